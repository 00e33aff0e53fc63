"""Named context features: kinds inferred from a sample of the data, statistics in Beam.

At construction, `resolve_features` turns every `kind: auto` feature of `BanditColumns.features`
into a concrete kind and dtype from the Arrow types of the source's sample (its `peek`; files:
sources/sample.py). In the pipeline, each valid batch yields `BatchStats` (value counts of
categoricals, sums of floats; vectorized), `MergeStats` combines them, and `write_schema` turns
the total into the FeatureSchema (top-k vocabularies, mean/std) stored with the Examples.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping

import apache_beam as beam
import numpy as np
import pyarrow as pa

from rlops.components.common import records
from rlops.components.common.decision_kinds import decision_kind
from rlops.components.experience_gen import json_paths
from rlops.components.experience_gen.config import ExperienceGenConfig, FeatureColumn
from rlops.components.experience_gen.errors import closest
from rlops.components.experience_gen.sources.base import Sample
from rlops.features.schema import CATEGORICAL, FLOAT, FLOAT_LIST, INT64, STRING, FeatureSchema, FeatureSpec, top_k

log = logging.getLogger(__name__)

# --- kinds: config, else inferred from the data -----------------------------------------------


def resolve_features(
    config: ExperienceGenConfig, sample: Callable[[], Sample] | None, source_label: str = "file"
) -> ExperienceGenConfig:
    """The config with every feature's kind, dtype and (float_list) dim made concrete from
    `sample` (a source's peek; None: the source cannot sample, so every kind must be given); a
    sample also checks configured kinds (a mismatch would quarantine every record)."""
    section = decision_kind(config.record_kind).columns_section
    cols = getattr(config, section)
    if not getattr(cols, "features", ()) or (sample is None and all(_concrete(f) for f in cols.features)):
        return config
    if sample is None:
        auto = next(f.name for f in cols.features if not _concrete(f))
        raise ValueError(
            f"{section}.features['{auto}']: kind/dtype 'auto' needs a file source to infer "
            f"from; with a {source_label} source set kind (and dtype/dim) explicitly"
        )
    if all(_concrete(f) for f in cols.features):  # nothing to infer: the sample only checks kinds
        try:
            types, samples = sample()
        except ValueError:  # no readable rows to check against: the records are checked one by one
            return config
    else:
        types, samples = sample()
    out = []
    for f in cols.features:
        if json_paths.parse(f.source_column):  # inside a JSON payload: the file's sample cannot tell
            if not _concrete(f):
                raise ValueError(
                    f"{section}.features['{f.name}']: column {f.source_column!r} is a path into a "
                    f"payload; set its kind (and dtype/dim) explicitly"
                )
            out.append(f)
            continue
        out.append(infer_feature(f, types, samples, section))
    return dataclasses.replace(config, **{section: dataclasses.replace(cols, features=tuple(out))})


def _concrete(f: FeatureColumn) -> bool:
    if f.kind == "auto":
        return False
    if f.kind == CATEGORICAL:
        return f.dtype != "auto" and (not f.is_multivalent or f.dim is not None)
    return f.kind == FLOAT or f.dim is not None


def infer_feature(
    f: FeatureColumn,
    types: Mapping[str, tuple[pa.DataType, int | None]],
    samples: Mapping[str, pa.ChunkedArray] | None = None,
    section: str = "bandit_columns",
) -> FeatureColumn:
    where = f"{section}.features['{f.name}']"
    col = f.source_column
    if col not in types:
        raise ValueError(f"{where}: column {col!r} is not in the data; {closest(col, list(types))}")
    t, width = types[col]
    if pa.types.is_dictionary(t):
        t = t.value_type
    sample = (samples or {}).get(col)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        text = pa.types.is_string(inner) or pa.types.is_large_string(inner) or pa.types.is_binary(inner)
        if (
            pa.types.is_integer(inner)
            and f.kind != CATEGORICAL
            and not f.is_multivalent
            and f.kind in ("auto", FLOAT_LIST)
        ):
            return dataclasses.replace(f, kind=FLOAT_LIST, dtype="auto", dim=f.dim or width or 1)
        if pa.types.is_floating(inner) and f.kind in ("auto", FLOAT_LIST) and not f.is_multivalent:
            return dataclasses.replace(f, kind=FLOAT_LIST, dtype="auto", dim=f.dim or width or 1)
        if f.kind in ("auto", CATEGORICAL) and (text or pa.types.is_integer(inner) or pa.types.is_null(inner)):
            dtype = f.dtype if f.dtype != "auto" else STRING if text else INT64 if pa.types.is_integer(inner) else None
            if dtype is None:
                raise ValueError(f"{where}: column {col!r} holds only empty lists in the sample; set dtype")
            if dtype == INT64 and text:
                raise ValueError(f"{where}: dtype 'int64' but column {col!r} holds lists of text")
            return _multivalent(f, dtype, sample)
        raise ValueError(
            f"{where}: column {col!r} holds lists of {inner}; kind {f.kind!r} does not take them "
            f"(lists of strings or integers are multivalent categoricals)"
        )
    if f.separator:  # text cells holding several values
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or pa.types.is_null(t)):
            raise ValueError(f"{where}: separator {f.separator!r} but column {col!r} holds {t}, not text")
        return _multivalent(f, STRING if f.dtype == "auto" else f.dtype, sample)
    if f.multivalent:
        raise ValueError(
            f"{where}: multivalent, but column {col!r} holds single values ({t}); give lists "
            f"(Parquet / JSON arrays) or set `separator` for text cells"
        )
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        numeric = numbers_in_text(sample) if f.kind == "auto" and sample is not None else None
        if numeric is not None:  # a number column with a few stray strings ('abc', 'N/A')
            integral, bad, total = numeric
            log.warning(
                "%s: %d of %d sampled values of column %r are not numbers (%s); kind %s, and records "
                "holding such a value are quarantined (set kind explicitly to choose)",
                where,
                len(bad),
                total,
                col,
                ", ".join(repr(v) for v in bad[:3]),
                "categorical int64" if integral else "float",
            )
            if integral:
                return dataclasses.replace(f, kind=CATEGORICAL, dtype=INT64)
            return dataclasses.replace(f, kind=FLOAT, dim=f.dim or 1)
        if f.kind not in ("auto", CATEGORICAL):
            raise ValueError(
                f"{where}: kind {f.kind!r} but column {col!r} holds text (e.g. hashed ids): use kind 'categorical'"
            )
        return dataclasses.replace(f, kind=CATEGORICAL, dtype=STRING if f.dtype == "auto" else f.dtype)
    if pa.types.is_integer(t):
        if f.kind in (FLOAT, FLOAT_LIST):
            return dataclasses.replace(f, dim=f.dim or 1)
        return dataclasses.replace(f, kind=CATEGORICAL, dtype=INT64 if f.dtype == "auto" else f.dtype)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        if f.kind == CATEGORICAL:
            raise ValueError(f"{where}: kind 'categorical' but column {col!r} holds non-integer numbers")
        return dataclasses.replace(f, kind=FLOAT if f.kind == "auto" else f.kind, dim=f.dim or 1)
    raise ValueError(
        f"{where}: cannot infer a kind from column {col!r} of type {t} (e.g. all empty in the "
        f"sample); set kind (and dtype) explicitly"
    )


# A text column is a number column when at least this share of its sampled values parse as
# numbers: one 'abc' where a price was must not turn `price` into a vocabulary of prices.
NUMERIC_SHARE = 0.99


def numbers_in_text(sample: pa.ChunkedArray) -> tuple[bool, list[str], int] | None:
    """(all integral, the values that are not numbers, values sampled) when the text column's
    non-empty values are numbers but for a share under 1 - NUMERIC_SHARE; None otherwise."""
    values = [v for v in sample.to_pylist() if v not in (None, "", b"")]
    if not values:
        return None
    bad: list[str] = []
    integral = True
    for v in values:
        text = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        try:
            float(text)
        except ValueError:
            bad.append(text)
            if len(bad) > (1 - NUMERIC_SHARE) * len(values):
                return None
            continue
        integral = integral and text.strip().lstrip("+-").isdigit()  # '3.0' and '1e3' are floats
    return (integral, bad, len(values)) if bad else None


def _multivalent(f: FeatureColumn, dtype: str, sample: pa.ChunkedArray | None) -> FeatureColumn:
    """A multivalent categorical; dim (if not configured) = the dim_percentile of the sample's list
    lengths (values that are padding, "" / null / -1, not counted)."""
    dim = f.dim
    if dim is None:
        lengths = list_lengths(sample, f.separator) if sample is not None else np.zeros(0, np.int64)
        dim = max(1, int(np.ceil(np.percentile(lengths, f.dim_percentile)))) if len(lengths) else 1
    return dataclasses.replace(f, kind=CATEGORICAL, dtype=dtype, multivalent=True, dim=int(dim))


def list_lengths(column: pa.ChunkedArray | pa.Array, separator: str | None) -> np.ndarray:
    """Values per record of a list column (or of text cells split on `separator`), padding excluded."""
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        arr = pc.split_pattern(pc.cast(arr, pa.string()), separator or "\x00")
    flat = pc.list_flatten(arr)
    ok = pc.is_valid(flat)
    if pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type):
        ok = pc.and_(ok, pc.not_equal(flat, ""))
    elif pa.types.is_integer(flat.type):
        ok = pc.and_(ok, pc.not_equal(flat, -1))
    lengths = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    row = np.repeat(np.arange(len(arr)), lengths)
    keep = np.asarray(ok.fill_null(False).to_numpy(zero_copy_only=False), bool)
    return np.bincount(row[keep], minlength=len(arr))


# --- statistics ---------------------------------------------------------------------------------


@dataclass
class Stats:
    """Sufficient statistics of the features over some valid records."""

    counts: dict[str, Counter] = field(default_factory=dict)  # categorical -> value counts
    sums: dict[str, np.ndarray] = field(default_factory=dict)  # float -> [3, dim]: n, sum, sum of squares

    def merge(self, other: "Stats") -> "Stats":
        for k, c in other.counts.items():
            self.counts.setdefault(k, Counter()).update(c)
        for k, s in other.sums.items():
            self.sums[k] = self.sums[k] + s if k in self.sums else s.copy()
        return self


def per_arm_column_features(config: ExperienceGenConfig) -> tuple[FeatureColumn, ...]:
    """The log's per-arm columns (bandit_columns.per_arm_columns) as float features; their
    statistics come from the records' candidates, not from the item table."""
    return tuple(FeatureColumn(name, kind=FLOAT) for name in config.bandit_columns.per_arm_columns)


def batch_stats(
    columns: Mapping[str, np.ndarray], features: tuple[FeatureColumn, ...], per_arm: tuple[FeatureColumn, ...] = ()
) -> Stats:
    """Statistics of the global `features`, and of the `per_arm` float features over each record's
    candidates (`per_arm/<name>` [N, K]; arms past num_actions are padding, not counted)."""
    out = Stats()
    for f in per_arm:
        v = np.asarray(columns[records.PER_ARM_PREFIX + f.name], np.float64)
        x = v[np.arange(v.shape[1])[None, :] < np.asarray(columns[records.NUM_ACTIONS])[:, None]]
        out.sums[records.PER_ARM_PREFIX + f.name] = np.array([[len(x)], [x.sum()], [(x * x).sum()]], np.float64)
    for f in features:
        v = columns[f.name]
        if f.kind == CATEGORICAL:
            import pandas as pd  # a hash-based count: np.unique sorts Python strings (slow)

            if f.is_multivalent:  # [N, dim] padded: every value counts, padding does not
                v = np.asarray(v).reshape(-1)
                v = v[v != ("" if f.dtype == STRING else -1)]
            vc = pd.Series(v, copy=False).value_counts(sort=False)
            out.counts[f.name] = Counter(dict(zip(vc.index.tolist(), vc.to_numpy().tolist())))
        else:
            x = np.asarray(v, np.float64).reshape(len(v), -1)
            out.sums[f.name] = np.stack([np.full(x.shape[1], len(x), np.float64), x.sum(0), (x * x).sum(0)])
    return out


class MergeStats(beam.CombineFn):
    def create_accumulator(self) -> Stats:
        return Stats()

    def add_input(self, acc: Stats, s: Stats) -> Stats:
        return acc.merge(s)

    def merge_accumulators(self, accs) -> Stats:
        out = Stats()
        for a in accs:
            out.merge(a)
        return out

    def extract_output(self, acc: Stats) -> Stats:
        return acc


def _dim(f: FeatureColumn) -> int:
    assert f.dim is not None, f.name  # resolve_features settles the width of lists
    return int(f.dim)


def feature_schema(features: tuple[FeatureColumn, ...], stats: Stats) -> FeatureSchema:
    """The schema of concrete feature columns given their statistics over the data."""
    return FeatureSchema(feature_specs(features, stats))


def feature_specs(features: tuple[FeatureColumn, ...], stats: Stats) -> tuple[FeatureSpec, ...]:
    """The specs of concrete feature columns given their statistics (none for none: an item table
    may hold only ids when the log's per-arm columns are the item features)."""
    specs = []
    for f in features:
        if f.kind == CATEGORICAL:
            vocab: tuple = ()
            if not f.hash_buckets:
                c = stats.counts.get(f.name, Counter())
                values = list(c)
                vocab = top_k(values, [c[v] for v in values], f.vocab_size)
                vocab = tuple(int(v) for v in vocab) if f.dtype == INT64 else tuple(str(v) for v in vocab)
            specs.append(
                FeatureSpec(
                    f.name,
                    CATEGORICAL,
                    dtype=f.dtype,
                    vocabulary=vocab,
                    num_oov_buckets=f.num_oov_buckets,
                    hash_buckets=f.hash_buckets,
                    multivalent=f.is_multivalent,
                    dim=_dim(f) if f.is_multivalent else 1,
                )
            )
            continue
        dim = 1 if f.kind == FLOAT else _dim(f)
        mean = std = None
        s = stats.sums.get(f.name)
        if f.normalize and s is not None and s[0, 0] > 0:
            n = s[0]
            mean = s[1] / n
            std = np.sqrt(np.maximum(s[2] / n - mean**2, 0.0))
            mean, std = tuple(mean.tolist()), tuple(std.tolist())
        specs.append(FeatureSpec(f.name, f.kind, dim=dim, mean=mean, std=std))
    return tuple(specs)


RESERVED_KINDS = {
    records.ACTION: "int",
    records.REWARD: "float",
    records.PROPENSITY: "float",
    records.ACTION_MASK: "int",
    records.WEIGHT: "float",
    records.TIMESTAMP: "int",
    records.SPLIT_UNIT: "int",
    records.SPLIT_CONTENT: "int",
}
_RESERVED_KINDS = RESERVED_KINDS


def write_schema(schema: FeatureSchema, examples_uri: str, reserved: tuple[str, ...]) -> str:
    """rlops_feature_schema.json and TFX's schema.pbtxt (features + the record's other fields)."""
    import tensorflow as tf
    from google.protobuf import text_format

    from rlops.features.schema import TFMD_SCHEMA_FILE

    path = schema.save(examples_uri, tfmd=False)
    tfmd = schema.to_tfmd_schema([(r, _RESERVED_KINDS[r]) for r in reserved])
    with tf.io.gfile.GFile(f"{examples_uri.rstrip('/')}/{TFMD_SCHEMA_FILE}", "w") as fh:
        fh.write(text_format.MessageToString(tfmd))
    return path


def per_arm_column_specs(per_arm: tuple[FeatureColumn, ...], stats: Stats) -> tuple[FeatureSpec, ...]:
    """The per-arm columns' specs, normalized by their statistics over the candidates (batch_stats)."""
    sums = {
        f.name: stats.sums[records.PER_ARM_PREFIX + f.name]
        for f in per_arm
        if records.PER_ARM_PREFIX + f.name in stats.sums
    }
    return feature_specs(per_arm, Stats(sums=sums))


class WriteSchemaFn(beam.DoFn):
    def __init__(
        self,
        features: tuple[FeatureColumn, ...],
        examples_uri: str,
        reserved: tuple[str, ...],
        per_arm: tuple[FeatureSpec, ...] = (),
        per_arm_columns: tuple[FeatureColumn, ...] = (),
    ):
        self.features, self.examples_uri, self.reserved = features, examples_uri, reserved
        self.per_arm, self.per_arm_columns = per_arm, per_arm_columns

    def process(self, stats: Stats):
        schema = feature_schema(self.features, stats)
        per_arm = self.per_arm + per_arm_column_specs(self.per_arm_columns, stats)  # the item table's, then the log's
        if per_arm:
            schema = dataclasses.replace(schema, per_arm=per_arm)
        yield write_schema(schema, self.examples_uri, self.reserved)
