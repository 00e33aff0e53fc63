"""Events to rewards: the join of decisions with a stream of events, in NumPy (docs/events.md).

The Beam graph (event_graph.py) reads the events into one compact `EventTable` (hashes, times,
type codes and values, sorted by decision; event_files.py keeps it on disk, memory-mapped) and
joins each batch of decisions against it with `join_batch`: decisions stream through without a
shuffle (events are the small side: a few per decision at most, 44 bytes each here). Every
event that a decision meets gets one category; an event no decision meets is `unknown_decision`.

An event's category, checked in this order (the contract users read in docs/events.md):
malformed (no decision id, no time, a `value` type without a number) -> unknown_decision -> pending
(its decision waits for the next run) -> duplicate (an earlier event of the decision has its id) ->
unmapped_type -> before_decision -> late -> attributed. "Earlier" is the order of time, then
carried events before this run's, then file path, then line.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from rlops.components.experience_gen import splits
from rlops.components.experience_gen.config import VALUE, EventsConfig

ATTRIBUTED, DUPLICATE, LATE, BEFORE_DECISION = "attributed", "duplicate", "late", "before_decision"
UNKNOWN_DECISION, UNMAPPED_TYPE, PENDING, MALFORMED = "unknown_decision", "unmapped_type", "pending", "malformed"
# Every event of a run lands in exactly one of these (IngestResult.events, --summary-json `events`).
CATEGORIES = (ATTRIBUTED, DUPLICATE, LATE, BEFORE_DECISION, UNKNOWN_DECISION, UNMAPPED_TYPE, PENDING, MALFORMED)
# Codes in the per-event category arrays; an event no decision met stays UNKNOWN_CODE.
CODES = {name: i for i, name in enumerate(CATEGORIES)}
UNKNOWN_CODE = CODES[UNKNOWN_DECISION]
# Events in these categories are listed in the quarantine with their file and line (never counted
# toward max_bad_record_ratio: they are not decisions).
QUARANTINED_EVENTS = (LATE, BEFORE_DECISION, UNKNOWN_DECISION, MALFORMED)
EVENT_REASON_PREFIX = "event_"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_WINDOW = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*")
_SECONDS_BELOW, _MILLIS_BELOW = 1e11, 1e14  # epoch magnitudes: seconds until 5138, ms until 5138


def parse_window(text: str | float) -> int:
    """'30m' -> microseconds; s, m, h, d (a bare number is seconds). Zero or negative: an error."""
    m = _WINDOW.fullmatch(str(text))
    if m is None:
        raise ValueError(
            f"experience_gen.events.window: {text!r} is not a duration; write e.g. 30m, 2h, 1d or 45s (> 0)"
        )
    us = float(m.group(1)) * _UNITS[m.group(2) or "s"] * 1e6
    if us <= 0:
        raise ValueError(f"experience_gen.events.window: {text!r} must be longer than 0 (e.g. 30m)")
    return int(round(us))


def parse_cutoff(text: str) -> int:
    """A cutoff time -> epoch microseconds (ISO-8601, epoch seconds or milliseconds)."""
    us, ok = to_micros(np.array([text], object))
    if not ok[0]:
        raise ValueError(
            f"experience_gen.events.cutoff: {text!r} is not a time; use auto, an ISO-8601 time with an offset "
            "(2026-12-01T00:00:00+00:00) or epoch seconds"
        )
    return int(us[0])


def normalize_epoch(values: np.ndarray) -> np.ndarray:
    """Integer epoch times in any of seconds, milliseconds or microseconds -> microseconds, by their
    magnitude (|t| < 1e11: seconds; < 1e14: milliseconds; else microseconds)."""
    v = np.asarray(values, np.int64)
    a = np.abs(v)
    return np.where(a < _SECONDS_BELOW, v * 1_000_000, np.where(a < _MILLIS_BELOW, v * 1_000, v))


def to_micros(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Times in any accepted form -> (epoch microseconds int64, parsed ok). Numbers by magnitude;
    text: a number, or a date-time (ISO-8601; an offset is honoured, none means UTC; BigQuery's
    '... UTC'); datetime objects; numpy datetime64."""
    import pandas as pd

    arr = np.asarray(values)
    if arr.dtype.kind == "M":
        ns = arr.astype("datetime64[us]").astype(np.int64)
        return ns, ~np.isnat(arr)
    if arr.dtype.kind in "iu":
        return normalize_epoch(arr.astype(np.int64)), np.ones(len(arr), bool)
    if arr.dtype.kind == "f":
        ok = np.isfinite(arr)
        f = np.where(ok, arr, 0.0)
        a = np.abs(f)
        us = np.where(a < _SECONDS_BELOW, f * 1e6, np.where(a < _MILLIS_BELOW, f * 1e3, f))
        return np.round(us).astype(np.int64), ok
    series = pd.Series(arr.astype(object), dtype=object)
    numbers = pd.to_numeric(series, errors="coerce").to_numpy(np.float64)
    us, ok = to_micros(numbers)
    text = ~ok & series.map(lambda v: isinstance(v, (str, datetime.datetime))).to_numpy(bool)
    if text.any():
        parsed = pd.to_datetime(series[text], utc=True, errors="coerce")
        good = parsed.notna().to_numpy()
        where = np.flatnonzero(text)
        us[where[good]] = parsed[good].view(np.int64).to_numpy() // 1000
        ok[where[good]] = True
    return us, ok


# --- the events, as read -------------------------------------------------------------------------


@dataclass
class EventChunk:
    """Events of one file (or carried with waiting decisions), columns of equal length. `types`
    names the type codes (an event's `type_code` indexes it), `files` the file codes: numbers
    only in the arrays, so a chunk pickles (crosses Beam's steps) at memory speed."""

    decision: np.ndarray  # uint64: the decision id's hash (splits.key_hash)
    time: np.ndarray  # int64 epoch microseconds
    type_code: np.ndarray  # int32 into `types`
    value: np.ndarray  # float64 (NaN: none)
    event_id: np.ndarray  # uint64: the event id's hash (or the row's, when no id column)
    file: np.ndarray  # int32 into `files`: the source file (or table) each event came from
    line: np.ndarray  # int64: its line (CSV, JSON Lines: 1-based, the header is line 1) or row
    types: tuple[str, ...]
    files: tuple[str, ...]
    carried: bool = False  # read by an earlier run, carried with a waiting decision

    def __len__(self) -> int:
        return len(self.decision)

    def take(self, idx: np.ndarray, carried: bool | None = None) -> "EventChunk":
        return EventChunk(
            self.decision[idx],
            self.time[idx],
            self.type_code[idx],
            self.value[idx],
            self.event_id[idx],
            self.file[idx],
            self.line[idx],
            self.types,
            self.files,
            self.carried if carried is None else carried,
        )


def event_chunk(
    columns: Mapping[str, Any], n: int, config: EventsConfig, path: str, lines: np.ndarray
) -> tuple[EventChunk, list[tuple[int, str]]]:
    """Raw event columns (by source column name; values as read) -> the chunk of well-formed
    events and (row, message) for each malformed one."""
    c = config.columns
    if n == 0:
        empty = np.zeros(0, np.int64)
        return EventChunk(
            empty.astype(np.uint64),
            empty,
            empty.astype(np.int32),
            empty.astype(np.float64),
            empty.astype(np.uint64),
            empty.astype(np.int32),
            empty,
            (),
            (path,),
        ), []
    ids = _text(columns.get(c.decision_id), n)
    if c.item:  # slates: the slot is its page and its item
        items = _text(columns.get(c.item), n)
        ids = np.where((ids == "") | (items == ""), "", slot_ids(ids, items)).astype(object)
    time, time_ok = _times(columns.get(c.time), n)
    types = _text(columns.get(c.type), n) if c.type else np.full(n, next(iter(config.rewards)), object)
    value = _numbers(columns.get(c.value), n) if c.value else np.full(n, np.nan)
    value_types = {t for t, r in config.rewards.items() if r == VALUE}
    needs_value = np.isin(types, list(value_types)) if value_types else np.zeros(n, bool)
    bad: list[tuple[int, str]] = []
    no_id = ids == ""
    for i in np.flatnonzero(no_id | ~time_ok | (needs_value & ~np.isfinite(value))).tolist():
        if no_id[i]:
            bad.append((i, f"events column {c.decision_id!r} is empty"))
        elif not time_ok[i]:
            shown = _values(columns.get(c.time), n)[i]
            bad.append((i, f"events column {c.time!r}: {shown!r} is not a time"))
        else:
            bad.append((i, f"events column {c.value!r}: type {types[i]!r} takes its reward from the value, got none"))
    keep = np.ones(n, bool)
    keep[[i for i, _ in bad]] = False
    names, codes = np.unique(types[keep], return_inverse=True)
    if c.event_id:
        eid = splits.key_hash(_text(columns.get(c.event_id), n)[keep])
    else:  # exact repeats of the row are repeats
        eid = splits.content_hash(
            {"t": time[keep], "k": types[keep], "v": value[keep], "d": ids[keep]}, ("d", "t", "k", "v")
        )
    chunk = EventChunk(
        splits.key_hash(ids[keep]),
        time[keep],
        codes.astype(np.int32),
        value[keep],
        eid,
        np.zeros(int(keep.sum()), np.int32),
        np.asarray(lines, np.int64)[keep],
        tuple(str(t) for t in names),
        (path,),
    )
    return chunk, bad


SLOT_SEPARATOR = "\x1f"  # a slate slot's decision id: its page's id and its item, as logged


def slot_ids(pages: np.ndarray, items: np.ndarray) -> np.ndarray:
    """The decision id of each shown item of a slate log: its page's id and its item id."""
    import pandas as pd

    joined = pd.Series(pages, dtype=object).astype(str).str.cat(pd.Series(items).astype(str), sep=SLOT_SEPARATOR)
    return joined.to_numpy(object)


def _times(col: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An events time column -> (epoch microseconds, parsed ok): Arrow's casts when every value
    fits one form (fast), else value by value (to_micros)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if isinstance(col, pa.Array) and col.null_count == 0:
        t = col.type
        try:
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                from rlops.components.experience_gen.convert import text_timestamps

                return normalize_epoch(text_timestamps(col).to_numpy()), np.ones(n, bool)
            if pa.types.is_timestamp(t):
                us = pc.cast(pc.cast(col, pa.timestamp("us", tz=t.tz)), pa.int64())
                return us.to_numpy().astype(np.int64), np.ones(n, bool)
        except pa.ArrowInvalid:
            pass  # mixed forms: value by value
    return to_micros(_values(col, n))


def _values(col: Any, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, None, object)
    if hasattr(col, "to_numpy") and not isinstance(col, np.ndarray):
        try:
            return np.asarray(col.to_numpy(zero_copy_only=False))
        except TypeError:
            return np.asarray(col.to_numpy())
    return np.asarray(col)


def _text(col: Any, n: int) -> np.ndarray:
    """Values as text ("" for missing), ids and types alike."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        try:
            text = pc.cast(col, pa.string()).fill_null("")
            if isinstance(text, pa.ChunkedArray):
                text = text.combine_chunks()
            return np.asarray(text.to_numpy(zero_copy_only=False), object)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # e.g. a column of lists: value by value below
    v = _values(col, n)
    out = np.empty(n, object)
    for i, x in enumerate(v.tolist()):
        out[i] = (
            ""
            if x is None or (isinstance(x, float) and math.isnan(x))
            else (x.decode() if isinstance(x, bytes) else str(x))
        )
    return out


def _numbers(col: Any, n: int) -> np.ndarray:
    import pandas as pd

    v = _values(col, n)
    if v.dtype.kind in "iuf":
        return v.astype(np.float64)
    return pd.to_numeric(pd.Series(v, dtype=object), errors="coerce").to_numpy(np.float64)


@dataclass
class EventTable:
    """Every event a run joins (read and carried), sorted by (decision, time, carried first, file,
    line); `cutoff` in epoch microseconds."""

    chunk: EventChunk
    cutoff: int
    carried: np.ndarray  # bool per event: carried in with a waiting decision (else read this run)

    def __len__(self) -> int:
        return len(self.chunk)


NO_CUTOFF = np.iinfo(np.int64).min  # `auto` with no event read: the run cannot settle a decision


# --- the join -----------------------------------------------------------------------------------


@dataclass
class Joined:
    """One batch of decisions after the join: per decision its reward and whether it waits, and
    per event it met (an index into the table) its category code."""

    reward: np.ndarray  # float32 [N] (waiting decisions: 0, unused)
    pending: np.ndarray  # bool [N]
    event_index: np.ndarray  # int64 [M]
    event_code: np.ndarray  # int8 [M]
    pending_events: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # table rows carried on


def join_batch(decision_ids: np.ndarray, decision_times: np.ndarray, table: EventTable, config: EventsConfig) -> Joined:
    """Rewards of N decisions (ids as text, times in epoch microseconds) from the events table."""
    ev = table.chunk
    window = parse_window(config.window)
    n = len(decision_ids)
    keys = splits.key_hash(np.asarray(decision_ids, object))
    t_d = np.asarray(decision_times, np.int64)
    pending = t_d + window > table.cutoff
    lo, hi = _ranges(ev.decision, keys)
    counts = hi - lo
    total = int(counts.sum())
    reward = np.full(n, config.default_reward, np.float32)
    if not total:
        return Joined(reward, pending, np.zeros(0, np.int64), np.zeros(0, np.int8))
    dec = np.repeat(np.arange(n), counts)  # one pair per (decision, event of its id)
    starts = np.cumsum(counts) - counts
    idx = np.arange(total) - np.repeat(starts, counts) + np.repeat(lo, counts)  # table rows, in table order
    code = np.full(total, CODES[ATTRIBUTED], np.int8)
    waits = pending[dec]
    code[waits] = CODES[PENDING]
    # duplicates: the first of each (decision, event id) in table order stays
    order = np.lexsort((idx, ev.event_id[idx], dec))
    same = (dec[order][1:] == dec[order][:-1]) & (ev.event_id[idx][order][1:] == ev.event_id[idx][order][:-1])
    dup = np.zeros(total, bool)
    dup[order[1:][same]] = True
    open_ = code == CODES[ATTRIBUTED]
    code[open_ & dup] = CODES[DUPLICATE]
    mapped = np.array([t in config.rewards for t in ev.types], bool)
    types = ev.type_code[idx]
    code[(code == CODES[ATTRIBUTED]) & ~mapped[types]] = CODES[UNMAPPED_TYPE]
    t_e = ev.time[idx]
    code[(code == CODES[ATTRIBUTED]) & (t_e < t_d[dec])] = CODES[BEFORE_DECISION]
    code[(code == CODES[ATTRIBUTED]) & (t_e > t_d[dec] + window)] = CODES[LATE]
    counted = code == CODES[ATTRIBUTED]
    if counted.any():
        reward = _rewards(n, dec[counted], types[counted], ev.value[idx][counted], ev.types, config)
    return Joined(reward, pending, idx, code, idx[waits])


def _ranges(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi) of each key's run in `sorted_keys`. The keys are searched in sorted order: each
    search starts near the last one, about 5x faster than in the batch's order on a table of
    millions (its pages stay in cache)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    lo, hi = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
    lo[order] = np.searchsorted(sorted_keys, ordered, "left")
    hi[order] = np.searchsorted(sorted_keys, ordered, "right")
    return lo, hi


def _rewards(
    n: int, dec: np.ndarray, types: np.ndarray, values: np.ndarray, names: tuple[str, ...], config: EventsConfig
) -> np.ndarray:
    """Per decision: the sum over types of the aggregated contributions of its attributed events
    (pairs in table order: by decision, then time); default_reward for decisions with none."""
    total = np.zeros(n, np.float64)
    any_counted = np.zeros(n, bool)
    for code in np.unique(types).tolist():
        name = names[code]
        mine = types == code
        d = dec[mine]
        reward = config.rewards[name]
        contrib = values[mine] if reward == VALUE else np.full(len(d), float(reward))
        how = config.aggregate_of(name)
        agg = np.zeros(n, np.float64)
        if how == "sum":
            np.add.at(agg, d, contrib)
        elif how == "count":
            np.add.at(agg, d, 1.0)
        elif how == "max":
            agg[:] = -np.inf
            np.maximum.at(agg, d, contrib)
            agg[np.isneginf(agg)] = 0.0
        else:  # first: the earliest (pairs are in table order within a decision)
            first_d, first_at = np.unique(d, return_index=True)
            agg[first_d] = contrib[first_at]
        total += agg
        any_counted[d] = True
    return np.where(any_counted, total, config.default_reward).astype(np.float32)


def categories_of(table_size: int, parts: Sequence[np.ndarray]) -> np.ndarray:
    """Per event of the table its category code, from the join's per-bundle codes (-1: not met
    there): the largest any bundle gave it (a decision id met twice: still one category per event),
    UNKNOWN_CODE for events no decision met."""
    out = np.full(table_size, -1, np.int8)
    for codes in parts:
        np.maximum(out, codes, out=out)
    out[out < 0] = UNKNOWN_CODE
    return out
