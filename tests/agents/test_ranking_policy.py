"""Ranking policies in TensorFlow: marginals and prefix probabilities against the numpy module (and
enumeration), draws against the reported marginals by chi-square at batch 1 and batch 64, seeds
(replayable when given, fresh when not), masks, and the slate-length error."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from rlops.agents import specs, trajectories
from rlops.agents.bandits import PerArmRewardNetwork
from rlops.agents.ranking import (
    EpsilonPerSlot,
    Greedy,
    PlackettLuce,
    RankingPolicy,
    UniformWithoutReplacement,
    brute_force_marginals,
    epsilon_rank_marginals,
    slate_head,
)
from rlops.heads.slate import tf_probabilities as tfp_

POLICIES = {
    "plackett_luce": (PlackettLuce(0.9), 1e-7),
    "epsilon_per_slot": (EpsilonPerSlot(0.3), 1e-12),
    "uniform": (UniformWithoutReplacement(), 1e-12),
    "greedy": (Greedy(), 0.0),
}


def _kind(policy):
    return {
        "PlackettLuce": ("plackett_luce", getattr(policy, "temperature", 1.0)),
        "EpsilonPerSlot": ("epsilon_per_slot", getattr(policy, "epsilon", 0.0)),
        "UniformWithoutReplacement": ("uniform", 1.0),
        "Greedy": ("greedy", 0.0),
    }[type(policy).__name__]


def _scores(rng, n, k, spread):
    s = rng.uniform(0.0, spread, (n, k))
    s[:, 0], s[:, -1] = 0.0, spread
    return s


@pytest.mark.parametrize("name", POLICIES)
def test_marginals_and_prefix_probs_equal_the_numpy_module(name):
    policy, tol = POLICIES[name]
    kind, parameter = _kind(policy)
    rng = np.random.default_rng(0)
    worst = worst_prefix = 0.0
    for k in range(2, 10):
        for num_slots in range(1, min(k, 4) + 1):
            scores = np.concatenate([_scores(rng, 2, k, spread) for spread in (0.5, 3.0, 8.0)])
            mask = rng.uniform(size=scores.shape) < 0.8
            mask[:, :num_slots] = True
            ref = policy.marginals(scores, num_slots, mask)
            got = tfp_.slate_marginals(kind, scores, mask, num_slots, parameter).numpy()
            worst = max(worst, np.abs(got - ref).max())
            slates = policy.sample(rng, scores, num_slots, mask)
            pref = policy.prefix_probs(scores, slates, mask)
            got_pref = tfp_.slate_prefix_probs(kind, scores, mask, slates, parameter).numpy()
            worst_prefix = max(worst_prefix, np.abs(got_pref - pref).max())
    assert worst <= tol, worst
    assert worst_prefix <= 1e-12, worst_prefix
    if name == "epsilon_per_slot":  # the dynamic program in TF (epsilon a tensor) equals the table
        counts = np.arange(4, 10)
        got = tfp_.epsilon_rank_marginals(counts, 4, tf.constant(0.3, tf.float64), 9).numpy()
        for row, m in zip(got, counts):
            np.testing.assert_allclose(row[:m], epsilon_rank_marginals(int(m), 4, 0.3), atol=1e-15)
            assert not row[m:].any()
    # and one case straight against enumeration
    scores = _scores(rng, 2, 7, 8.0)
    exact = brute_force_marginals(policy, scores, 3)
    assert np.abs(tfp_.slate_marginals(kind, scores, np.ones((2, 7), bool), 3, parameter).numpy() - exact).max() <= tol


def test_plackett_luce_marginals_at_serving_size():
    """K=100, L=5, wide spreads and masks: the TF quadrature equals the numpy one."""
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(4, 100)) * np.array([[0.5], [2.0], [4.0], [8.0]])
    mask = rng.uniform(size=scores.shape) < 0.7
    ref = PlackettLuce(0.7).marginals(scores, 5, mask)
    got = tfp_.slate_marginals("plackett_luce", scores, mask, 5, 0.7).numpy()
    assert np.abs(got - ref).max() < 1e-10
    np.testing.assert_allclose(got.sum(1), 1.0, atol=1e-10)  # each slot holds one item


def _chi2_pvalue(slates, marginals):
    """Per slot, Pearson chi-square of item counts (summed over rows) against the summed marginals
    (cells expecting < 5 pooled); the smallest p-value over slots, Bonferroni-corrected."""
    calls, batch, num_slots = slates.shape
    k = marginals.shape[1]
    worst = 1.0
    for slot in range(num_slots):
        observed = np.bincount(slates[:, :, slot].ravel(), minlength=k).astype(float)
        expected = calls * marginals[:, :, slot].sum(0)
        assert observed[expected == 0].sum() == 0, "an item of probability 0 was shown"
        big = expected >= 5
        obs = np.append(observed[big], observed[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        p = stats.chisquare(obs[keep], exp[keep]).pvalue if keep.sum() > 1 else 1.0
        worst = min(worst, p * num_slots)
    return worst


@pytest.mark.parametrize("policy", [PlackettLuce(0.8), EpsilonPerSlot(0.3)], ids=["plackett_luce", "epsilon"])
def test_draws_match_reported_marginals_at_batch_1_and_batch_64(policy):
    """Fixed seeds: a stateless seed per call (the path a replay takes), and row seeds 0..n-1 for
    20,000 draws in one call. Fresh draws are tested in test_seeds_replay_and_fresh_draws_differ."""
    rng = np.random.default_rng(2)
    k, num_slots = 7, 3
    kind, parameter = _kind(policy)
    head = tf.function(lambda s, m, seed: slate_head(s, num_slots, policy, m, seed=seed), autograph=False)

    def draw_only(s, m):
        """What the head draws for row seeds 0..n-1, without its propensities (cheaper at 20k rows)."""
        u = tfp_.row_uniforms(tf.range(len(s), dtype=tf.int64), tfp_.num_uniforms(kind, s.shape[1], num_slots))
        return tfp_.sample_slates(kind, s, m, num_slots, u, parameter).numpy()

    # batch 1: 200 calls, and 20,000 copies of the request in one call
    scores = _scores(rng, 1, k, 3.0).astype(np.float32)
    mask = np.ones((1, k), bool)
    mask[0, 2] = False
    marg = tfp_.slate_marginals(kind, scores, mask, num_slots, parameter).numpy()
    calls = np.stack([head(scores, mask, tf.constant([i, 1], tf.int64))["slate"].numpy() for i in range(200)])
    assert _chi2_pvalue(calls, marg) > 1e-3
    many = draw_only(np.repeat(scores, 20_000, 0), np.repeat(mask, 20_000, 0))
    assert _chi2_pvalue(many[None], np.repeat(marg, 20_000, 0)) > 1e-3
    out = head(scores, mask, tf.constant([5, 5], tf.int64))  # reported: the marginals at the shown slots
    shown = out["slate"].numpy()[0]
    np.testing.assert_allclose(out["propensity_item_position"].numpy()[0], marg[0, shown, range(num_slots)], rtol=1e-6)
    # batch 64: different requests, 30 calls, and the batch tiled to 20,480 rows in one call
    scores = _scores(rng, 64, k, 4.0).astype(np.float32)
    mask = rng.uniform(size=(64, k)) < 0.8
    mask[:, :num_slots] = True
    marg = tfp_.slate_marginals(kind, scores, mask, num_slots, parameter).numpy()
    slates = np.stack([head(scores, mask, tf.constant([i, 2], tf.int64))["slate"].numpy() for i in range(30)])
    assert _chi2_pvalue(slates, marg) > 1e-3
    tiled = draw_only(np.tile(scores, (320, 1)), np.tile(mask, (320, 1))).reshape(320, 64, num_slots)
    assert _chi2_pvalue(tiled, marg) > 1e-3
    slates = np.concatenate([slates, tiled])
    assert not any(mask[np.arange(64)[None, :, None], slates].ravel() == 0), "a masked item was shown"
    assert (np.diff(np.sort(slates, axis=-1), axis=-1) > 0).all(), "an item was shown twice"


def test_seeds_replay_and_fresh_draws_differ():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(5, 20)).astype(np.float32)
    policy = PlackettLuce(2.0)
    head = lambda s, **kw: slate_head(s, 4, policy, **kw)  # noqa: E731  (eager: one trace per variant costs more)
    fresh = tf.function(lambda s: slate_head(s[:1], 4, policy)["slate"], autograph=False)
    draws = {tuple(fresh(scores).numpy()[0]) for _ in range(50)}
    assert len(draws) >= 40, f"50 unseeded calls drew only {len(draws)} distinct slates"
    seeded = head(scores, seed=tf.constant([7, 1], tf.int64))
    np.testing.assert_array_equal(seeded["slate"].numpy(), head(scores, seed=tf.constant([7, 1], tf.int64))["slate"])
    # row seeds: a request's draw depends on its own seed only, not on the rest of its batch
    rows = tf.constant([11, -3, 2**62, 5, 0], tf.int64)
    full = head(scores, row_seeds=rows)
    np.testing.assert_array_equal(full["seed"].numpy(), rows.numpy())
    alone = head(scores[2:3], row_seeds=rows[2:3])
    np.testing.assert_array_equal(full["slate"].numpy()[2], alone["slate"].numpy()[0])
    # the returned seed of a fresh draw replays it
    fresh = head(scores)
    np.testing.assert_array_equal(fresh["slate"].numpy(), head(scores, row_seeds=fresh["seed"])["slate"].numpy())
    # and numpy replays it too: Gumbel-top-L over the numpy twin of the row uniforms
    u = tfp_.numpy_row_uniforms(rows.numpy(), 20)
    keys = scores.astype(np.float64) / 2.0 - np.log(-np.log(u))
    np.testing.assert_array_equal(np.argsort(-keys, axis=1, kind="stable")[:, :4], full["slate"].numpy())
    with pytest.raises(ValueError, match="not both"):
        slate_head(scores, 4, policy, seed=[1, 2], row_seeds=rows)


@pytest.mark.parametrize("name", POLICIES)
def test_caller_uniforms_give_the_numpy_twin_s_slates(name):
    policy = POLICIES[name][0]
    kind, parameter = _kind(policy)
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(300, 9)) * 2
    mask = rng.uniform(size=scores.shape) < 0.7
    mask[:, :4] = True
    u = rng.uniform(size=(300, tfp_.num_uniforms(kind, 9, 4)))
    out = slate_head(scores, 4, policy, mask, uniforms=u)
    np.testing.assert_array_equal(out["slate"].numpy(), tfp_.numpy_sample_slates(kind, scores, mask, 4, u, parameter))


def test_row_uniforms_are_uniform_and_independent():
    u = tfp_.row_uniforms(tf.range(2000, dtype=tf.int64), 50).numpy()
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u.ravel(), "uniform").pvalue > 1e-3
    corr = np.corrcoef(u[:, :10].T)
    assert np.abs(corr - np.eye(10)).max() < 0.1  # neighbouring counters, neighbouring seeds
    assert np.abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.1
    np.testing.assert_array_equal(u, tfp_.numpy_row_uniforms(np.arange(2000), 50))


def test_masked_items_never_shown_and_short_requests_fail_naming_the_slate_length():
    scores = np.arange(6, dtype=np.float32)[None].repeat(3, 0)
    mask = np.ones((3, 6), bool)
    mask[:, 5] = False  # the best item is masked
    for policy in (PlackettLuce(1.0), EpsilonPerSlot(0.5), Greedy(), UniformWithoutReplacement()):
        out = slate_head(scores, 4, policy, mask)
        assert not (out["slate"].numpy() == 5).any()
        np.testing.assert_array_equal(out["greedy_slate"].numpy(), [[4, 3, 2, 1]] * 3)
    mask[1, :3] = False  # request 1 keeps 2 items
    with pytest.raises(tf.errors.InvalidArgumentError, match="slate length 4"):
        slate_head(scores, 4, PlackettLuce(1.0), mask)
    with pytest.raises(tf.errors.InvalidArgumentError, match="slate length 4"):
        tf.function(lambda s, m: slate_head(s, 4, EpsilonPerSlot(0.1), m), autograph=False)(scores, mask)


def test_ranking_policy_on_per_arm_observations():
    k, num_slots = 8, 3
    obs_spec = {
        "global": tf.TensorSpec([2], tf.float32),
        "per_arm": tf.TensorSpec([k, 3], tf.float32),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, k),
    }
    net = PerArmRewardNetwork(obs_spec, common_layers=(8,), output_gain=1.0)
    action_spec = specs.BoundedTensorSpec([num_slots], tf.int32, 0, k - 1)
    rng = np.random.default_rng(4)
    obs = {
        "global": rng.normal(size=(16, 2)).astype(np.float32),
        "per_arm": rng.normal(size=(16, k, 3)).astype(np.float32),
        "num_actions": rng.integers(num_slots, k + 1, 16).astype(np.int32),
    }
    ts = trajectories.restart(obs, 16)
    sampler = RankingPolicy(trajectories.time_step_spec(obs_spec), action_spec, net, PlackettLuce(0.5))
    step = sampler.action(ts)
    slates = step.action.numpy()
    assert slates.shape == (16, num_slots) and step.action.dtype == tf.int32
    assert (slates < obs["num_actions"][:, None]).all(), "a candidate beyond num_actions was shown"
    scores = step.info["predicted_rewards_mean"].numpy()
    allowed = np.arange(k)[None] < obs["num_actions"][:, None]
    np.testing.assert_allclose(scores, net({"global": obs["global"], "per_arm": obs["per_arm"]}).numpy(), rtol=1e-6)
    marg = PlackettLuce(0.5).marginals(scores, num_slots, allowed)
    expected = np.take_along_axis(marg, slates[:, None, :], 1)[:, 0]
    np.testing.assert_allclose(step.info["propensity_item_position"].numpy(), expected, rtol=1e-5)
    expected_cascade = PlackettLuce(0.5).prefix_probs(scores, slates, allowed)
    np.testing.assert_allclose(step.info["propensity_cascade"].numpy(), expected_cascade, rtol=1e-5)
    np.testing.assert_array_equal(sampler.action(ts, seed=[3, 4]).action, sampler.action(ts, seed=[3, 4]).action)
    greedy = RankingPolicy(trajectories.time_step_spec(obs_spec), action_spec, net)
    top = np.argsort(-np.where(allowed, scores, -np.inf), axis=1, kind="stable")[:, :num_slots]
    np.testing.assert_array_equal(greedy.action(ts).action.numpy(), top)
    with pytest.raises(ValueError, match="slate length 9"):
        RankingPolicy(trajectories.time_step_spec(obs_spec), specs.BoundedTensorSpec([9], tf.int32, 0, k - 1), net)
