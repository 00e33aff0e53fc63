"""Feature schema round trip and compatibility; the preprocessor against a numpy reference."""

import numpy as np
import pytest
import tensorflow as tf

from rlops.features import (
    FeatureSchema,
    FeatureSchemaError,
    FeatureSpec,
    Preprocessor,
    numpy_features,
    schema as schema_lib,
)


def _schema():
    return FeatureSchema(
        (
            FeatureSpec("user", "categorical", dtype="string", vocabulary=("b", "a", "c"), num_oov_buckets=2),
            FeatureSpec("pos", "categorical", dtype="int64", vocabulary=(2, 0, 1), num_oov_buckets=0),
            FeatureSpec("dev", "categorical", dtype="string", hash_buckets=7),
            FeatureSpec(
                "tags", "categorical", dtype="string", vocabulary=("x", "y"), num_oov_buckets=1, dim=3, multivalent=True
            ),
            FeatureSpec("price", "float", mean=2.0, std=4.0),
            FeatureSpec("emb", "float_list", dim=2),
        )
    )


def test_json_round_trip_and_files(tmp_path):
    s = _schema()
    assert FeatureSchema.from_json(s.to_json()) == s
    s.save(str(tmp_path))
    assert schema_lib.load(str(tmp_path)) == s
    text = (tmp_path / "schema.pbtxt").read_text()
    assert 'name: "user"' in text and "BYTES" in text and 'value: "b"' in text
    assert schema_lib.load(str(tmp_path / "nothing")) is None
    assert s.observation_dim == (3 + 2) + 3 + 7 + (2 + 1) + 1 + 2


def test_bad_specs_name_the_feature():
    with pytest.raises(FeatureSchemaError, match="'reward' is a reserved"):
        FeatureSpec("reward", "float")
    with pytest.raises(FeatureSchemaError, match="feature 'x'.*kind"):
        FeatureSpec("x", "text")
    with pytest.raises(FeatureSchemaError, match="'u' appears more than once"):
        FeatureSchema((FeatureSpec("u", "float"), FeatureSpec("u", "float")))


def test_check_compatible_names_missing_and_retyped():
    model = _schema()
    data = FeatureSchema(model.features + (FeatureSpec("new_col", "float"),))
    assert model.check_compatible(data) == ["new_col"]
    missing = FeatureSchema(tuple(f for f in model.features if f.name != "dev"))
    with pytest.raises(FeatureSchemaError, match="feature 'dev'.*missing"):
        model.check_compatible(missing)
    retyped = FeatureSchema(tuple(FeatureSpec("pos", "float") if f.name == "pos" else f for f in model.features))
    with pytest.raises(FeatureSchemaError, match="feature 'pos' is categorical int64 in the model but float"):
        model.check_compatible(retyped)


def _reference(s, cols):
    """The encoding in numpy, from the schema alone (hash buckets via TF's own hash)."""
    n = len(cols["price"])
    out = []
    for f in s.features:
        v = cols[f.name]
        if f.kind != "categorical":
            x = np.asarray(v, np.float64).reshape(n, -1)
            if f.mean is not None:
                x = (x - np.asarray(f.mean)) / np.asarray(f.std)
            out.append(x)
            continue
        hot = np.zeros((n, f.output_dim))
        rows = v if f.multivalent else [[x] for x in v]
        for i, vals in enumerate(rows):
            for x in vals:
                if f.multivalent and x in ("", -1):
                    continue
                key = x if f.dtype == "string" else str(x)
                if f.hash_buckets:
                    hot[i, tf.strings.to_hash_bucket_fast(key, f.hash_buckets).numpy()] = 1
                elif x in f.vocabulary:
                    hot[i, f.vocabulary.index(x)] = 1
                elif f.num_oov_buckets:
                    hot[i, len(f.vocabulary) + tf.strings.to_hash_bucket_fast(key, f.num_oov_buckets).numpy()] = 1
        out.append(hot)
    return np.concatenate(out, 1)


def test_preprocessor_matches_numpy_reference_and_ignores_order():
    s = _schema()
    cols = {
        "user": np.array(["a", "zz", "c", "b"], object),
        "pos": np.array([0, 2, 7, 1]),
        "dev": np.array(["ios", "android", "web", "ios"], object),
        "tags": np.array([["x", "", ""], ["y", "q", "x"], ["", "", ""], ["y", "y", ""]], object),
        "price": np.array([1.0, 2.0, 6.0, -2.0]),
        "emb": np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32),
    }
    pre = Preprocessor(s)
    got = pre(numpy_features(s, cols)).numpy()
    np.testing.assert_allclose(got, _reference(s, cols), atol=1e-6)
    assert got.shape == (4, s.observation_dim)
    assert got[2, 5:8].sum() == 0  # pos 7: not in the vocabulary, no OOV bucket -> all zeros
    reordered = {k: cols[k] for k in reversed(list(cols))}
    reordered["extra"] = np.zeros(4)
    np.testing.assert_array_equal(pre(numpy_features(s, reordered)).numpy(), got)


def test_preprocessor_errors_name_the_feature():
    s = _schema()
    pre = Preprocessor(s)
    feats = {
        "user": tf.constant(["a"]),
        "pos": tf.constant([1], tf.int64),
        "dev": tf.constant(["x"]),
        "tags": tf.constant([["x", "", ""]]),
        "price": tf.constant([1.0]),
        "emb": tf.constant([[1.0, 2.0]]),
    }
    pre(feats)
    with pytest.raises(FeatureSchemaError, match="feature 'dev'.*missing"):
        pre({k: v for k, v in feats.items() if k != "dev"})
    with pytest.raises(FeatureSchemaError, match="feature 'user' is categorical string.*arrives as float"):
        pre({**feats, "user": tf.constant([1.0])})


def test_preprocessor_survives_saved_model(tmp_path):
    s = _schema()
    pre = Preprocessor(s)
    module = tf.Module()
    module.pre = pre
    module.f = tf.function(lambda feats: pre(feats), input_signature=[pre.raw_specs()])
    tf.saved_model.save(module, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    feats = {
        "user": tf.constant(["c", "q"]),
        "pos": tf.constant([2, 0], tf.int64),
        "dev": tf.constant(["a", "b"]),
        "tags": tf.constant([["x", "y", ""], ["", "", ""]]),
        "price": tf.constant([0.0, 1.0]),
        "emb": tf.constant([[1.0, 2.0], [0.0, 0.0]]),
    }
    np.testing.assert_allclose(loaded.f(feats).numpy(), pre(feats).numpy())
