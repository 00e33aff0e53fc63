"""The Beam graph: read -> validate -> (assemble episodes) -> split -> write, plus quarantine.

Every element between transforms is a batch (thousands of records as NumPy/Arrow columns);
the only per-record Beam elements are quarantined records and, for trajectories, episodes.

    work items ─ Ingest ─┬─ valid batches ─ EncodeBandit ──────────────┬─ Split-<name>/*.gz
                         │               └ KeySteps ─ GBK ─ Assemble ──┤
                         └─ quarantine ─────────────────────────────────┴─ quarantine-*.jsonl.gz

Per-arm records: Ingest joins each valid batch with the item table, read by ReadItemTable
(fileio) and passed as a side input (AsSingleton), by item id.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import operator
import pickle
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from rlops.components.common.decision_kinds import BANDIT, SLATE, decision_kind
from rlops.components.experience_gen import (
    event_files,
    event_graph,
    event_store,
    features,
    items as item_table,
    json_paths,
    records,
    sinks,
    slates,
    sources,
    splits,
    validation,
    writes,
)
from rlops.components.experience_gen.config import ExperienceGenConfig, FileSource
from rlops.components.experience_gen.errors import closest
from rlops.components.experience_gen.layout import Layout, SourceSchema, resolve_layout
from rlops.components.experience_gen.sources import Block, Quarantined, Unreadable
from rlops.components.experience_gen.sources.base import compression_type

NS = sinks.METRICS_NAMESPACE
READ, QUARANTINED, UNREADABLE, TRUNCATED = "read", "quarantined", "unreadable", "truncated"
QUARANTINE_PREFIX = "quarantine"
QUARANTINE_DEST = "<quarantine>"  # its name among the written destinations: no split can take it
# Late, early and unknown events: written where they are listed (a Flatten with the records'
# quarantine would hold every line in memory first); `quarantine*` files, read as one quarantine.
EVENTS_QUARANTINE_DEST, EVENTS_QUARANTINE_PREFIX = "<events quarantine>", "quarantine-events"
BAD_GROUPS = "bad_groups"  # IngestFn's output of BadStep marks (grouped kinds)
SLATE_IDS, SLATE_IDS_GROUPING = "slate_ids", "slate_ids_grouping"  # pages seen, and those of > 1 row
EPISODE_NOT_CONTIGUOUS = "episode_not_contiguous"
EPISODE_DUPLICATE_STEP = "episode_duplicate_step"
EPISODE_TERMINAL_INSIDE = "episode_terminal_inside"
EPISODE_HAS_BAD_STEP = "episode_has_bad_step"
REWARD_SCALE = 1_000_000  # rewards enter the distribution in millionths
REWARDS = "rewards"  # a distribution of the written rewards (its min and max: constant rewards warn)
DUPLICATE_DECISION = "duplicate_decision"  # events: a decision read again while it waits from the last run


@dataclass(frozen=True)
class Plan:
    """What construction resolved: the effective config, the layout and the work items."""

    config: ExperienceGenConfig
    layout: Layout
    items: tuple = ()
    item_table: item_table.ItemTable | None = None  # per-arm: the joined item-features table (small)
    item_ids: tuple[str, ...] = ()  # slates with an item table: its ids, an item's index is its row
    pending: event_store.Plan | None = None  # events: where waiting decisions are read and written
    events_scratch: str | None = None  # events: this run's chunks and table (event_files.py)

    @property
    def item_index(self) -> dict[str, int]:
        return {v: i for i, v in enumerate(self.item_ids)}


def make_plan(config: ExperienceGenConfig) -> Plan:
    """The source's plan (its inputs and work items), then what every source shares: feature kinds
    from its sample, the per-arm item table, the layout, and mapped columns checked against the
    data's header or schema."""
    source = sources.source_of(config.source)
    planned = source.plan(config)
    peek = source.peek(planned.config, planned.inputs)
    config = features.resolve_features(planned.config, peek, source.label)
    table = None
    item_ids: tuple[str, ...] = ()
    if config.record_kind == SLATE:
        config, item_ids = slates.resolve_items(config)
    elif planned.joins_items:
        config, table = item_table.resolve(config)
    schema, header_file = source.columns(config, planned.inputs)
    layout = resolve_layout(config, schema, () if table is None else table.ids.tolist())  # per-arm columns: by item
    if header_file is not None:  # a header / schema, not a first record
        check_columns(layout, schema, header_file)
        note = ignored_columns_note(layout, schema, header_file)
        if note:  # extra columns are ignored, and the user is told which
            logging.getLogger(__name__).info(note)
    if config.record_kind == SLATE and config.slate_columns.position:  # the position column is there
        config = slates.resolve_first_position(config, _sampled_ints(peek, config.slate_columns.position))
    pending = None
    if config.events is not None:
        event_graph.check_first_events_file(config.events)
        pending = event_store.plan(_pending_dir(config), _inputs_key(config), _layout_key(layout))
    scratch = None if pending is None else event_files.scratch_dir(pending.path)
    return Plan(config, layout, planned.items, table, item_ids, pending, scratch)


def _pending_dir(config: ExperienceGenConfig) -> str:
    assert config.events is not None
    if not config.events.pending_dir:
        raise ValueError(
            "experience_gen.events.pending_dir: set where decisions whose window is still open wait for the next "
            "run (the pipelines set it under the pipeline root)"
        )
    return config.events.pending_dir


def _inputs_key(config: ExperienceGenConfig) -> str:
    """Which night this run reads: its two sources as resolved for the run (patterns or queries
    with the date filled in). Equal keys mean the same night run again (event_store.plan), even
    when its files were written again or corrected in between."""
    import hashlib
    import json

    assert config.events is not None
    parts = [dataclasses.asdict(config.source), dataclasses.asdict(config.events.source)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _layout_key(layout: Layout) -> str:
    return ",".join(f"{f.name}:{f.dtype}:{f.width}" for f in layout.all_fields)


def _sampled_ints(peek: Any, column: str | None) -> np.ndarray | None:
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


def check_columns(layout: Layout, schema: SourceSchema, path: str) -> None:
    """Every required mapped column is in the file's header or schema; else one error naming the
    config key, the column and the closest of the file's columns (not 100% of the records
    quarantined as missing_column)."""
    for f in layout.all_fields:
        if not f.required:
            continue
        for column in f.columns:
            base = json_paths.base_column(column) or column
            if base not in schema.names:
                raise ValueError(
                    f"{_config_key(layout, f)}: column {base!r} is not in {path}; {closest(base, schema.names)}"
                )


def ignored_columns_note(layout: Layout, schema: SourceSchema, path: str, shown: int = 10) -> str | None:
    """One line naming the source's columns no config key maps (at most `shown`, then a count),
    or None when every column is read."""
    read = set(layout.columns)
    ignored = [(i, c) for i, c in enumerate(schema.names, 1) if c not in read]
    if not ignored:
        return None

    def label(position: int, name: str) -> str:
        if name.strip():
            return name
        # df.to_csv(path) writes the index as a first column named '': say which column it is
        return f"(unnamed column {position}{': a pandas index?' if position == 1 else ''})"

    names = ", ".join(label(i, c) for i, c in ignored[:shown])
    names += f" and {len(ignored) - shown} more" if len(ignored) > shown else ""
    return f"experience_gen: {len(ignored)} column(s) of {path} not in the config, ignored: {names}"


def _config_key(layout: Layout, f: Any) -> str:
    """The config key that mapped a layout field, for error messages."""
    if f is layout.split_key:
        return "experience_gen.splits.key"
    if f is layout.split_time:
        return "experience_gen.splits.time_column"
    section = decision_kind(layout.kind).columns_section
    if f.feature_kind is not None and f.name != records.CONTEXT:
        return f"experience_gen.{section}.features['{f.name}']"
    return f"experience_gen.{section}.{f.name}"


# --- ingest: read + validate ------------------------------------------------------------------


@dataclass
class ValidBatch:
    columns: dict[str, np.ndarray]
    split_key: np.ndarray | None = None
    split_time: np.ndarray | None = None
    # Provenance, kept for trajectory steps (an invalid episode quarantines all its steps).
    provenance: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def nbytes(self) -> int:
        arrays = [*self.columns.values(), *self.provenance.values(), self.split_key, self.split_time]
        return sum(a.nbytes for a in arrays if a is not None)


class ValidBatchCoder(beam.coders.Coder):
    """Valid batches are pickled where they cross workers, and sized from their arrays: Beam sizes
    sampled elements of every PCollection by encoding them, which for batches (few elements, each
    thousands of rows) meant pickling nearly every batch once more, text columns value by value."""

    def encode(self, value: ValidBatch) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> ValidBatch:
        return pickle.loads(encoded)

    def is_deterministic(self) -> bool:
        return False

    def estimate_size(self, value: ValidBatch) -> int:
        return value.nbytes()

    def to_type_hint(self) -> type:
        return ValidBatch


beam.coders.registry.register_coder(ValidBatch, ValidBatchCoder)


@dataclass(frozen=True)
class BadStep:
    """Marks an episode one of whose steps was quarantined: the rest of it is not written."""

    episode_id: str
    message: str


def read_item(plan: Plan, item: Any) -> Iterator[Block | Quarantined | Unreadable]:
    """One work item (file range, simulation shard, or BigQuery row batch) -> Blocks / Quarantined."""
    yield from sources.source_of(plan.config.source).read_item(plan.config, plan.layout, item)


_PLAN_TABLE: Any = object()  # default of `table`: the plan's own (in-process) item table


def validate_block(
    plan: Plan, block: Block, table: item_table.ItemTable | None = _PLAN_TABLE, pending: np.ndarray | None = None
) -> Iterator[ValidBatch | BadStep | Quarantined]:
    """A Block -> its Quarantined rows, one ValidBatch of the rest (if any), and for trajectories
    a BadStep per quarantined step whose episode is known."""
    v = validation.validate(block.columns, block.num_rows, plan.layout, plan.config, block.text)
    per_item_rows = plan.layout.kind == SLATE and bool(plan.config.slate_columns.position)
    # rows assembled into records later (an episode's steps, a page's shown items) may still be rejected
    grouped = decision_kind(plan.layout.kind).grouped and (plan.layout.kind != SLATE or per_item_rows)
    table = plan.item_table if table is _PLAN_TABLE else table
    if table is not None and len(v.rows):  # per-arm: join the item table by item id
        joined, keep, rejects = item_table.join(v.columns, table, plan.config)
        v.rejects.update({int(v.rows[i]): r for i, r in rejects.items()})
        v.rows = v.rows[keep]
        v.columns = joined
        v.split_key = None if v.split_key is None else v.split_key[keep]
        v.split_time = None if v.split_time is None else v.split_time[keep]
    if plan.item_ids and len(v.rows):  # slates: item ids -> their rows in the item table
        mapping = slates.map_items if per_item_rows else slates.map_item_lists
        mapped, rejects = mapping(v.columns, plan.item_index, plan.config.slate_columns.item_id)
        keep = np.ones(len(mapped), bool)
        keep[list(rejects)] = False
        v.rejects.update({int(v.rows[i]): r for i, r in rejects.items()})
        if rejects and v.reject_episodes is not None:  # the rest of the slate goes with the row
            ids = v.columns[records.SLATE_ID]
            v.reject_episodes.update({int(v.rows[i]): str(ids[i]) for i in rejects})
        v.columns = {k: c[keep] for k, c in {**v.columns, records.SLATE_ITEM: mapped}.items()}
        v.rows = v.rows[keep]
        v.split_key = None if v.split_key is None else v.split_key[keep]
        v.split_time = None if v.split_time is None else v.split_time[keep]
    if pending is not None and len(pending) and len(v.rows):  # events: a decision already waiting
        ids = v.columns[records.DECISION_ID]
        hashes = splits.key_hash(ids)
        where = np.minimum(np.searchsorted(pending, hashes), len(pending) - 1)
        again = pending[where] == hashes
        if again.any():
            for i in np.flatnonzero(again).tolist():
                v.rejects[int(v.rows[i])] = (
                    DUPLICATE_DECISION,
                    f"decision {ids[i]!r} is already waiting from the last run (its window was open at the cutoff)",
                )
            keep = ~again
            v.columns = {k: c[keep] for k, c in v.columns.items()}
            v.rows = v.rows[keep]
            v.split_key = None if v.split_key is None else v.split_key[keep]
            v.split_time = None if v.split_time is None else v.split_time[keep]
    for row, (code, message) in sorted(v.rejects.items()):
        q = block.quarantine(row, code, message)
        yield q
        if grouped and v.reject_episodes and row in v.reject_episodes:
            yield BadStep(v.reject_episodes[row], f"line {q.line} of {q.source_file}: {code}")
    if not len(v.rows):
        return
    if plan.layout.kind == SLATE and records.SLATE_ID not in v.columns:  # a slate per row, no id column
        lines, _ = block.locate(v.rows)
        name = block.source_file.rsplit("/", 1)[-1]
        v.columns[records.SLATE_ID] = np.array([f"{name}:{line}" for line in lines.tolist()], object)
    provenance = {}
    if grouped:
        lines, offsets = block.locate(v.rows)
        provenance = {"file": np.full(len(v.rows), block.source_file, object), "line": lines, "offset": offsets}
        if not block.payload_from_file:  # else read back for the rows of a rejected group only
            provenance["payload"] = np.empty(len(v.rows), object)
            provenance["payload"][:] = block.payloads(v.rows)
    yield ValidBatch(v.columns, v.split_key, v.split_time, provenance)


def ingest(
    plan: Plan, item: Any, table: item_table.ItemTable | None = _PLAN_TABLE, pending: np.ndarray | None = None
) -> Iterator[tuple[int, ValidBatch | BadStep | Quarantined | Unreadable]]:
    """read_item + validate_block, with the number of source records each output accounts for
    (an Unreadable range accounts for none: its records cannot be counted)."""
    for got in read_item(plan, item):
        if isinstance(got, Quarantined):
            yield 1, got
            continue
        if isinstance(got, Unreadable):
            yield 0, got
            continue
        first = True
        for out in validate_block(plan, got, table, pending):
            yield (got.num_rows if first else 0), out
            first = False


class IngestFn(beam.DoFn):
    """Work item -> valid column batches (main output, ValidBatch only: its coder sizes it cheaply);
    Quarantined records and Unreadable byte ranges ('quarantine'); BadStep marks of grouped kinds
    ('bad_groups'). Per-arm: the item table arrives as a side input (`table`), so the DoFn itself
    does not carry it."""

    def __init__(self, plan: Plan):
        self.plan = dataclasses.replace(plan, item_table=None)
        self.read = beam.metrics.Metrics.counter(NS, READ)
        self.unreadable = beam.metrics.Metrics.counter(NS, UNREADABLE)

    def process(
        self, item: Any, table: item_table.ItemTable | None = None, pending: np.ndarray | None = None
    ) -> Iterator[Any]:
        if isinstance(item, event_graph.PendingItem):  # decisions that waited from the last run
            batch = item.batch()
            self.read.inc(len(batch))  # read = written + quarantined + pending counts them again
            yield batch
            return
        for n, out in ingest(self.plan, item, table, pending):
            self.read.inc(n)
            if isinstance(out, ValidBatch):  # multivalent lists cut to their dim: counted per feature
                for k, v in out.columns.items():
                    if k.endswith(validation.TRUNCATED_SUFFIX) and v.any():
                        beam.metrics.Metrics.counter(NS, f"{TRUNCATED}:{k[: -len(validation.TRUNCATED_SUFFIX)]}").inc(
                            int(v.sum())
                        )
            if isinstance(out, Unreadable):  # listed with the quarantine, fails the run (core.check)
                self.unreadable.inc()
            if isinstance(out, (Quarantined, Unreadable)):
                yield beam.pvalue.TaggedOutput(QUARANTINE_PREFIX, out)
            elif isinstance(out, BadStep):
                yield beam.pvalue.TaggedOutput(BAD_GROUPS, out)
            else:
                yield out


# --- bandit: encode + split -------------------------------------------------------------------


class EncodeBanditFn(beam.DoFn):
    """Valid batch -> (serialized tf.Examples, count) per split, tagged with the split's name."""

    def __init__(
        self,
        config: ExperienceGenConfig,
        feature_names: tuple[str, ...] = (records.CONTEXT,),
        multivalent: dict[str, Any] | None = None,
    ):
        self.config = config
        self.feature_names = feature_names
        self.multivalent = multivalent or {}
        self.rewards = beam.metrics.Metrics.distribution(NS, REWARDS)

    def process(self, batch: ValidBatch) -> Iterator[Any]:
        reward = batch.columns.get(records.REWARD)
        if reward is not None and len(reward):  # the run warns when every written reward is the same
            self.rewards.update(int(round(float(np.min(reward)) * REWARD_SCALE)))  # Beam's distributions are integers
            self.rewards.update(int(round(float(np.max(reward)) * REWARD_SCALE)))
        serialized, which = encode_and_split(self.config, batch, self.feature_names, self.multivalent)
        for i, s in enumerate(self.config.splits.splits):
            idx = np.flatnonzero(which == i)
            if len(idx) == len(serialized):
                yield beam.pvalue.TaggedOutput(s.name, (serialized, len(idx)))
            elif len(idx):
                yield beam.pvalue.TaggedOutput(s.name, (_pick(serialized, idx), len(idx)))


def _pick(serialized: list[bytes], idx: np.ndarray) -> list[bytes]:
    """serialized[idx] without a Python step per record."""
    if len(idx) == 1:
        return [serialized[int(idx[0])]]
    return list(operator.itemgetter(*idx.tolist())(serialized))


def encode_and_split(
    config: ExperienceGenConfig,
    batch: ValidBatch,
    feature_names: tuple[str, ...],
    multivalent: dict[str, Any] | None = None,
) -> tuple[list[bytes], np.ndarray]:
    """A valid batch's serialized records, each with the hash its split was drawn from (the
    Evaluator resamples by it), and each record's split index."""
    unit = split_hash(batch.columns, batch.split_key, batch.split_time, feature_names)
    columns = batch.columns
    if unit is not None:
        keyed = batch.split_key is not None or records.DECISION_ID in columns
        name = records.SPLIT_UNIT if keyed else records.SPLIT_CONTENT
        columns = {**columns, name: unit.view(np.int64)}
    serialized = records.encode_bandit(columns, feature_names, multivalent)
    return serialized, assign_splits(config, batch.columns, batch.split_key, batch.split_time, feature_names, unit)


def split_hash(
    columns: dict[str, np.ndarray],
    key: np.ndarray | None,
    time: np.ndarray | None,
    feature_names: tuple[str, ...] = (records.CONTEXT,),
) -> np.ndarray | None:
    """[N] uint64 hash each record's split is drawn from (its key's, or its content's); None when
    the split is by time. Written into the record as its `split_unit` or `split_content`.

    The content is the decision (context, action, propensity, ...), never its reward: hashed with
    the reward, the clicks and the non-clicks of one (context, action) went to different splits,
    so a policy trained on train where its choices clicked was evaluated on eval where the same
    choices had not, and its estimates skewed low."""
    if time is not None:
        return None
    if key is None and records.DECISION_ID in columns:  # the decision's own id: the same split whatever features
        return splits.key_hash(columns[records.DECISION_ID])
    order = tuple(feature_names) + tuple(
        k for k in records.BANDIT_ORDER if k not in feature_names and k != records.REWARD
    )
    return splits.key_hash(key) if key is not None else splits.content_hash(columns, order)


def assign_splits(
    config: ExperienceGenConfig,
    columns: dict[str, np.ndarray],
    key: np.ndarray | None,
    time: np.ndarray | None,
    feature_names: tuple[str, ...] = (records.CONTEXT,),
    unit: np.ndarray | None = None,
) -> np.ndarray:
    """Split index per record: by time, or by the record's `split_hash` (`unit`: already computed)."""
    h = split_hash(columns, key, time, feature_names) if unit is None else unit
    if h is None:
        assert time is not None
        return splits.by_time(time, config.splits.time_boundaries)
    return splits.by_hash(h, config.splits.splits)


# --- trajectories: group steps into episodes --------------------------------------------------


def key_steps(batch: ValidBatch | BadStep) -> Iterator[tuple[str, ValidBatch | BadStep]]:
    """One (episode id, its steps in this batch) per episode present in the batch."""
    if isinstance(batch, BadStep):
        yield batch.episode_id, batch
        return
    ids = batch.columns[records.EPISODE_ID]
    uniq, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
    for k, episode in enumerate(uniq):
        idx = order[bounds[k] : bounds[k + 1]]
        yield str(episode), _take(batch, idx)


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
    bucket = page_bucket(batch.columns[records.SLATE_ID])
    order = np.argsort(bucket, kind="stable")
    uniq, starts = np.unique(bucket[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    later = batch.columns[records.POSITION][order] != 0

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


def _take(batch: ValidBatch, idx: np.ndarray) -> ValidBatch:
    pick = lambda d: {k: v[idx] for k, v in d.items()}  # noqa: E731
    return ValidBatch(
        pick(batch.columns),
        None if batch.split_key is None else batch.split_key[idx],
        None if batch.split_time is None else batch.split_time[idx],
        pick(batch.provenance),
    )


def _concat(parts: list[ValidBatch]) -> ValidBatch:
    cat = lambda ds: {k: np.concatenate([d[k] for d in ds]) for k in ds[0]}  # noqa: E731
    key = None if parts[0].split_key is None else np.concatenate([p.split_key for p in parts])
    time = None if parts[0].split_time is None else np.concatenate([p.split_time for p in parts])
    return ValidBatch(cat([p.columns for p in parts]), key, time, cat([p.provenance for p in parts]))


class AssembleEpisodeFn(beam.DoFn):
    """(episode id, step parts) -> one SequenceExample in its split, or every step quarantined."""

    def __init__(self, config: ExperienceGenConfig):
        self.config = config

    def process(self, element: tuple[str, list[ValidBatch | BadStep]]) -> Iterator[Any]:
        episode_id, parts = element
        steps = [p for p in parts if isinstance(p, ValidBatch)]
        bad = [p for p in parts if isinstance(p, BadStep)]
        if not steps:
            return
        ep = _concat(steps)
        order = np.argsort(ep.columns[records.STEP], kind="stable")
        ep = _take(ep, order)
        problem = episode_problem(episode_id, ep.columns)
        if bad:
            problem = (
                EPISODE_HAS_BAD_STEP,
                (f"episode {episode_id!r}: {len(bad)} of its steps were quarantined (first: {bad[0].message})"),
            )
        if problem is not None:
            yield from _quarantine_rows(ep, [problem] * len(ep), self.config)
            return
        serialized = records.encode_episode(episode_id, episode_steps(ep.columns))
        s = self.config.splits
        if ep.split_time is not None:
            which = splits.by_time(ep.split_time[:1], s.time_boundaries)[0]
        else:
            key = ep.split_key[:1] if ep.split_key is not None else np.array([episode_id], object)
            which = splits.by_hash(splits.key_hash(key), s.splits)[0]
        yield beam.pvalue.TaggedOutput(s.splits[int(which)].name, ([serialized], len(ep)))


def episode_problem(episode_id: str, cols: dict[str, np.ndarray]) -> tuple[str, str] | None:
    """Why an episode (steps sorted by index) cannot be written, or None."""
    steps = cols[records.STEP]
    n = len(steps)
    uniq, counts = np.unique(steps, return_counts=True)
    if len(uniq) < n:
        dup = int(uniq[np.argmax(counts > 1)])
        return EPISODE_DUPLICATE_STEP, f"episode {episode_id!r}: step {dup} appears {counts.max()} times"
    if steps[0] != 0 or steps[-1] != n - 1:
        missing = np.setdiff1d(np.arange(n), steps)[:5].tolist()
        return EPISODE_NOT_CONTIGUOUS, (
            f"episode {episode_id!r}: steps are not contiguous from 0 "
            f"(have {n} steps up to {int(steps[-1])}, missing {missing})"
        )
    term = cols.get(records.TERMINAL)
    if term is not None:
        present = cols.get(validation.present_key(records.TERMINAL), np.ones(n, bool))
        inside = np.flatnonzero(term[:-1] & present[:-1])
        if len(inside):
            return EPISODE_TERMINAL_INSIDE, (
                f"episode {episode_id!r}: terminal at step {int(steps[inside[0]])} "
                f"but the episode goes on to step {int(steps[-1])}"
            )
    return None


def episode_steps(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sorted step columns -> the arrays of the SequenceExample (discount derived if not logged)."""
    n = len(cols[records.STEP])
    out = {k: cols[k] for k in (records.OBSERVATION, records.ACTION, records.REWARD)}
    if records.DISCOUNT in cols:
        out[records.DISCOUNT] = cols[records.DISCOUNT]
    else:  # 0 after a terminal step, 1 otherwise (a cut-off episode still bootstraps)
        discount = np.ones(n, np.float32)
        term = cols.get(records.TERMINAL)
        logged = cols.get(validation.present_key(records.TERMINAL), np.ones(n, bool))
        if term is not None and bool(term[-1]) and bool(logged[-1]):
            discount[-1] = 0.0
        out[records.DISCOUNT] = discount
    out.update({k: v for k, v in cols.items() if k.startswith(records.POLICY_INFO_PREFIX)})
    return out


# --- slates: group a page's rows into one record -----------------------------------------------


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
        page_ids, group = np.unique(rows.columns[records.SLATE_ID], return_inverse=True)
        bad_ids = [p.episode_id for p in got if isinstance(p, BadStep)]
        bad_rows = np.zeros(len(page_ids), np.int64)
        if bad_ids:
            where = np.searchsorted(page_ids, np.asarray(bad_ids, object))
            found = (where < len(page_ids)) & (page_ids[np.minimum(where, len(page_ids) - 1)] == bad_ids)
            np.add.at(bad_rows, where[found], 1)
        order = np.lexsort((rows.columns[records.POSITION], group))
        rows, group = _take(rows, order), group[order]
        counts = np.bincount(group, minlength=len(page_ids))
        beam.metrics.Metrics.counter(NS, SLATE_IDS).inc(len(page_ids))
        beam.metrics.Metrics.counter(NS, SLATE_IDS_GROUPING).inc(int((counts > 1).sum()))
        ends = np.cumsum(counts)
        for first_page in range(0, len(page_ids), PAGE_CHUNK):  # bounded encode batches
            last_page = min(first_page + PAGE_CHUNK, len(page_ids))
            lo, hi = int(ends[first_page] - counts[first_page]), int(ends[last_page - 1])
            yield from self.assemble(
                page_ids[first_page:last_page],
                group[lo:hi] - first_page,
                _take(rows, np.arange(lo, hi)),
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
            yield from _quarantine_rows(_take(rows, rejected), reasons, self.config)
            good_pages = np.setdiff1d(np.arange(len(page_ids)), list(problems))
            keep = ~bad
            rows = _take(rows, np.flatnonzero(keep))
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
        serialized = records.encode_slates(columns, self.feature_names)
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
                yield beam.pvalue.TaggedOutput(split.name, (_pick(serialized, idx), int(counts[idx].sum())))


class EncodeSlateRowsFn(beam.DoFn):
    """A valid batch of slates given one per row -> (serialized slates, count) per split."""

    def __init__(self, config: ExperienceGenConfig, feature_names: tuple[str, ...]):
        self.config = config
        self.feature_names = feature_names
        self.num_items = slates.num_items(config)

    def process(self, batch: ValidBatch) -> Iterator[Any]:
        units = splits.key_hash(np.asarray(batch.columns[records.SLATE_ID], object))
        columns = slates.assemble_slate_rows(batch.columns, self.feature_names, self.num_items, units)
        serialized = records.encode_slates(columns, self.feature_names)
        s = self.config.splits
        if batch.split_time is not None:
            which = splits.by_time(batch.split_time, s.time_boundaries)
        else:
            which = splits.by_hash(units if batch.split_key is None else splits.key_hash(batch.split_key), s.splits)
        for i, split in enumerate(s.splits):
            idx = np.flatnonzero(which == i)
            if len(idx):
                yield beam.pvalue.TaggedOutput(split.name, (_pick(serialized, idx), len(idx)))


def _quarantine_rows(rows: ValidBatch, reasons: list[tuple[str, str]], config: ExperienceGenConfig) -> Iterator[Any]:
    """Rows that cannot be written, each with its group's (reason, message); payloads that were
    left in the source (Block.payload_from_file) are read back here."""
    p = rows.provenance
    if "payload" in p:
        payloads: Sequence[bytes] = p["payload"].tolist()
    else:
        payloads = sources.read_back_payloads(config.source, p["file"], p["line"], p["offset"])
    for i, (code, message) in enumerate(reasons):
        yield beam.pvalue.TaggedOutput(
            QUARANTINE_PREFIX,
            Quarantined(code, message, str(p["file"][i]), int(p["line"][i]), int(p["offset"][i]), payloads[i]),
        )


# --- quarantine -------------------------------------------------------------------------------


class FormatQuarantineFn(beam.DoFn):
    def process(self, q: Quarantined | Unreadable) -> Iterator[str]:
        if isinstance(q, Unreadable):  # bytes, not a record: counted by IngestFn, not as quarantined
            yield q.to_json()
            return
        beam.metrics.Metrics.counter(NS, QUARANTINED).inc()
        beam.metrics.Metrics.counter(NS, f"{QUARANTINED}:{q.code}").inc()
        yield q.to_json()


# --- the graph --------------------------------------------------------------------------------


def build(p: beam.Pipeline, plan: Plan, examples_uri: str, quarantine_uri: str) -> None:
    cfg = plan.config
    items = sources.source_of(cfg.source).read(p, cfg, plan.items)
    if plan.pending is not None and plan.pending.part_files():  # work items: small, cheap to flatten
        waiting = [event_graph.PendingItem(path) for path in plan.pending.part_files()]
        items = (items, p | "PendingItems" >> beam.Create(waiting)) | "AllItems" >> beam.Flatten()
    side = {}
    if plan.item_table is not None:  # per-arm: the item table read by Beam IO, joined as a side input
        side["table"] = beam.pvalue.AsSingleton(p | "ReadItemTable" >> read_item_table(cfg))
    if plan.pending is not None and plan.pending.part_files():  # events: decisions read again while waiting
        side["pending"] = beam.pvalue.AsSingleton(event_graph.pending_ids(p, plan.pending.part_files()))
    ingest = beam.ParDo(IngestFn(plan), **side).with_output_types(ValidBatch)
    ingested = items | "Ingest" >> ingest.with_outputs(QUARANTINE_PREFIX, BAD_GROUPS, main="valid")
    valid = ingested.valid
    if cfg.reshuffle:
        valid = valid | "Reshuffle" >> beam.Reshuffle()
    event_lines, outcome_lines = [], None
    if plan.pending is not None:  # events to rewards: decisions meet the events (event_graph.py)
        assert plan.events_scratch is not None
        valid, outcome_lines, malformed_lines = event_graph.join_rewards(
            p, cfg, valid, plan.pending, plan.events_scratch
        )
        event_lines.append(malformed_lines)
    names = cfg.splits.names
    quarantined, bad = [ingested[QUARANTINE_PREFIX]], ingested[BAD_GROUPS]
    if plan.layout.kind == BANDIT:
        feature_names = tuple(f.name for f in plan.layout.features)
        if plan.item_table is not None:
            feature_names += tuple(item_table.per_arm_key(f.name) for f in plan.item_table.features)
            feature_names += (item_table.NUM_ACTIONS,)
        multivalent = {f.name: ("" if f.dtype == "string" else -1) for f in plan.layout.features if f.multivalent}
        out = valid | "EncodeSplit" >> beam.ParDo(EncodeBanditFn(cfg, feature_names, multivalent)).with_outputs(*names)
        _schema(p, plan, valid, examples_uri)
    elif plan.layout.kind == SLATE and not cfg.slate_columns.position:  # a slate per row
        feature_names = tuple(f.name for f in plan.layout.features)
        out = valid | "EncodeSplit" >> beam.ParDo(EncodeSlateRowsFn(cfg, feature_names)).with_outputs(*names)
        if feature_names:
            _schema(p, plan, valid, examples_uri)
    elif plan.layout.kind == SLATE:
        feature_names = tuple(f.name for f in plan.layout.features)
        out = (
            (valid | "KeyRows" >> beam.FlatMap(key_pages, feature_names), bad | "KeyBadRows" >> beam.FlatMap(key_pages))
            | "AllRows" >> beam.Flatten()
            | "GroupSlates" >> beam.GroupByKey()
            | "Assemble" >> beam.ParDo(AssembleSlatesFn(cfg, feature_names)).with_outputs(QUARANTINE_PREFIX, *names)
        )
        quarantined.append(out[QUARANTINE_PREFIX])
        if feature_names:  # vocabularies and statistics over the valid rows
            _schema(p, plan, valid, examples_uri)
    else:
        out = (
            (valid | "KeySteps" >> beam.FlatMap(key_steps), bad | "KeyBadSteps" >> beam.FlatMap(key_steps))
            | "AllSteps" >> beam.Flatten()
            | "GroupEpisodes" >> beam.GroupByKey()
            | "Assemble" >> beam.ParDo(AssembleEpisodeFn(cfg)).with_outputs(QUARANTINE_PREFIX, *names)
        )
        quarantined.append(out[QUARANTINE_PREFIX])
    lines = quarantined | "AllQuarantined" >> beam.Flatten() | "FormatQuarantine" >> beam.ParDo(FormatQuarantineFn())
    if event_lines:
        lines = (lines, *event_lines) | "AllQuarantineLines" >> beam.Flatten()
    dests = {n: writes.tfrecord_split(examples_uri, n, cfg.compression_level, cfg.num_shards) for n in names}
    dests[QUARANTINE_DEST] = writes.Destination(
        QUARANTINE_DEST, FileSystems.join(quarantine_uri, QUARANTINE_PREFIX), ".jsonl.gz", writes.TEXT
    )
    outputs = {**{n: out[n] for n in names}, QUARANTINE_DEST: lines}
    if outcome_lines is not None:
        outputs[EVENTS_QUARANTINE_DEST] = outcome_lines
        dests[EVENTS_QUARANTINE_DEST] = writes.Destination(
            EVENTS_QUARANTINE_DEST, FileSystems.join(quarantine_uri, EVENTS_QUARANTINE_PREFIX), ".jsonl.gz", writes.TEXT
        )
    writes.write_all(outputs, dests)


def _reserved(plan: Plan) -> tuple[str, ...]:
    """The record's fields besides its features, as the schema lists them."""
    reserved = tuple(f.name for f in plan.layout.fields if f.feature_kind is None and f.name in features.RESERVED_KINDS)
    if plan.item_table is not None:
        reserved += (records.ACTION,)
    splits_config = plan.config.splits
    if splits_config.time_column is None:
        reserved += (records.SPLIT_UNIT if splits_config.key is not None else records.SPLIT_CONTENT,)
    return reserved


def write_legacy_schema(plan: Plan, examples_uri: str) -> None:
    """The schema of the legacy dense `context` (bandit records without named features), written
    by the driver once the pipeline has run: it depends on the config alone, and a Beam stage of
    its own costs ~0.1 s of fixed CPU per run."""
    if plan.layout.kind != BANDIT or plan.config.columns.features:
        return
    from rlops.features.schema import FeatureSchema

    width = plan.layout.features[0].width or 1
    features.write_schema(FeatureSchema.legacy(width), examples_uri, _reserved(plan))


def _schema(p: beam.Pipeline, plan: Plan, valid: beam.PCollection, examples_uri: str) -> None:
    """The feature schema beside the Examples: vocabularies and float statistics of named
    features combined over every valid batch (the legacy dense `context`: write_legacy_schema)."""
    cols = plan.config.columns.features
    if not cols:
        return
    reserved = _reserved(plan)
    arm_cols = features.per_arm_column_features(plan.config) if plan.item_table is not None else ()
    _ = (
        valid
        | "FeatureStats" >> beam.Map(lambda b: features.batch_stats(b.columns, cols, arm_cols))
        | "MergeStats" >> beam.CombineGlobally(features.MergeStats())
        | "WriteSchema"
        >> beam.ParDo(features.WriteSchemaFn(cols, examples_uri, reserved, _per_arm_specs(plan), arm_cols))
    )


def _per_arm_specs(plan: Plan) -> tuple:
    """Item features' vocabularies and statistics: over the item table (each item counted once)."""
    t = plan.item_table
    if t is None:
        return ()
    return features.feature_specs(t.features, features.batch_stats(t.columns, t.features))


def read_item_table(config: ExperienceGenConfig) -> beam.PTransform:
    """The item-features table as one ItemTable element: matched and read with Beam's fileio (any
    filesystem Beam has: local, gs://), checked as at planning (items.table_from_frames)."""
    from apache_beam.io import fileio

    src = config.item_source
    assert src is not None  # per-arm plans only

    @beam.ptransform_fn
    def read(pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        patterns = [x.strip() for x in src.pattern.split(",")]
        return (
            pbegin
            | "ItemPatterns" >> beam.Create(patterns)
            | "MatchItemFiles" >> fileio.MatchAll()
            | "OpenItemFiles" >> fileio.ReadMatches()
            | "ParseItemFile" >> beam.Map(_parse_item_file, src)
            | "AllItemFiles" >> beam.combiners.ToList()
            | "ItemTable" >> beam.Map(_item_table_of, config)
        )

    return read()


def _parse_item_file(f: Any, src: FileSource) -> tuple[str, Any]:
    with f.open(compression_type=compression_type(f.metadata.path, src)) as fh:
        return f.metadata.path, item_table.parse_frame(fh.read(), src)


def _item_table_of(frames: list[tuple[str, Any]], config: ExperienceGenConfig) -> item_table.ItemTable:
    """Files in path order (as at planning: item order is action order), each once."""
    by_path = dict(frames)
    return item_table.table_from_frames([by_path[k] for k in sorted(by_path)], config)
