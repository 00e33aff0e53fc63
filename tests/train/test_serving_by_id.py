"""Serving a catalog by item id (rlops.train.by_id): a per-arm policy exported with its item table
answers `serving_default` from the user's features plus `candidate_ids` [B, C], any C per call.

Served in a fresh process that imports only TensorFlow and numpy, through TF Serving's REST rule for
an `instances` body (each input gathered over the instances into one batched tensor of its dtype):
ids among the candidates for C = 1, a few and all; draws whose frequencies match the reported
propensities (chi-square, rlops.heads.draws) at batch 1 and batch 64; pads never chosen; an unknown
id fails naming it; the table's row count and hash in get_metadata and policy_specs.json.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import run_fresh_python

from rlops.features.item_catalog import ItemCatalog
from rlops.heads.draws import SIGNIFICANCE, frequency_pvalue
from rlops.heads.epsilon_greedy import epsilon_greedy_probs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "components"))
from test_litert import K_PER_ARM, _randomize, per_arm_schema  # noqa: E402

EPSILON = 0.3
PAGE_SIZE = 3
M = 50
IDS = np.arange(M)  # ids 0..49, so the request [3, 17, 42] names known items
USER = {
    "user_0": "u0_1",
    "user_1": "u1_2",
    "user_2": "u2_3",
    "user_3": "u3_4",
    "region": 7,
    "tags": ["t1", "t2", ""],
    "age": 31.0,
}

# TF Serving's REST rule for a row-format body, then one call per `repeat`; TensorFlow and numpy only.
SERVE = r"""
import importlib.abc, json, sys

class NoRlops(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "rlops" or name.startswith("rlops."):
            raise ImportError("rlops is not installed on the server")

sys.meta_path.insert(0, NoRlops())
import tensorflow as tf

model = tf.saved_model.load(sys.argv[1])
fn = model.signatures["serving_default"]
specs = fn.structured_input_signature[1]
meta = {k: v.numpy().decode() if v.dtype == tf.string else float(v.numpy())
        for k, v in model.signatures["get_metadata"]().items()}


def answer(body, repeat):
    instances = body["instances"]
    feeds = {name: tf.constant([inst[name] for inst in instances], spec.dtype) for name, spec in specs.items()}
    calls = []
    for _ in range(repeat):
        try:
            out = fn(**feeds)
        except tf.errors.InvalidArgumentError as e:
            return {"error": e.message}
        calls.append({k: [x.decode() if isinstance(x, bytes) else x for x in v.numpy().tolist()] for k, v in out.items()})
    return {"calls": calls}


requests = json.loads(open(sys.argv[2]).read())
print(json.dumps({"responses": [answer(r["body"], r["repeat"]) for r in requests], "metadata": meta,
                  "inputs": sorted(specs), "rlops_loaded": any(m.startswith("rlops") for m in sys.modules)}))
"""


def _catalog(ids: np.ndarray) -> ItemCatalog:
    rng = np.random.default_rng(0)
    return ItemCatalog(
        ids,
        {f"item_feature_{i}": np.array([f"c{i}_{j}" for j in rng.integers(0, 12, len(ids))], object) for i in range(3)},
    )


def _export(kind: str, catalog: ItemCatalog, out: str, page_size: int | None = None) -> None:
    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.components.trainer.config import TrainerConfig
    from rlops.features.export import PerArmFeaturePolicy
    from rlops.features.per_arm import PerArmPreprocessor
    from rlops.train.policy_saver import PolicySaver

    pre = PerArmPreprocessor(per_arm_schema(), K_PER_ARM)
    agent = make_bandit_agent(
        TrainerConfig(agent=kind, num_actions=K_PER_ARM),
        pre.global_dim,
        tf.Variable(0, dtype=tf.int64),
        per_arm=(pre.global_dim, K_PER_ARM, pre.arm_dim),
    )
    _randomize(agent.policy.variables, 2)
    policy = PerArmFeaturePolicy(serving_policy(agent), pre)
    PolicySaver(
        policy, serving_epsilon=EPSILON, decision_kind="bandit", item_catalog=catalog, page_size=page_size
    ).save(out)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("by_id")
    catalog = _catalog(IDS)
    _export("neural_epsilon_greedy", catalog, str(d / "policy"), page_size=PAGE_SIZE)
    return d, catalog


def _serve(path, requests, tmp_path):
    body = tmp_path / "requests.json"
    body.write_text(json.dumps(requests))
    out = run_fresh_python(SERVE, str(path), str(body), cwd=tmp_path)
    assert not out["rlops_loaded"]
    return out


def _instances(candidate_rows):
    return [{**USER, "candidate_ids": [int(c) if not isinstance(c, str) else c for c in row]} for row in candidate_rows]


def _batch_64(rng):
    """64 rows of 1 to 12 candidates, padded to 12 with -1 placed anywhere in the row."""
    rows = []
    for _ in range(64):
        c = int(rng.integers(1, 13))
        row = np.full(12, -1)
        row[rng.choice(12, c, replace=False)] = rng.choice(IDS, c, replace=False)
        rows.append(row.tolist())
    return rows


def _check_draws(rows, calls):
    """Ids among each row's candidates, never a pad; propensities and frequencies as the head's."""
    cands = np.asarray(rows)
    valid = cands != -1
    greedy = np.asarray(calls[0]["greedy_item_id"])
    assert all(np.asarray(c["greedy_item_id"]).tolist() == greedy.tolist() for c in calls)  # greedy is stable
    greedy_index = np.array([np.flatnonzero(cands[i] == greedy[i])[0] for i in range(len(rows))])
    probs = epsilon_greedy_probs(greedy_index, EPSILON, valid)
    actions = np.asarray([c["action"] for c in calls])  # [R, B] indices into candidate_ids
    item_ids = np.asarray([c["item_id"] for c in calls])
    assert (item_ids == cands[np.arange(len(rows))[None, :], actions]).all()
    assert valid[np.arange(len(rows))[None, :], actions].all(), "a pad was chosen"
    reported = np.asarray([c["propensity"] for c in calls])
    np.testing.assert_allclose(reported, probs[np.arange(len(rows))[None, :], actions], atol=1e-6)
    assert frequency_pvalue(actions, probs) > SIGNIFICANCE


def test_ids_are_among_the_candidates_for_one_a_few_and_all(exported, tmp_path):
    path, _ = exported
    sets = [[17], [3, 17, 42], IDS.tolist()]
    out = _serve(path / "policy", [{"body": {"instances": _instances([s])}, "repeat": 20} for s in sets], tmp_path)
    assert "candidate_ids" in out["inputs"] and "num_actions" not in out["inputs"]
    for s, response in zip(sets, out["responses"]):
        for call in response["calls"]:
            assert call["item_id"][0] in s and call["greedy_item_id"][0] in s
            assert s[call["action"][0]] == call["item_id"][0]
            assert call["policy_version"] == [-1]
    assert all(c["propensity"] == [1.0] for c in out["responses"][0]["calls"])  # one candidate: certain


def test_draws_match_the_reported_propensities_at_batch_1_and_64_and_pads_are_never_chosen(exported, tmp_path):
    path, _ = exported
    one = [[3, -1, 17, 42, -1, 20]]
    many = _batch_64(np.random.default_rng(3))
    requests = [
        {"body": {"instances": _instances(one)}, "repeat": 400},
        {"body": {"instances": _instances(many)}, "repeat": 40},
    ]
    out = _serve(path / "policy", requests, tmp_path)
    _check_draws(one, out["responses"][0]["calls"])
    _check_draws(many, out["responses"][1]["calls"])


def test_two_fresh_processes_draw_independently_and_both_match_the_propensities(exported, tmp_path):
    """The same request in two server processes: no baked-in seed replays one draw sequence, and
    each process's draws match the probabilities it reports."""
    path, _ = exported
    row = [[3, -1, 17, 42, -1, 20]]
    runs = []
    for i in range(2):
        scratch = tmp_path / f"process_{i}"
        scratch.mkdir()
        runs.append(_serve(path / "policy", [{"body": {"instances": _instances(row)}, "repeat": 300}], scratch))
    calls = [run["responses"][0]["calls"] for run in runs]
    for process_calls in calls:
        _check_draws(row, process_calls)
    sequences = [[c["action"][0] for c in process_calls] for process_calls in calls]
    assert sequences[0] != sequences[1], "two processes drew the same sequence: a seed is baked into the graph"


def test_an_unknown_id_fails_the_call_naming_it(exported, tmp_path):
    path, _ = exported
    requests = [
        {"body": {"instances": _instances([[3, 9999, -1], [4, 5, 8888]])}, "repeat": 1},
        {"body": {"instances": _instances([[-1, -1]])}, "repeat": 1},
    ]
    out = _serve(path / "policy", requests, tmp_path)
    error = out["responses"][0]["error"]
    assert "unknown candidate_ids, not in the item table" in error and "9999" in error and "8888" in error
    assert "no candidate" in out["responses"][1]["error"]


def test_metadata_and_specs_name_the_item_tables_rows_and_hash(exported):
    path, catalog = exported
    meta = tf.saved_model.load(str(path / "policy")).signatures["get_metadata"]()
    assert int(meta["item_table_rows"]) == M
    assert meta["item_table_sha256"].numpy().decode() == catalog.sha256
    assert meta["decision_kind"].numpy().decode() == "bandit"
    specs = json.loads((path / "policy" / "policy_specs.json").read_text())
    assert specs["item_table"] == {"num_rows": M, "sha256": catalog.sha256, "id_dtype": "int64"}
    assert "candidate_ids" in specs["signatures"]["serving_default"]["inputs"]
    assert "num_actions" in specs["signatures"]["serving_features"]["inputs"]  # feature arrays stay served


def test_a_rest_instance_with_three_candidate_ids_is_answered(exported, tmp_path):
    path, _ = exported
    body = {"instances": [{**USER, "candidate_ids": [3, 17, 42]}]}
    out = _serve(path / "policy", [{"body": body, "repeat": 1}], tmp_path)
    (call,) = out["responses"][0]["calls"]
    assert call["item_id"][0] in (3, 17, 42) and 0 < call["propensity"][0] <= 1


def test_the_greedy_id_is_the_feature_signatures_greedy_among_the_same_candidates(exported):
    """Scored by the same network and preprocessing: serving_features on the candidates' features
    (padded to K, num_actions = C) picks the same greedy candidate."""
    path, catalog = exported
    loaded = tf.saved_model.load(str(path / "policy"))
    rng = np.random.default_rng(5)
    rows = [rng.choice(M, int(c), replace=False) for c in (1, 4, 9, 20)]
    for r in rows:
        by_id = loaded.signatures["serving_default"](candidate_ids=tf.constant([IDS[r]], tf.int64), **_user_tensors())
        arms = {
            f"per_arm_{name}": tf.constant([np.concatenate([col[r], [""] * (K_PER_ARM - len(r))]).tolist()])
            for name, col in catalog.columns.items()
        }
        features = loaded.signatures["serving_features"](
            num_actions=tf.constant([len(r)], tf.int64), **arms, **_user_tensors()
        )
        assert int(by_id["greedy_item_id"][0]) == int(IDS[r][int(features["greedy_action"][0])])


def _user_tensors():
    return {
        k: tf.constant([v], tf.int64 if k == "region" else (tf.float32 if k == "age" else tf.string))
        for k, v in USER.items()
    }


def test_string_ids_with_a_linear_policy(tmp_path):
    ids = np.array([f"sku-{i}" for i in range(12)], object)
    catalog = _catalog(ids)
    _export("lin_ucb", catalog, str(tmp_path / "policy"))
    requests = [
        {"body": {"instances": _instances([["sku-3", "", "sku-7"], ["sku-1", "sku-2", "sku-11"]])}, "repeat": 30},
        {"body": {"instances": _instances([["sku-3", "sku-404", ""]])}, "repeat": 1},
    ]
    out = _serve(tmp_path / "policy", requests, tmp_path)
    for call in out["responses"][0]["calls"]:
        assert call["item_id"][0] in ("sku-3", "sku-7") and call["item_id"][1] in ("sku-1", "sku-2", "sku-11")
    assert "sku-404" in out["responses"][1]["error"]
    assert out["metadata"]["item_table_sha256"] == catalog.sha256


# serving_page in a fresh process (TensorFlow and numpy only): batch 1 then batch 64, many calls each.
SERVE_PAGES = r"""
import json, sys
import numpy as np
import tensorflow as tf

model = tf.saved_model.load(sys.argv[1])
fn = model.signatures["serving_page"]
specs = fn.structured_input_signature[1]
args = json.loads(open(sys.argv[2]).read())
instances = args["instances"]
feeds = {name: tf.constant([inst[name] for inst in instances], spec.dtype) for name, spec in specs.items()}
out = {}
for part, rows, calls in (("one", 1, args["calls_one"]), ("many", len(instances), args["calls_many"])):
    answers = [fn(**{k: v[:rows] for k, v in feeds.items()}) for _ in range(calls)]
    for key in answers[0]:
        out[f"{part}_{key}"] = np.stack([a[key].numpy() for a in answers]).tolist()
print(json.dumps(out))
"""


def test_serving_page_draws_distinct_ids_whose_slot_frequencies_match_the_heads_marginals(exported, tmp_path):
    from rlops.heads.slate import verifier
    from rlops.heads.slate.probabilities import EpsilonPerSlot

    path, _ = exported
    rows = _batch_64(np.random.default_rng(7))
    rows = [r if (np.asarray(r) != -1).sum() >= PAGE_SIZE else IDS[:12].tolist() for r in rows]
    body = tmp_path / "pages.json"
    body.write_text(json.dumps({"instances": _instances(rows), "calls_one": 400, "calls_many": 40}))
    runs = [run_fresh_python(SERVE_PAGES, str(path / "policy"), str(body), cwd=tmp_path) for _ in range(2)]
    cands = np.asarray(rows)
    valid = cands != -1
    for run in runs:
        for part, n in (("one", 1), ("many", len(rows))):
            page, slate = np.asarray(run[f"{part}_page"]), np.asarray(run[f"{part}_slate"])
            assert page.shape[1:] == (n, PAGE_SIZE)
            np.testing.assert_array_equal(page, cands[np.arange(n)[None, :, None], slate])  # ids of the indices
            assert (page != -1).all(), "a pad was shown"
            assert all(len(set(p)) == PAGE_SIZE for call in page for p in call), "an id twice on a page"
    draws = [
        {
            **{
                f"{part}_{k}": np.asarray(run[f"{part}_{k}"])
                for part in ("one", "many")
                for k in ("propensity_item_position", "propensity_cascade", "scores")
            },
            **{f"{part}_slate": np.asarray(run[f"{part}_slate"]) for part in ("one", "many")},
            **{f"{part}_greedy_slate": _indices(cands, run[f"{part}_greedy_page"]) for part in ("one", "many")},
        }
        for run in runs
    ]
    error = verifier.draws_error(draws, EpsilonPerSlot(EPSILON), PAGE_SIZE, lambda b, k: valid[:b, :k], "serving_page")
    assert error is None, error
    meta = tf.saved_model.load(str(path / "policy")).signatures["get_metadata"]()
    assert int(meta["page_size"]) == PAGE_SIZE


def _indices(cands, pages):
    """Page ids [R, B, L] -> their indices into each row's candidate_ids."""
    pages = np.asarray(pages)
    out = np.zeros(pages.shape, np.int64)
    for r, b, slot in np.ndindex(*pages.shape):
        out[r, b, slot] = np.flatnonzero(cands[b] == pages[r, b, slot])[0]
    return out


def test_serving_page_fails_a_row_with_fewer_valid_candidates_than_the_page(exported):
    path, _ = exported
    page = tf.saved_model.load(str(path / "policy")).signatures["serving_page"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="slate length 3"):
        page(candidate_ids=tf.constant([[3, 17, -1]], tf.int64), **_user_tensors())


def test_the_pushers_verifier_calls_serving_default_by_id(exported):
    """verify.py (the Pusher's fresh process) calls serving_default with the table's first ids on
    the verification rows' global features, probes an unknown id (item_table.json beside it) and
    draws a page from serving_page."""
    from rlops.components.pusher import verify

    path, catalog = exported
    assert json.loads((path / "policy" / "item_table.json").read_text())["ids"] == catalog.ids.tolist()
    signatures = tf.saved_model.load(str(path / "policy")).signatures
    feeds = {k: tf.concat([v, v], 0) for k, v in _user_tensors().items()}
    assert verify._check_by_id(signatures, feeds, 2, str(path / "policy")) is None
