"""Slate records (`record_kind: slate`): the ordered list of items one page showed, written as one
tf.Example in rlops.components.common.slates' layout.

Two shapes of log, told apart by `slate_columns.position`: rows per shown item, grouped by slate
id into pages (a page is written whole or not at all: experience_gen/slates.py checks it), or one
row per page whose slot fields are lists in display order (a list longer than slate_length is
quarantined, not cut). Item ids are indices in [0, K) or, with an item table, its ids (an item's
index is its row).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import apache_beam as beam
import numpy as np

from rlops.components.common import records
from rlops.components.common.decision_kinds import SLATE
from rlops.components.common.slates import POSITION, PROPENSITY_CASCADE, SLATE_ID, SLATE_ITEM
from rlops.components.experience_gen import sinks, slate_simulation, slates, splits
from rlops.components.experience_gen.batches import (
    QUARANTINE_PREFIX,
    BadStep,
    ValidBatch,
    pick,
    quarantine_rows,
    take,
)
from rlops.components.experience_gen.checks import (
    ACTION_OUT_OF_RANGE,
    NOT_FINITE,
    OUT_OF_RANGE,
    PROPENSITY_OUT_OF_RANGE,
    Rejects,
    action_spec,
    check_probability,
    finite,
    label,
)
from rlops.components.experience_gen.config import (
    ExperienceGenConfig,
    SimulationSource,
)
from rlops.components.experience_gen.convert import MISSING_VALUE
from rlops.components.experience_gen.kinds.base import RecordKind
from rlops.components.experience_gen.layout import (
    FLOAT,
    INT,
    STRING,
    TIMESTAMP,
    Field,
    Layout,
    SourceSchema,
    feature_field,
)
from rlops.components.experience_gen.records import encode_slates

if TYPE_CHECKING:
    from rlops.components.experience_gen.items import ItemTable
    from rlops.components.experience_gen.pipeline import Plan
    from rlops.components.experience_gen.sources import Block, Sample
    from rlops.components.experience_gen.validation import Validated

NS = sinks.METRICS_NAMESPACE


class Slate(RecordKind):
    name = SLATE
    cuts_long_lists = False  # a slot list longer than slate_length is quarantined (SLATE_TOO_LONG)

    def simulates(self, source: SimulationSource) -> bool:
        return source.env == slate_simulation.SLATES_ENV  # the slate generator's world

    def plan_simulation(self, config: ExperienceGenConfig) -> ExperienceGenConfig:
        return slate_simulation.plan_config(config)

    def simulate(self, config: ExperienceGenConfig, shard: int) -> Iterator[dict[str, np.ndarray]]:
        return slate_simulation.simulate_slates(config, shard)

    def plan_items(
        self, config: ExperienceGenConfig, joins_items: bool
    ) -> tuple[ExperienceGenConfig, ItemTable | None, tuple[str, ...]]:
        config, item_ids = slates.resolve_items(config)  # records index the item table's ids, not join it
        return config, None, item_ids

    def resolve_sample(self, config: ExperienceGenConfig, peek: Callable[[], Sample] | None) -> ExperienceGenConfig:
        if not config.slate_columns.position:  # list slots are in display order: no position to number
            return config
        return slates.resolve_first_position(config, _sampled_ints(peek, config.slate_columns.position))

    def fields(self, config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str]) -> list[Field]:
        return slate_fields(config, schema)

    def check(
        self,
        values: dict[str, np.ndarray],
        present: dict[str, np.ndarray],
        layout: Layout,
        config: ExperienceGenConfig,
        rej: Rejects,
    ) -> None:
        if config.slate_columns.position:
            check_slate_row(values, layout, config, rej)
        else:
            check_slate_lists(values, layout, config, rej)

    def rows_grouped(self, config: ExperienceGenConfig) -> bool:
        return bool(config.slate_columns.position)  # rows per shown item; a page per row is a record

    def finish_rows(self, v: Validated, block: Block, config: ExperienceGenConfig, item_ids: Sequence[str]) -> None:
        """Item ids -> their rows in the item table (an unknown id rejects its row, and its page);
        pages given one per row without an id column are named by their file and line."""
        if item_ids and len(v.rows):
            mapping = slates.map_items if config.slate_columns.position else slates.map_item_lists
            index = {item: i for i, item in enumerate(item_ids)}
            mapped, rejects = mapping(v.columns, index, config.slate_columns.item_id)
            keep = np.ones(len(mapped), bool)
            keep[list(rejects)] = False
            v.rejects.update({int(v.rows[i]): r for i, r in rejects.items()})
            if rejects and v.reject_episodes is not None:  # the rest of the slate goes with the row
                ids = v.columns[SLATE_ID]
                v.reject_episodes.update({int(v.rows[i]): str(ids[i]) for i in rejects})
            v.columns = {k: c[keep] for k, c in {**v.columns, SLATE_ITEM: mapped}.items()}
            v.rows = v.rows[keep]
            v.split_key = None if v.split_key is None else v.split_key[keep]
            v.split_time = None if v.split_time is None else v.split_time[keep]
        if len(v.rows) and SLATE_ID not in v.columns:  # a slate per row, no id column
            lines, _ = block.locate(v.rows)
            name = block.source_file.rsplit("/", 1)[-1]
            v.columns[SLATE_ID] = np.array([f"{name}:{line}" for line in lines.tolist()], object)

    def write(self, plan: Plan, valid: beam.PCollection, bad: beam.PCollection) -> tuple[Any, beam.PCollection | None]:
        cfg, names = plan.config, plan.config.splits.names
        feature_names = tuple(f.name for f in plan.layout.features)
        if not cfg.slate_columns.position:  # a slate per row
            encode = beam.ParDo(EncodeSlateRowsFn(cfg, feature_names))
            return valid | "EncodeSplit" >> encode.with_outputs(*names), None
        out = (
            (valid | "KeyRows" >> beam.FlatMap(key_pages, feature_names), bad | "KeyBadRows" >> beam.FlatMap(key_pages))
            | "AllRows" >> beam.Flatten()
            | "GroupSlates" >> beam.GroupByKey()
            | "Assemble" >> beam.ParDo(AssembleSlatesFn(cfg, feature_names)).with_outputs(QUARANTINE_PREFIX, *names)
        )
        return out, out[QUARANTINE_PREFIX]


# --- config -----------------------------------------------------------------------------------


def _sampled_ints(peek: Callable[[], Sample] | None, column: str | None) -> np.ndarray | None:
    """The integers a source's sample holds in `column` (None: no sample, or no such column)."""
    if peek is None or column is None:
        return None
    try:
        _, samples = peek()
    except ValueError:  # nothing readable to sample: the records are checked one by one
        return None
    values = samples.get(column)
    if values is None:
        return None
    out = []
    for v in values.to_pylist():
        try:
            out.append(int(str(v).strip()))
        except ValueError:  # a bad row is quarantined later
            continue
    return np.asarray(out, np.int64)


# --- layout and checks ----------------------------------------------------------------------


def slate_fields(config: ExperienceGenConfig, schema: SourceSchema) -> list[Field]:
    """One row per shown item: the slate it belongs to, its position, the item and the slot's
    reward and propensities, and the request's context (repeated on each of its rows)."""
    c = config.slate_columns
    out = [feature_field(f, schema) for f in c.features]
    item_dtype = STRING if config.item_source is not None else INT
    if not c.position:  # one row per slate: the slot fields are lists in display order
        length = int(config.slate_length or 0)

        def slots(name: str, column: str, dtype: str) -> Field:
            return Field(name, (column,), dtype, length, multivalent=True, separator=c.separator)

        if c.slate_id:
            out.append(Field(SLATE_ID, (c.slate_id,), STRING))
        out += [
            slots(SLATE_ITEM, c.item_id, item_dtype),
            slots(records.REWARD, c.reward, FLOAT),
            slots(records.PROPENSITY, c.propensity, FLOAT),
        ]
        if c.propensity_cascade:
            out.append(slots(PROPENSITY_CASCADE, c.propensity_cascade, FLOAT))
        if c.timestamp:
            out.append(Field(records.TIMESTAMP, (c.timestamp,), TIMESTAMP))
        return out
    assert c.slate_id is not None  # config validation
    out += [
        Field(SLATE_ID, (c.slate_id,), STRING),
        Field(POSITION, (c.position,), INT),
        Field(SLATE_ITEM, (c.item_id,), item_dtype),
        Field(records.PROPENSITY, (c.propensity,), FLOAT),
    ]
    if config.events is None:  # else the events join gives each slot its reward
        out.append(Field(records.REWARD, (c.reward,), FLOAT))
    elif c.decision_time:
        out.append(Field(records.DECISION_TIME, (c.decision_time,), TIMESTAMP))
    if c.propensity_cascade:
        out.append(Field(PROPENSITY_CASCADE, (c.propensity_cascade,), FLOAT))
    if c.timestamp:
        out.append(Field(records.TIMESTAMP, (c.timestamp,), TIMESTAMP))
    return out


def check_slate_row(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: Rejects) -> None:
    """One shown item's row: its slate id, a position inside the slate (made 0-based here), an
    item inside the action spec, a finite reward and propensities in (0, 1]."""
    f = layout.require
    for feature in layout.features:
        if feature.feature_kind != "categorical":
            finite(values[feature.name], feature, rej)
    ids = values[SLATE_ID]
    rej.add(ids == "", MISSING_VALUE, lambda i: f"{label(f(SLATE_ID))}: empty slate id")
    first = int(config.slate_columns.first_position or 0)
    length = int(config.slate_length or 0)
    pos = values[POSITION]
    rej.add(
        (pos < first) | (pos >= first + length),
        OUT_OF_RANGE,
        lambda i: (
            f"{label(f(POSITION))}: {pos[i]} outside positions {first}..{first + length - 1} "
            f"(slate_length {length}, first_position {first})"
        ),
    )
    values[POSITION] = pos - first
    if config.events is not None:  # a shown item's events name its page and the item as logged
        from rlops.components.experience_gen.events import slot_ids

        values[records.DECISION_ID] = slot_ids(ids, values[SLATE_ITEM])
    if f(SLATE_ITEM).dtype == INT:  # indices; an item table's ids are mapped after validation
        spec = action_spec(config)
        lo = int(spec.minimum or 0)
        hi = int(spec.maximum if spec.maximum is not None else np.iinfo(np.int64).max)
        item = values[SLATE_ITEM]
        rej.add(
            (item < lo) | (item > hi),
            ACTION_OUT_OF_RANGE,
            lambda i: f"{label(f(SLATE_ITEM))}: item {item[i]} outside the action spec [{lo}, {hi}]",
        )
        values[SLATE_ITEM] = item - lo
    if records.REWARD in values:  # else events give each slot its reward
        finite(values[records.REWARD], f(records.REWARD), rej)
    check_probability(values, f(records.PROPENSITY), rej)
    if PROPENSITY_CASCADE in values:
        check_probability(values, f(PROPENSITY_CASCADE), rej)


def _lists_differ(field: Field, counts: np.ndarray, items: Field, item_counts: np.ndarray) -> Callable[[int], str]:
    return lambda i: f"{label(field)}: {counts[i]} values for the {item_counts[i]} items of {label(items)}"


def _not_all_probabilities(field: Field, p: np.ndarray, shown: np.ndarray) -> Callable[[int], str]:
    return lambda i: f"{label(field)}: {p[i][shown[i]].tolist()} not all in (0, 1]"


def check_slate_lists(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: Rejects) -> None:
    """One slate per row, its slot fields lists in display order: lists of one length, at most
    slate_length, items inside the action spec and shown once, finite rewards, propensities in
    (0, 1] and a cascade propensity that never increases (and starts at the first propensity)."""
    f = layout.require
    for feature in layout.features:
        if feature.feature_kind != "categorical":
            finite(values[feature.name], feature, rej)
    if SLATE_ID in values:
        ids = values[SLATE_ID]
        rej.add(ids == "", MISSING_VALUE, lambda i: f"{label(f(SLATE_ID))}: empty slate id")
    count = values[slates.COUNT_PREFIX + SLATE_ITEM]
    for name in (records.REWARD, records.PROPENSITY, PROPENSITY_CASCADE):
        other = values.get(slates.COUNT_PREFIX + name)
        if other is not None:
            rej.add(other != count, slates.SLATE_LISTS_DIFFER, _lists_differ(f(name), other, f(SLATE_ITEM), count))
    length = int(config.slate_length or 0)
    rej.add(count == 0, MISSING_VALUE, lambda i: f"{label(f(SLATE_ITEM))}: no items shown")
    rej.add(
        count > length,
        slates.SLATE_TOO_LONG,
        lambda i: f"{label(f(SLATE_ITEM))}: {count[i]} items, more than slate_length {length}",
    )
    shown = np.arange(length)[None, :] < count[:, None]
    items = values[SLATE_ITEM]
    if f(SLATE_ITEM).dtype == INT:  # indices; an item table's ids are mapped after validation
        spec = action_spec(config)
        lo = int(spec.minimum or 0)
        hi = int(spec.maximum if spec.maximum is not None else np.iinfo(np.int64).max)
        outside = ((items < lo) | (items > hi)) & shown
        rej.add(
            outside.any(1),
            ACTION_OUT_OF_RANGE,
            lambda i: f"{label(f(SLATE_ITEM))}: items {items[i][shown[i]].tolist()} outside [{lo}, {hi}]",
        )
        values[SLATE_ITEM] = np.where(shown, items - lo, slates.PADDING_ITEM)
        rej.add(
            slates.shows_an_item_twice(values[SLATE_ITEM], shown),
            slates.SLATE_DUPLICATE_ITEM,
            lambda i: f"{label(f(SLATE_ITEM))}: an item is shown twice in {items[i][shown[i]].tolist()}",
        )
    r = values[records.REWARD]
    rej.add(
        ~np.isfinite(np.where(shown, r, 0.0)).all(1),
        NOT_FINITE,
        lambda i: f"{label(f(records.REWARD))}: {r[i][shown[i]].tolist()} holds a value that is not finite",
    )
    for name in (records.PROPENSITY, PROPENSITY_CASCADE):
        if name in values:
            p = values[name]
            with np.errstate(invalid="ignore"):
                bad = (~((p > 0) & (p <= 1)) & shown).any(1)
            rej.add(bad, PROPENSITY_OUT_OF_RANGE, _not_all_probabilities(f(name), p, shown))
    if PROPENSITY_CASCADE in values:
        c, p = values[PROPENSITY_CASCADE], values[records.PROPENSITY]
        with np.errstate(invalid="ignore"):
            rises = (np.diff(c, axis=1) > slates.CASCADE_TOLERANCE * c[:, :-1]) & shown[:, 1:]
            mismatch = np.abs(c[:, 0] - p[:, 0]) > slates.CASCADE_TOLERANCE * np.maximum(c[:, 0], p[:, 0])
        rej.add(
            rises.any(1),
            slates.SLATE_CASCADE_INCREASES,
            lambda i: f"{label(f(PROPENSITY_CASCADE))}: {c[i][shown[i]].tolist()} rises down the slate",
        )
        rej.add(
            mismatch,
            slates.SLATE_CASCADE_MISMATCH,
            lambda i: (
                f"{label(f(PROPENSITY_CASCADE))}: {c[i, 0]!r} at the first slot differs from its propensity {p[i, 0]!r}"
            ),
        )


# --- group a page's rows into one record ------------------------------------------------------


PAGE_BUCKETS = 256  # slate-id hash buckets that pages are grouped in (rows of one page share one)
PAGE_CHUNK = 8192  # pages assembled and encoded at a time


@dataclass(frozen=True)
class PageRows:
    """The rows of a batch whose pages fall in one hash bucket, as Python lists: the group-by
    pickles every element, and lists of scalars pickle many times faster than numpy arrays."""

    columns: dict[str, list]
    split_key: list | None
    split_time: list | None
    provenance: dict[str, list]


def page_bucket(slate_ids: np.ndarray) -> np.ndarray:
    return splits.key_hash(np.asarray(slate_ids, object)) % np.uint64(PAGE_BUCKETS)


def key_pages(batch: ValidBatch | BadStep, context: tuple[str, ...] = ()) -> Iterator[tuple[int, PageRows | BadStep]]:
    """A batch's rows by the hash bucket of their slate id: one element per bucket present (not
    per page), so grouping costs a few hundred elements per batch whatever the pages' number.
    `context`: the page's context features; a slate takes them from its first slot's row, so
    text values of the other rows travel as None (a page without a first slot is rejected)."""
    if isinstance(batch, BadStep):
        yield int(page_bucket(np.array([batch.episode_id], object))[0]), batch
        return
    bucket = page_bucket(batch.columns[SLATE_ID])
    order = np.argsort(bucket, kind="stable")
    uniq, starts = np.unique(bucket[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    later = batch.columns[POSITION][order] != 0

    def lists(d: dict[str, np.ndarray], blank: tuple[str, ...] = ()) -> dict[str, list]:
        out = {}
        for k, v in d.items():
            v = v[order]
            if k in blank and v.ndim == 1 and len(v) and isinstance(v[0], str):
                v[later] = None
            out[k] = v.tolist()
        return out

    columns, provenance = lists(batch.columns, context), lists(batch.provenance)
    key = None if batch.split_key is None else batch.split_key[order].tolist()
    time = None if batch.split_time is None else batch.split_time[order].tolist()
    for k, b in enumerate(uniq.tolist()):
        lo, hi = bounds[k], bounds[k + 1]
        yield (
            int(b),
            PageRows(
                {c: v[lo:hi] for c, v in columns.items()},
                None if key is None else key[lo:hi],
                None if time is None else time[lo:hi],
                {c: v[lo:hi] for c, v in provenance.items()},
            ),
        )


def _rows_of_pages(parts: list[PageRows]) -> ValidBatch:
    """Pages' rows back as one column batch."""

    def array(values: list) -> np.ndarray:
        is_text = bool(values) and isinstance(values[0], (str, bytes))
        return np.asarray(values, dtype=object) if is_text else np.asarray(values)

    def joined(get) -> list:
        return list(itertools.chain.from_iterable(map(get, parts)))

    columns = {k: array(joined(lambda p, k=k: p.columns[k])) for k in parts[0].columns}
    provenance = {k: array(joined(lambda p, k=k: p.provenance[k])) for k in parts[0].provenance}
    key = None if parts[0].split_key is None else array(joined(lambda p: p.split_key))
    time = None if parts[0].split_time is None else array(joined(lambda p: p.split_time))
    return ValidBatch(columns, key, time, provenance)


class AssembleSlatesFn(beam.DoFn):
    """(bucket, row parts) -> the slate records of the bucket's valid pages, per split, and every row
    of the others quarantined with its page's reason. Pages are grouped, checked and laid out
    together (numpy over all their rows), so a page costs no Python of its own."""

    def __init__(self, config: ExperienceGenConfig, feature_names: tuple[str, ...]):
        self.config = config
        self.feature_names = feature_names
        self.num_items = slates.num_items(config)

    def process(self, element: tuple[int, list[PageRows | BadStep]]) -> Iterator[Any]:
        _, got = element
        parts = [p for p in got if isinstance(p, PageRows)]
        if not parts:  # pages with no valid row left have nothing more to quarantine
            return
        rows = _rows_of_pages(parts)
        page_ids, group = np.unique(rows.columns[SLATE_ID], return_inverse=True)
        bad_ids = [p.episode_id for p in got if isinstance(p, BadStep)]
        bad_rows = np.zeros(len(page_ids), np.int64)
        if bad_ids:
            where = np.searchsorted(page_ids, np.asarray(bad_ids, object))
            found = (where < len(page_ids)) & (page_ids[np.minimum(where, len(page_ids) - 1)] == bad_ids)
            np.add.at(bad_rows, where[found], 1)
        order = np.lexsort((rows.columns[POSITION], group))
        rows, group = take(rows, order), group[order]
        counts = np.bincount(group, minlength=len(page_ids))
        beam.metrics.Metrics.counter(NS, slates.SLATE_IDS).inc(len(page_ids))
        beam.metrics.Metrics.counter(NS, slates.SLATE_IDS_GROUPING).inc(int((counts > 1).sum()))
        ends = np.cumsum(counts)
        for first_page in range(0, len(page_ids), PAGE_CHUNK):  # bounded encode batches
            last_page = min(first_page + PAGE_CHUNK, len(page_ids))
            lo, hi = int(ends[first_page] - counts[first_page]), int(ends[last_page - 1])
            yield from self.assemble(
                page_ids[first_page:last_page],
                group[lo:hi] - first_page,
                take(rows, np.arange(lo, hi)),
                bad_rows[first_page:last_page],
            )

    def assemble(
        self, page_ids: np.ndarray, group: np.ndarray, rows: ValidBatch, bad_rows: np.ndarray
    ) -> Iterator[Any]:
        """Pages 0..G-1 (rows sorted by page, then position) -> records per split, or quarantine."""
        length = int(self.config.slate_length or 0)
        first = int(self.config.slate_columns.first_position or 0)
        problems = slates.page_problems(page_ids, group, rows.columns, length, first, bad_rows)
        if problems:
            bad = np.isin(group, list(problems))
            rejected = np.flatnonzero(bad)
            reasons = [problems[g] for g in group[rejected].tolist()]
            yield from quarantine_rows(take(rows, rejected), reasons, self.config)
            good_pages = np.setdiff1d(np.arange(len(page_ids)), list(problems))
            keep = ~bad
            rows = take(rows, np.flatnonzero(keep))
            group = np.searchsorted(good_pages, group[keep])
            page_ids = page_ids[good_pages]
        if not len(page_ids):
            return
        counts = np.bincount(group, minlength=len(page_ids))
        starts = np.cumsum(counts) - counts
        units = splits.key_hash(page_ids)
        columns = slates.assemble_pages(
            page_ids, group, rows.columns, self.feature_names, length, self.num_items, units
        )
        serialized = encode_slates(columns, self.feature_names)
        s = self.config.splits
        if rows.split_time is not None:
            which = splits.by_time(rows.split_time[starts], s.time_boundaries)
        elif rows.split_key is not None:
            which = splits.by_hash(splits.key_hash(rows.split_key[starts]), s.splits)
        else:
            which = splits.by_hash(units, s.splits)
        for i, split in enumerate(s.splits):
            idx = np.flatnonzero(which == i)
            if len(idx):
                yield beam.pvalue.TaggedOutput(split.name, (pick(serialized, idx), int(counts[idx].sum())))


class EncodeSlateRowsFn(beam.DoFn):
    """A valid batch of slates given one per row -> (serialized slates, count) per split."""

    def __init__(self, config: ExperienceGenConfig, feature_names: tuple[str, ...]):
        self.config = config
        self.feature_names = feature_names
        self.num_items = slates.num_items(config)

    def process(self, batch: ValidBatch) -> Iterator[Any]:
        units = splits.key_hash(np.asarray(batch.columns[SLATE_ID], object))
        columns = slates.assemble_slate_rows(batch.columns, self.feature_names, self.num_items, units)
        serialized = encode_slates(columns, self.feature_names)
        s = self.config.splits
        if batch.split_time is not None:
            which = splits.by_time(batch.split_time, s.time_boundaries)
        else:
            which = splits.by_hash(units if batch.split_key is None else splits.key_hash(batch.split_key), s.splits)
        for i, split in enumerate(s.splits):
            idx = np.flatnonzero(which == i)
            if len(idx):
                yield beam.pvalue.TaggedOutput(split.name, (pick(serialized, idx), len(idx)))
