"""The slate log generator: exact click expectations against simulated clicks, exact policy values
against enumeration of every full slate, logged propensities against the logging policy's exact
probabilities, writers that round-trip, and determinism by seed."""

import json

import numpy as np
import pandas as pd
import pytest

from rlops.agents.ranking import (
    EpsilonPerSlot,
    Greedy,
    PlackettLuce,
    UniformWithoutReplacement,
    brute_force_marginals,
    brute_force_slate_probs,
)
from rlops.envs.slate_feedback import ClickModel, LoggedSlates, SlateConfig, SlateLogGenerator

SMALL = dict(num_items=5, num_slots=3, num_users=40, mean_relevance=0.3)


@pytest.fixture(scope="module", params=["pbm", "cascade", "dcm"])
def small(request):
    return SlateLogGenerator(SlateConfig(click_model=request.param, continuation=(0.7, 0.4, 0.2), seed=2, **SMALL))


def _reference_clicks(kind, rel, examine, cont):
    """E[click at l] by walking the slots of one slate (pbm / cascade / dcm as the literature states)."""
    out, browsing = [], 1.0
    for slot, r in enumerate(rel):
        if kind == "pbm":
            out.append(examine[slot] * r)
            continue
        out.append(browsing * r)
        go_on = 0.0 if kind == "cascade" else cont[slot]
        browsing *= (1 - r) + r * go_on
    return np.array(out)


@pytest.mark.parametrize("kind", ["pbm", "cascade", "dcm"])
def test_expected_clicks_match_the_formulas_and_simulated_clicks(kind):
    model = ClickModel.make(kind, 4, position_decay=0.8, continuation=(0.6, 0.5, 0.3, 0.1))
    rel = np.array([[0.9, 0.5, 0.3, 0.7], [0.2, 0.1, 0.6, 0.4], [0.5, 0.5, 0.5, 0.5]])
    expected = model.expected(rel)
    theta = 1 / np.arange(1, 5) ** 0.8
    for row, e in zip(rel, expected):
        np.testing.assert_allclose(e, _reference_clicks(kind, row, theta, (0.6, 0.5, 0.3, 0.1)), rtol=1e-12)
    draws = 100_000
    clicks = model.sample(np.random.default_rng(0), np.repeat(rel, draws, 0)).reshape(3, draws, 4)
    se = np.sqrt(expected * (1 - expected) / draws)
    assert (np.abs(clicks.mean(1) - expected) <= 4 * se + 1e-12).all()
    if kind == "cascade":
        assert (clicks.sum(2) <= 1).all()  # a cascade user clicks at most once


@pytest.mark.parametrize(
    "policy", [PlackettLuce(0.7), EpsilonPerSlot(0.3), UniformWithoutReplacement(), Greedy()], ids=repr
)
def test_true_value_equals_enumeration_of_every_full_slate(small, policy):
    g = small
    scores = 3 * g.relevance + np.random.default_rng(1).normal(size=g.relevance.shape)
    weights = np.array([1.0, 0.7, 0.4])
    slates, probs = brute_force_slate_probs(policy, scores, 3)  # [S, L], [U, S]
    per_slate = np.stack(
        [g.expected_rewards(np.repeat(g.relevance[u : u + 1], len(slates), 0), slates) @ weights for u in range(40)]
    )
    reference = float(g.user_weights @ (probs * per_slate).sum(1))
    exact = g.true_value(policy, scores, position_weights=weights)
    assert exact.method == ("marginals" if g.click_model.kind == "pbm" else "enumeration")
    assert exact.standard_error == 0.0
    np.testing.assert_allclose(exact.value, reference, rtol=1e-9)
    forced = g.true_value(policy, scores, position_weights=weights, method="enumeration")
    np.testing.assert_allclose(forced.value, reference, rtol=1e-12)
    mc = g.true_value(policy, scores, position_weights=weights, method="monte_carlo", mc_samples=20_000)
    assert mc.method == "monte_carlo" and abs(mc.value - reference) <= 4 * mc.standard_error + 1e-12


def test_value_takes_scores_from_a_function_of_contexts_and_masks():
    g = SlateLogGenerator(SlateConfig(click_model="cascade", **SMALL))
    by_context = g.true_value(Greedy(), g.relevance_of)  # a policy scoring by the true relevance
    assert by_context == g.true_value(Greedy(), g.relevance)
    mask = np.ones(g.relevance.shape, bool)
    mask[:, 0] = False
    masked = g.true_value(PlackettLuce(), g.relevance, mask=mask)
    slates, probs = brute_force_slate_probs(PlackettLuce(), g.relevance, 3, mask)
    assert (probs[:, (slates == 0).any(1)] == 0).all()
    per_slate = np.stack([g.expected_rewards(np.repeat(r[None], len(slates), 0), slates).sum(1) for r in g.relevance])
    np.testing.assert_allclose(masked.value, g.user_weights @ (probs * per_slate).sum(1), rtol=1e-12)
    with pytest.raises(ValueError, match="pbm only"):
        g.true_value(Greedy(), g.relevance, method="marginals")
    big = SlateLogGenerator(SlateConfig(num_items=12, num_slots=5, click_model="dcm", num_users=20))
    assert big.true_value(Greedy(), big.relevance, mc_samples=2_000).method == "monte_carlo"  # 12^5 > 1e5


@pytest.mark.parametrize("logging", ["plackett_luce", "epsilon_greedy", "uniform"])
def test_logged_propensities_are_the_logging_policys_exact_probabilities(logging):
    g = SlateLogGenerator(SlateConfig(logging=logging, click_model="dcm", epsilon=0.3, seed=4, **SMALL))
    logs = g.sample(300, seed=1)
    assert logs.slates.shape == (300, 3) and (np.sort(logs.slates, 1)[:, 1:] != np.sort(logs.slates, 1)[:, :-1]).all()
    np.testing.assert_array_equal(logs.logging_scores, g.logging_scores[logs.users])
    marg = brute_force_marginals(g.logging_policy, logs.logging_scores, 3)
    np.testing.assert_allclose(logs.propensity, np.take_along_axis(marg, logs.slates[:, None, :], 1)[:, 0], atol=1e-9)
    space, probs = brute_force_slate_probs(g.logging_policy, logs.logging_scores, 3)
    for slot in range(3):  # P(prefix) = the probability of every full slate extending it
        extends = (space[None, :, : slot + 1] == logs.slates[:, None, : slot + 1]).all(2)
        np.testing.assert_allclose(logs.propensity_cascade[:, slot], (probs * extends).sum(1), rtol=1e-9)
    assert (np.diff(logs.propensity_cascade, axis=1) <= 0).all() and (logs.propensity > 0).all()
    np.testing.assert_allclose(logs.propensity[:, 0], logs.propensity_cascade[:, 0], rtol=1e-12)
    np.testing.assert_allclose(logs.relevance, g.relevance_of(logs.contexts), rtol=1e-12)
    np.testing.assert_allclose(logs.expected_rewards, g.expected_rewards(logs.relevance, logs.slates), rtol=1e-12)
    np.testing.assert_array_equal(logs.slate_reward, logs.rewards.sum(1))


def test_clicks_in_the_logs_follow_the_exact_expectations():
    g = SlateLogGenerator(SlateConfig(click_model="cascade", num_users=200, seed=5))
    logs = g.sample(40_000, seed=3)
    mean, se = logs.expected_rewards.mean(0), np.sqrt(logs.expected_rewards.mean(0) / len(logs))
    assert (np.abs(logs.rewards.mean(0) - mean) <= 4 * se).all()
    assert 0.05 < logs.rewards.mean() < 0.5 and set(np.unique(logs.rewards)) == {0, 1}


def _equal_logs(a: LoggedSlates, b: LoggedSlates) -> bool:
    return all(
        np.array_equal(getattr(a, name), getattr(b, name))
        for name in ("slate_id", "slates", "rewards", "propensity", "propensity_cascade", "slate_reward", "users")
    ) and all(np.array_equal(a.contexts[c], b.contexts[c]) for c in a.context_columns)


def test_determinism_by_seed():
    config = SlateConfig(seed=7, **SMALL)
    a, b = SlateLogGenerator(config).sample(500, seed=1), SlateLogGenerator(config).sample(500, seed=1)
    assert _equal_logs(a, b)
    assert not _equal_logs(a, SlateLogGenerator(config).sample(500, seed=2))
    assert not np.array_equal(
        a.relevance, SlateLogGenerator(SlateConfig(seed=8, **SMALL)).sample(500, seed=1).relevance
    )


def test_writers_round_trip(tmp_path):
    g = SlateLogGenerator(SlateConfig(seed=3, **SMALL))
    logs = g.sample(50, seed=0)
    ids = logs.items["item_id"]
    user_cols = list(logs.context_columns)
    assert user_cols[0] == "user_feature_0" and "user_float_0" in user_cols  # logged_feedback's names
    for fmt in ("csv", "jsonl"):
        paths = logs.to_files(str(tmp_path / fmt), layout="item", format=fmt)
        rows = (  # exact floats: the writers use the shortest repr that round-trips
            pd.read_csv(paths["impressions"], float_precision="round_trip")
            if fmt == "csv"
            else pd.read_json(paths["impressions"], lines=True, precise_float=True)
        )
        assert list(rows.columns[:7]) == [
            "slate_id",
            "position",
            "item_id",
            "reward",
            "propensity",
            "propensity_cascade",
            "slate_reward",
        ]
        rows = rows.sort_values(["slate_id", "position"])
        np.testing.assert_array_equal(rows["position"].to_numpy().reshape(50, 3), np.tile([1, 2, 3], (50, 1)))
        np.testing.assert_array_equal(rows["item_id"].to_numpy().reshape(50, 3), ids[logs.slates])
        np.testing.assert_array_equal(rows["reward"].to_numpy().reshape(50, 3), logs.rewards)
        for col in ("propensity", "propensity_cascade"):  # floats exactly
            np.testing.assert_array_equal(rows[col].to_numpy().reshape(50, 3), getattr(logs, col))
        for col in user_cols:
            np.testing.assert_array_equal(rows[col].to_numpy()[::3], logs.contexts[col])
        items = pd.read_csv(paths["items"], float_precision="round_trip")
        np.testing.assert_array_equal(items["item_id"], ids)
        np.testing.assert_array_equal(items["item_price"], logs.items["item_price"])
    paths = logs.to_files(str(tmp_path / "slate"), layout="slate", format="jsonl")
    records = [json.loads(line) for line in open(paths["slates"])]
    assert [r["slate_id"] for r in records] == list(range(50))
    assert [r["slate"] for r in records] == ids[logs.slates].tolist()
    np.testing.assert_array_equal([r["propensity_cascade"] for r in records], logs.propensity_cascade)
    np.testing.assert_array_equal([r["reward"] for r in records], logs.rewards)
    assert [r[user_cols[-1]] for r in records] == logs.contexts[user_cols[-1]].tolist()
    with pytest.raises(ValueError, match="layout 'slate' writes jsonl"):
        logs.to_files(str(tmp_path), layout="slate", format="csv")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="click_model"):
        SlateConfig(click_model="position")
    with pytest.raises(ValueError, match="slate length num_slots=6"):
        SlateConfig(num_items=5, num_slots=6)
    with pytest.raises(ValueError, match="logging"):
        SlateConfig(logging="thompson")
    with pytest.raises(ValueError, match="mean_relevance"):
        SlateConfig(mean_relevance=0.7)
    with pytest.raises(ValueError, match="continuation"):
        ClickModel.make("dcm", 3, continuation=(0.5, 0.5))
