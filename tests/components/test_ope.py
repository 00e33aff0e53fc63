"""Off-policy estimators against a plain-loop reference, record weights, action masks, the trust
gate (minimum records / ESS), reward models and the streaming bootstrap."""

import math
import tracemalloc

import numpy as np
import pytest

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import bootstrap, estimators, reward_models


def loop_reference(actions, rewards, props, pi, q, s, tau, lam):
    """Every estimator written out row by row from its definition (OBP / Su et al. / Wang et al.)."""
    n = len(actions)
    w = [pi[i][actions[i]] / props[i] for i in range(n)]
    res = [rewards[i] - q[i][actions[i]] for i in range(n)]
    dm_i = [sum(pi[i][a] * q[i][a] for a in range(len(pi[i]))) for i in range(n)]
    S = sum(s)
    SW = sum(s[i] * w[i] for i in range(n))
    dm = sum(s[i] * dm_i[i] for i in range(n)) / S
    corr = sum(s[i] * w[i] * res[i] for i in range(n))
    return {
        "ips": sum(s[i] * w[i] * rewards[i] for i in range(n)) / S,
        "snips": sum(s[i] * w[i] * rewards[i] for i in range(n)) / SW,
        "dm": dm,
        "dr": dm + corr / S,
        "sndr": dm + corr / SW,
        "switch_dr": dm + sum(s[i] * (w[i] if w[i] <= tau else 0.0) * res[i] for i in range(n)) / S,
        "dr_os": dm + sum(s[i] * (lam * w[i] / (w[i] ** 2 + lam)) * res[i] for i in range(n)) / S,
        "ess": SW**2 / sum((s[i] * w[i]) ** 2 for i in range(n)),
    }


def fixed_data(n=200, k=4, seed=0, weights=False):
    rng = np.random.default_rng(seed)
    ctx = rng.normal(size=(n, 3))
    props = rng.dirichlet(np.ones(k), n)
    actions = np.array([rng.choice(k, p=p) for p in props])
    rewards = rng.normal(size=n) + actions
    s = rng.integers(0, 4, n).astype(float) if weights else None
    data = LoggedFeedback(ctx, actions, rewards, props[np.arange(n), actions], weights=s)
    pi = rng.dirichlet(np.ones(k), n)
    q = rng.normal(size=(n, k))
    return data, pi, q


@pytest.mark.parametrize("weights", [False, True])
def test_estimators_match_loop_reference(weights):
    data, pi, q = fixed_data(weights=weights)
    result = estimators.compare(data, pi, None, q, num_bootstrap=200, switch_tau=3.0, dr_os_lambda=2.0, min_ess=0)
    got, diag = result.candidate, result.diagnostics
    ref = loop_reference(data.actions, data.rewards, data.propensities, pi, q, data.record_weights, 3.0, 2.0)
    assert set(got) == set(estimators.ESTIMATORS)
    for name in estimators.ESTIMATORS:
        assert got[name].value == pytest.approx(ref[name], rel=1e-9), name
        assert got[name].trusted and got[name].lower <= got[name].value <= got[name].upper, name
    assert diag.ess["candidate"] == pytest.approx(ref["ess"], rel=1e-9)
    assert diag.hyperparameters["candidate"] == {"switch_tau": 3.0, "dr_os_lambda": 2.0}


def test_switch_and_shrinkage_limits_and_tuning():
    data, pi, q = fixed_data(seed=4)
    got = estimators.estimate(data, pi, q, num_bootstrap=100, switch_tau=math.inf, dr_os_lambda=math.inf, min_ess=0)
    assert got["switch_dr"].value == pytest.approx(got["dr"].value)  # nothing switched off
    assert got["dr_os"].value == pytest.approx(got["dr"].value)  # no shrinkage
    got = estimators.estimate(data, pi, q, num_bootstrap=100, switch_tau=0.0, dr_os_lambda=1e-12, min_ess=0)
    assert got["switch_dr"].value == pytest.approx(got["dm"].value)  # every weight switched off
    assert got["dr_os"].value == pytest.approx(got["dm"].value, abs=1e-9)  # full shrinkage
    chosen = estimators.compare(data, pi, None, q, num_bootstrap=100, min_ess=0).diagnostics.hyperparameters[
        "candidate"
    ]
    assert chosen["switch_tau"] in estimators.DEFAULT_GRID and chosen["dr_os_lambda"] in estimators.DEFAULT_GRID


def test_integer_record_weights_equal_repeated_rows():
    data, pi, q = fixed_data(n=150, seed=5, weights=True)
    s = data.record_weights.astype(int)
    rep = np.repeat(np.arange(len(s)), s)
    repeated = LoggedFeedback(data.contexts[rep], data.actions[rep], data.rewards[rep], data.propensities[rep])
    kw = dict(num_bootstrap=100, switch_tau=2.0, dr_os_lambda=5.0, min_ess=0)
    a, b = estimators.estimate(data, pi, q, **kw), estimators.estimate(repeated, pi[rep], q[rep], **kw)
    for name in estimators.ESTIMATORS:
        assert a[name].value == pytest.approx(b[name].value, rel=1e-9), name
    # And the weighted reward model equals the model fitted on repeated rows (one fold: same rows).
    qa = reward_models.fit_reward_model(data.contexts, data.actions, data.rewards, 4, weights=data.weights, folds=1)
    qb = reward_models.fit_reward_model(repeated.contexts, repeated.actions, repeated.rewards, 4, folds=1)
    keep = np.flatnonzero(s)
    np.testing.assert_allclose(qa[keep], qb[[int(np.flatnonzero(rep == i)[0]) for i in keep]], atol=1e-8)


def test_action_mask_gives_masked_actions_probability_zero():
    n, k = 300, 3
    rng = np.random.default_rng(0)
    mask = np.ones((n, k), int)
    mask[: n // 2, 2] = 0  # action 2 unavailable in the first half
    actions = np.where(np.arange(n) < n // 2, rng.integers(0, 2, n), rng.integers(0, 3, n))
    props = np.where(np.arange(n) < n // 2, 0.5, 1 / 3)
    rewards = (actions == 2).astype(float) + 0.1 * actions
    data = LoggedFeedback(np.zeros((n, 1)), actions, rewards, props, action_mask=mask)
    uniform = estimators.uniform_probs(n, k, mask)
    np.testing.assert_allclose(uniform[0], [0.5, 0.5, 0]) and np.testing.assert_allclose(uniform[-1], [1 / 3] * 3)
    # Uniform over all 3 arms, honouring the mask, is uniform over the allowed ones.
    got = estimators.estimate(data, estimators.uniform_probs(n, k), num_bootstrap=100, min_ess=0)["ips"].value
    w = uniform[np.arange(n), actions] / props
    assert got == pytest.approx((w * rewards).mean())
    with pytest.raises(ValueError, match="action_mask excludes.*row 0"):
        estimators.estimate(data, estimators.greedy_probs(np.full(n, 2), k), num_bootstrap=100)
    with pytest.raises(ValueError, match="action_mask excludes the logged action; row 0"):
        LoggedFeedback(np.zeros((n, 1)), np.full(n, 2), rewards, props, action_mask=mask)


def test_one_logged_click_is_refused_with_a_reason():
    """Reproduces issue 11: one click at propensity 0.1 used to give DR's improvement [9, 9]."""
    data = LoggedFeedback(np.zeros((1, 2)), np.array([0]), np.array([1.0]), np.array([0.1]))
    q = np.zeros((1, 3))
    cand, base, diff = estimators.compare(data, estimators.greedy_probs(np.array([0]), 3), estimators.LOGGING_POLICY, q)
    assert diff["dr"].value == pytest.approx(9.0)
    for est in list(cand.values()) + list(diff.values()):
        assert not est.trusted and math.isnan(est.lower) and math.isnan(est.upper)
        assert "only 1 eval records" in est.reason and "min_eval_records" in est.reason
    assert not diff["dr"].lower > 0  # no rule can bless on it
    # Lowering the minimum records does not help: the ESS (1) is still too small ...
    _, _, diff = estimators.compare(
        data, estimators.greedy_probs(np.array([0]), 3), estimators.LOGGING_POLICY, q, min_records=1
    )
    assert "effective sample size" in diff["dr"].reason and "candidate 1.0" in diff["dr"].reason
    # ... and with no minimums at all the bootstrap itself is invalid (resamples without rows).
    _, _, diff = estimators.compare(
        data, estimators.greedy_probs(np.array([0]), 3), estimators.LOGGING_POLICY, q, min_records=1, min_ess=0
    )
    assert "invalid bootstrap" in diff["dr"].reason


def test_small_effective_sample_size_is_refused():
    n, k = 2000, 20
    rng = np.random.default_rng(1)
    actions = rng.integers(0, k, n)
    data = LoggedFeedback(np.zeros((n, 1)), actions, rng.random(n), np.full(n, 1 / k))
    greedy = estimators.greedy_probs(np.zeros(n, int), k)  # matches ~100 logged rows
    result = estimators.compare(data, greedy, None, num_bootstrap=100, min_ess=200)
    est = result.candidate
    assert result.diagnostics.ess["candidate"] == pytest.approx((actions == 0).sum(), rel=1e-9)
    assert not est["ips"].trusted and "min_ess" in est["ips"].reason
    assert estimators.estimate(data, greedy, num_bootstrap=100, min_ess=50)["ips"].trusted


@pytest.mark.parametrize("bad", [0, 10, 2.5, "500", True])
def test_num_bootstrap_is_validated(bad):
    data, pi, q = fixed_data()
    with pytest.raises(ValueError, match="num_bootstrap"):
        estimators.estimate(data, pi, q, num_bootstrap=bad)


def test_paired_comparison_difference_and_identity():
    data, pi, q = fixed_data(seed=1)
    cand, base, diff = estimators.compare(data, pi, pi, q, num_bootstrap=100, min_ess=0)
    for name in estimators.ESTIMATORS:
        # Same rows, same policy: 0, up to the float32 rounding of the bootstrap's sums (two identical
        # columns of one matrix product may round differently by 1e-9 under some BLAS builds).
        assert diff[name].value == 0 and abs(diff[name].lower) < 1e-7 and abs(diff[name].upper) < 1e-7
    other = estimators.greedy_probs(np.zeros(len(data.actions), int), 4)
    cand, base, diff = estimators.compare(data, pi, other, q, num_bootstrap=100, min_ess=0)
    for name in estimators.ESTIMATORS:
        assert diff[name].value == pytest.approx(cand[name].value - base[name].value)


def test_ips_is_unbiased_where_the_true_value_is_known():
    """Uniform logging over 5 arms with Bernoulli rewards of known means; the greedy target
    policy's true value lies inside IPS's 95% interval, and the mean estimate over 200
    independent logs is within 3 standard errors of it."""
    k, n = 5, 2_000
    rng = np.random.default_rng(42)
    theta = rng.normal(size=(k, 3))
    estimates, covered = [], 0
    for rep in range(200):
        ctx = rng.normal(size=(n, 3))
        means = 1 / (1 + np.exp(-ctx @ theta.T))  # [N, K] expected rewards
        actions = rng.integers(0, k, n)
        rewards = (rng.uniform(size=n) < means[np.arange(n), actions]).astype(float)
        target = np.argmax(ctx[:, :1] * np.arange(k), 1)  # a fixed rule, not the optimal policy
        true_value = means[np.arange(n), target].mean()
        data = LoggedFeedback(ctx, actions, rewards, np.full(n, 1.0 / k))
        est = estimators.estimate(data, estimators.greedy_probs(target, k), num_bootstrap=200, seed=rep)["ips"]
        estimates.append(est.value - true_value)
        covered += est.lower <= true_value <= est.upper
    errors = np.array(estimates)
    assert abs(errors.mean()) < 3 * errors.std() / np.sqrt(len(errors))
    assert covered >= 0.88 * 200  # ~95% nominal coverage


def test_poisson_bootstrap_matches_the_standard_error_and_is_reproducible():
    rng = np.random.default_rng(0)
    x = rng.exponential(size=(20_000, 1))
    sums = bootstrap.poisson_bootstrap_sums(
        np.concatenate([np.ones_like(x), x], 1), 2000, seed=3, chunk_elements=1 << 20
    )
    means = sums[:, 1] / sums[:, 0]
    assert means.std() == pytest.approx(x.std() / np.sqrt(len(x)), rel=0.08)
    assert abs(means.mean() - x.mean()) < 3 * x.std() / np.sqrt(len(x))
    np.testing.assert_array_equal(
        sums,
        bootstrap.poisson_bootstrap_sums(np.concatenate([np.ones_like(x), x], 1), 2000, seed=3, chunk_elements=1 << 20),
    )


def test_bootstrap_memory_does_not_grow_with_rows():
    """The old bootstrap held resamples x rows indices (1,000 x 200k x 8 bytes = 1.6 GB here);
    the streaming one needs the same few MB however many rows there are."""
    peaks = []
    for n in (20_000, 200_000):
        columns = np.random.default_rng(0).random((n, 7))
        tracemalloc.start()
        bootstrap.poisson_bootstrap_sums(columns, 1000, chunk_elements=1 << 20)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # One chunk of ~1M hash-derived float64 multiplicities (8 MB, plus the quarter-size hash
    # buffers), not 1,000 x rows; plus the [n] uint64 record keys (1.6 MB at 200k).
    assert max(peaks) < 16e6, peaks
    assert peaks[1] < 1.5 * peaks[0] + 1e6, peaks  # flat in the number of rows


def test_cross_fitted_reward_models():
    rng = np.random.default_rng(3)
    ctx = rng.normal(size=(3000, 2))
    actions = rng.integers(0, 3, 3000)
    theta = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 0.0]])
    rewards = (ctx * theta[actions]).sum(1) + 0.1 * rng.normal(size=3000)
    q = reward_models.fit_reward_model(ctx, actions, rewards, 3)
    np.testing.assert_allclose(q, ctx @ theta.T, atol=0.1)  # ridge shrinks a little
    # Logistic: an item effect, a shared context effect and one action's own interaction,
    # recovered from 20k binary rewards.
    n = 20_000
    ctx = rng.normal(size=(n, 2))
    actions = rng.integers(0, 3, n)
    logits = np.array([-2.0, -1.0, 0.0])[None, :] + (ctx @ np.array([0.7, -0.4]))[:, None]
    logits[:, 2] += ctx @ np.array([-1.2, 0.8])
    truth = 1 / (1 + np.exp(-logits))
    clicks = (rng.random(n) < truth[np.arange(n), actions]).astype(float)
    q = reward_models.fit_reward_model(ctx, actions, clicks, 3, kind="logistic")
    err = np.abs(q - truth)
    assert err.mean() < 0.02 and np.percentile(err, 99) < 0.08, (err.mean(), np.percentile(err, 99))
    assert np.abs(reward_models.fit_reward_model(ctx, actions, clicks, 3, kind="ridge") - truth).mean() > err.mean()
    with pytest.raises(ValueError, match=r"'logistic' needs rewards in \{0, 1\}; row 0"):
        reward_models.fit_reward_model(ctx, actions, clicks + 0.5, 3, kind="logistic")
    with pytest.raises(ValueError, match="unknown kind 'forest'"):
        reward_models.fit_reward_model(ctx, actions, clicks, 3, kind="forest")
    data = LoggedFeedback(ctx, actions, clicks, np.full(n, 1 / 3))
    np.testing.assert_array_equal(reward_models.reward_predictions(lambda x: truth, data, 3), truth)  # e.g. the network
    with pytest.raises(ValueError, match=r"reward model returned shape \(20000, 2\)"):
        reward_models.reward_predictions(lambda x: truth[:, :2], data, 3)


def test_bad_inputs_name_the_row():
    with pytest.raises(ValueError, match="row 1"):
        LoggedFeedback(np.zeros((2, 1)), np.array([0, 1]), np.zeros(2), np.array([0.5, 0.0]))
    with pytest.raises(ValueError, match="weight must be finite and >= 0; row 1"):
        LoggedFeedback(np.zeros((2, 1)), np.array([0, 1]), np.zeros(2), np.ones(2), weights=np.array([1, -1.0]))
    with pytest.raises(ValueError, match="every record has weight 0"):
        LoggedFeedback(np.zeros((2, 1)), np.array([0, 1]), np.zeros(2), np.ones(2), weights=np.zeros(2))
    data, pi, q = fixed_data()
    with pytest.raises(ValueError, match="candidate action probabilities must sum to 1; row 0"):
        estimators.estimate(data, pi * 2, q)


def test_logging_policy_baseline_is_the_observed_mean_reward():
    data, pi, q = fixed_data(seed=2)
    cand, base, diff = estimators.compare(data, pi, estimators.LOGGING_POLICY, q, num_bootstrap=100, min_ess=0)
    for name in estimators.ESTIMATORS:
        assert base[name].value == pytest.approx(data.rewards.mean())
        assert diff[name].value == pytest.approx(cand[name].value - data.rewards.mean())
    # Evaluating the logging policy itself by IPS gives exactly the observed mean too.
    logging_probs = np.zeros_like(pi)
    logging_probs[np.arange(len(data.actions)), data.actions] = data.propensities
    rest = (1 - data.propensities) / 3
    logging_probs += (logging_probs == 0) * rest[:, None]
    assert estimators.estimate(data, logging_probs, num_bootstrap=50, min_ess=0)["ips"].value == pytest.approx(
        data.rewards.mean()
    )


def test_reward_model_names_are_one_list_everywhere():
    """'auto' works in the Python API as in the config and CLI (issue 20: it did not), and every
    place offers the same names."""
    from rlops.components.evaluator import config
    from rlops.pipelines import cli_evaluate

    assert config.REWARD_MODEL_CHOICES is reward_models.REWARD_MODEL_CHOICES is cli_evaluate.REWARD_MODEL_CHOICES
    rng = np.random.default_rng(0)
    n = 400
    ctx, actions = rng.normal(size=(n, 2)), rng.integers(0, 3, n)
    clicks = (rng.random(n) < 0.3).astype(float)
    for rewards, kind in ((clicks, "logistic"), (clicks + rng.normal(0, 0.1, n), "ridge")):
        data = LoggedFeedback(ctx, actions, rewards, np.full(n, 1 / 3))
        np.testing.assert_array_equal(
            reward_models.reward_predictions("auto", data, 3), reward_models.reward_predictions(kind, data, 3)
        )
        np.testing.assert_array_equal(
            reward_models.fit_reward_model(ctx, actions, rewards, 3, kind="auto"),
            reward_models.fit_reward_model(ctx, actions, rewards, 3, kind=kind),
        )
    with pytest.raises(ValueError, match="choose one of auto, ridge, logistic, network"):
        reward_models.reward_predictions("forest", data, 3)
    with pytest.raises(ValueError, match="'network' is the candidate SavedModel's own predicted rewards"):
        reward_models.reward_predictions("network", data, 3)


def test_ridge_predictions_are_clipped_so_dr_is_never_a_negative_click_rate():
    """Issue 20 reproduced on the generator (1,000 Thompson-logged rows, propensities down to
    0.02 / 34, 9 clicks): unclipped ridge predicts click rates down to -0.36 and DR estimates
    the uniform policy's CTR at -0.00018 (the issue saw -0.00014 on real logs). Clipped to the
    observed reward range, every prediction is in [0, 1] and DR is positive."""
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    gen = LogGenerator(LogConfig(logging="thompson", seed=0, exploration=0.02))
    logs = gen.sample(1000, seed=8)
    imp = logs.impressions
    data = LoggedFeedback(gen.encode(logs.contexts()), imp["action"], imp["reward"].astype(float), imp["propensity"])
    uniform = estimators.uniform_probs(len(data.actions), gen.num_items)
    # Folds are hashes of the record keys (seed 0: the split that reproduces the sign).
    raw = reward_models.reward_predictions("ridge", data, gen.num_items, seed=0, clip=False)
    clipped = reward_models.reward_predictions("ridge", data, gen.num_items, seed=0)
    assert raw.min() < -0.1 and estimators.estimate(data, uniform, raw, num_bootstrap=50)["dr"].value < 0
    np.testing.assert_array_equal(clipped, np.clip(raw, 0.0, 1.0))
    assert estimators.estimate(data, uniform, clipped, num_bootstrap=50)["dr"].value > 0


def test_epsilon_greedy_probs_over_allowed_actions():
    greedy = np.array([0, 2, 1, 3])
    allowed = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [0, 1, 1, 0], [1, 1, 1, 0]])
    probs = estimators.epsilon_greedy_probs(greedy, 4, 0.2, allowed)
    expected = np.array(
        [
            [0.85, 0.05, 0.05, 0.05],
            [0.2 / 3, 0.2 / 3, 0.8 + 0.2 / 3, 0.0],
            [0.0, 0.9, 0.1, 0.0],
            [1 / 3, 1 / 3, 1 / 3, 0.0],
        ]
    )  # greedy not allowed: uniform over the allowed
    np.testing.assert_allclose(probs, expected)
    np.testing.assert_allclose(estimators.epsilon_greedy_probs(greedy, 4, 0.0), estimators.greedy_probs(greedy, 4))


def test_dm_interval_with_refits_is_wider_and_pairs_candidate_and_baseline():
    """DM's interval from reward-model refits carries the model's own error: wider than the
    fixed-model bootstrap's; the difference of two policies uses the same refits (paired)."""
    rng = np.random.default_rng(3)
    n, k = 3000, 4
    ctx = rng.normal(size=(n, 2))
    logging = rng.dirichlet(np.ones(k), n)
    actions = np.array([rng.choice(k, p=p) for p in logging])
    truth = 1 / (1 + np.exp(-(np.array([-2.0, -1.5, -1.0, -2.5]) + ctx[:, :1])))
    clicks = (rng.random(n) < truth[np.arange(n), actions]).astype(float)
    data = LoggedFeedback(ctx, actions, clicks, logging[np.arange(n), actions])
    q = reward_models.reward_predictions("logistic", data, k)
    target = estimators.uniform_probs(n, k)
    fixed = estimators.estimate(data, target, q, num_bootstrap=200)["dm"]
    refits = reward_models.refit_dm_replicates(data, [target, estimators.LOGGING_POLICY], "logistic", k, replicates=20)
    assert refits[0].shape == (20, 2) and refits[1] == 1.0 and np.isfinite(refits[0]).all()
    cand, base, diff = estimators.compare(
        data, target, estimators.LOGGING_POLICY, q, num_bootstrap=200, dm_refits=refits
    )
    assert cand["dm"].value == fixed.value and cand["dm"].trusted
    assert cand["dm"].upper - cand["dm"].lower > fixed.upper - fixed.lower
    half = 1.959964 * np.std(refits[0][:, 0] - refits[0][:, 1], ddof=1)
    assert diff["dm"].upper - diff["dm"].value == pytest.approx(half, rel=1e-5)
    # Bounded: 1,000 of the 3,000 rows per refit, the spread scaled by sqrt(1000 / 3000).
    assert reward_models.refit_dm_replicates(data, [target], "logistic", k, replicates=10, max_records=1000)[
        1
    ] == pytest.approx((1000 / 3000) ** 0.5)
