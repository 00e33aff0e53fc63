"""The Beam graph: read -> validate -> (assemble groups) -> split -> write, plus quarantine.

Every element between transforms is a batch (thousands of records as NumPy/Arrow columns);
the only per-record Beam elements are quarantined records and, for grouped kinds, their groups.
The record kind (kinds/) gives the layout, the checks and the write stage:

    work items ─ Ingest ─┬─ valid batches ─ the kind's write stage ───┬─ Split-<name>/*.gz
                         │   (bandit: encode; trajectory, slate rows:  │
                         │    key ─ GBK ─ assemble, or quarantine) ────┤
                         └─ quarantine ─────────────────────────────────┴─ quarantine-*.jsonl.gz

Per-arm records: Ingest joins each valid batch with the item table, read by ReadItemTable
(fileio) and passed as a side input (AsSingleton), by item id.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from rlops.components.common import records
from rlops.components.common.decision_kinds import decision_kind
from rlops.components.experience_gen import (
    checks,
    event_files,
    event_graph,
    event_store,
    features,
    items as item_table,
    json_paths,
    kinds,
    sinks,
    sources,
    splits,
    validation,
    writes,
)
from rlops.components.experience_gen.batches import QUARANTINE_PREFIX, BadStep, ValidBatch
from rlops.components.experience_gen.config import ExperienceGenConfig, FileSource
from rlops.components.experience_gen.errors import closest
from rlops.components.experience_gen.layout import Layout, SourceSchema
from rlops.components.experience_gen.sources import Block, Quarantined, Unreadable
from rlops.components.experience_gen.sources.base import compression_type

NS = sinks.METRICS_NAMESPACE
READ, QUARANTINED, UNREADABLE, TRUNCATED = "read", "quarantined", "unreadable", "truncated"
QUARANTINE_DEST = "<quarantine>"  # its name among the written destinations: no split can take it
# Late, early and unknown events: written where they are listed (a Flatten with the records'
# quarantine would hold every line in memory first); `quarantine*` files, read as one quarantine.
EVENTS_QUARANTINE_DEST, EVENTS_QUARANTINE_PREFIX = "<events quarantine>", "quarantine-events"
BAD_GROUPS = "bad_groups"  # IngestFn's output of BadStep marks (grouped kinds)
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
    def kind(self) -> kinds.RecordKind:
        return kinds.record_kind(self.layout.kind)


def make_plan(config: ExperienceGenConfig) -> Plan:
    """The source's plan (its inputs and work items), then what every source shares: feature kinds
    from its sample, the per-arm item table, the layout, and mapped columns checked against the
    data's header or schema."""
    source = sources.source_of(config.source)
    planned = source.plan(config)
    peek = source.peek(planned.config, planned.inputs)
    config = features.resolve_features(planned.config, peek, source.label)
    kind = kinds.record_kind(config.record_kind)
    config, table, item_ids = kind.plan_items(config, planned.joins_items)
    schema, header_file = source.columns(config, planned.inputs)
    layout = kinds.resolve_layout(
        config, schema, () if table is None else table.ids.tolist()
    )  # per-arm columns: by item
    if header_file is not None:  # a header / schema, not a first record
        check_columns(layout, schema, header_file)
        note = ignored_columns_note(layout, schema, header_file)
        if note:  # extra columns are ignored, and the user is told which
            logging.getLogger(__name__).info(note)
    config = kind.resolve_sample(config, peek)  # its columns are there
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


def read_item(plan: Plan, item: Any) -> Iterator[Block | Quarantined | Unreadable]:
    """One work item (file range, simulation shard, or BigQuery row batch) -> Blocks / Quarantined."""
    yield from sources.source_of(plan.config.source).read_item(plan.config, plan.layout, item)


_PLAN_TABLE: Any = object()  # default of `table`: the plan's own (in-process) item table


def validate_block(
    plan: Plan, block: Block, table: item_table.ItemTable | None = _PLAN_TABLE, pending: np.ndarray | None = None
) -> Iterator[ValidBatch | BadStep | Quarantined]:
    """A Block -> its Quarantined rows, one ValidBatch of the rest (if any), and for grouped kinds
    (an episode's steps, a page's shown items) a BadStep per quarantined row whose group is known."""
    kind = plan.kind
    v = validation.validate(block.columns, block.num_rows, plan.layout, plan.config, block.text, kind)
    # rows assembled into records later (an episode's steps, a page's shown items) may still be rejected
    grouped = kind.rows_grouped(plan.config)
    table = plan.item_table if table is _PLAN_TABLE else table
    if table is not None and len(v.rows):  # per-arm: join the item table by item id
        joined, keep, rejects = item_table.join(v.columns, table, plan.config)
        v.rejects.update({int(v.rows[i]): r for i, r in rejects.items()})
        v.rows = v.rows[keep]
        v.columns = joined
        v.split_key = None if v.split_key is None else v.split_key[keep]
        v.split_time = None if v.split_time is None else v.split_time[keep]
    kind.finish_rows(v, block, plan.config, plan.item_ids)
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
                    if k.endswith(checks.TRUNCATED_SUFFIX) and v.any():
                        beam.metrics.Metrics.counter(NS, f"{TRUNCATED}:{k[: -len(checks.TRUNCATED_SUFFIX)]}").inc(
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
    kind = plan.kind
    out, group_quarantine = kind.write(plan, valid, bad)
    if group_quarantine is not None:  # the rows of groups that could not be written
        quarantined.append(group_quarantine)
    if kind.feature_schema:  # vocabularies and statistics of named features over the valid rows
        _schema(p, plan, valid, examples_uri)
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
    if not plan.kind.dense_context or plan.config.columns.features:
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
