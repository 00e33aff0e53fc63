"""The bandit head (rlops.heads.epsilon_greedy): the TensorFlow head against its numpy twin, fresh
draws whatever seed the exporting process set, masks, and the checks the Pusher runs on draws."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from rlops.features import serving_candidates
from rlops.heads import draws, epsilon_greedy

K = 6


def _case(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy actions (a third of them masked out), masks allowing >= 1 action, uniforms."""
    rng = np.random.default_rng(seed)
    greedy = rng.integers(0, K, n)
    allowed = rng.random((n, K)) < 0.6
    allowed[np.arange(n), rng.integers(0, K, n)] = True
    uniforms = rng.random((n, 2)).astype(np.float32)
    return greedy, allowed, uniforms


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0])
def test_the_head_decides_as_its_numpy_twin_and_reports_the_probability_it_drew_with(epsilon):
    greedy, allowed, uniforms = _case(2000, seed=1)
    out = epsilon_greedy.head(
        tf.constant(greedy + 3, tf.int32), K, epsilon, minimum=3, action_mask=allowed, uniforms=uniforms
    )
    action, propensity, greedy_out = epsilon_greedy.decide(greedy, epsilon, allowed, uniforms)
    np.testing.assert_array_equal(out["action"].numpy() - 3, action)
    np.testing.assert_array_equal(out["greedy_action"].numpy() - 3, greedy_out)
    np.testing.assert_allclose(out["propensity"].numpy(), propensity, atol=1e-6)
    probs = epsilon_greedy.epsilon_greedy_probs(greedy, epsilon, allowed)
    np.testing.assert_allclose(probs.sum(1), 1.0)
    np.testing.assert_allclose(propensity, probs[np.arange(len(action)), action], atol=1e-6)
    assert allowed[np.arange(len(action)), action].all()


def test_greedy_action_respects_the_mask():
    """A greedy choice masked out is served uniformly over the allowed actions, and greedy_action is
    that draw (what the policy serves at epsilon 0), never the masked action."""
    greedy = np.full(4000, 2)
    allowed = np.ones((4000, K), bool)
    allowed[:, 2] = False
    out = epsilon_greedy.head(tf.constant(greedy), K, 0.3, action_mask=allowed)
    action, greedy_out = out["action"].numpy(), out["greedy_action"].numpy()
    assert not (greedy_out == 2).any() and not (action == 2).any()
    np.testing.assert_array_equal(action, greedy_out)
    np.testing.assert_allclose(out["propensity"].numpy(), 1 / (K - 1))
    counts = np.bincount(action, minlength=K)[[0, 1, 3, 4, 5]]
    assert stats.chisquare(counts).pvalue > 0.001


def test_a_seed_set_while_tracing_is_not_baked_in():
    """The Trainer sets tf.random.set_seed before exporting: the traced head's random op still has
    seeds (0, 0), so it draws differently on every call (and, seeded from the OS, in every process)."""
    tf.random.set_seed(7)
    try:
        head = tf.function(lambda g: epsilon_greedy.head(g, K, 0.5)["action"], autograph=False)
        concrete = head.get_concrete_function(tf.TensorSpec([None], tf.int32))
    finally:
        tf.random.set_seed(None)
    seeds = [
        (op.get_attr("seed"), op.get_attr("seed2")) for op in concrete.graph.get_operations() if "Random" in op.type
    ]
    assert seeds == [(0, 0)]
    calls = np.stack([concrete(tf.zeros([1], tf.int32)).numpy() for _ in range(200)])
    assert (
        epsilon_greedy.draws_error([calls], epsilon_greedy.epsilon_greedy_probs(np.zeros(1), 0.5, None, K), "t") is None
    )


def test_allowed_actions_has_one_rule_in_tensorflow_and_numpy():
    rng = np.random.default_rng(3)
    inputs = {
        "num_actions": rng.integers(1, K + 1, 50),
        "per_arm_colour": np.zeros((50, K), np.float32),
        "action_mask": (rng.random((50, K)) < 0.7).astype(np.int64),
    }
    want = serving_candidates.allowed_actions(inputs, K)
    got = serving_candidates.allowed_actions_tf({k: tf.constant(v) for k, v in inputs.items()}, K).numpy()
    np.testing.assert_array_equal(got, want)
    assert (want.sum(1) <= inputs["num_actions"]).all()
    dense = {"context": np.zeros((50, 3)), "num_actions": inputs["num_actions"]}  # not per-arm: a feature
    assert (
        serving_candidates.allowed_actions(dense, K).all() and serving_candidates.allowed_actions_tf(dense, K) is None
    )


# ---- the draw checks -----------------------------------------------------------------------------
def _probs(batch: int, epsilon: float, seed: int) -> np.ndarray:
    greedy, allowed, _ = _case(batch, seed)
    return epsilon_greedy.epsilon_greedy_probs(greedy, epsilon, allowed)


def _sample(probs: np.ndarray, calls: int, rng: np.random.Generator) -> np.ndarray:
    cum = probs.cumsum(1)
    u = rng.random((calls, len(probs), 1))
    return np.minimum((u > cum[None]).sum(-1), probs.shape[1] - 1)


@pytest.mark.parametrize("batch, calls", [(1, 200), (64, 8)])
def test_draw_checks_pass_honest_draws_and_catch_repeated_ones(batch, calls):
    rng = np.random.default_rng(batch)
    probs = _probs(batch, 0.3, seed=batch)
    honest = [_sample(probs, calls, rng) for _ in range(2)]
    props = [probs[np.arange(batch)[None, :], d] for d in honest]
    assert epsilon_greedy.draws_error(honest, probs, "x", props) is None
    stuck = np.repeat(honest[0][:1], calls, axis=0)  # every call the same draw (a seed re-set per call)
    assert epsilon_greedy.draws_error([stuck, honest[1]], probs, "x") is not None  # repeats (or frequencies)
    twin = epsilon_greedy.draws_error([honest[0], honest[0].copy()], probs, "x")  # two processes, one stream
    assert "two fresh processes draw the same actions" in twin
    lying = [props[0] * 0.9, props[1]]
    assert "reported propensity" in epsilon_greedy.draws_error(honest, probs, "x", lying)


def test_draw_checks_catch_wrong_frequencies_and_impossible_actions():
    rng = np.random.default_rng(5)
    probs = _probs(64, 0.3, seed=5)
    other = _probs(64, 0.05, seed=5)  # drawn with less exploration than reported
    assert "frequencies" in epsilon_greedy.draws_error([_sample(other, 8, rng) for _ in range(2)], probs, "x")
    drawn = [_sample(probs, 8, rng) for _ in range(2)]
    row = int(np.flatnonzero((probs == 0).any(1))[0])
    drawn[1][3, row] = int(np.flatnonzero(probs[row] == 0)[0])
    impossible = epsilon_greedy.draws_error(drawn, probs, "x")
    assert f"call 3 row {row} drew action index" in impossible
    assert not isinstance(impossible, draws.ChanceFailure)  # no fresh draw explains it


def test_a_chance_failure_is_confirmed_on_fresh_draws_before_it_stands():
    rng = np.random.default_rng(11)
    probs = _probs(64, 0.3, seed=11)
    honest = [_sample(probs, 8, rng) for _ in range(2)]
    twin = epsilon_greedy.draws_error([honest[0], honest[0].copy()], probs, "x")
    assert isinstance(twin, draws.ChanceFailure)
    answers = iter([twin, None])  # unlucky once, honest on the fresh draws: the push goes on
    calls = []
    assert draws.confirmed(lambda: calls.append(1) or next(answers)) is None
    assert len(calls) == 2
    stuck = [twin, draws.ChanceFailure("again")]  # fails twice: the second run's error stands
    assert draws.confirmed(iter(stuck).__next__) == "again"
    calls.clear()  # a failure chance cannot explain is not drawn again
    assert draws.confirmed(lambda: calls.append(1) or "call 3 row 0 drew action index 7") is not None
    assert len(calls) == 1


def test_chi_square_tail_matches_scipy():
    for df in (1, 2, 5, 33):
        for x in (0.01, 0.5, 3.0, 12.0, 40.0, 90.0):
            assert draws.chi2_sf(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-9, abs=1e-15)
