"""Multivalent categoricals end to end: a user's interest list and an item's category list from
Parquet lists, JSON Lines arrays and "|"-separated CSV cells -> ExperienceGen (zero quarantine,
every value in the vocabulary, longer lists truncated and counted) -> a per-arm
NeuralEpsilonGreedy -> serving_features (and serving_default by item id) in a fresh process without
rlops, on padded string lists (order inside a list does not matter; columns past dim are ignored)."""

import glob
import json
import os
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf
from helpers import run_fresh_python
from multivalent_logs import MAX_INTERESTS, NUM_ITEMS, config, make_world, true_value, write

from rlops.components.common import records
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import read_quarantine, run_experience_gen
from rlops.features import load as load_schema

# Slow: ingests the multivalent world in three formats and trains on it; `make test` runs it.
pytestmark = pytest.mark.slow

DIM = 4
N = 3000


def _ingest(d, logs, items, fmt, dim=DIM):
    os.makedirs(d / fmt, exist_ok=True)
    paths = write(str(d / fmt), logs, items, fmt)
    r = run_experience_gen(
        ExperienceGenConfig.from_json(config(paths, fmt, dim)), str(d / fmt / "ex"), str(d / fmt / "q")
    )
    return r, str(d / fmt / "ex")


def _records(examples):
    """(split, {feature: values}) of every record, sorted: comparable across runs."""
    out = []
    for path in sorted(glob.glob(os.path.join(examples, "Split-*", "*"))):
        split = os.path.basename(os.path.dirname(path))
        for r in tf.data.TFRecordDataset(path, compression_type="GZIP"):
            f = tf.train.Example.FromString(r.numpy()).features.feature
            out.append((split, tuple(sorted((k, tuple(getattr(v, v.WhichOneof("kind")).value)) for k, v in f.items()))))
    return sorted(out)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("multivalent")
    logs, items, cats = make_world(N, seed=0)
    runs = {fmt: _ingest(d, logs, items, fmt) for fmt in ("parquet", "jsonl", "csv")}
    return d, logs, items, cats, runs


def test_lists_from_parquet_jsonl_and_csv_ingest_alike_with_nothing_quarantined(world):
    _, logs, items, _, runs = world
    too_long = sum(len(v) > DIM for v in logs["interests"])
    assert too_long > 100  # the fixture does exercise truncation
    for fmt, (r, _) in runs.items():
        assert (r.records_read, r.records_written, r.records_quarantined) == (N, N, 0), fmt
        assert r.truncated == {"interests": too_long}, fmt  # kept, first dim values, counted
    # The three formats give the same records in the same splits.
    parquet = _records(runs["parquet"][1])
    assert len(parquet) == N
    assert _records(runs["jsonl"][1]) == parquet and _records(runs["csv"][1]) == parquet

    examples = runs["parquet"][1]
    schema = load_schema(examples)
    f = schema["interests"]
    assert (f.kind, f.dtype, f.multivalent, f.dim) == ("categorical", "string", True, DIM)
    # Vocabulary: every value kept in a record counts (numpy reference over the truncated lists).
    counts = Counter(v for vs in logs["interests"] for v in vs[:DIM])
    assert list(f.vocabulary) == sorted(counts, key=lambda v: (-counts[v], v))
    cats = next(a for a in schema.per_arm if a.name == "item_cats")
    assert cats.multivalent and cats.dim == max(len(c) for c in items["item_cats"])  # table read whole
    item_counts = Counter(c for cs in items["item_cats"] for c in cs)
    assert list(cats.vocabulary) == sorted(item_counts, key=lambda v: (-item_counts[v], v))
    # TFX's Schema: a variable-length list of 0..dim values.
    pbtxt = open(os.path.join(examples, "schema.pbtxt")).read()
    block = pbtxt[pbtxt.index('name: "interests"') :].split("feature {")[0]
    assert "value_count" in block and "max: 4" in block and "type: BYTES" in block
    import tensorflow_data_validation as tfdv  # TFX's own validator: no anomalies on this data
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    tfmd = text_format.Parse(pbtxt, schema_pb2.Schema())
    stats = tfdv.generate_statistics_from_tfrecord(os.path.join(examples, "Split-train", "*"))
    assert not tfdv.validate_statistics(stats, tfmd).anomaly_info
    next(f for f in tfmd.feature if f.name == "interests").value_count.max = 3  # lists longer than that
    assert "interests" in tfdv.validate_statistics(stats, tfmd).anomaly_info

    # Stored as variable-length lists: each record's first dim values, empty lists included.
    lengths = Counter(len(dict(r)["interests"]) for _, r in parquet)
    assert max(lengths) == DIM and lengths[0] > 0
    stored = Counter()
    for split in ("train", "eval"):
        got = records.read_logged_bandit(examples, split)
        feats = got[records.FEATURES]
        assert feats["interests"].shape[1] == DIM and feats["per_arm/item_cats"].shape[1:] == (NUM_ITEMS, cats.dim)
        stored.update(tuple(v.decode() for v in row if v) for row in feats["interests"])
        assert got[records.CONTEXT].shape[1] == schema.observation_dim
    assert stored == Counter(tuple(v[:DIM]) for v in logs["interests"])
    assert stored[()] > 0  # empty lists are valid records


def test_bad_multivalent_cell_is_quarantined_naming_the_field(tmp_path):
    logs, items, _ = make_world(60, seed=1)
    paths = write(str(tmp_path), logs, items, "jsonl")
    lines = open(paths["logs"]).read().splitlines()
    for i, bad in ((3, ["int_01", 7.5]), (8, "int_02")):  # a float among ids; a bare string, no separator
        row = json.loads(lines[i])
        row["interests"] = bad
        lines[i] = json.dumps(row)
    open(paths["logs"], "w").write("\n".join(lines) + "\n")
    cfg = ExperienceGenConfig.from_json({**config(paths, "jsonl"), "max_bad_record_ratio": 0.1})
    r = run_experience_gen(cfg, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_quarantined, r.records_written, r.reasons) == (2, 58, {"wrong_type": 2})
    msgs = sorted(q["message"] for q in read_quarantine(str(tmp_path / "q")))
    assert msgs[0].startswith("interests (interests): 'int_02' is not a list") and "separator" in msgs[0]
    assert msgs[1] == "interests[1] (interests): 7.5 is not a string or integer id"


FRESH = r"""
import json, sys
import numpy as np
import tensorflow as tf
args = json.load(open(sys.argv[1]))
model = tf.saved_model.load(args["model"])
sig = model.signatures["serving_features"]  # the candidates' feature arrays
out = {}
for name, inputs in args["cases"].items():
    feeds = {k: tf.constant(v, tf.float32 if k == "per_arm/item_price" else tf.int64 if k == "num_actions"
                            else tf.string) for k, v in inputs.items()}
    out[name] = sig(**feeds)["greedy_action"].numpy().tolist()
# by id: the category lists come from the item table inside the model
base = args["cases"]["base"]
by_id = model.signatures["serving_default"](
    segment=tf.constant(base["segment"]), interests=tf.constant(base["interests"]),
    candidate_ids=tf.constant([args["item_ids"]] * len(base["segment"])))
out["by_id"] = [x.decode() for x in by_id["greedy_item_id"].numpy().tolist()]
print(json.dumps({"rlops": any(m.startswith("rlops") for m in sys.modules), **out}))
"""


def _pad(lists, width):
    return [list(v[:width]) + [""] * (width - len(v[:width])) for v in lists]


def test_per_arm_policy_trains_and_serves_padded_string_lists_in_a_fresh_process(world, tmp_path):
    from rlops.components.common.model import serving_dir
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    _, _, items, cats, runs = world
    cfg = TrainerConfig(
        agent="neural_epsilon_greedy",
        num_actions=NUM_ITEMS,
        batch_size=64,
        train_steps=300,
        steps_per_run=300,
        hidden_sizes=(32,),
        learning_rate=0.01,
        epsilon=0.05,
    )
    run_trainer(cfg, str(tmp_path / "model"), str(tmp_path / "run"), runs["parquet"][1])
    model = serving_dir(str(tmp_path / "model"))

    users, _, _ = make_world(200, seed=7)
    rng = np.random.default_rng(3)
    ids = [[int(v[4:]) for v in u] for u in users["interests"]]
    cat_w = max(len(c) for c in items["item_cats"])
    arms = {
        "per_arm/item_cats": [_pad(items["item_cats"], cat_w)] * 200,
        "per_arm/item_price": [items["item_price"].tolist()] * 200,
        "num_actions": [NUM_ITEMS] * 200,
    }
    base = {"segment": users["segment"].tolist(), "interests": _pad(users["interests"], DIM), **arms}
    # The same lists, values shuffled inside each list (padding moved to the end, then a wider pad).
    shuffled = [rng.permutation(v[:DIM]).tolist() for v in users["interests"]]
    permuted = {
        **base,
        "interests": _pad(shuffled, DIM + 3),
        "per_arm/item_cats": [_pad([rng.permutation(c).tolist() for c in items["item_cats"]], cat_w)] * 200,
    }
    # Longer than dim: the columns past dim are ignored (documented truncation, as at ingestion).
    longer = {**base, "interests": [row + ["int_99", "int_00"] for row in base["interests"]]}
    empty = {**base, "interests": [[""] * DIM] * 200}  # no interests: the lists must matter
    cases = {"base": base, "permuted": permuted, "longer": longer, "empty": empty}
    args = {"model": model, "cases": cases, "item_ids": items["item_id"].tolist()}
    (tmp_path / "args.json").write_text(json.dumps(args))
    got = run_fresh_python(FRESH, str(tmp_path / "args.json"), cwd=tmp_path)
    assert not got["rlops"]
    assert got["permuted"] == got["base"] and got["longer"] == got["base"]
    assert got["by_id"] == [items["item_id"][a] for a in got["base"]]  # the same greedy item, by id
    assert np.mean(np.asarray(got["empty"]) != np.asarray(got["base"])) > 0.3
    # The policy learned from the lists: its greedy choice beats uniform's expected reward.
    truncated_ids = [u[:DIM] for u in ids]
    uniform = np.mean([true_value(cats, truncated_ids, np.full(200, a)) for a in range(NUM_ITEMS)])
    value = true_value(cats, truncated_ids, np.asarray(got["base"]))
    print(
        json.dumps(
            {
                "greedy_value": value,
                "uniform_value": uniform,
                "changed_without_interests": float(np.mean(np.asarray(got["empty"]) != got["base"])),
            }
        )
    )
    assert value > uniform + 0.15, (value, uniform)
    assert max(len(u) for u in users["interests"]) == MAX_INTERESTS


def test_a_different_inferred_dim_is_compatible_and_the_model_reads_its_own_first_dim_values():
    from rlops.features import FeatureSchema, FeatureSpec, Preprocessor

    model = FeatureSchema(
        (FeatureSpec("tags", "categorical", dim=2, dtype="int64", vocabulary=(3, 5, 7), multivalent=True),)
    )
    today = FeatureSchema((FeatureSpec("tags", "categorical", dim=5, dtype="int64", multivalent=True),))
    assert model.check_compatible(today) == []
    pre = Preprocessor(model)
    ragged = tf.ragged.constant([[7, 3, 5], [], [9]], dtype=tf.int64)  # parsed Examples
    # multi-hot over vocab (3, 5, 7) + 1 OOV bucket; row 0 keeps its first 2 values (7, 3).
    expected = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1]], np.float32)
    np.testing.assert_array_equal(pre({"tags": ragged}).numpy(), expected)
    padded = tf.constant([[3, 7, -1, -1], [-1, -1, -1, -1], [9, -1, -1, -1]], tf.int64)
    np.testing.assert_array_equal(pre({"tags": padded}).numpy(), expected)


def test_csv_int_cells_split_on_the_separator_pad_truncate_and_name_a_bad_value():
    import pyarrow as pa

    from rlops.components.experience_gen import convert
    from rlops.components.experience_gen.layout import INT, Field

    f = Field("tags", ("tag_col",), INT, 3, feature_kind="categorical", multivalent=True, separator="|")
    ex = convert.extract({"tag_col": pa.array(["3|5", "", "7|x", "1|2|3|4", None, "9||8|"])}, 6, f, text=True)
    np.testing.assert_array_equal(
        ex.values[[0, 1, 3, 4, 5]], [[3, 5, -1], [-1, -1, -1], [1, 2, 3], [-1, -1, -1], [9, 8, -1]]
    )
    np.testing.assert_array_equal(ex.counts[[0, 1, 3, 4, 5]], [2, 0, 4, 0, 2])  # row 3: 4 values, dim 3
    assert not ex.missing.any() and list(ex.errors) == [2]
    assert ex.errors[2] == ("wrong_type", "tag_col[1] (tags): 'x' is not an integer")
