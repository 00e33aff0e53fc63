"""Per-arm features: the item-features table and its join with the impressions.

The item table is small (tens to thousands of items). Planning reads it once to resolve item
feature kinds, the action count and the per-arm vocabularies; the Beam pipeline reads it again
with fileio (local or gs://) into one ItemTable joined as a side input (beam.pvalue.AsSingleton),
so Dataflow workers get it from Beam rather than inside a pickled DoFn. Both are built and checked
by `table_from_frames` (unique ids, every feature present). Each valid impression batch is joined
vectorized:

    item id  -> index among the record's candidates (the logged action)
    candidates (default: every item, in table order) -> per_arm/<name> [K], or [K, dim] padded
                for a multivalent item feature (an item's category list)
    num_actions = the number of candidates
    per_arm/<name> [N, M] (a per-arm column pattern: one log column per item, in table order)
                -> each record's candidates' values [K]

An impression whose item id is not in the table, or not among its candidates, is quarantined
with a reason naming the id.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from dataclasses import dataclass

import numpy as np

from rlops.components.common import records
from rlops.components.experience_gen.config import ExperienceGenConfig, FeatureColumn, FileSource
from rlops.features.item_catalog import ItemCatalog

log = logging.getLogger(__name__)
ITEM_ID, CANDIDATES = "item_id", "candidates"
PER_ARM_PREFIX = records.PER_ARM_PREFIX
NUM_ACTIONS = "num_actions"
UNKNOWN_ITEM = "unknown_item_id"
NOT_A_CANDIDATE = "item_not_candidate"
TOO_MANY_CANDIDATES = "too_many_candidates"
CANDIDATE_SEPARATOR = "|"
# Padding of arms beyond a record's candidates (never scored: num_actions masks them).
STRING_PAD, INT_PAD, FLOAT_PAD = "", -1, 0.0
ITEM_SOURCE_PATTERN = "experience_gen.item_source.pattern"  # the config key its read errors name


def per_arm_key(name: str) -> str:
    return PER_ARM_PREFIX + name


@dataclass
class ItemTable:
    ids: np.ndarray  # [M] str
    columns: dict[str, np.ndarray]  # item feature name -> [M] or [M, dim]
    features: tuple[FeatureColumn, ...]  # concrete kinds
    source: str
    integer_ids: bool = False  # the table's id column holds integers (the served ids are int64)

    def __post_init__(self) -> None:
        self.index = {v: i for i, v in enumerate(self.ids.tolist())}

    def __len__(self) -> int:
        return len(self.ids)

    def catalog(self) -> ItemCatalog:
        """The ids (in their logged dtype) and raw item features the exported policy serves by."""
        ids = self.ids.astype(np.int64) if self.integer_ids else self.ids
        return ItemCatalog(ids, {f.name: self.columns[f.name] for f in self.features})


def parse_frame(data: bytes, src: FileSource):
    """One item-table file's bytes -> a pandas frame."""
    import pandas as pd

    if src.format == "parquet":
        return pd.read_parquet(io.BytesIO(data))
    if src.format == "jsonl":
        return pd.read_json(io.BytesIO(data), lines=True, dtype=False)
    names = list(src.csv_column_names) or None
    return pd.read_csv(
        io.BytesIO(data),
        sep=src.csv_delimiter,
        names=names,
        header=0 if src.csv_header else None,
        keep_default_na=False,
        na_values=[""],
    )


def read_frames(src: FileSource) -> list:
    """Every file of an item source, parsed whole (the table is small)."""
    from rlops.components.experience_gen import sources
    from rlops.components.experience_gen.sources.base import open_file

    try:
        files = sources.match_files(src.pattern)
    except FileNotFoundError as e:  # "source pattern part 'x' (of 'x') matched no files": which source
        raise FileNotFoundError(f"{ITEM_SOURCE_PATTERN}: {str(e).removeprefix('source ')}") from e
    frames = []
    for path, _ in files:
        with open_file(path, src) as fh:
            data = fh.read()
        try:
            frames.append(parse_frame(data, src))
        except Exception as e:  # noqa: BLE001 - the table is small and read whole: every row must parse
            raise ValueError(
                f"item_source: cannot read {path} as {src.format} ({' '.join(str(e).split())[:300]})"
            ) from e
    return frames


def load_item_table(config: ExperienceGenConfig) -> ItemTable:
    """Reads and checks the item table; resolves `auto` item feature kinds from its columns."""
    assert config.item_source is not None  # callers check that there is an item table
    return table_from_frames(read_frames(config.item_source), config)


def table_from_frames(frames: list, config: ExperienceGenConfig) -> ItemTable:
    """Checks the item table (unique ids, every feature present and typed) and resolves `auto`
    item feature kinds from its columns. The plan and the pipeline's side input both build it here."""
    import pandas as pd
    import pyarrow as pa

    from rlops.components.experience_gen import convert
    from rlops.components.experience_gen.errors import closest
    from rlops.components.experience_gen.features import infer_feature
    from rlops.components.experience_gen.layout import INT, STRING, Field

    cols, src = config.bandit_columns, config.item_source
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    id_col = cols.item_table_id or cols.item_id
    assert src is not None and id_col is not None  # the config checks both with an item_source
    where = f"item_source ({src.pattern})"
    if id_col not in frame.columns:
        raise ValueError(f"{where}: no id column {id_col!r}; {closest(id_col, [str(c) for c in frame.columns])}")
    if frame[id_col].isna().any():
        raise ValueError(f"{where}: row {int(np.flatnonzero(frame[id_col].isna())[0])} has no item id")
    integer_ids = pd.api.types.is_integer_dtype(frame[id_col])
    ids = frame[id_col].astype(str).to_numpy(object)
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"{where}: item id {uniq[np.argmax(counts > 1)]!r} appears {counts.max()} times")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    types = {name: (table.schema.field(name).type, None) for name in table.column_names}
    features, values = [], {}
    for f in cols.item_features:
        where_f = f"bandit_columns.item_features['{f.name}']"
        try:
            # The table is small and read whole: a multivalent dim defaults to its longest list.
            f = infer_feature(
                dataclasses.replace(f, dim_percentile=100.0) if f.dim is None else f,
                types,
                {c: table.column(c) for c in table.column_names},
            )
        except ValueError as e:
            raise ValueError(f"{where_f}: {str(e).split(': ', 1)[-1]}") from None
        if f.kind == "float_list":
            raise ValueError(f"{where_f}: float-list item features are not supported yet; give one column per value")
        if f.is_multivalent:  # an item's category list: [M, dim] padded, like a global feature
            assert f.dim is not None  # infer_feature settles it (the longest list here)
            field = Field(
                f.name,
                (f.source_column,),
                STRING if f.dtype == "string" else INT,
                int(f.dim),
                feature_kind=f.kind,
                multivalent=True,
                separator=f.separator,
            )
            ex = convert.extract({f.source_column: table.column(f.source_column)}, len(ids), field, src.format == "csv")
            if ex.errors:
                row, (_, message) = min(ex.errors.items())
                raise ValueError(f"{where}: item {ids[row]!r}: {message}")
            assert ex.counts is not None  # a multivalent field's extract counts its values
            cut = int((ex.counts > f.dim).sum())
            if cut:
                log.info(
                    "%s: %d item(s) have more than dim=%d values of '%s'; their first %d are kept",
                    where,
                    cut,
                    f.dim,
                    f.name,
                    f.dim,
                )
            features.append(f)
            values[f.name] = ex.values
            continue
        col = frame[f.source_column]
        missing = col.isna().to_numpy()
        if missing.any():
            raise ValueError(
                f"{where}: item {ids[np.argmax(missing)]!r} has no value for item feature "
                f"'{f.name}' (column {f.source_column!r})"
            )
        if f.kind == "categorical":
            v = col.astype(str).to_numpy(object) if f.dtype == "string" else col.to_numpy(np.int64)
        else:
            v = col.to_numpy(np.float64)
            if not np.isfinite(v).all():
                raise ValueError(
                    f"{where}: item {ids[np.argmax(~np.isfinite(v))]!r}: item feature '{f.name}' is not finite"
                )
        features.append(f)
        values[f.name] = v
    return ItemTable(ids, values, tuple(features), src.pattern, integer_ids)


def resolve(config: ExperienceGenConfig) -> tuple[ExperienceGenConfig, ItemTable | None]:
    """The config with concrete item feature kinds and the action spec (K = items, when every item
    is a candidate), and the loaded table."""
    if config.item_source is None:
        return config, None
    from rlops.components.experience_gen.config import SpecConfig

    table = load_item_table(config)
    cols = dataclasses.replace(config.bandit_columns, item_features=table.features)
    spec = config.action_spec
    if not config.bandit_columns.candidates:
        k = len(table)
        if spec is not None and (spec.maximum is not None and int(spec.maximum) - int(spec.minimum or 0) + 1 != k):
            raise ValueError(
                f"action_spec: {int(spec.maximum) - int(spec.minimum or 0) + 1} actions, but every one "
                f"of the {k} items of {config.item_source.pattern} is a candidate"
            )
        spec = SpecConfig.discrete(k)
    return dataclasses.replace(config, bandit_columns=cols, action_spec=spec), table


def max_candidates(config: ExperienceGenConfig) -> int:
    spec = config.action_spec
    assert spec is not None and spec.maximum is not None  # discrete, set by `resolve` or the config
    return int(spec.maximum) - int(spec.minimum or 0) + 1


def join(
    columns: dict[str, np.ndarray], table: ItemTable, config: ExperienceGenConfig
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[int, tuple[str, str]]]:
    """Valid impression columns -> (joined columns of the kept rows, kept row indices, rejects by row)."""
    cols = config.bandit_columns
    k = max_candidates(config)
    item_ids = np.asarray(columns[ITEM_ID]).astype(str)
    n = len(item_ids)
    rejects: dict[int, tuple[str, str]] = {}
    logged = np.array([table.index.get(v, -1) for v in item_ids.tolist()], np.int64)  # row in the table
    for i in np.flatnonzero(logged < 0):
        rejects[int(i)] = (
            UNKNOWN_ITEM,
            f"{cols.item_id}: item id {item_ids[i]!r} is not in the item table ({table.source})",
        )
    if CANDIDATES in columns:
        cand = np.full((n, k), -1, np.int64)
        for i, text in enumerate(np.asarray(columns[CANDIDATES]).astype(str).tolist()):
            if i in rejects:
                continue
            ids = [c for c in text.split(CANDIDATE_SEPARATOR) if c]
            rows = [table.index.get(c, -1) for c in ids]
            if -1 in rows:
                bad = ids[rows.index(-1)]
                rejects[i] = (
                    UNKNOWN_ITEM,
                    f"{cols.candidates}: candidate item id {bad!r} is not in the item table ({table.source})",
                )
            elif len(rows) > k:
                rejects[i] = (
                    TOO_MANY_CANDIDATES,
                    f"{cols.candidates}: {len(rows)} candidates, more than the action_spec's {k}",
                )
            else:
                cand[i, : len(rows)] = rows
    else:
        cand = np.broadcast_to(np.arange(k, dtype=np.int64), (n, k))
    num_actions = (cand >= 0).sum(1)
    hit = cand == logged[:, None]
    action = np.where(hit.any(1), hit.argmax(1), -1)
    for i in np.flatnonzero(action < 0):
        if int(i) not in rejects:
            rejects[int(i)] = (
                NOT_A_CANDIDATE,
                f"{cols.item_id}: item id {item_ids[i]!r} is not among the record's candidates",
            )
    keep = np.array([i for i in range(n) if i not in rejects], np.int64)
    wide = {name: v for name, v in columns.items() if name.startswith(PER_ARM_PREFIX)}  # [n, items]
    out = {name: v[keep] for name, v in columns.items() if name not in (ITEM_ID, CANDIDATES) and name not in wide}
    out[records.ACTION] = action[keep]
    out[NUM_ACTIONS] = num_actions[keep].astype(np.int64)
    c = cand[keep]
    pad = c < 0
    for name, v in wide.items():  # the log's per-arm columns: each candidate's own column, per record
        out[name] = np.where(pad, FLOAT_PAD, np.asarray(v)[keep[:, None], np.maximum(c, 0)]).astype(np.float32)
    for f in table.features:
        v = table.columns[f.name][np.maximum(c, 0)]  # [n, K] (or [n, K, dim] for a category list)
        fill = (STRING_PAD if f.dtype == "string" else INT_PAD) if f.kind == "categorical" else FLOAT_PAD
        if pad.any():
            v = np.where(pad.reshape(pad.shape + (1,) * (v.ndim - 2)), fill, v)
        out[per_arm_key(f.name)] = v
    return out, keep, rejects
