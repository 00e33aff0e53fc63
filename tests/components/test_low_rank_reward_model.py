"""The factorization reward model (reward_model "low_rank", reward_models.LowRank).

Clicks drawn from a known low-rank logistic model (a user's taste vector . an item's embedding),
logged by a heavy-tailed Thompson-like policy that shows a few items most of the time: the shape
of the closed loop's logs. A per-item model (kind "logistic": each item's slopes from its own
rows, shrunk) fills the rarely shown items in from their means, so it values a personalized
policy low; the factorization shares the user tower across items.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import reward_models


def low_rank_world(seed: int = 0, n: int = 20_000, columns: int = 3, values: int = 6, items: int = 20, rank: int = 3):
    """Users described by `columns` categorical features (one-hot), each value with its taste
    vector; a user's taste is their sum. The log's propensities are heavy-tailed."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, values, (n, columns))
    x = np.concatenate([np.eye(values)[codes[:, c]] for c in range(columns)], 1)  # [n, columns * values]
    taste, embedding = rng.normal(size=(columns * values, rank)), rng.normal(size=(items, rank))
    logits = -2.5 + 0.5 * (x @ taste) @ embedding.T  # [n, items]
    truth = 1 / (1 + np.exp(-logits))
    popularity = np.exp(rng.normal(scale=1.5, size=items))
    propensity = popularity / popularity.sum()
    actions = rng.choice(items, n, p=propensity)
    rewards = rng.binomial(1, truth[np.arange(n), actions]).astype(float)
    return x, actions, rewards, propensity[actions], truth


@pytest.mark.parametrize("seed", [0, 1])
def test_low_rank_values_a_personalized_policy_where_a_per_item_model_falls_short(seed):
    """DM of the per-user best item: the factorization within 15% of the true value; the per-item
    model at least twice as far off, and below the truth (both balanced toward uniform: no target
    policy given, so the comparison is of the models' shapes, not of their weights)."""
    x, actions, rewards, propensities, truth = low_rank_world(seed)
    data = LoggedFeedback(x, actions, rewards, propensities)
    best = np.eye(truth.shape[1])[truth.argmax(1)]
    value = float((best * truth).sum(1).mean())
    dm = {
        kind: float((best * reward_models.reward_predictions(kind, data, truth.shape[1])).sum(1).mean())
        for kind in ("logistic", "low_rank")
    }
    assert abs(dm["low_rank"] - value) < 0.15 * value, (dm, value)
    assert value - dm["logistic"] > 2 * abs(dm["low_rank"] - value), (dm, value)


def test_predictions_for_slots_equal_those_for_every_item():
    """predict(x, items) picks, slot by slot, the columns of predict(x); padding slots are 0."""
    rng = np.random.default_rng(2)
    model = reward_models.LowRank(
        "logistic", -1.0, rng.normal(size=4), rng.normal(size=6), rng.normal(size=(4, 2)), rng.normal(size=(6, 2))
    )
    x = rng.normal(size=(5, 4))
    slots = np.array([[0, 5, -1], [3, 3, 2], [1, -1, -1], [4, 0, 5], [2, 1, 0]])
    every = model.predict(x)
    expected = np.where(slots < 0, 0.0, np.take_along_axis(every, np.maximum(slots, 0), 1))
    np.testing.assert_allclose(model.predict(x, slots), expected, rtol=1e-12)


def test_an_item_never_logged_gets_its_users_tastes_through_its_features():
    """Per-arm records: item 0 a candidate everywhere, never logged; its embedding comes from its
    features (f_m M), so its predictions still rank users as the truth does."""
    rng = np.random.default_rng(4)
    n, m, d, da = 12_000, 30, 6, 4
    f = rng.normal(size=(m, da))
    x = rng.normal(size=(n, d))
    logits = -2.0 + (x @ rng.normal(size=(d, 2))) @ (f @ rng.normal(size=(da, 2))).T
    truth = 1 / (1 + np.exp(-logits))
    items = np.tile(np.arange(m), (n, 1))
    actions = rng.integers(1, m, n)  # never item 0
    rewards = rng.binomial(1, truth[np.arange(n), actions]).astype(float)
    q = reward_models.fit_arm_reward_model(x, items, actions, rewards, f, kind="low_rank", seed=1)
    assert np.corrcoef(q[:, 0], truth[:, 0])[0, 1] > 0.9


def test_rewards_not_0_or_1_fit_the_squared_error_link():
    """ "low_rank" resolves to auto's link: squared error for real-valued rewards, and recovers a
    low-rank mean reward closer than one ridge regression per item does."""
    rng = np.random.default_rng(3)
    n, d, m = 20_000, 18, 20
    x = rng.normal(size=(n, d))
    mean = 1.0 + (x @ rng.normal(size=(d, 2))) @ rng.normal(size=(m, 2)).T  # [n, m]
    actions = rng.integers(0, m, n)
    rewards = mean[np.arange(n), actions] + rng.normal(scale=2.0, size=n)
    assert reward_models.resolve_reward_model("low_rank", rewards) == "ridge_low_rank"
    data = LoggedFeedback(x, actions, rewards, np.full(n, 1 / m))
    error = {
        kind: float(np.abs(reward_models.reward_predictions(kind, data, m) - mean).mean())
        for kind in ("ridge", "low_rank")
    }
    assert error["low_rank"] < 0.8 * error["ridge"], error  # 0.22 against 0.32
