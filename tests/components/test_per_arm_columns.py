"""Per-arm columns from wide logs (bandit_columns.per_arm_columns): one numeric column per item,
named by a pattern holding the item's id, becomes one per-arm feature per_arm/<name> [K], joined
to each candidate like the item table's features and served as one input per_arm_<name> [B, K].

End to end on a tiny wide log whose affinity column decides the reward: ingest (messy cells
quarantined with a reason) -> train -> push (verified in fresh processes) -> a fresh process
without rlops calls serving_features (and serving_default by candidate id, the affinities aligned
with the ids) and prefers the high-affinity item. The config is the one docs/ingestion.md shows
(its per_arm_columns block), so the page cannot drift from the code."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import run_fresh_python

from rlops.components.common import records
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import read_quarantine, run_experience_gen

ITEMS = ["sku-a", "sku-b", "sku-c", "sku-d"]  # ids with punctuation: columns are named by them as logged
PATTERN = "user-item_affinity_{item_id}"
N = 600


def _column(item: str) -> str:
    return PATTERN.replace("{item_id}", item)


def _write_logs(root, rows: int = N, seed: int = 0) -> dict:
    """A wide CSV log (one affinity column per item; the logged item's affinity decides the click)
    and an item table with one item feature. Row 3 has an empty affinity cell, row 4 a word."""
    rng = np.random.default_rng(seed)
    k = len(ITEMS)
    affinity = rng.uniform(0, 1, (rows, k)).round(4)
    shown = rng.integers(0, k, rows)
    logs = pd.DataFrame(
        {
            "user_x": rng.permutation(rows) / 100,  # distinct: a record's row is found by it
            "item": [ITEMS[a] for a in shown],
            "click": (affinity[np.arange(rows), shown] > 0.5).astype(int),
            "propensity": 1.0 / k,
        }
    )
    for j, item in enumerate(ITEMS):
        logs[_column(item)] = affinity[:, j].astype(object)
    logs.loc[3, _column("sku-b")] = ""
    logs.loc[4, _column("sku-d")] = "n/a"
    pd.DataFrame({"item_id": ITEMS, "item_price": [3.0, 1.5, 2.0, 9.0]}).to_csv(root / "items.csv", index=False)
    logs.to_csv(root / "logs.csv", index=False)
    return {"logs": logs, "affinity": affinity}


DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ingestion.md")


def _docs_block() -> dict:
    """The config docs/ingestion.md shows for per-arm columns: the one these tests run."""
    text = open(DOCS, encoding="utf-8").read()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "per_arm_columns: {affinity:" in b]
    return yaml.safe_load(block)["experience_gen"]


def _config(root, **columns) -> dict:
    cfg = _docs_block()
    cfg["source"]["pattern"] = str(root / "logs.csv")
    cfg["item_source"]["pattern"] = str(root / "items.csv")
    cfg["bandit_columns"].update(columns)
    return cfg


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    root = tmp_path_factory.mktemp("wide")
    data = _write_logs(root)
    result = run_experience_gen(ExperienceGenConfig.from_json(_config(root)), str(root / "ex"), str(root / "q"))
    return root, data, result


def test_wide_columns_become_one_per_arm_feature_and_bad_cells_are_quarantined(wide):
    from rlops.features import load

    root, data, result = wide
    assert result.records_read == N and result.records_written == N - 2
    assert result.reasons == {"missing_value": 1, "wrong_type": 1}
    messages = {q["reason"]: q["message"] for q in read_quarantine(str(root / "q"))}
    assert _column("sku-b") in messages["missing_value"] and "'n/a'" in messages["wrong_type"]
    schema = load(str(root / "ex"))
    assert schema.names == ["user_x"]  # the affinity columns are no global features
    assert [f.name for f in schema.per_arm] == ["item_price", "affinity"]
    aff = schema.per_arm[1]
    kept = np.delete(data["affinity"], [3, 4], axis=0)
    assert aff.kind == "float" and aff.mean[0] == pytest.approx(kept.mean(), rel=1e-5)
    # Each record carries its own row's affinities, one per candidate, in the item table's order.
    logs = data["logs"].set_index((data["logs"]["user_x"] * 100).round().astype(int))
    for split in ("train", "eval"):
        got = records.read_logged_bandit(str(root / "ex"), split)
        f = got[records.FEATURES]
        assert f["per_arm/affinity"].shape == (len(got[records.ACTION]), len(ITEMS))
        for i in range(0, len(f["user_x"]), 97):
            row = logs.loc[int(round(float(f["user_x"][i]) * 100))]
            want = [float(row[_column(item)]) for item in ITEMS]
            np.testing.assert_allclose(f["per_arm/affinity"][i], want, rtol=1e-6)
            assert ITEMS[got[records.ACTION][i]] == row["item"]


FRESH = r"""
import json, sys
import tensorflow as tf
args = json.loads(sys.argv[1])
model = tf.saved_model.load(args["model"])
sig = model.signatures["serving_features"]  # feature arrays per candidate
b = len(args["affinity"])
out = sig(
    user_x=tf.constant([0.3] * b, tf.float32),
    per_arm_item_price=tf.constant([[3.0, 1.5, 2.0, 9.0]] * b, tf.float32),
    per_arm_affinity=tf.constant(args["affinity"], tf.float32),
    num_actions=tf.constant([4] * b, tf.int64),
)
# by id: the item table's features are inside; the per-user affinities come aligned with the ids
by_id = model.signatures["serving_default"]
reverse = [row[::-1] for row in args["affinity"]]
ids = by_id(
    user_x=tf.constant([0.3] * b, tf.float32),
    candidate_ids=tf.constant([args["items"][::-1]] * b),
    per_arm_affinity=tf.constant(reverse, tf.float32),
)
print(json.dumps({"rlops": any(m.startswith("rlops") for m in sys.modules),
                  "inputs": {k: s.shape.as_list() for k, s in sig.structured_input_signature[1].items()},
                  "by_id_inputs": sorted(by_id.structured_input_signature[1]),
                  "greedy_item_id": [x.decode() for x in ids["greedy_item_id"].numpy().tolist()],
                  "greedy": out["greedy_action"].numpy().tolist(),
                  "propensity": out["propensity"].numpy().tolist()}))
"""


@pytest.mark.slow  # trained, pushed (two fresh verifier processes) and served: ~15-25 s
def test_trains_pushes_verified_and_a_fresh_process_prefers_the_high_affinity_item(wide, tmp_path):
    from rlops.components.common.model import serving_dir
    from rlops.components.pusher.core import push_policy, verification_inputs
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    root, _, _ = wide
    examples = str(root / "ex")
    cfg = TrainerConfig(agent="lin_ucb", num_actions=len(ITEMS), batch_size=128, alpha=0.1)
    run_trainer(cfg, str(tmp_path / "model"), str(tmp_path / "run"), examples)
    # Verified in two fresh processes on the eval split's records, the SavedModel and the LiteRT file
    # (same greedy actions and propensities, honest draws), both taking the wide column as one input.
    policy, serving = serving_dir(str(tmp_path / "model")), str(tmp_path / "serving")
    pushed = push_policy(policy, serving, True, verification_inputs(examples, None), litert=True)
    assert pushed.pushed and str(pushed.destination).endswith(f"/{pushed.version}")
    with open(os.path.join(str(pushed.destination), "policy_litert.json")) as f:
        assert json.load(f)["inputs"]["per_arm_affinity"]["shape"] == [None, 4]
    # Two requests: the high affinity on item 2, then on item 0 (the item with it wins, whichever).
    affinity = [[0.1, 0.1, 0.9, 0.1], [0.9, 0.1, 0.1, 0.1]]
    request = {"model": pushed.destination, "affinity": affinity, "items": ITEMS}
    got = run_fresh_python(FRESH, json.dumps(request), cwd=tmp_path)
    assert not got["rlops"]
    assert got["inputs"] == {  # the 4 affinity columns are one input
        "user_x": [None],
        "per_arm_item_price": [None, 4],
        "per_arm_affinity": [None, 4],
        "num_actions": [None],
    }
    assert got["greedy"] == [2, 0]
    # served by id (candidates in reverse order, their affinities aligned): the same items win
    assert got["by_id_inputs"] == ["candidate_ids", "per_arm_affinity", "user_x"]
    assert got["greedy_item_id"] == [ITEMS[2], ITEMS[0]]
    assert all(0 < p <= 1 for p in got["propensity"])


def test_a_header_without_an_items_column_is_one_line_naming_it(tmp_path, capsys):
    from rlops.components.experience_gen.__main__ import main

    _write_logs(tmp_path, rows=20)
    logs = pd.read_csv(tmp_path / "logs.csv").drop(columns=[_column("sku-c")])
    logs.to_csv(tmp_path / "logs.csv", index=False)
    cfg = json.dumps(_config(tmp_path))
    code = main(["--config", cfg, "--examples-uri", str(tmp_path / "ex"), "--quarantine-uri", str(tmp_path / "q")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "per_arm_columns['affinity']: 1 of the 4 items" in err and "'user-item_affinity_sku-c'" in err
    assert "closest: 'user-item_affinity_sku-" in err


def test_a_record_without_an_items_value_is_quarantined_naming_the_column(tmp_path):
    """JSON Lines name their columns per record: one lacking an item's key, or holding text there,
    is quarantined with the column in the reason; the rest are written."""
    rows = [
        {"user_x": i / 10, "item": ITEMS[i % 4], "click": i % 2, "propensity": 0.25}
        | {_column(item): 0.5 for item in ITEMS}
        for i in range(12)
    ]
    del rows[5][_column("sku-a")]
    rows[6][_column("sku-d")] = "high"
    (tmp_path / "logs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pd.DataFrame({"item_id": ITEMS}).to_csv(tmp_path / "items.csv", index=False)
    cfg = _config(tmp_path, item_features=[])  # an item table of ids only: the log's columns are the item features
    cfg["source"] = {"kind": "file", "pattern": str(tmp_path / "logs.jsonl"), "format": "jsonl"}
    cfg["max_bad_record_ratio"] = 0.5
    r = run_experience_gen(ExperienceGenConfig.from_json(cfg), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert r.records_written == 10 and r.records_quarantined == 2
    messages = sorted(q["message"] for q in read_quarantine(str(tmp_path / "q")))
    assert any(_column("sku-a") in m for m in messages) and any("'high'" in m for m in messages), messages
    from rlops.features import load

    assert [f.name for f in load(str(tmp_path / "ex")).per_arm] == ["affinity"]


def _without_item_table(cfg: dict) -> None:
    """Actions as indices, no item table: nothing tells which column is which action's."""
    del cfg["item_source"]
    for key in ("item_id", "item_table_id", "item_features"):
        del cfg["bandit_columns"][key]
    cfg["action_spec"] = {"minimum": 0, "maximum": len(ITEMS) - 1}


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda c: c["bandit_columns"].update(per_arm_columns={"affinity": "affinity_"}), r"hold \{item_id\} once"),
        (
            lambda c: c["bandit_columns"].update(features=["user_x", _column("sku-a")]),
            r"features\['user-item_affinity_sku-a'\]: .* a per-arm feature now",
        ),
        (lambda c: c["bandit_columns"].update(item_features=[], per_arm_columns={"item_price": PATTERN}) or None, None),
        (lambda c: c["bandit_columns"].update(per_arm_columns={"item_price": PATTERN}), "already have 'item_price'"),
        (lambda c: c["bandit_columns"].update(per_arm_columns={"reward": PATTERN}), "name the per-arm feature"),
        (lambda c: _without_item_table(c), r"per_arm_columns: needs experience_gen.item_source"),
    ],
)
def test_config_errors_name_the_key(tmp_path, change, match):
    cfg = _config(tmp_path)
    change(cfg)
    if match is None:  # an item table of ids only is fine with per-arm columns
        ExperienceGenConfig.from_json(cfg)
        return
    with pytest.raises(ValueError, match=match):
        ExperienceGenConfig.from_json(cfg)


def test_rlops_init_proposes_the_pattern_for_columns_named_by_item_id(tmp_path, capsys):
    """A stray word in one affinity column does not split the group; an item without its column is
    one DECIDE line; the YAML loads with the strict loader unchanged."""
    from rlops.pipelines import cli
    from rlops.pipelines.config import load_config

    _write_logs(tmp_path, rows=120)
    logs = pd.read_csv(tmp_path / "logs.csv", dtype=str)
    logs.loc[7, _column("sku-c")] = "abc"
    logs.to_csv(tmp_path / "logs.csv", index=False)
    out = tmp_path / "init.yaml"
    assert cli.main(["init", "--from", str(tmp_path / "logs.csv"), "--items", str(tmp_path / "items.csv"),
                     "--out", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    cols = yaml.safe_load(text)["experience_gen"]["bandit_columns"]
    assert cols["per_arm_columns"] == {"user-item_affinity": PATTERN}
    assert [f["name"] for f in cols["features"]] == ["user_x"]  # the 4 columns are no global features
    assert "DECIDE" not in text
    config = load_config("bandit", str(out))
    assert config.experience_gen.bandit_columns.per_arm_columns == {"user-item_affinity": PATTERN}

    pd.DataFrame({"item_id": [*ITEMS, "sku-e"], "item_price": [1.0] * 5}).to_csv(tmp_path / "items.csv", index=False)
    assert cli.main(["init", "--from", str(tmp_path / "logs.csv"), "--items", str(tmp_path / "items.csv"),
                     "--out", str(out), "--force"]) == 0  # fmt: skip
    (decide,) = [line for line in out.read_text().splitlines() if line.startswith("# DECIDE: ")]
    assert "1 item(s) of the item table have no column user-item_affinity_{item_id} ('sku-e')" in decide

    # Without an item table, columns named by the action ids are pointed out (as global features still).
    plain = logs.drop(columns=["item"]).assign(action=[i % 4 for i in range(len(logs))])
    plain.columns = [c.replace("sku-a", "0").replace("sku-b", "1").replace("sku-c", "2").replace("sku-d", "3")
                     for c in plain.columns]  # fmt: skip
    plain.to_csv(tmp_path / "plain.csv", index=False)
    assert cli.main(["init", "--from", str(tmp_path / "plain.csv"), "--out", "-"]) == 0
    printed = capsys.readouterr().out
    assert "4 columns user-item_affinity_{item_id} hold one value per action: give an item table" in printed
