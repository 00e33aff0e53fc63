"""Each head's TensorFlow probabilities against its numpy twin on random scores and masks (within
1e-6), and the HEADS table (rlops.heads)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlops.heads import HEADS, epsilon_greedy, head_module
from rlops.heads.slate import head as slate
from rlops.heads.slate.probabilities import EpsilonPerSlot, Greedy, PlackettLuce, UniformWithoutReplacement

TOLERANCE = 1e-6


def _masks(rng: np.random.Generator, batch: int, k: int, least: int = 1) -> np.ndarray:
    """[B, K] random masks allowing at least `least` items per row."""
    mask = rng.random((batch, k)) < 0.6
    for row in range(batch):
        mask[row, rng.choice(k, least, replace=False)] = True
    return mask


def test_the_table_names_each_kinds_head():
    assert head_module("bandit") is epsilon_greedy
    assert head_module("slate").__name__ == "rlops.heads.slate"
    assert head_module("trajectory") is None and HEADS["trajectory"] is None
    with pytest.raises(KeyError, match="no head for decision kind 'page'"):
        head_module("page")


@pytest.mark.parametrize("seed", range(3))
def test_bandit_head_probabilities_equal_the_numpy_twin(seed):
    rng = np.random.default_rng(seed)
    batch, k = 64, 7
    epsilon = float(rng.uniform(0.0, 1.0))
    mask = _masks(rng, batch, k)
    greedy = rng.integers(0, k, batch)  # some not allowed: served uniformly
    exact = epsilon_greedy.epsilon_greedy_probs(greedy, epsilon, mask)
    # every action's probability under the TF rule, against the twin's [B, K]
    n_allowed = tf.constant(mask.sum(1), tf.float32)
    greedy_ok = tf.constant(mask[np.arange(batch), greedy])
    per_action = np.stack(
        [
            epsilon_greedy.propensity_tf(
                tf.constant(epsilon, tf.float32), n_allowed, tf.constant(greedy == a), greedy_ok
            ).numpy()
            for a in range(k)
        ],
        axis=1,
    )
    np.testing.assert_allclose(np.where(mask, per_action, 0.0), exact, atol=TOLERANCE)
    # the served head and its replay twin, on the same uniforms
    uniforms = rng.random((batch, epsilon_greedy.NUM_UNIFORMS)).astype(np.float32)
    out = epsilon_greedy.head(tf.constant(greedy), k, epsilon, action_mask=tf.constant(mask), uniforms=uniforms)
    action, propensity, greedy_action = epsilon_greedy.decide(greedy, epsilon, mask, uniforms)
    np.testing.assert_array_equal(out["action"].numpy(), action)
    np.testing.assert_array_equal(out["greedy_action"].numpy(), greedy_action)
    np.testing.assert_allclose(out["propensity"].numpy(), propensity, atol=TOLERANCE)
    # the twin at epsilon from its greedy probabilities (the Evaluator's certification grid)
    np.testing.assert_allclose(
        epsilon_greedy.mix(epsilon_greedy.epsilon_greedy_probs(greedy, 0.0, mask), epsilon, mask),
        exact,
        atol=1e-12,
    )


@pytest.mark.parametrize("masked", [False, True])
def test_collect_draws_report_the_numpy_twins_probability(masked):
    rng = np.random.default_rng(7)
    batch, k, epsilon = 256, 5, 0.3
    mask = _masks(rng, batch, k) if masked else np.ones((batch, k), bool)
    greedy = np.array([rng.choice(np.flatnonzero(row)) for row in mask], np.int32)  # a masked argmax
    action, propensity, explore = epsilon_greedy.collect_draw(
        tf.constant(greedy), k, epsilon, tf.constant(mask) if masked else None, tf.int32
    )
    action = action.numpy()
    exact = epsilon_greedy.epsilon_greedy_probs(greedy, epsilon, mask)
    assert mask[np.arange(batch), action].all()
    np.testing.assert_allclose(propensity.numpy(), exact[np.arange(batch), action], atol=TOLERANCE)
    assert explore.numpy().any() and not explore.numpy().all()


SLATE_POLICIES = {
    "plackett_luce": PlackettLuce(0.8),
    "epsilon_per_slot": EpsilonPerSlot(0.25),
    "uniform": UniformWithoutReplacement(),
    "greedy": Greedy(),
}


@pytest.mark.parametrize("name", sorted(SLATE_POLICIES))
def test_slate_head_probabilities_equal_the_numpy_twin(name):
    policy = SLATE_POLICIES[name]
    rng = np.random.default_rng(11)
    batch, k, num_slots = 16, 9, 3
    scores = rng.normal(0.0, 2.0, (batch, k))
    mask = _masks(rng, batch, k, least=num_slots)
    out = slate.slate_head(tf.constant(scores), num_slots, policy, tf.constant(mask), seed=[3, 5])
    shown = out[slate.SLATE].numpy().astype(np.int64)
    marginals = policy.marginals(scores, num_slots, mask)  # [B, K, L]
    at_slot = marginals[np.arange(batch)[:, None], shown, np.arange(num_slots)[None, :]]
    np.testing.assert_allclose(out[slate.PROPENSITY_ITEM_POSITION].numpy(), at_slot, atol=TOLERANCE)
    np.testing.assert_allclose(
        out[slate.PROPENSITY_CASCADE].numpy(), policy.prefix_probs(scores, shown, mask), atol=TOLERANCE
    )
    np.testing.assert_array_equal(
        out[slate.GREEDY_SLATE].numpy(), Greedy().sample(np.random.default_rng(0), scores, num_slots, mask)
    )
    # the LiteRT twin: float32 builtins, the same probabilities for the page it draws
    kind, parameter = slate.policy_kind(policy)
    step = getattr(policy, "quadrature_step", 0.25)
    lite = slate.litert_slate_head(tf.constant(scores, tf.float32), tf.constant(mask), num_slots, kind, parameter, step)
    page = lite[slate.SLATE].numpy().astype(np.int64)
    exact = policy.marginals(scores.astype(np.float32).astype(np.float64), num_slots, mask)
    at_slot = exact[np.arange(batch)[:, None], page, np.arange(num_slots)[None, :]]
    np.testing.assert_allclose(lite[slate.PROPENSITY_ITEM_POSITION].numpy(), at_slot, atol=TOLERANCE)
