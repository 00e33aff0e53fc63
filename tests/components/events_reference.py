"""A plain-pandas REFERENCE ("oracle") of the events-to-rewards join, and random event streams for property tests.

The contract is docs/events.md ("What counts", issue 46). This module is written from that text alone, for
clarity rather than speed: python loops over events, one decision at a time. It is a test helper, not a test file.

    reference_night(decisions, events, spec, state_in) -> (NightResult, state_out)
    random_nights(seed, ...) -> [(decisions_df, events_df), ...]   one pair per night
    write_night(directory, decisions, events, fmt) -> (decisions_path, events_paths, events_with_read_order)

Frames handed to `reference_night`:
  decisions: `decision_id`, `decision_time` (any time form), anything else is ignored. Read order is the frame's
             row order (or `_file`, `_line` when the frame has both).
  events:    `decision_id`, `time`, optionally `type`, `value`, `event_id`; `_file` (path string) and `_line`
             (row number) give the read order used to break ties (missing: "" and the row position).
The state passed from night to night is a `ReferenceState` (two frames, see there); `None` is the empty state.

Resolutions of points the contract leaves open are marked "(choice)" below.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any, Hashable

import numpy as np
import pandas as pd

BAD_TIME = int(np.iinfo(np.int64).min)  # to_micros' value for a missing / unparseable time
CATEGORIES = (
    "attributed",
    "duplicate",
    "late",
    "before_decision",
    "unknown_decision",
    "unmapped_type",
    "pending",
    "malformed",
)
AGGREGATES = ("first", "max", "sum", "count")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US = timedelta(microseconds=1)
_DAY_US = 86_400 * 1_000_000
_INT64_MAX = int(np.iinfo(np.int64).max)

# --- times ------------------------------------------------------------------------------------------------------

# YYYY-MM-DD, optionally followed by [T| ]HH:MM[:SS[.fraction]] and an offset (Z, +HH, +HHMM, +HH:MM).
_ISO_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?)?"
)
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _is_missing(x: Any) -> bool:
    if x is None or x is pd.NA or x is pd.NaT:
        return True
    if isinstance(x, (float, np.floating)):
        return bool(np.isnan(x))
    if isinstance(x, np.datetime64):
        return bool(np.isnat(x))
    return False


def _number_to_micros(x: int | float) -> int:
    """Epoch seconds / milliseconds / microseconds by magnitude: |x| < 1e11 s, < 1e14 ms, else us."""
    if isinstance(x, float) and not math.isfinite(x):
        return BAD_TIME
    magnitude = abs(x)
    scale = 1_000_000 if magnitude < 1e11 else 1_000 if magnitude < 1e14 else 1
    # (choice) a fractional number is rounded to the nearest microsecond
    micros = x * scale if isinstance(x, int) else round(x * scale)
    return int(micros) if -_INT64_MAX <= micros <= _INT64_MAX else BAD_TIME


def _iso_to_micros(text: str) -> int:
    m = _ISO_RE.fullmatch(text)
    if m is None:
        return BAD_TIME
    year, month, day, hour, minute, second, fraction, offset = m.groups()
    try:
        dt = datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), tzinfo=timezone.utc
        )
    except ValueError:  # month 13, hour 24, second 60 ...
        return BAD_TIME
    micros = (dt - _EPOCH) // _ONE_US
    if fraction:
        micros += int(fraction[:6].ljust(6, "0"))  # (choice) digits past the microsecond are dropped
    if offset and offset not in ("Z", "z"):
        digits = offset[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:] or 0)
        if hours > 23 or minutes > 59:
            return BAD_TIME
        sign = -1 if offset[0] == "-" else 1
        micros -= sign * (hours * 60 + minutes) * 60_000_000  # local time minus its offset = UTC
    return micros


def _time_to_micros(v: Any) -> int:
    if _is_missing(v) or isinstance(v, (bool, np.bool_)):
        return BAD_TIME
    if isinstance(v, pd.Timestamp):  # .value is UTC nanoseconds (a naive Timestamp is read as UTC)
        return int(v.value) // 1000
    if isinstance(v, datetime):
        if v.tzinfo is None or v.tzinfo.utcoffset(v) is None:
            v = v.replace(tzinfo=timezone.utc)  # no offset means UTC
        return (v - _EPOCH) // _ONE_US
    if isinstance(v, np.datetime64):
        return int(v.astype("datetime64[us]").astype(np.int64))
    if isinstance(v, date):  # a date alone: its midnight, UTC
        return (datetime(v.year, v.month, v.day, tzinfo=timezone.utc) - _EPOCH) // _ONE_US
    if isinstance(v, (int, np.integer)):
        return _number_to_micros(int(v))
    if isinstance(v, (float, np.floating)):
        return _number_to_micros(float(v))
    if isinstance(v, str):
        s = v.strip()
        if not s:
            return BAD_TIME
        if _NUMBER_RE.fullmatch(s):  # (choice) numeric text is a number, by magnitude like any other number
            return _number_to_micros(int(s) if s.lstrip("+-").isdigit() else float(s))
        return _iso_to_micros(s)
    return BAD_TIME


def to_micros(values: Any) -> np.ndarray:
    """Times -> epoch microseconds (int64); BAD_TIME where a value is missing or unparseable.

    ISO-8601 text (an offset is honoured, none means UTC; a `T` or a space between date and time), datetime objects
    (naive = UTC), pandas Timestamps, numpy datetime64, and numbers (or numeric text) by magnitude: |x| < 1e11 epoch
    seconds, < 1e14 epoch milliseconds, else epoch microseconds. A scalar gives a 1-element array.
    """
    if isinstance(values, (str, bytes, datetime, date, np.datetime64)) or np.isscalar(values) or values is None:
        values = [values]
    return np.array([_time_to_micros(v) for v in list(values)], dtype=np.int64)


_WINDOW_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([smhd]?)")
_UNIT_US = {"": 1_000_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": _DAY_US}


def parse_window(text: Any) -> int:
    """`30m` / `2h` / `1d` / `45s` / a plain number of seconds (number or text) -> microseconds (> 0)."""
    if isinstance(text, (bool, np.bool_)):
        raise ValueError(f"window: {text!r} is not a duration")
    if isinstance(text, (int, float, np.integer, np.floating)):
        if not math.isfinite(float(text)):
            raise ValueError(f"window: {text!r} is not a duration")
        amount, unit = Fraction(repr(float(text)) if isinstance(text, (float, np.floating)) else int(text)), ""
    else:
        m = _WINDOW_RE.fullmatch(str(text).strip())
        if m is None:
            raise ValueError(f"window: {text!r} is not a duration like 30m, 2h, 1d, 45s or a number of seconds")
        amount, unit = Fraction(m.group(1)), m.group(2)
    micros = round(amount * _UNIT_US[unit])
    if micros <= 0:
        raise ValueError(f"window: {text!r} must be > 0")
    return int(micros)


# --- config and results -----------------------------------------------------------------------------------------


@dataclass
class EventsSpec:
    """The `events` config block, less the source and the column names.

    Which of the optional event columns exist (type, value, event_id) is read off the events frame.
    """

    window: str | float = "30m"
    rewards: dict[str, float | str] = field(default_factory=lambda: {"click": 1.0, "purchase": "value"})
    aggregate: str | dict[str, str] = "max"
    default_reward: float = 0.0
    cutoff: Any = "auto"  # "auto" or a time (any form to_micros reads)

    def validate(self) -> None:
        if not self.rewards:
            raise ValueError("rewards: at least one event type")
        for event_type, reward in self.rewards.items():
            if reward == "value":
                continue
            if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (int, float, np.integer, np.floating)):
                raise ValueError(f"rewards[{event_type!r}]: a number or the word 'value', not {reward!r}")
            if not math.isfinite(float(reward)):
                raise ValueError(f"rewards[{event_type!r}]: {reward!r} is not finite")
        if isinstance(self.aggregate, dict):
            # (choice) a per-type aggregate must name exactly the types of `rewards`
            if set(self.aggregate) != set(self.rewards):
                raise ValueError(f"aggregate: keys {sorted(self.aggregate)} != rewards keys {sorted(self.rewards)}")
            aggregates = list(self.aggregate.values())
        else:
            aggregates = [self.aggregate]
        for a in aggregates:
            if a not in AGGREGATES:
                raise ValueError(f"aggregate: {a!r} is not one of {AGGREGATES}")
        if not math.isfinite(float(self.default_reward)):
            raise ValueError("default_reward: not finite")
        self.window_us()
        self.cutoff_us()

    def window_us(self) -> int:
        return parse_window(self.window)

    def cutoff_us(self) -> int | None:
        """None for `auto`."""
        if isinstance(self.cutoff, str) and self.cutoff.strip() == "auto":
            return None
        t = int(to_micros(self.cutoff)[0])
        if t == BAD_TIME:
            raise ValueError(f"cutoff: {self.cutoff!r} is neither 'auto' nor a time")
        return t

    def aggregate_of(self, event_type: str) -> str:
        return self.aggregate[event_type] if isinstance(self.aggregate, dict) else self.aggregate


_STATE_DECISION_COLUMNS = ["decision_id", "decision_time_us"]
_STATE_EVENT_COLUMNS = ["decision_id", "time_us", "type", "value", "key", "_file", "_line"]


@dataclass(frozen=True, eq=False)
class ReferenceState:
    """What one night hands the next: the pending decisions, each with its events so far (less malformed ones).

    decisions: `decision_id` (str), `decision_time_us` (int64), in D's order.
    events:    `decision_id`, `time_us` (int64, BAD_TIME when unparseable), `type` (str or None), `value` (float,
               NaN when missing / not a number), `key` (the duplicate key: ("id", event_id), ("row", time_us, type,
               value-or-None) without an event_id column, None for a missing event_id), and the original `_file`,
               `_line` (for reading only). Row order IS the read order of carried events: next night they come
               before every event read then, in this order.
    """

    decisions: pd.DataFrame
    events: pd.DataFrame

    @staticmethod
    def empty() -> ReferenceState:
        return ReferenceState(
            decisions=pd.DataFrame({"decision_id": pd.Series([], dtype=object), "decision_time_us": []}).astype(
                {"decision_time_us": np.int64}
            ),
            events=pd.DataFrame({c: pd.Series([], dtype=object) for c in _STATE_EVENT_COLUMNS}),
        )

    def equals(self, other: ReferenceState) -> bool:
        return self.decisions.equals(other.decisions) and self.events.equals(other.events)


@dataclass
class NightResult:
    rewards: dict[str, float]  # written (settled) decisions -> reward
    quarantined_decisions: dict[str, str]  # id -> reason (the first reason when an id is quarantined twice)
    pending: set[str]
    events: dict[str, int]  # the 8 CATEGORIES -> counts
    records: dict[str, int]  # read / written / quarantined / pending
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # every quarantined row (ids may repeat, "")
    cutoff_us: int | None = None
    event_log: pd.DataFrame | None = None  # one row per event (carried first, then read order) with its category


# --- the join ---------------------------------------------------------------------------------------------------


@dataclass
class _Event:
    decision_id: str
    time_us: int
    type: str | None
    value: float
    key: Hashable | None
    file: str
    line: int
    carried: bool
    order: tuple  # read order: carried events (0, position) before this run's (1, file, line, position)
    category: str = ""


def _norm_id(x: Any) -> str:
    """Decision ids compare as text; missing -> "" (empty). (choice) no stripping: " a" != "a"."""
    if _is_missing(x):
        return ""
    if isinstance(x, str):
        return x
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return str(int(x))  # an integer id column that picked up a NaN became float
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return str(int(x))
    return str(x)


def _norm_optional_text(x: Any) -> str | None:
    s = _norm_id(x)
    return s if s != "" else None


def _norm_value(x: Any) -> float:
    """Event value -> float; NaN when missing or not a number. (choice) numeric text counts as a number."""
    if _is_missing(x) or isinstance(x, (bool, np.bool_)):
        return math.nan
    if isinstance(x, (int, float, np.integer, np.floating)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x.strip())
        except ValueError:
            return math.nan
    return math.nan


def _read_order(frame: pd.DataFrame) -> tuple[list[str], list[int]]:
    n = len(frame)
    files = [("" if _is_missing(f) else str(f)) for f in frame["_file"]] if "_file" in frame.columns else [""] * n
    if "_line" not in frame.columns:
        return files, list(range(n))
    return files, [(i if _is_missing(v) else int(v)) for i, v in enumerate(frame["_line"])]


def _events_read(events: pd.DataFrame | None, spec: EventsSpec) -> list[_Event]:
    if events is None or len(events) == 0:
        return []
    n = len(events)
    ids = [_norm_id(x) for x in events["decision_id"]]
    times = [int(t) for t in to_micros(events["time"])]
    if "type" in events.columns:
        types = [_norm_optional_text(x) for x in events["type"]]
    else:
        if len(spec.rewards) != 1:
            raise ValueError("events have no type column: rewards must have exactly one entry")
        types = [next(iter(spec.rewards))] * n
    values = [_norm_value(x) for x in events["value"]] if "value" in events.columns else [math.nan] * n
    if "event_id" in events.columns:
        # (choice) a missing / empty event_id matches no other event
        keys: list[Hashable | None] = [
            None if (eid := _norm_optional_text(x)) is None else ("id", eid) for x in events["event_id"]
        ]
    else:
        # the whole row is the id (the decision is implied: duplicates are looked for within one decision)
        keys = [("row", t, ty, v if math.isfinite(v) else None) for t, ty, v in zip(times, types, values)]
    files, lines = _read_order(events)
    return [
        _Event(ids[i], times[i], types[i], values[i], keys[i], files[i], lines[i], False, (1, 0, files[i], lines[i], i))
        for i in range(n)
    ]


def _events_carried(state: ReferenceState) -> list[_Event]:
    f = state.events
    rows = zip(f["decision_id"], f["time_us"], f["type"], f["value"], f["key"], f["_file"], f["_line"])
    return [
        _Event(d, int(t), ty, math.nan if _is_missing(v) else float(v), key, file, int(line), True, (0, i, "", 0, 0))
        for i, (d, t, ty, v, key, file, line) in enumerate(rows)
    ]


def _is_malformed(e: _Event, spec: EventsSpec) -> bool:
    if e.decision_id == "" or e.time_us == BAD_TIME:
        return True
    return e.type is not None and spec.rewards.get(e.type) == "value" and not math.isfinite(e.value)


def _aggregate(events: list[_Event], event_type: str, spec: EventsSpec) -> float:
    """`events`: the attributed events of one type, earliest first."""
    how = spec.aggregate_of(event_type)
    if how == "count":
        return float(len(events))
    reward = spec.rewards[event_type]
    contributions = [e.value if reward == "value" else float(reward) for e in events]
    if how == "first":
        return contributions[0]
    if how == "max":
        return max(contributions)
    return math.fsum(contributions)  # sum: exactly rounded, so independent of the order


def reference_night(
    decisions: pd.DataFrame,
    events: pd.DataFrame | None,
    spec: EventsSpec,
    state_in: ReferenceState | None = None,
) -> tuple[NightResult, ReferenceState]:
    """One run ("night") of the join, per events_semantics.md. Inputs are not modified."""
    spec.validate()
    window = spec.window_us()
    state = state_in if state_in is not None else ReferenceState.empty()

    # D: carried decisions first, then the valid decisions read this run, in read order.
    decision_time: dict[str, int] = {
        str(d): int(t) for d, t in zip(state.decisions["decision_id"], state.decisions["decision_time_us"])
    }
    quarantined: list[tuple[str, str]] = []
    if len(decisions):
        ordered = decisions
        if "_file" in decisions.columns and "_line" in decisions.columns:
            ordered = decisions.sort_values(["_file", "_line"], kind="stable")
        for d, t in zip([_norm_id(x) for x in ordered["decision_id"]], to_micros(ordered["decision_time"])):
            if d == "" or t == BAD_TIME:
                quarantined.append((d, "invalid_decision"))  # (choice) checked before duplicate_decision
            elif d in decision_time:
                # in state_in, or (choice) read earlier in this run: the first one read is kept
                quarantined.append((d, "duplicate_decision"))
            else:
                decision_time[d] = int(t)

    carried = _events_carried(state)
    read = _events_read(events, spec)

    cutoff = spec.cutoff_us()
    if cutoff is None:  # auto: the latest time among the events READ this run, else the latest decision in D
        read_times = [e.time_us for e in read if not _is_malformed(e, spec)]  # well-formed events only
        if read_times:
            cutoff = max(read_times)
        elif decision_time:
            cutoff = max(decision_time.values())
    pending = {d for d, t in decision_time.items() if cutoff is not None and t + window > cutoff}

    # Categories 1-3; the rest go on, grouped by decision.
    candidates: dict[str, list[_Event]] = {}
    for e in carried + read:
        if _is_malformed(e, spec):
            e.category = "malformed"
        elif e.decision_id not in decision_time:
            e.category = "unknown_decision"
        elif e.decision_id in pending:
            e.category = "pending"
        else:
            candidates.setdefault(e.decision_id, []).append(e)

    # Categories 4-8, per decision, earliest first (time, then read order).
    attributed: dict[str, dict[str, list[_Event]]] = {}
    for d, evs in candidates.items():
        t_d = decision_time[d]
        seen: set[Hashable] = set()
        for e in sorted(evs, key=lambda e: (e.time_us, e.order)):
            if e.key is not None and e.key in seen:
                e.category = "duplicate"
                continue
            if e.key is not None:
                seen.add(e.key)
            if e.type not in spec.rewards:
                e.category = "unmapped_type"
            elif e.time_us < t_d:
                e.category = "before_decision"
            elif e.time_us > t_d + window:
                e.category = "late"
            else:
                e.category = "attributed"
                attributed.setdefault(d, {}).setdefault(e.type, []).append(e)  # stays earliest first

    rewards: dict[str, float] = {}
    for d in decision_time:
        if d in pending:
            continue
        by_type = attributed.get(d)
        if not by_type:
            rewards[d] = float(spec.default_reward)
        else:
            rewards[d] = math.fsum(_aggregate(evs, t, spec) for t, evs in sorted(by_type.items()))

    all_events = carried + read
    counts = {c: 0 for c in CATEGORIES}
    for e in all_events:
        counts[e.category] += 1
    records = {
        "read": len(decisions) + len(state.decisions),
        "written": len(rewards),
        "quarantined": len(quarantined),
        "pending": len(pending),
    }
    assert records["read"] == records["written"] + records["quarantined"] + records["pending"], records
    assert len(all_events) == len(carried) + len(read) == sum(counts.values()), counts

    # a malformed event is counted once, in the run that reads it: never carried
    kept = sorted(
        (e for e in all_events if e.decision_id in pending and e.category != "malformed"), key=lambda e: e.order
    )
    state_out = ReferenceState(
        decisions=pd.DataFrame(
            {
                "decision_id": pd.Series([d for d in decision_time if d in pending], dtype=object),
                "decision_time_us": pd.Series([t for d, t in decision_time.items() if d in pending], dtype=np.int64),
            }
        ),
        events=_events_frame(kept, with_category=False),
    )
    result = NightResult(
        rewards=rewards,
        quarantined_decisions={},
        pending=set(pending),
        events=counts,
        records=records,
        quarantined=quarantined,
        cutoff_us=cutoff,
        event_log=_events_frame(all_events, with_category=True),
    )
    for d, reason in quarantined:
        result.quarantined_decisions.setdefault(d, reason)
    return result, state_out


def _events_frame(evs: list[_Event], with_category: bool) -> pd.DataFrame:
    columns: dict[str, pd.Series] = {
        "decision_id": pd.Series([e.decision_id for e in evs], dtype=object),
        "time_us": pd.Series([e.time_us for e in evs], dtype=np.int64),
        "type": pd.Series([e.type for e in evs], dtype=object),
        "value": pd.Series([e.value for e in evs], dtype=np.float64),
        "key": pd.Series([e.key for e in evs], dtype=object),
        "_file": pd.Series([e.file for e in evs], dtype=object),
        "_line": pd.Series([e.line for e in evs], dtype=np.int64),
    }
    if with_category:
        columns["carried"] = pd.Series([e.carried for e in evs], dtype=bool)
        columns["category"] = pd.Series([e.category for e in evs], dtype=object)
    return pd.DataFrame(columns)


# --- random streams ---------------------------------------------------------------------------------------------

TIME_FORMATS = ("s", "ms", "us", "iso", "datetime")
_FORMAT_RESOLUTION_US = {"s": 1_000_000, "ms": 1_000, "us": 1, "iso": 1, "datetime": 1}
_ISO_OFFSETS_MIN = (0, 0, 0, 60, 120, -300, 330, -210)
_BAD_ISO_TIMES = ("not-a-time", "", "2024-13-40T25:61:00Z", "yesterday")


def _render_times(times: list[int | None], fmt: str, rng: np.random.Generator) -> pd.Series:
    """Epoch microseconds (None = a bad time) -> one column in `fmt`; numbers are floored to the format's unit."""
    if fmt in ("s", "ms", "us"):
        unit = _FORMAT_RESOLUTION_US[fmt]
        return pd.Series([pd.NA if t is None else t // unit for t in times], dtype="Int64")
    if fmt == "datetime":
        return pd.Series(pd.to_datetime([pd.NaT if t is None else t for t in times], unit="us", utc=True))
    if fmt != "iso":
        raise ValueError(f"time format {fmt!r} not in {TIME_FORMATS}")
    out: list[str | None] = []
    for t in times:
        if t is None:
            bad = _BAD_ISO_TIMES[int(rng.integers(len(_BAD_ISO_TIMES)))]
            out.append(bad if bad else None)
            continue
        offset = _ISO_OFFSETS_MIN[int(rng.integers(len(_ISO_OFFSETS_MIN)))]
        local = _EPOCH + timedelta(microseconds=t + offset * 60_000_000)
        s = local.strftime("%Y-%m-%dT%H:%M:%S")
        if t % 1_000_000:
            s += f".{local.microsecond // 1000:03d}" if t % 1000 == 0 else f".{local.microsecond:06d}"
        if offset == 0:
            s += ("Z", "+00:00", "")[int(rng.integers(3))]  # "" = no offset = UTC
        else:
            s += f"{'+' if offset > 0 else '-'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
        out.append(s)
    return pd.Series(out, dtype=object)


def random_nights(
    seed: int,
    n_nights: int = 3,
    decisions_per_night: int = 300,
    *,
    window: str = "30m",
    start: str = "2024-03-01T00:00:00Z",
    decision_formats: tuple[str, ...] = ("s", "iso", "ms"),
    event_formats: tuple[str, ...] = ("iso", "ms", "s"),
    types: tuple[str, ...] = ("click", "purchase", "view"),
    type_weights: tuple[float, ...] = (0.5, 0.25, 0.25),
    max_events_per_decision: int = 4,
    with_type: bool = True,
    with_value: bool = True,
    with_event_id: bool = True,
    skew: str = "10m",
    horizon: str = "3h",
    end_of_night_decisions: int = 15,
    boundary_rate: float = 0.05,
    duplicate_rate: float = 0.05,
    resend_rate: float = 0.05,
    tie_rate: float = 0.03,
    unknown_rate: float = 0.02,
    malformed_rate: float = 0.01,
    bad_value_rate: float = 0.01,
    delayed_rate: float = 0.02,
    reread_rate: float = 0.02,
    invalid_decision_rate: float = 0.01,
    n_event_files: int = 2,
) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """Random decision / event streams, one (decisions, events) pair per night; set a rate to 0 to turn a case off.

    Night k covers [start + k days, start + k+1 days). Decisions: unique ids `d{k}-{i}-{hex}`, times uniform over the
    night at millisecond resolution (the last `end_of_night_decisions` in the night's final `window`, so their
    window is open at the cutoff), columns decision_id, decision_time (format decision_formats[k % len]), action,
    propensity. Each decision gets 0..max_events_per_decision events: type by type_weights, value for purchases
    (cents; sometimes for clicks too, where it is ignored), time from -skew to +horizon after the decision (with
    `boundary_rate` exactly at 0, window, window +- 1 s, -1 s). An event lands in the night its time falls in
    (never before its decision's night; past the last night it is dropped), so late decisions' events arrive in
    the next night's events; `delayed_rate` of them arrive one night later still. Extras: exact copies
    (`duplicate_rate`, possibly in another file), re-sent copies with the same event_id and a later time
    (`resend_rate`), distinct events at the very same time (`tie_rate`, to exercise `first` ties), events for
    unknown ids `ghost-*` (`unknown_rate`), malformed events (empty / missing id, bad time: `malformed_rate` each;
    a purchase with no value: `bad_value_rate`; these get unique event ids, and those with a time get one at least
    an hour before the night's end, so they are not the latest event read: see the `auto` cutoff note), decisions of night k-1 read again in
    night k (`reread_rate`: half from its last window, likely still pending -> duplicate_decision), invalid
    decisions (empty id or bad time, `invalid_decision_rate`; their events become unknown_decision).

    Events columns: decision_id, time (format event_formats[k % len]), type / value / event_id (when with_*),
    `_file` = `events-{k:02d}-{part}.csv` (part < n_event_files, random per event) and `_line` = the CSV data line
    (2 for the first row): frame order is read order. write_night rewrites both to what it writes. Without a type
    column every event carries a value (so a `value` reward is not mostly malformed). Rates are per decision
    (per generated event for the copies); the malformed / unknown counts scale with decisions_per_night. Time
    formats: s / ms / us (nullable Int64 epoch numbers, floored to the unit), iso (text with a random offset among
    Z, +00:00, none, +01:00, +02:00, -05:00, +05:30, -03:30), datetime (datetime64[ns, UTC]); a bad time is a null
    (numbers, datetime) or junk text (iso).
    """
    rng = np.random.default_rng(seed)
    w = parse_window(window)
    skew_us, horizon_us = parse_window(skew), parse_window(horizon)
    t0 = int(to_micros(start)[0])
    if t0 == BAD_TIME:
        raise ValueError(f"start: {start!r}")
    weights = np.asarray(type_weights[: len(types)], dtype=float)
    weights /= weights.sum()
    per_night_decisions: list[list[dict]] = [[] for _ in range(n_nights)]
    per_night_events: list[list[dict]] = [[] for _ in range(n_nights)]
    counter = iter(range(10**9))

    def new_event_id() -> str:
        return f"ev-{next(counter):07d}"

    def emit(event: dict, night: int) -> None:
        if 0 <= night < n_nights:
            per_night_events[night].append(event)

    def night_of(t: int) -> int:
        return (t - t0) // _DAY_US

    def random_value() -> float:
        return round(float(rng.uniform(0.5, 100.0)), 2)

    def draw_offset() -> int:
        u = rng.random()
        if u < boundary_rate:
            return int(rng.choice([0, w, w + 1_000_000, w - 1_000_000, -1_000_000]))
        u = rng.random()
        if u < 0.55:
            return int(rng.integers(0, w // 1000 + 1)) * 1000
        if u < 0.67:
            return -int(rng.integers(1, skew_us // 1000 + 1)) * 1000
        return int(rng.integers(w // 1000 + 1, horizon_us // 1000 + 1)) * 1000

    for k in range(n_nights):
        night_start = t0 + k * _DAY_US
        dres = _FORMAT_RESOLUTION_US[decision_formats[k % len(decision_formats)]]
        offsets = rng.integers(0, _DAY_US // 1000, decisions_per_night) * 1000
        m = min(end_of_night_decisions, decisions_per_night)
        if m:
            offsets[-m:] = _DAY_US - rng.integers(1, w // 1000 + 1, m) * 1000
        rows = []
        for i, off in enumerate(offsets):
            t_d = (night_start + int(off)) // dres * dres
            rows.append({"decision_id": f"d{k}-{i:05d}-{int(rng.integers(16**4)):04x}", "time_us": t_d})
        for row in rows:
            d, t_d = row["decision_id"], row["time_us"]
            for _ in range(int(rng.integers(0, max_events_per_decision + 1))):
                event_type = str(rng.choice(types, p=weights))
                t = t_d + draw_offset()
                if not with_type or event_type == "purchase":
                    value = random_value()
                elif event_type == "click" and rng.random() < 0.2:
                    value = random_value()
                else:
                    value = math.nan
                ev = {"decision_id": d, "time_us": t, "type": event_type, "value": value, "event_id": new_event_id()}
                arrival = max(k, night_of(t)) + (1 if rng.random() < delayed_rate else 0)
                emit(ev, arrival)
                if rng.random() < duplicate_rate:
                    emit(dict(ev), arrival)
                if rng.random() < resend_rate:
                    t2 = t + int(rng.integers(1, 1200)) * 1_000_000
                    emit({**ev, "time_us": t2}, max(k, night_of(t2)))
                if rng.random() < tie_rate:
                    tie_value = random_value() if not math.isnan(value) else math.nan
                    emit({**ev, "event_id": new_event_id(), "value": tie_value}, arrival)
        n_expected_events = decisions_per_night * max_events_per_decision // 2
        for i in range(int(round(unknown_rate * n_expected_events))):
            t = night_start + int(rng.integers(0, _DAY_US // 1000)) * 1000
            emit({"decision_id": f"ghost-{k}-{i}", "time_us": t, "type": str(rng.choice(types, p=weights)),
                  "value": random_value(), "event_id": new_event_id()}, k)  # fmt: skip
        n_plain = decisions_per_night - m  # rows[:n_plain] are spread over the night, the next m end it
        latest_malformed = night_start + _DAY_US - 3_600_000_000

        if rows:
            # Malformed events with a time get one well before the night's end: the contract does not say whether
            # they count for the `auto` cutoff, so they should hardly ever be the latest event read.
            for i in range(int(round(malformed_rate * n_expected_events))):
                victim = rows[int(rng.integers(max(n_plain, 1)))]
                t = victim["time_us"] + int(rng.integers(0, w // 1000)) * 1000
                t = t if t <= latest_malformed else t - 2 * 3_600_000_000
                emit({"decision_id": ("", None)[i % 2], "time_us": t, "type": "click",
                      "value": math.nan, "event_id": new_event_id()}, k)  # fmt: skip
                victim = rows[int(rng.integers(len(rows)))]
                emit({"decision_id": victim["decision_id"], "time_us": None, "type": "click", "value": math.nan,
                      "event_id": new_event_id()}, k)  # fmt: skip
            if "purchase" in types and with_type:
                for _ in range(int(round(bad_value_rate * n_expected_events))):
                    victim = rows[int(rng.integers(max(n_plain, 1)))]
                    t = victim["time_us"] + int(rng.integers(0, w // 1000)) * 1000
                    emit({"decision_id": victim["decision_id"], "time_us": min(t, latest_malformed), "type": "purchase",
                          "value": math.nan, "event_id": new_event_id()}, k)  # fmt: skip
        n_invalid = min(int(round(invalid_decision_rate * decisions_per_night)), n_plain)
        for j, idx in enumerate(rng.choice(n_plain, size=n_invalid, replace=False)):
            rows[int(idx)] = {**rows[int(idx)], **({"decision_id": ""} if j % 2 == 0 else {"time_us": None})}
        if k > 0 and decisions_per_night:
            previous = per_night_decisions[k - 1][:decisions_per_night]
            for i in range(int(round(reread_rate * decisions_per_night))):
                pool = previous[n_plain:] if i % 2 == 0 and m else previous
                again = dict(pool[int(rng.integers(len(pool)))])
                if again["decision_id"] and again["time_us"] is not None and i % 4 == 1:
                    again["time_us"] += 1_000_000  # read again with another time
                rows.append(again)
        per_night_decisions[k] = rows

    nights = []
    for k in range(n_nights):
        dfmt = decision_formats[k % len(decision_formats)]
        efmt = event_formats[k % len(event_formats)]
        rows = [per_night_decisions[k][int(i)] for i in rng.permutation(len(per_night_decisions[k]))]
        decisions = pd.DataFrame(
            {
                "decision_id": pd.Series([r["decision_id"] for r in rows], dtype=object),
                "decision_time": _render_times([r["time_us"] for r in rows], dfmt, rng),
                "action": rng.integers(0, 4, len(rows)),
                "propensity": rng.choice([0.25, 0.5, 1.0], len(rows)),
            }
        )
        evs = [per_night_events[k][int(i)] for i in rng.permutation(len(per_night_events[k]))]
        parts = rng.integers(0, max(n_event_files, 1), len(evs))
        order = np.argsort(parts, kind="stable")
        evs = [evs[int(i)] for i in order]
        parts = parts[order]
        columns: dict[str, Any] = {
            "decision_id": pd.Series([e["decision_id"] for e in evs], dtype=object),
            "time": _render_times([e["time_us"] for e in evs], efmt, rng),
        }
        if with_type:
            columns["type"] = pd.Series([e["type"] for e in evs], dtype=object)
        if with_value:
            columns["value"] = pd.Series([e["value"] for e in evs], dtype=np.float64)
        if with_event_id:
            columns["event_id"] = pd.Series([e["event_id"] for e in evs], dtype=object)
        columns["_file"] = pd.Series([f"events-{k:02d}-{int(p)}.csv" for p in parts], dtype=object)
        line_in_part = np.zeros(len(evs), dtype=np.int64)
        for p in np.unique(parts):
            where = np.flatnonzero(parts == p)
            line_in_part[where] = np.arange(len(where)) + 2
        columns["_line"] = line_in_part
        nights.append((decisions, pd.DataFrame(columns)))
    return nights


_EXTENSIONS = {"csv": "csv", "parquet": "parquet", "jsonl": "jsonl"}


def _write_frame(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "parquet":
        frame.to_parquet(path, index=False, engine="pyarrow")
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True, date_format="iso", date_unit="us")
    else:
        raise ValueError(f"format {fmt!r} not in {sorted(_EXTENSIONS)}")


def _first_line(fmt: str) -> int:
    return {"csv": 2, "parquet": 0, "jsonl": 1}[fmt]


def write_night(
    directory: str | Path,
    decisions: pd.DataFrame,
    events: pd.DataFrame,
    fmt: str = "csv",
    *,
    decision_columns: dict[str, str] | None = None,
    event_columns: dict[str, str] | None = None,
    decisions_name: str = "decisions",
) -> tuple[Path, list[Path], pd.DataFrame]:
    """Write one night: `{directory}/{decisions_name}.{ext}` and one events file per distinct `_file` value.

    Events file: `{directory}/{stem of _file}.{ext}`, its rows in the frame's order (no `_file` column: a single
    `events.{ext}`). `_file` / `_line` are never written. `decision_columns` / `event_columns` rename columns on
    the way out (e.g. {"decision_id": "impression_id", "time": "event_time"}), so the files match a config.

    Returns (decisions path, events paths sorted, events) where `events` is the input frame (same row order, the
    reference's column names) with `_file` = str(the absolute path written) and `_line` = the reader's position:
      csv:     the 1-based line number in the file counting the header as line 1 (first data row = 2; no field
               written here contains a newline, so rows and lines agree),
      parquet: the 0-based row index in the file,
      jsonl:   the 1-based line number (no header: first row = 1).
    """
    if fmt not in _EXTENSIONS:
        raise ValueError(f"format {fmt!r} not in {sorted(_EXTENSIONS)}")
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    ext = _EXTENSIONS[fmt]
    decisions_path = directory / f"{decisions_name}.{ext}"
    _write_frame(
        decisions.drop(columns=[c for c in ("_file", "_line") if c in decisions.columns]).rename(
            columns=decision_columns or {}
        ),
        decisions_path,
        fmt,
    )
    out = events.copy()
    names = np.array([str(f) for f in out["_file"]] if "_file" in out.columns else ["events"] * len(out), dtype=object)
    paths: list[Path] = []
    new_file = np.empty(len(out), dtype=object)
    new_line = np.zeros(len(out), dtype=np.int64)
    for name in sorted(set(names)):
        path = directory / f"{Path(name).stem}.{ext}"
        if path in paths or path == decisions_path:
            raise ValueError(f"two files would both be written to {path}")
        mask = names == name
        part = out[mask].drop(columns=[c for c in ("_file", "_line") if c in out.columns])
        _write_frame(part.rename(columns=event_columns or {}), path, fmt)
        paths.append(path)
        new_file[mask] = str(path)
        new_line[mask] = np.arange(int(mask.sum())) + _first_line(fmt)
    out["_file"] = new_file
    out["_line"] = new_line
    return decisions_path, sorted(paths), out
