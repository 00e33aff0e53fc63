"""The events join in the Beam graph (events.py holds the join itself, event_files.py the events
on disk, event_store.py the waiting decisions):

    events files / BigQuery ─ ParseEvents ─┬─ chunk files ──┐
                                           └─ malformed ── quarantine
    waiting decisions' events (last run) ─ PendingEvents ───┴─ EventTable: one sorted table on disk
                                                                   (its reference: a side input)
    work items + waiting decisions ─ Ingest ─ valid batches ─ JoinRewards ─┬─ settled ─ EncodeSplit
                                                                           ├─ waiting ─ WritePending
                                                                           └─ categories ─ EventOutcomes
                                                                               (counts, quarantine)

Decisions never cross a shuffle: each batch meets the whole events table (the small side, memory-
mapped) where Ingest reads it. Each bundle's categories come back as one int8 per event, merged once.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from rlops.components.common import records
from rlops.components.experience_gen import event_files, event_store, events, sinks
from rlops.components.experience_gen.batches import ValidBatch
from rlops.components.experience_gen.config import BigQuerySource, EventsConfig, ExperienceGenConfig, FileSource
from rlops.components.experience_gen.sources import Quarantined
from rlops.components.experience_gen.sources.base import compression_type

NS = sinks.METRICS_NAMESPACE
EVENTS_PREFIX = "events:"  # Beam counters events:<category>, events:read, events:carried
EVENTS_READ, EVENTS_CARRIED = "events:read", "events:carried"
EVENT_TYPE_PREFIX = "event_type:"  # well-formed events read per type (notes on rewards' types)
RECORDS_PENDING = "records_pending"
CATEGORIES_TAG, PENDING_TAG, MALFORMED_TAG = "categories", "pending", "malformed"


def counter(name: str) -> Any:
    return beam.metrics.Metrics.counter(NS, name)


# --- reading events -----------------------------------------------------------------------------


class ParseEventsFileFn(beam.DoFn):
    """A matched events file -> one EventChunk, and its malformed rows (tagged) as Quarantined."""

    def __init__(self, config: EventsConfig, scratch: str):
        self.config = config
        self.scratch = scratch

    def process(self, f: Any) -> Iterator[Any]:
        src = self.config.source
        assert isinstance(src, FileSource)
        path = f.metadata.path
        with f.open(compression_type=compression_type(path, src)) as fh:
            table = read_events_table(fh.read(), src, self.config)
        first = 0 if src.format == "parquet" else 2 if (src.format == "csv" and src.csv_header) else 1
        yield from _chunk_outputs(table, self.config, path, np.arange(table.num_rows) + first, self.scratch)


def read_events_table(data: bytes, src: FileSource, config: EventsConfig) -> Any:
    """An events file's bytes -> a pyarrow Table of the mapped columns (ids and types as text)."""
    import io

    import pyarrow as pa

    c = config.columns
    wanted = [x for x in (c.decision_id, c.time, c.type, c.value, c.event_id, c.item) if x]
    if src.format == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(io.BytesIO(data))
        names = pf.schema_arrow.names
        return pf.read(columns=[x for x in wanted if x in names])
    if src.format == "jsonl":
        import pyarrow.json as pj

        return pj.read_json(io.BytesIO(data))
    import pyarrow.csv as pc

    text = {x: pa.string() for x in wanted}
    read = pc.ReadOptions(column_names=list(src.csv_column_names) or None, autogenerate_column_names=False)
    if not data.strip():
        return pa.table({})
    return pc.read_csv(
        io.BytesIO(data),
        read_options=read,
        parse_options=pc.ParseOptions(delimiter=src.csv_delimiter),
        convert_options=pc.ConvertOptions(column_types=text, strings_can_be_null=True),
    )


def _chunk_outputs(table: Any, config: EventsConfig, path: str, lines: np.ndarray, scratch: str) -> Iterator[Any]:
    """A parsed events table -> its chunk, written to `scratch` (an event_files.ChunkRef), and its
    malformed rows (tagged) as Quarantined."""
    check_event_columns(table.column_names, config, path, table.num_rows)
    n = table.num_rows
    columns = {name: table.column(name) for name in table.column_names}
    chunk, bad = events.event_chunk(columns, n, config, path, lines)
    counter(EVENTS_READ).inc(n)
    for i, message in bad:
        counter(EVENTS_PREFIX + events.MALFORMED).inc()
        row = {k: _plain(v[i].as_py()) for k, v in columns.items()}
        payload = json.dumps(row, sort_keys=True).encode("utf-8")
        yield beam.pvalue.TaggedOutput(
            MALFORMED_TAG,
            Quarantined(events.EVENT_REASON_PREFIX + events.MALFORMED, message, path, int(lines[i]), -1, payload),
        )
    if len(chunk):
        codes, counts = np.unique(chunk.type_code, return_counts=True)
        for code, count in zip(codes.tolist(), counts.tolist()):
            counter(EVENT_TYPE_PREFIX + chunk.types[code]).inc(count)
        yield event_files.write_chunk(scratch, chunk)


def _plain(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool, type(None))) else str(v)


def check_event_columns(names: list[str], config: EventsConfig, path: str, rows: int) -> None:
    """Every mapped events column is in the file (a file with no rows at all may have none):
    one error naming the config key, the column and the file's closest columns."""
    from rlops.components.experience_gen.errors import InputError, closest

    if rows == 0 and not names:
        return
    c = config.columns
    for key in ("decision_id", "time", "type", "value", "event_id", "item"):
        column = getattr(c, key)
        if column and column not in names:
            raise InputError(
                f"experience_gen.events.columns.{key}: column {column!r} is not in {path}; {closest(column, names)}"
            )


def check_first_events_file(config: EventsConfig) -> None:
    """At planning: the first events file's columns hold every mapped one (one error naming the
    config key and the closest columns, before any decision is read)."""
    from rlops.components.experience_gen.sources.base import match_files

    src = config.source
    if not isinstance(src, FileSource):
        return
    try:
        path = match_files(src.pattern)[0][0]
    except FileNotFoundError as e:
        raise ValueError(f"experience_gen.events.source.pattern: {e}") from e
    with FileSystems.open(path, compression_type=compression_type(path, src)) as f:
        data = f.read() if src.format == "parquet" else f.read(1 << 20)
    if src.format != "parquet" and len(data) == 1 << 20:
        data = data[: data.rfind(b"\n") + 1]  # whole lines of the first MiB
    table = read_events_table(data, src, config)
    check_event_columns(table.column_names, config, path, table.num_rows)


class ParseEventRowsFn(beam.DoFn):
    """A batch of BigQuery rows (dicts) -> one EventChunk and its malformed rows."""

    def __init__(self, config: EventsConfig, name: str, scratch: str):
        self.config = config
        self.name = name
        self.scratch = scratch

    def process(self, rows: list[dict]) -> Iterator[Any]:
        import pyarrow as pa

        c = self.config.columns
        wanted = [x for x in (c.decision_id, c.time, c.type, c.value, c.event_id, c.item) if x]
        present = set().union(*(r.keys() for r in rows)) if rows else set()
        table = pa.table({k: pa.array([_plain(r.get(k)) for r in rows]) for k in wanted if k in present})
        yield from _chunk_outputs(table, self.config, self.name, np.full(len(rows), -1), self.scratch)


def read_events(p: beam.Pipeline, config: EventsConfig, scratch: str) -> Any:
    """The events source -> (ChunkRef PCollection, malformed Quarantined PCollection)."""
    src = config.source
    if isinstance(src, BigQuerySource):
        from rlops.components.experience_gen.sources.bigquery import bigquery_read

        parsed = (
            p
            | "ReadEventsBigQuery" >> bigquery_read(src)
            | "BatchEvents"
            >> beam.BatchElements(min_batch_size=min(1000, src.batch_size), max_batch_size=src.batch_size)
            | "ParseEvents"
            >> beam.ParDo(ParseEventRowsFn(config, f"bigquery:{src.table or 'query'}", scratch)).with_outputs(
                MALFORMED_TAG, main="chunks"
            )
        )
    else:
        from apache_beam.io import fileio

        assert isinstance(src, FileSource)
        patterns = [x.strip() for x in src.pattern.split(",") if x.strip()]
        parsed = (
            p
            | "EventPatterns" >> beam.Create(patterns)
            | "MatchEventFiles" >> fileio.MatchAll()
            | "OpenEventFiles" >> fileio.ReadMatches()
            | "ParseEvents" >> beam.ParDo(ParseEventsFileFn(config, scratch)).with_outputs(MALFORMED_TAG, main="chunks")
        )
    return parsed.chunks, parsed[MALFORMED_TAG]


# --- waiting decisions from the last run -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PendingItem:
    """A work item of the Ingest step: one part file of the decisions that waited from the last run.
    Carried decisions enter where the logs' do, so they meet the events in the same fused step
    (a Flatten of two steps' batches would make the runner hold every decision in memory)."""

    path: str

    def batch(self) -> Any:
        return event_store.read_part(self.path).batch


def carried_events(p: beam.Pipeline, paths: list[str], scratch: str) -> Any:
    """The events carried with the last run's waiting decisions (ChunkRef PCollection)."""
    return (
        p
        | "PendingParts" >> beam.Create(paths)
        | "ReadPending" >> beam.Map(event_store.read_part)
        | "PendingEvents" >> beam.ParDo(_CarriedEventsFn(scratch))
    )


class _CarriedEventsFn(beam.DoFn):
    def __init__(self, scratch: str):
        self.scratch = scratch

    def process(self, part: event_store.PendingPart) -> Iterator[Any]:
        counter(EVENTS_CARRIED).inc(len(part.events))
        if len(part.events):
            yield event_files.write_chunk(self.scratch, part.events)


def pending_ids(p: beam.Pipeline, paths: list[str]) -> Any:
    """The decision-id hashes that wait from the last run, sorted (a singleton side input)."""
    from rlops.components.experience_gen import splits

    def ids(part: event_store.PendingPart) -> np.ndarray:
        return splits.key_hash(part.batch.columns[records.DECISION_ID])

    return (
        p
        | "PendingIdParts" >> beam.Create(paths)
        | "ReadPendingIds" >> beam.Map(lambda path: ids(event_store.read_part(path)))
        | "AllPendingIds" >> beam.combiners.ToList()
        | "SortPendingIds"
        >> beam.Map(lambda parts: np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64))
    )


# --- the join --------------------------------------------------------------------------------------


class JoinRewardsFn(beam.DoFn):
    """Decisions -> settled ones with their reward (main), waiting ones with their events
    ('pending'), and, once per bundle, the category of every event its decisions met
    ('categories': one int8 per event of the table, -1 where none met it)."""

    def __init__(self, config: EventsConfig):
        self.config = config

    def start_bundle(self) -> None:
        self.codes: np.ndarray | None = None

    def process(self, batch: Any, table_ref: event_files.TableRef) -> Iterator[Any]:
        table = event_files.load_table(table_ref)
        cols = batch.columns
        times = events.normalize_epoch(cols[records.DECISION_TIME])
        j = events.join_batch(cols[records.DECISION_ID], times, table, self.config)
        if len(j.event_index):  # kept per bundle: a few bytes per event instead of an element per batch
            if self.codes is None:
                self.codes = np.full(len(table), -1, np.int8)
            np.maximum.at(self.codes, j.event_index, j.event_code)
        waiting = np.flatnonzero(j.pending)
        if len(waiting):
            counter(RECORDS_PENDING).inc(len(waiting))
            carried = table.chunk.take(np.unique(j.pending_events), carried=True)
            yield beam.pvalue.TaggedOutput(PENDING_TAG, event_store.PendingPart(_rows(batch, waiting), carried))
        settled = np.flatnonzero(~j.pending)
        if len(settled):
            out = batch if len(settled) == len(batch) else _rows(batch, settled)
            yield dataclasses.replace(out, columns={**out.columns, records.REWARD: j.reward[settled]})

    def finish_bundle(self) -> Iterator[Any]:
        from apache_beam.transforms.window import GlobalWindows

        if self.codes is not None:
            yield beam.pvalue.TaggedOutput(CATEGORIES_TAG, GlobalWindows.windowed_value(self.codes))
            self.codes = None


def _rows(batch: Any, idx: np.ndarray) -> Any:
    """The rows `idx` of a ValidBatch (columns, split key and time, provenance)."""
    pick = lambda v: None if v is None else v[idx]  # noqa: E731
    return dataclasses.replace(
        batch,
        columns={k: v[idx] for k, v in batch.columns.items()},
        split_key=pick(batch.split_key),
        split_time=pick(batch.split_time),
        provenance={k: v[idx] for k, v in batch.provenance.items()},
    )


class WritePendingFn(beam.DoFn):
    def __init__(self, directory: str):
        self.directory = directory

    def process(self, part: event_store.PendingPart) -> Iterator[str]:
        yield event_store.write_part(self.directory, part)


class EventOutcomesFn(beam.DoFn):
    """The merged (index, code) arrays of every batch -> one category per event of the table:
    counted (events:<category>), and late, early and unknown ones listed in the quarantine."""

    def process(self, parts: list, table_ref: event_files.TableRef) -> Iterator[str]:
        table = event_files.load_table(table_ref)
        codes = events.categories_of(len(table), parts)
        counts = np.bincount(codes, minlength=len(events.CATEGORIES))
        for name, n in zip(events.CATEGORIES, counts.tolist()):
            if n:
                counter(EVENTS_PREFIX + name).inc(n)
        ev = table.chunk
        quarantined = [events.CODES[c] for c in events.QUARANTINED_EVENTS if c != events.MALFORMED]
        listed = np.flatnonzero(np.isin(codes, quarantined))
        for start in range(0, len(listed), LINES_PER_ELEMENT):  # many lines per element: a few elements
            yield "\n".join(quarantine_lines(ev, codes, listed[start : start + LINES_PER_ELEMENT]))


def quarantine_lines(ev: events.EventChunk, codes: np.ndarray, idx: np.ndarray) -> list[str]:
    """The quarantine's JSON line (Quarantined.to_json's fields, no payload) of each event `idx`,
    built from per-(category, type) and per-file pieces: tens of thousands of late clicks a night."""
    times = np.char.add(np.datetime_as_string(ev.time[idx].astype("datetime64[us]"), unit="s").astype(str), "+00:00")
    heads: dict[tuple[int, int], str] = {}
    tails: dict[tuple[int, int], str] = {}
    files: dict[str, str] = {}
    out = []
    for i, when in zip(idx.tolist(), times.tolist()):
        key = (int(codes[i]), int(ev.type_code[i]))
        head = heads.get(key)
        if head is None:
            name = events.CATEGORIES[key[0]]
            reason = json.dumps(events.EVENT_REASON_PREFIX + name)
            head = heads[key] = f'{{"reason": {reason}, "message": "event at '
            tails[key] = json.dumps(f" ({ev.types[key[1]]}): {_WHY[name]}")[1:-1]
        path = ev.files[ev.file[i]]
        where = files.get(path)
        if where is None:
            where = files[path] = json.dumps(path)
        out.append(
            f'{head}{when}{tails[key]}", "source_file": {where}, "line": {int(ev.line[i])}, "offset": -1, '
            '"payload": "", "payload_encoding": "utf-8", "payload_truncated": false}'
        )
    return out


LINES_PER_ELEMENT = 20_000  # quarantine lines joined into one text element (the writer appends a newline)


_WHY = {
    events.LATE: "after its decision's window (experience_gen.events.window)",
    events.BEFORE_DECISION: "before its decision was made (clock skew?)",
    events.UNKNOWN_DECISION: "no decision with its id in this run (nor waiting from the last one)",
}


class FormatEventQuarantineFn(beam.DoFn):
    """Events in the quarantine are listed, not counted as bad records (they are not decisions)."""

    def process(self, q: Quarantined) -> Iterator[str]:
        yield q.to_json()


def join_rewards(
    p: beam.Pipeline, config: ExperienceGenConfig, valid: Any, store: event_store.Plan, scratch: str
) -> tuple[Any, Any, Any]:
    """Valid decision batches (the last run's waiting ones among them: PendingItem) -> (settled
    batches with rewards, quarantine lines of late, early and unknown events, those of malformed
    ones). Waiting decisions are written into the store's new generation; the events' chunks and
    table into `scratch` (removed by the run when it ends)."""
    ev = config.events
    assert ev is not None
    chunks, malformed = read_events(p, ev, scratch)
    table_dir = FileSystems.join(scratch, "table")
    table = beam.pvalue.AsSingleton(
        (chunks, carried_events(p, store.part_files(), scratch))
        | "AllEvents" >> beam.Flatten()
        | "EventChunks" >> beam.combiners.ToList()
        | "EventTable" >> beam.Map(lambda refs: event_files.build_table_files(refs, ev, table_dir))
    )
    join = beam.ParDo(JoinRewardsFn(ev), table).with_output_types(ValidBatch)  # its coder sizes batches cheaply
    joined = valid | "JoinRewards" >> join.with_outputs(CATEGORIES_TAG, PENDING_TAG, main="settled")
    _ = joined[PENDING_TAG] | "WritePending" >> beam.ParDo(WritePendingFn(store.path))
    outcomes = (
        joined[CATEGORIES_TAG]
        | "AllCategories" >> beam.combiners.ToList()
        | "EventOutcomes" >> beam.ParDo(EventOutcomesFn(), table)
    )
    return joined.settled, outcomes, malformed | "FormatEventQuarantine" >> beam.ParDo(FormatEventQuarantineFn())
