"""The production-shaped log generator: shape of the logs, propensities that match the actions
drawn, a click model that matches the clicks, and exact ground truth against a loop reference."""

import re

import numpy as np
import pandas as pd
import pytest

from rlops.envs.logged_feedback import LogConfig, LogGenerator, check_probs


@pytest.fixture(scope="module")
def thompson():
    return LogGenerator(LogConfig(logging="thompson", seed=3))


@pytest.fixture(scope="module")
def thompson_logs(thompson):
    return thompson.sample(200_000, seed=1)


def test_logs_have_the_production_shape(thompson, thompson_logs):
    logs, imp = thompson_logs, thompson_logs.impressions
    assert len(thompson.user_columns) == 4 and len(thompson.float_columns) >= 2
    for col in thompson.user_columns:
        values = set(imp[col])
        assert 5 <= len(values) <= 50, col
        assert all(re.fullmatch(r"[0-9a-f]{32}", v) for v in values), col
    assert 30 <= thompson.num_items <= 80 and thompson.num_positions == 3
    assert set(imp["position"]) == {0, 1, 2}
    assert 0.003 <= imp["reward"].mean() <= 0.01  # CTR 0.3-1%
    assert set(np.unique(imp["reward"])) == {0, 1}
    np.testing.assert_array_equal(imp["item_id"], logs.items["item_id"][imp["action"]])
    # Item table: mixed numeric and categorical features, one row per item.
    assert len(logs.items["item_id"]) == thompson.num_items == len(set(logs.items["item_id"]))
    assert logs.items["item_price"].dtype.kind == "f" and logs.items["item_category"].dtype.kind == "U"
    assert set(logs.context_columns) | {"item_id", "action", "reward", "propensity"} == set(imp)


def test_propensities_are_the_probabilities_the_actions_were_drawn_with(thompson, thompson_logs):
    imp = thompson_logs.impressions
    table = thompson.logging_table
    np.testing.assert_allclose(table.sum(1), 1.0)
    assert table.min() >= thompson.config.exploration / thompson.num_items - 1e-12
    assert table.max() > 5 / thompson.num_items  # Thompson concentrates
    np.testing.assert_allclose(imp["propensity"], table[imp["position"], imp["action"]])
    for p in range(3):
        rows = imp["position"] == p
        freq = np.bincount(imp["action"][rows], minlength=thompson.num_items) / rows.sum()
        se = np.sqrt(table[p] * (1 - table[p]) / rows.sum())
        assert np.all(np.abs(freq - table[p]) < 5 * se + 1e-9)


def test_clicks_follow_the_click_model_and_true_values(thompson, thompson_logs):
    imp = thompson_logs.impressions
    n = len(thompson_logs)
    chosen = thompson_logs.expected_ctr[np.arange(n), imp["action"]]
    np.testing.assert_allclose(thompson_logs.expected_ctr, thompson.expected_ctr(thompson_logs.contexts()))
    se = np.sqrt(chosen.mean() / n)
    assert abs(imp["reward"].mean() - chosen.mean()) < 4 * se
    # The logging policy's exact value is what its logs earn on average.
    assert abs(imp["reward"].mean() - thompson.true_value(thompson.logging_policy)) < 4 * se
    assert thompson.true_value(thompson.uniform_policy) == pytest.approx(thompson.config.ctr, rel=1e-6)
    best = thompson.true_value(thompson.optimal_policy)
    # Online contexts: the optimal policy's mean expected CTR on them approaches its true value.
    online = thompson.sample_contexts(100_000, seed=4)
    assert abs(thompson.expected_ctr(online).max(1).mean() - best) < 0.05 * best
    feats = thompson.item_feature_matrix()
    assert feats.shape[0] == thompson.num_items and np.isfinite(feats).all()
    assert np.linalg.matrix_rank(feats) > 5
    assert best > thompson.true_value(thompson.logging_policy) > thompson.true_value(thompson.uniform_policy)


def test_true_value_matches_a_loop_over_the_population():
    gen = LogGenerator(LogConfig(num_items=30, num_users=40, logging="uniform", seed=7))
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(gen.num_items), (len(gen.vocabularies["user_feature_0"]), 3))

    def policy(ctx):  # depends on a hashed user column and the position
        codes = np.array([list(gen.vocabularies["user_feature_0"]).index(v) for v in ctx["user_feature_0"]])
        return table[codes, ctx["position"]]

    expected = 0.0
    scale = gen.config.interaction_scale / np.sqrt(gen.config.latent_dim)
    vocab0 = list(gen.vocabularies["user_feature_0"])
    for u in range(gen.config.num_users):
        emb = sum(gen._cat_emb[j][gen.user_codes[u, j]] for j in range(4)) + gen.user_floats[u] @ gen._float_map
        for p in range(3):
            for a in range(gen.num_items):
                logit = gen._b0 + gen.config.position_bias[p] + gen.item_bias[a] + scale * emb @ gen.item_latent[a]
                prob_a = table[vocab0.index(gen.vocabularies["user_feature_0"][gen.user_codes[u, 0]]), p, a]
                expected += gen.user_weights[u] / 3 * prob_a / (1 + np.exp(-logit))
    assert gen.true_value(policy) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_to_files_round_trips(tmp_path, fmt):
    gen = LogGenerator(LogConfig(logging="uniform", seed=1))
    logs = gen.sample(500, seed=2)
    paths = logs.to_files(str(tmp_path), format=fmt)
    read = {
        "csv": lambda p: pd.read_csv(p, dtype=str),
        "jsonl": lambda p: pd.read_json(p, lines=True, dtype=False),
        "parquet": pd.read_parquet,
    }[fmt]
    imp, items = read(paths["impressions"]), read(paths["items"])
    assert list(imp.columns) == list(logs.impressions) and len(imp) == 500
    assert list(items.columns) == list(logs.items) and len(items) == gen.num_items
    for col in gen.user_columns + ("item_id",):
        assert list(imp[col].astype(str)) == list(logs.impressions[col])
    for col in ("action", "position", "reward"):
        np.testing.assert_array_equal(imp[col].astype(int), logs.impressions[col])
    np.testing.assert_allclose(imp["propensity"].astype(float), logs.impressions["propensity"], rtol=1e-12)
    np.testing.assert_allclose(items["item_price"].astype(float), logs.items["item_price"])


def test_same_seed_same_logs_and_clear_errors():
    a, b = LogGenerator(LogConfig(seed=5)), LogGenerator(LogConfig(seed=5))
    la, lb = a.sample(1000, seed=9), b.sample(1000, seed=9)
    for col in la.impressions:
        np.testing.assert_array_equal(la.impressions[col], lb.impressions[col])
    assert not np.array_equal(la.impressions["action"], a.sample(1000, seed=10).impressions["action"])
    with pytest.raises(ValueError, match="LogConfig.logging"):
        LogConfig(logging="greedy")
    with pytest.raises(ValueError, match=r"policy_fn returned shape"):
        a.true_value(lambda ctx: np.ones((3, 2)))
    with pytest.raises(ValueError, match="row 0 sum"):
        a.true_value(lambda ctx: np.full((len(ctx["position"]), a.num_items), 0.5))
    ctx = la.contexts()
    np.testing.assert_allclose(check_probs(a.logging_policy(ctx), 1000, a.num_items, "x").sum(1), 1.0)
    x = a.encode(ctx)
    assert x.shape == (1000, sum(a.config.user_cardinalities) + a.config.num_user_floats + 3)
    np.testing.assert_allclose(x.sum(1) - x[:, -6:-3].sum(1), 5)  # one-hot per category + position
    ctx["user_feature_2"] = ctx["user_feature_2"].copy()
    ctx["user_feature_2"][0] = "f" * 32
    with pytest.raises(ValueError, match=r"user_feature_2.*not in this generator's vocabulary"):
        a.expected_ctr(ctx)
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        la.to_files("/tmp/never", format="xml")
