"""ExperienceGen's executor core: a plain function over output URIs and a config.

`run_experience_gen` is what every face calls: the TFX `Executor` (executor.py), the KFP v2
component and the CLI (kfp.py, __main__.py); nothing here imports TFX. It runs the
Beam pipeline, reads back the record counts from Beam's metrics, checks that
read = written + quarantined, and fails above the configured bad-record ratio with the top
reasons.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from rlops.components.common.decision_kinds import decision_kind, write_record_kind
from rlops.components.experience_gen import batches, pipeline, sinks, slates, sources
from rlops.components.experience_gen.cloud import check_credentials
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.errors import InputError
from rlops.components.experience_gen.kinds import bandit
from rlops.components.experience_gen.sources.base import SourceError
from rlops.features.item_catalog import write_item_catalog

log = logging.getLogger(__name__)


class ExperienceGenError(RuntimeError):
    """Raised when input was unreadable or empty, too many records were bad, or the record
    accounting does not add up."""

    def __init__(self, message: str, result: "IngestResult"):
        super().__init__(message)
        self.result = result


@dataclass
class IngestResult:
    """What one run did. Counts are in source records (steps, for trajectories)."""

    record_kind: str
    split_names: list[str]
    records_read: int
    records_written: int
    records_quarantined: int
    written_per_split: dict[str, int]  # source records per split
    outputs_per_split: dict[str, int]  # tf.Examples / SequenceExamples per split
    reasons: dict[str, int] = field(default_factory=dict)  # quarantine reason code -> count
    examples_uri: str = ""
    quarantine_uri: str = ""
    unreadable: list[str] = field(default_factory=list)  # byte ranges that could not be read
    # multivalent feature -> records that had more values than its dim (kept, first dim values)
    truncated: dict[str, int] = field(default_factory=dict)
    # quarantine reason -> one record's "file line N: message" (filled when the run fails on them)
    examples: dict[str, str] = field(default_factory=dict)
    # events to rewards: decisions whose window was open at the cutoff (kept for the next run), and
    # every event in exactly one category (events.CATEGORIES); None without an events section
    records_pending: int = 0
    events: dict[str, int] | None = None
    events_read: int = 0  # events read this run (malformed ones included)
    events_carried: int = 0  # events carried in with the decisions that waited from the last run
    reward_range: tuple[float, float] | None = None  # the smallest and largest reward written
    notes: list[str] = field(default_factory=list)  # what the user should know, one line each

    @property
    def constant_reward(self) -> float | None:
        """The reward every written record has, when they all have the same one (else None): the
        trap of an INNER JOIN with a clicks-only table, or of a window too short to see any event."""
        if self.reward_range is None or self.records_written < 2:
            return None
        lo, hi = self.reward_range
        return lo if lo == hi else None

    @property
    def bad_record_ratio(self) -> float:
        return self.records_quarantined / self.records_read if self.records_read else 0.0

    @property
    def payload_format(self) -> str:
        return decision_kind(self.record_kind).payload_format

    def top_reasons(self, k: int = 5) -> list[tuple[str, int]]:
        return Counter(self.reasons).most_common(k)

    def properties(self) -> dict[str, int | float | str]:
        """Flat custom properties for the output artifact (TFX) or its metadata (KFP)."""
        out: dict[str, int | float | str] = {
            "record_kind": self.record_kind,
            "records_read": self.records_read,
            "records_written": self.records_written,
            "records_quarantined": self.records_quarantined,
            "bad_record_ratio": round(self.bad_record_ratio, 6),
            "quarantine_reasons": json.dumps(self.reasons, sort_keys=True),
        }
        if self.events is not None:
            out["records_pending"] = self.records_pending
            out["events"] = json.dumps(self.events)  # in events.CATEGORIES' order
            out["events_read"] = self.events_read
            out["events_carried"] = self.events_carried
            out["notes"] = json.dumps(self.notes)
        if self.constant_reward is not None:  # the Evaluator refuses to bless on such data
            out["constant_reward"] = self.constant_reward
        for split in self.split_names:
            out[f"records_written_{split}"] = self.written_per_split.get(split, 0)
            out[f"examples_{split}"] = self.outputs_per_split.get(split, 0)
        return out


def run_experience_gen(
    config: ExperienceGenConfig | str,
    examples_uri: str,
    quarantine_uri: str,
    beam_pipeline_args: Sequence[str] | None = None,
) -> IngestResult:
    """Ingest the configured source into `examples_uri` (TFX Examples layout) and
    `quarantine_uri`; return the counts, or raise ExperienceGenError (with `.result`)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from rlops.components.common.direct_runner import in_process_runner

    if isinstance(config, str):
        config = ExperienceGenConfig.from_json(config)
    check_credentials(config)  # gs:// / BigQuery: seconds, not minutes of client retries
    try:
        plan = pipeline.make_plan(config)
    except (InputError, SourceError):
        raise
    except ValueError as e:  # the config does not fit the data (make_plan's checks name the key)
        raise InputError(str(e)) from e
    _clear_outputs(examples_uri, quarantine_uri)
    options = PipelineOptions(list(beam_pipeline_args or []))
    p = beam.Pipeline(runner=in_process_runner(options), options=options)  # DirectRunner: no Prism attempt
    pipeline.build(p, plan, examples_uri, quarantine_uri)
    try:
        beam_result = p.run()
        beam_result.wait_until_finish()
    finally:
        if plan.events_scratch is not None:  # the events' chunks and table: this run's only
            from rlops.components.experience_gen import event_files

            event_files.remove(plan.events_scratch)
    pipeline.write_legacy_schema(plan, examples_uri)
    write_record_kind(examples_uri, config.record_kind)  # what every later component reads
    if plan.item_table is not None:  # per-arm: the table the exported policy serves candidate ids by
        _write_item_catalog(plan.item_table, examples_uri)
    counters = _counters(beam_result)
    result = _result(config, counters, examples_uri, quarantine_uri)
    result.reward_range = _reward_range(beam_result)
    if plan.pending is not None:
        _settle_events(plan, result, counters)
    if result.constant_reward is not None:
        log.warning(
            "experience_gen: every one of the %d written rewards is %g: nothing to learn from, and the Evaluator "
            "will not bless on it (an INNER JOIN that kept only clicked decisions? an events window too short?)",
            result.records_written,
            result.constant_reward,
        )
    if counters.get(pipeline.UNREADABLE, 0):
        result.unreadable = read_unreadable(quarantine_uri)
    if result.bad_record_ratio > config.max_bad_record_ratio:  # the error shows one of each top reason
        result.examples = reason_examples(quarantine_uri, [code for code, _ in result.top_reasons()])
    grouping = slates.grouping_error(
        config,
        counters.get(slates.SLATE_IDS, 0),
        counters.get(slates.SLATE_IDS_GROUPING, 0),
        result.reasons.get(slates.SLATE_MISSING_POSITION, 0),
    )
    if grouping:  # the config's mistake, not its rows': exit 2 as for any config that does not fit
        raise InputError(grouping)
    check(result, config.max_bad_record_ratio, config.min_split_records)
    _mark_constant_reward(result)
    if plan.pending is not None:  # only a run that landed hands its waiting decisions to the next
        from rlops.components.experience_gen import event_store

        assert result.events is not None
        event_store.commit(plan.pending, {"decisions": result.records_pending, "events": result.events["pending"]})
    return result


def _mark_constant_reward(result: IngestResult) -> None:
    """A marker beside the splits when every written reward is the same: the Evaluator reads it."""
    import tensorflow as tf

    from rlops.components.common.records import CONSTANT_REWARD_FILE

    if result.constant_reward is None:
        return
    with tf.io.gfile.GFile(os.path.join(result.examples_uri, CONSTANT_REWARD_FILE), "w") as f:
        json.dump({"reward": result.constant_reward, "records": result.records_written}, f)


def _settle_events(plan: Any, result: IngestResult, counters: Mapping[str, int]) -> None:
    """The events' counts, and the check that every event landed in one category."""
    from rlops.components.experience_gen import event_graph, events

    result.records_pending = counters.get(event_graph.RECORDS_PENDING, 0)
    result.events = {c: counters.get(event_graph.EVENTS_PREFIX + c, 0) for c in events.CATEGORIES}
    result.events_read = counters.get(event_graph.EVENTS_READ, 0)
    result.events_carried = counters.get(event_graph.EVENTS_CARRIED, 0)
    assert plan.config.events is not None
    result.notes.extend(_type_notes(plan.config.events.rewards, counters))
    for note in result.notes:
        log.info("experience_gen: %s", note)
    if result.events_read == 0 and plan.config.events.cutoff == "auto":
        raise InputError(
            f"experience_gen.events.source: no event was read ({_events_where(plan.config.events.source)}), so with "
            "cutoff auto no decision's window can close; check the events source, or set experience_gen.events.cutoff"
        )
    if result.events_read + result.events_carried != sum(result.events.values()):
        raise ExperienceGenError(
            f"event accounting does not add up: read {result.events_read} + carried {result.events_carried} != "
            + " + ".join(f"{k} {v}" for k, v in result.events.items()),
            result,
        )


def _type_notes(rewards: Mapping[str, Any], counters: Mapping[str, int]) -> list[str]:
    """A rewards entry for a type no event had, and the types read that no entry names."""
    from rlops.components.experience_gen import event_graph

    prefix = event_graph.EVENT_TYPE_PREFIX
    seen = {k[len(prefix) :]: v for k, v in counters.items() if k.startswith(prefix)}
    shown = ", ".join(f"{t} {n}" for t, n in sorted(seen.items(), key=lambda kv: -kv[1])) or "none"
    notes = [
        f"note: experience_gen.events.rewards['{t}']: no event of this type was read (types read: {shown})"
        for t in rewards
        if t not in seen
    ]
    unmapped = {t: n for t, n in seen.items() if t not in rewards}
    if unmapped:
        names = ", ".join(f"{t} ({n})" for t, n in sorted(unmapped.items(), key=lambda kv: -kv[1]))
        notes.append(
            f"note: event types that experience_gen.events.rewards does not name count as unmapped_type: {names}"
        )
    return notes


def _events_where(src: Any) -> str:
    return f"pattern {src.pattern!r}" if getattr(src, "pattern", None) else f"BigQuery {src.table or 'query'}"


def _reward_range(beam_result: Any) -> tuple[float, float] | None:
    from apache_beam.metrics.metric import MetricsFilter

    query = beam_result.metrics().query(
        MetricsFilter().with_namespace(sinks.METRICS_NAMESPACE).with_name(bandit.REWARDS)
    )
    found = [d.committed or d.attempted for d in query["distributions"]]
    found = [d for d in found if d is not None and d.count]
    if not found:
        return None
    scale = bandit.REWARD_SCALE
    return min(d.min for d in found) / scale, max(d.max for d in found) / scale


def _write_item_catalog(table: Any, examples_uri: str) -> None:
    """The item table beside the splits; one the policy cannot serve by id (an item named by the
    candidate pad, -1 or "") is left out with a warning: the policy then serves feature arrays only."""
    try:
        catalog = table.catalog()
    except ValueError as e:
        log.warning("experience_gen: %s; the trained policy will not serve candidate ids", e)
        return
    write_item_catalog(examples_uri, catalog)


def _clear_outputs(examples_uri: str, quarantine_uri: str) -> None:
    """A retried task (Vertex retries into the same URIs) must not mix with what a killed attempt
    left: shards of the old attempt would be read twice, and Beam's `beam-temp-*` directory inside
    a `Split-*` folder breaks every reader of `Split-<name>/*`. The URIs are this execution's own."""
    import tensorflow as tf

    for uri in (examples_uri, quarantine_uri):
        if tf.io.gfile.isdir(uri):
            for name in tf.io.gfile.listdir(uri):
                path = os.path.join(uri, name.rstrip("/"))
                (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)


def _counters(beam_result: Any) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    query = beam_result.metrics().query(MetricsFilter().with_namespace(sinks.METRICS_NAMESPACE))
    out: dict[str, int] = Counter()
    for c in query["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        out[c.key.metric.name] += int(value or 0)
    return dict(out)


def _result(
    config: ExperienceGenConfig, counters: Mapping[str, int], examples_uri: str, quarantine_uri: str
) -> IngestResult:
    names = config.splits.names
    units = {s: counters.get(f"{sinks.WRITTEN_UNITS}:{s}", 0) for s in names}
    outputs = {s: counters.get(f"{sinks.WRITTEN_RECORDS}:{s}", 0) for s in names}
    prefix = pipeline.QUARANTINED + ":"
    reasons = {k[len(prefix) :]: v for k, v in counters.items() if k.startswith(prefix)}
    cut = f"{pipeline.TRUNCATED}:"
    truncated = {k[len(cut) :]: v for k, v in counters.items() if k.startswith(cut)}
    for name, n in truncated.items():
        log.info(
            "experience_gen: %d record(s) had more values of multivalent feature '%s' than its dim; "
            "their first dim values were kept",
            n,
            name,
        )
    return IngestResult(
        config.record_kind,
        names,
        counters.get(pipeline.READ, 0),
        sum(units.values()),
        counters.get(pipeline.QUARANTINED, 0),
        units,
        outputs,
        reasons,
        examples_uri,
        quarantine_uri,
        truncated=truncated,
    )


def check(
    result: IngestResult, max_bad_record_ratio: float, min_split_records: Mapping[str, int] | None = None
) -> None:
    """Every byte was read; every record is written or quarantined; the bad share stays under the
    threshold; and every split got enough records to train or evaluate on."""
    if result.unreadable:
        shown = "; ".join(result.unreadable[:5]) + ("; ..." if len(result.unreadable) > 5 else "")
        raise ExperienceGenError(
            f"{len(result.unreadable)} part(s) of the input could not be read, so their records cannot be "
            f"counted or quarantined one by one: {shown}",
            result,
        )
    if result.records_read != result.records_written + result.records_quarantined + result.records_pending:
        raise ExperienceGenError(
            f"record accounting does not add up: read {result.records_read} != written "
            f"{result.records_written} + quarantined {result.records_quarantined}"
            + (f" + pending {result.records_pending}" if result.records_pending else ""),
            result,
        )
    if result.bad_record_ratio > max_bad_record_ratio:
        top = ", ".join(
            f"{code}: {n}" + (f" (e.g. {result.examples[code]})" if code in result.examples else "")
            for code, n in result.top_reasons()
        )
        raise ExperienceGenError(
            f"{result.records_quarantined} of {result.records_read} records were bad "
            f"({result.bad_record_ratio:.2%} > max_bad_record_ratio {max_bad_record_ratio:.2%}). "
            f"Top reasons: {top}. Each bad record, with its source file, line and payload, is in "
            f"{result.quarantine_uri}",
            result,
        )
    if result.records_read == 0:
        raise ExperienceGenError(
            "the source held no records (files empty or header-only, or a query that "
            "returned no rows): nothing to train or evaluate on",
            result,
        )
    for split, need in sorted((min_split_records or {}).items()):
        got = result.written_per_split.get(split, 0)
        if got < need:
            raise ExperienceGenError(
                f"split {split!r} got {got} valid record(s) of {result.records_written}, fewer than the "
                f"{need} it needs (min_split_records; the pipeline asks for at least one train and one "
                "eval record): add data or change the split's hash_buckets",
                result,
            )


def read_unreadable(quarantine_uri: str) -> list[str]:
    """The unreadable byte ranges listed in the quarantine, as 'file bytes [start, end): why'."""
    from rlops.components.experience_gen.sources import Unreadable

    entries = _read_quarantine_files(quarantine_uri)
    return sorted(
        Unreadable(**{k: e[k] for k in ("source_file", "start", "end", "message")}).describe()
        for e in entries
        if e.get("reason") == Unreadable.REASON
    )


def reason_examples(quarantine_uri: str, codes: Sequence[str]) -> dict[str, str]:
    """The first quarantined record of each reason in `codes`, as "file line N: message" (the
    message names the column: "column 'clicked' is absent"). Stops reading once each has one."""
    out: dict[str, str] = {}
    for entry in _iter_quarantine(quarantine_uri):
        code = entry.get("reason")
        if isinstance(code, str) and code in codes and code not in out:
            where = os.path.basename(str(entry.get("source_file", "")))
            line = entry.get("line", -1)
            out[code] = f"{where}{f' line {line}' if line and line > 0 else ''}: {entry.get('message', '')}"
            if len(out) == len(set(codes)):
                break
    return out


def read_quarantine(quarantine_uri: str) -> list[dict]:
    """The quarantined records as dicts (reason, message, source_file, line, offset, payload)."""
    from rlops.components.experience_gen.sources import Unreadable

    return [e for e in _read_quarantine_files(quarantine_uri) if e.get("reason") != Unreadable.REASON]


def _read_quarantine_files(quarantine_uri: str) -> list[dict]:
    return list(_iter_quarantine(quarantine_uri))


def _iter_quarantine(quarantine_uri: str) -> Iterator[dict]:
    import gzip

    from apache_beam.io.filesystems import FileSystems

    pattern = FileSystems.join(quarantine_uri, batches.QUARANTINE_PREFIX + "*")
    for m in sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path):
        with FileSystems.open(m.path, compression_type="uncompressed") as f:
            text = gzip.decompress(f.read()).decode("utf-8")
        yield from (json.loads(line) for line in text.splitlines() if line)


# --- this run's values (Vertex runtime parameters, KFP inputs) -------------------------------------

# Placeholders a file pattern or a BigQuery query/table may hold; replaced by the run's data date.
DATE_PLACEHOLDERS = {"{date}": "%Y-%m-%d", "{date_nodash}": "%Y%m%d"}


def resolve_date(data_date: str | None, today: datetime.date | None = None) -> datetime.date:
    """'' or 'yesterday' (the nightly default: the last complete day, UTC), 'today', or YYYY-MM-DD."""
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    text = (data_date or "").strip()
    if text.lower() in ("", "yesterday"):
        return today - datetime.timedelta(days=1)
    if text.lower() == "today":
        return today
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"data_date: expected YYYY-MM-DD, 'today' or 'yesterday', got {data_date!r}") from None


def apply_runtime_params(
    config: ExperienceGenConfig,
    data_pattern: str | None = None,
    data_date: str | None = None,
    num_records: int | None = None,
    today: datetime.date | None = None,
) -> ExperienceGenConfig:
    """The config with this run's values: each parameter the source takes replaces its field
    (`data_pattern` the file pattern, `num_records` the simulation budget: the source's
    runtime_fields), and `{date}` / `{date_nodash}` in its dated fields (the file pattern, the
    BigQuery query/table) become `data_date` (default: yesterday, UTC). Empty values change nothing."""
    source = config.source
    reader = sources.source_of(source)
    for name, value in (("data_pattern", data_pattern), ("num_records", num_records)):
        if not value:
            continue
        field = reader.runtime_fields.get(name)
        if field is None:
            takers = [k for k, s in sources.SOURCES.items() if name in s.runtime_fields]
            raise ValueError(
                f"{name}: the source is '{source.kind}'; {name} only applies to "
                f"experience_gen.source.kind={'|'.join(takers)}"
            )
        source = dataclasses.replace(source, **{field: type(getattr(source, field))(value)})
    fields = [f for f in reader.dated_fields if getattr(source, f)]
    dated = [f for f in fields if any(p in getattr(source, f) for p in DATE_PLACEHOLDERS)]
    events = config.events
    events_dated = events is not None and _has_date(events.source)
    if dated or events_dated:
        day = resolve_date(data_date, today)
        source = _dated(source, day)
        if events is not None:  # the events of the same day (events/{date}/*.parquet)
            events = dataclasses.replace(events, source=_dated(events.source, day))
    elif data_date:
        raise ValueError(
            f"data_date: {data_date!r} given, but the source has no {{date}} placeholder in its "
            f"{' or '.join(fields) or 'settings'}"
        )
    if source is config.source and events is config.events:
        return config
    return dataclasses.replace(config, source=source, events=events)


def _has_date(source: Any) -> bool:
    fields = sources.source_of(source).dated_fields
    return any(p in (getattr(source, f) or "") for f in fields for p in DATE_PLACEHOLDERS)


def _dated(source: Any, day: datetime.date) -> Any:
    """The source with {date} / {date_nodash} in its dated fields replaced by `day`."""
    values = {}
    for f in sources.source_of(source).dated_fields:
        text = getattr(source, f)
        if text and any(p in text for p in DATE_PLACEHOLDERS):
            for placeholder, fmt in DATE_PLACEHOLDERS.items():
                text = text.replace(placeholder, day.strftime(fmt))
            values[f] = text
    return dataclasses.replace(source, **values) if values else source
