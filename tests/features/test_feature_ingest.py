"""ExperienceGen with named categorical features: zero quarantine, raw values stored by name,
vocabularies and float statistics against numpy, config errors naming the feature."""

import glob
import json
import os
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf
from feature_logs import FEATURES, USER_COLUMNS

from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import run_experience_gen
from rlops.features import load as load_schema


def _config(pattern, features=FEATURES, **extra):
    return ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": str(pattern), "format": "csv"},
            "bandit_columns": {"features": list(features)},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 3},
            **extra,
        }
    )


def test_categorical_logs_ingest_with_zero_quarantine(logs_csv, tmp_path):
    path, cols, _ = logs_csv
    features = FEATURES[:-1] + [{"name": "position", "kind": "categorical"}, {"name": "user_d", "hash_buckets": 8}]
    features = [f for f in features if f != "user_d"]
    r = run_experience_gen(_config(path, features), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_read, r.records_written, r.records_quarantined) == (4000, 4000, 0)
    schema = load_schema(str(tmp_path / "ex"))
    kinds = {f.name: (f.kind, f.dtype) for f in schema.features}
    assert kinds["user_a"] == ("categorical", "string") and kinds["position"] == ("categorical", "int64")
    assert kinds["price"] == ("float", "float") and schema["user_d"].hash_buckets == 8
    # Vocabulary: every value, most frequent first (ties by value); floats: numpy's mean/std.
    counts = Counter(cols["user_b"].tolist())
    assert list(schema["user_b"].vocabulary) == sorted(counts, key=lambda v: (-counts[v], v))
    assert len(schema["user_a"].vocabulary) == USER_COLUMNS["user_a"]
    np.testing.assert_allclose(schema["price"].mean, [cols["price"].mean()], rtol=1e-6)
    np.testing.assert_allclose(schema["price"].std, [cols["price"].std()], rtol=1e-5)
    assert os.path.exists(tmp_path / "ex" / "schema.pbtxt")
    # Each feature under its own name, raw: strings as bytes, ints as int64, floats as float.
    first = glob.glob(str(tmp_path / "ex" / "Split-train" / "*"))[0]
    ex = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(first, compression_type="GZIP"))).numpy())
    f = ex.features.feature
    assert len(f["user_a"].bytes_list.value[0]) == 32 and f["position"].int64_list.value
    assert f["price"].float_list.value and "context" not in f


def test_vocab_size_keeps_top_k(logs_csv, tmp_path):
    path, cols, _ = logs_csv
    r = run_experience_gen(
        _config(path, [{"name": "user_d", "vocab_size": 5, "num_oov_buckets": 2}]),
        str(tmp_path / "ex"),
        str(tmp_path / "q"),
    )
    assert r.records_quarantined == 0
    spec = load_schema(str(tmp_path / "ex"))["user_d"]
    counts = Counter(cols["user_d"].tolist())
    assert list(spec.vocabulary) == sorted(counts, key=lambda v: (-counts[v], v))[:5]
    assert spec.output_dim == 7


def test_feature_config_errors_name_the_feature(logs_csv):
    path, _, _ = logs_csv
    with pytest.raises(ValueError, match=r"features\['reward'\].*reserved"):
        _config(path, ["user_a", "reward"])
    with pytest.raises(ValueError, match=r"features\['user_z'\]: column 'user_z' is not in the data"):
        from rlops.components.experience_gen.pipeline import make_plan

        make_plan(_config(path, ["user_a", "user_z"]))
    with pytest.raises(ValueError, match=r"features\['user_a'\]: kind 'float' but column 'user_a' holds text"):
        from rlops.components.experience_gen.pipeline import make_plan

        make_plan(_config(path, [{"name": "user_a", "kind": "float"}]))
    with pytest.raises(ValueError, match="either `features`"):
        ExperienceGenConfig.from_json(
            {
                "source": {"kind": "file", "pattern": str(path)},
                "bandit_columns": {"features": ["user_a"], "context": ["price"]},
                "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 3},
            }
        )


def test_legacy_dense_context_still_writes_context_and_schema(tmp_path):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(0)
    table = {f"x{i}": rng.random(50) for i in range(3)}
    table.update(action=rng.integers(0, 4, 50), reward=rng.random(50), propensity=np.full(50, 0.25))
    pcsv.write_csv(pa.table(table), str(tmp_path / "d.csv"))
    cfg = ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": str(tmp_path / "d.csv")},
            "bandit_columns": {"context_prefix": "x"},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 3},
        }
    )
    run_experience_gen(cfg, str(tmp_path / "ex"), str(tmp_path / "q"))
    schema = load_schema(str(tmp_path / "ex"))
    assert schema.is_legacy and schema.observation_dim == 3
    with open(tmp_path / "ex" / "rlops_feature_schema.json") as fh:
        assert json.load(fh)["features"][0]["name"] == "context"


def test_tfdv_validates_the_examples_against_the_written_schema(logs_csv, tmp_path):
    """TFX's own tools use the schema.pbtxt written beside the Examples: no anomalies on the
    data it came from; a value outside a (trimmed) string domain is flagged, by feature."""
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    path, _, _ = logs_csv
    run_experience_gen(_config(path, ["user_a", "price", "position"]), str(tmp_path / "ex"), str(tmp_path / "q"))
    schema = text_format.Parse((tmp_path / "ex" / "schema.pbtxt").read_text(), schema_pb2.Schema())
    assert {f.name for f in schema.feature} >= {"user_a", "price", "position", "action", "reward", "propensity"}
    stats = tfdv.generate_statistics_from_tfrecord(str(tmp_path / "ex" / "Split-train" / "*"))
    assert not tfdv.validate_statistics(stats, schema).anomaly_info
    domain = next(f for f in schema.feature if f.name == "user_a").string_domain
    del domain.value[1:]
    assert "user_a" in tfdv.validate_statistics(stats, schema).anomaly_info
