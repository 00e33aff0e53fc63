"""Raw named features -> the model's dense float observation [B, D], as a tf.Module.

The same module runs in the Trainer's input pipeline and inside the exported SavedModel, so
training and serving encode features identically. Features are matched by name: the order of
the input dict (or of a file's columns) never matters; extra inputs are ignored with a logged
note; a missing or retyped feature raises an error naming it.

Encodings, in schema order:
    float / float_list   (x - mean) / std when the schema has them, else x
    categorical          vocabulary lookup (StaticHashTable) with OOV ids hashed into
                         `num_oov_buckets` extra slots, or `hash_buckets` > 0: hashing only;
                         then one-hot (multi-hot for multivalent, padding ignored)

Multivalent categoricals arrive as [B, W] values padded with "" (strings) or -1 (int64), any
width W: value order does not matter (multi-hot); values come first, and only the first `dim`
columns are read (the same rule as ingestion, which keeps a record's first `dim` values), so a
longer list is truncated, never an error. A RaggedTensor (parsed Examples) is padded first.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from rlops.features.schema import (
    CATEGORICAL,
    FLOAT,
    INT64,
    STD_FLOOR,
    FeatureSchema,
    FeatureSchemaError,
    FeatureSpec,
    needs_string_hash,
)
from rlops.features.serving_names import serving_input_name, serving_inputs

log = logging.getLogger(__name__)

# Padding of multivalent categoricals (values beyond a record's count): never counted.
STRING_PAD, INT_PAD = b"", -1


def input_spec(f: FeatureSpec, batch_size: int | None = None) -> tf.TensorSpec:
    """The raw tensor a feature arrives as: [B] for one value, [B, dim] for float lists, [B, W]
    (any width, padded) for multivalent categoricals. Named by its serving input name."""
    dtype = {"string": tf.string, INT64: tf.int64}.get(f.dtype, tf.float32)
    if f.multivalent:
        return tf.TensorSpec([batch_size, None], dtype, name=serving_input_name(f.name))
    shape = [batch_size] if (f.kind == FLOAT or f.kind == CATEGORICAL) else [batch_size, f.dim]
    return tf.TensorSpec(shape, dtype, name=serving_input_name(f.name))


class Preprocessor(tf.Module):
    """`preprocessor(features) -> [B, observation_dim] float32` for a FeatureSchema."""

    def __init__(self, schema: FeatureSchema, name: str = "preprocessor"):
        super().__init__(name=name)
        self.schema = self._no_dependency(schema)
        self.observation_dim = schema.observation_dim
        self.input_names = serving_inputs(schema.names)  # {serving input: feature}; collisions raise
        self._tables = {}
        for f in schema.features:
            # String vocabularies: a StaticHashTable (TFLite's builtin HASHTABLE ops take string keys).
            # int64 ones are matched against the vocabulary instead (_int_lookup): TFLite has no
            # int64 -> int64 table, and one such table stops the converter legalizing any table.
            if f.kind == CATEGORICAL and not f.hash_buckets and f.vocabulary and f.dtype == "string":
                keys = tf.constant(list(f.vocabulary), tf.string)
                init = tf.lookup.KeyValueTensorInitializer(keys, tf.range(len(f.vocabulary), dtype=tf.int64))
                self._tables[f.name] = tf.lookup.StaticHashTable(init, default_value=-1)
        # tf.Module tracks tables held in a dict attribute: they travel into the SavedModel.
        self.tables = self._tables

    def raw_specs(self, batch_size: int | None = None) -> dict[str, tf.TensorSpec]:
        """The raw inputs, batched, keyed by serving input name (the same call as PerArmPreprocessor's)."""
        return {serving_input_name(f.name): input_spec(f, batch_size) for f in self.schema.features}

    def by_feature(self, features: Mapping[str, object]) -> dict[str, object]:
        """Inputs keyed by feature name (records) or by serving input name (a signature) -> by
        feature name."""
        out = dict(features)
        for name, feature in self.input_names.items():
            if feature not in out and name in out:
                out[feature] = out.pop(name)
        return out

    def check_inputs(self, features: Mapping[str, object]) -> None:
        """Missing or retyped features raise (naming them); extras are logged and ignored."""
        for f in self.schema.features:
            if f.name not in features:
                raise FeatureSchemaError(
                    f"feature '{f.name}' ({f.describe()}) is missing from the inputs; got {sorted(features)}"
                )
            want = input_spec(f).dtype
            got = tf.as_dtype(getattr(features[f.name], "dtype", want))
            compatible = (
                got == want
                or (want.is_floating and (got.is_floating or got.is_integer))
                or (want == tf.int64 and got.is_integer)
            )
            if not compatible:
                raise FeatureSchemaError(
                    f"feature '{f.name}' is {f.describe()} ({want.name}) in the model but arrives as {got.name}"
                )
        extra = sorted(set(features) - set(self.schema.names))
        if extra:
            log.info("preprocessor: ignoring input column(s) not in the feature schema: %s", extra)

    def __call__(self, features: Mapping[str, tf.Tensor]) -> tf.Tensor:
        features = self.by_feature(features)
        self.check_inputs(features)
        parts = [self._encode(f, features[f.name]) for f in self.schema.features]
        return tf.concat(parts, axis=-1) if len(parts) > 1 else parts[0]

    # --- per kind -------------------------------------------------------------------------------
    def _encode(self, f: FeatureSpec, x: tf.Tensor) -> tf.Tensor:
        if f.kind != CATEGORICAL:
            x = tf.cast(x, tf.float32)
            x = tf.reshape(x, [-1, f.dim])
            if f.mean is not None:
                std = np.maximum(np.asarray(f.std if f.std is not None else [1.0] * f.dim, np.float32), STD_FLOOR)
                x = (x - tf.constant(f.mean, tf.float32)) / tf.constant(std)
            return x
        if f.multivalent:
            x = multivalent_dense(f, x)
        x = tf.convert_to_tensor(x)
        if f.dtype == INT64:
            x = tf.cast(x, tf.int64)
        ids = self._ids(f, x)  # [B] or [B, dim]; -1: no slot (padding, or OOV without buckets)
        hot = one_hot(ids, f.output_dim)  # -1 -> all zeros
        if f.multivalent:
            hot = tf.minimum(tf.reduce_sum(hot, axis=-2), 1.0)
        return tf.reshape(hot, [-1, f.output_dim])

    def _ids(self, f: FeatureSpec, x: tf.Tensor) -> tf.Tensor:
        pad = tf.equal(x, STRING_PAD if f.dtype == "string" else INT_PAD) if f.multivalent else None
        if f.hash_buckets:
            ids = _hash_bucket(x, f.hash_buckets)
        else:
            n = len(f.vocabulary)
            if not n:
                ids = tf.fill(tf.shape(x), tf.constant(-1, tf.int64))
            elif f.dtype == "string":
                ids = self._tables[f.name].lookup(x)
            else:
                ids = _int_lookup(x, f.vocabulary)
            if f.num_oov_buckets:
                ids = tf.where(ids < 0, n + _hash_bucket(x, f.num_oov_buckets), ids)
        if pad is not None:
            ids = tf.where(pad, tf.constant(-1, tf.int64), ids)
        return ids


GATHER_ONE_HOT_MAX = 128  # widths up to this take rows of a constant identity (<= 64 KB)


def one_hot(ids: tf.Tensor, depth: int) -> tf.Tensor:
    """tf.one_hot(ids, depth) for ids in [-1, depth) (-1: all zeros). Narrow ones gather rows of a
    [depth + 1, depth] constant instead: the same numbers, and under TFLite a row copy is ~4x
    faster than its ONE_HOT kernel (34 candidates x 1,024 rows, benchmarks/policy_inference.py)."""
    if depth > GATHER_ONE_HOT_MAX:
        return tf.one_hot(ids, depth, dtype=tf.float32)
    rows = tf.constant(np.eye(depth + 1, dtype=np.float32)[:, 1:])  # row 0: the -1 id
    return tf.gather(rows, ids + 1)


def _int_lookup(x: tf.Tensor, vocabulary: Sequence[int]) -> tf.Tensor:
    """Each int64 value's index in `vocabulary` (distinct values), -1 where absent."""
    hits = tf.equal(x[..., None], tf.constant(list(vocabulary), tf.int64))
    index = tf.argmax(tf.cast(hits, tf.int32), axis=-1, output_type=tf.int64)
    return tf.where(tf.reduce_any(hits, axis=-1), index, tf.constant(-1, tf.int64))


def _hash_bucket(x: tf.Tensor, buckets: int) -> tf.Tensor:
    """The bucket of each value's text. One bucket needs no hash (every value lands in it): no
    string op, so a policy with the default single OOV bucket converts to TFLite builtins, which
    have no op that reads a string's bytes (rlops.train.litert)."""
    if not needs_string_hash(buckets):
        return tf.zeros_like(x, tf.int64) if x.dtype != tf.string else tf.zeros(tf.shape(x), tf.int64)
    text = x if x.dtype == tf.string else tf.strings.as_string(x)
    return tf.strings.to_hash_bucket_fast(text, buckets)


def pad_value(f: FeatureSpec) -> object:
    return STRING_PAD if f.dtype == "string" else INT_PAD


def multivalent_dense(f: FeatureSpec, x: tf.Tensor | tf.RaggedTensor | tf.SparseTensor) -> tf.Tensor:
    """[B, W] padded values (ragged or sparse rows padded) cut to their first `dim` columns."""
    pad = pad_value(f)
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(x, default_value=tf.constant(pad, x.dtype))
    elif isinstance(x, tf.RaggedTensor):
        x = x.to_tensor(default_value=tf.constant(pad, x.dtype))
    x = tf.convert_to_tensor(x)
    if x.shape.rank == 1:  # one value per record
        x = x[:, None]
    return x[:, : f.dim]


def numpy_features(schema: FeatureSchema, columns: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, tf.Tensor]:
    """Numpy columns (strings as str/bytes objects) -> tensors typed for the preprocessor."""
    out = {}
    for f in schema.features:
        if f.name not in columns:
            raise FeatureSchemaError(f"feature '{f.name}' is missing; got {sorted(columns)}")
        v = np.asarray(columns[f.name])
        if f.multivalent and v.dtype == object and v.ndim == 1:  # lists per record: pad them
            v = pad_lists(v, pad_value(f), object if f.dtype == "string" else np.int64)
        if f.dtype == "string":
            out[f.name] = tf.constant(v.astype(object) if v.dtype != object else v, tf.string)
        else:
            out[f.name] = tf.constant(v, input_spec(f).dtype)
    return out


def pad_lists(lists: Sequence[Sequence[Any]] | np.ndarray[Any, Any], pad: Any, dtype: Any) -> np.ndarray[Any, Any]:
    """Python lists of values -> [N, longest] padded (what serving_default takes)."""
    width = max([len(v) for v in lists] + [1])
    out = np.full((len(lists), width), pad, dtype)
    for i, v in enumerate(lists):
        out[i, : len(v)] = list(v)
    return out
