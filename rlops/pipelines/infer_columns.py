"""What each column of a sampled log holds, and which bandit field it probably is (`rlops init`).

A column is profiled from the Arrow sample ingestion itself infers feature kinds from
(experience_gen.sources.sample): its kind, how many distinct values, the numeric range. Roles
(action, reward, propensity, position, timestamp) are guessed from the name first and checked
against the content; a name that matches but content that does not fit is not taken, and the
reason is kept so the config can say why. Every guess carries how sure it is, in words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

FLOAT, INT, STRING, BOOL, TIME, LIST, EMPTY = "float", "int", "string", "bool", "timestamp", "list", "empty"
SEPARATOR = "|"  # text cells holding several values (FeatureColumn.separator)
MAX_ACTIONS = 100_000  # more distinct action ids than this is not an action column
# A text column whose values are numbers but for at most this share (and at least one of them): a
# number column with stray values (a typo, "n/a"), which ingestion quarantines as wrong_type,
# rather than a column of text ids.
MAX_STRAY_SHARE = 0.01
MAX_COUNTED = 50  # text columns with at most this many distinct values keep each value's count


@dataclass(frozen=True)
class Column:
    """One sampled column: its kind and the few facts the guesses and the comments use."""

    name: str
    kind: str  # FLOAT | INT | STRING | BOOL | TIME | LIST | EMPTY
    rows: int
    non_null: int
    distinct: int
    values: frozenset[str] = field(repr=False)  # distinct values as text (for the item-id join)
    low: float | None = None  # numeric range
    high: float | None = None
    binary: bool = False  # numbers, all 0 or 1
    integral: bool = False  # numbers, all whole
    multivalent: bool = False  # text cells holding SEPARATOR-separated values, or a list column
    list_of: str | None = None  # LIST: FLOAT | INT | STRING
    stray: tuple[str, ...] = ()  # numbers read from text: the sampled cells that are not numbers, one per row
    # text columns of at most MAX_COUNTED distinct values: (value, rows), most frequent first
    counts: tuple[tuple[str, int], ...] = field(default=(), repr=False)

    @property
    def numeric(self) -> bool:
        return self.kind in (FLOAT, INT) or (self.kind == BOOL)

    @property
    def unique(self) -> bool:
        return self.non_null > 1 and self.distinct == self.non_null

    def describe(self) -> str:
        """'80 distinct ints, 0..79', '0/1', '5 distinct strings', ... for the config's comments."""
        if self.kind == EMPTY:
            return "empty in the sample"
        if self.binary:
            return "0/1"
        if self.kind in (FLOAT, INT):
            word = "ints" if self.kind == INT else "floats"
            text = f"{self.distinct} distinct {word}, {_num(self.low)}..{_num(self.high)}"
            return f"{text}; {_stray_note(self)}" if self.stray else text
        if self.kind == LIST:
            return f"lists of {self.list_of}s"
        if self.multivalent:
            return f"'{SEPARATOR}'-separated values"
        if self.kind == TIME:
            return "date-times"
        return f"{self.distinct} distinct {'strings' if self.kind == STRING else self.kind + 's'}"


def describe_columns(columns: Iterable[Column]) -> str:
    """One description of several columns read as one feature (per-item columns): '0/1' only when
    every one of them is 0/1; number columns as one range over all of them ('ints, 0..3': a first
    column that happens to be 0/1 does not label counts that reach 3); else each one's description."""
    cols = list(columns)
    if not cols:
        return "no columns"
    if all(c.binary for c in cols):
        return "0/1"
    numbers = [c for c in cols if c.kind in (FLOAT, INT, BOOL) and c.low is not None and c.high is not None]
    if len(numbers) == len(cols):
        word = "ints" if all(c.kind in (INT, BOOL) for c in numbers) else "floats"
        low, high = min(c.low for c in numbers if c.low is not None), max(c.high for c in numbers if c.high is not None)
        return f"{word}, {_num(low)}..{_num(high)}"
    return "; ".join(dict.fromkeys(c.describe() for c in cols))


def _num(v: float | None) -> str:
    return "?" if v is None else str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def profile(samples: Mapping[str, pa.ChunkedArray]) -> list[Column]:
    """Every sampled column, in the file's order."""
    return [_profile(name, column) for name, column in samples.items()]


def _profile(name: str, column: pa.ChunkedArray) -> Column:
    t = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    arr = column.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(t)
    rows, non_null = len(arr), len(arr) - arr.null_count
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        of = FLOAT if pa.types.is_floating(inner) else INT if pa.types.is_integer(inner) else STRING
        flat = pc.list_flatten(arr)
        return Column(name, LIST, rows, non_null, _distinct(flat), frozenset(), multivalent=of != FLOAT, list_of=of)
    if non_null == 0 or pa.types.is_null(t):
        return Column(name, EMPTY, rows, 0, 0, frozenset())
    values = arr.drop_null()
    texts = frozenset(pc.unique(values.cast(pa.string())).to_pylist()) if not pa.types.is_timestamp(t) else frozenset()
    distinct = _distinct(values)
    if pa.types.is_boolean(t):
        return Column(name, BOOL, rows, non_null, distinct, texts, 0.0, 1.0, binary=True, integral=True)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return Column(name, TIME, rows, non_null, distinct, texts)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        kind = INT if pa.types.is_integer(t) else FLOAT
        return _numbers(name, rows, non_null, values.cast(pa.float64()), texts, kind, distinct)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        strings = values.cast(pa.string())
        numbers = _mostly_numbers(name, rows, non_null, strings)
        if numbers is not None:
            return numbers
        with_sep = pc.sum(pc.match_substring(strings, SEPARATOR)).as_py() or 0
        if _looks_like_time(strings):
            return Column(name, TIME, rows, non_null, distinct, texts)
        multivalent = with_sep * 2 >= non_null
        counts = _counts(strings) if distinct <= MAX_COUNTED and not multivalent else ()
        return Column(name, STRING, rows, non_null, distinct, texts, multivalent=multivalent, counts=counts)
    return Column(name, STRING, rows, non_null, distinct, texts)


def _numbers(
    name: str,
    rows: int,
    non_null: int,
    floats: pa.Array,
    texts: frozenset[str],
    kind: str,
    distinct: int,
    stray: tuple[str, ...] = (),
) -> Column:
    low, high = pc.min(floats).as_py(), pc.max(floats).as_py()
    integral = bool(pc.all(pc.equal(pc.floor(floats), floats)).as_py())
    binary = bool(pc.all(pc.is_in(floats, pa.array([0.0, 1.0]))).as_py())
    return Column(name, kind, rows, non_null, distinct, texts, low, high, binary, integral, stray=stray)


def _mostly_numbers(name: str, rows: int, non_null: int, strings: pa.Array) -> Column | None:
    """A text column of numbers with a few stray values (MAX_STRAY_SHARE), profiled as the numbers
    it holds; None when it is text."""
    floats: list[float] = []
    numbers: list[str] = []
    stray: list[str] = []
    for text in strings.to_pylist():
        try:
            floats.append(float(text))
            numbers.append(text)
        except ValueError:
            stray.append(text)
            if len(stray) > MAX_STRAY_SHARE * non_null:
                return None  # text: a text column's first few values decide it
    if not stray or not floats:
        return None
    column = pa.array(floats, pa.float64())
    kind = INT if all(f.is_integer() for f in floats) else FLOAT
    return _numbers(name, rows, non_null, column, frozenset(numbers), kind, _distinct(column), tuple(stray))


def _counts(strings: pa.Array) -> tuple[tuple[str, int], ...]:
    """(value, rows) of each distinct value, most frequent first (ties: by value)."""
    pairs = [(str(v["values"]), int(v["counts"])) for v in pc.value_counts(strings).to_pylist()]
    return tuple(sorted(pairs, key=lambda vc: (-vc[1], vc[0])))


def _distinct(values: pa.Array) -> int:
    return len(pc.unique(values.drop_null()))


ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2}| UTC)?$")


def _looks_like_time(strings: pa.Array) -> bool:
    """ISO 8601 text (or BigQuery's '... UTC'), which ingestion turns into epoch microseconds."""
    head = strings.slice(0, 50).to_pylist()
    return bool(head) and all(ISO_DATE.match(s.strip()) for s in head)


# --- roles --------------------------------------------------------------------------------------

# Names by role: an exact match is "sure", a token of the name "likely". Checked in this order;
# a column takes one role only.
NAMES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "reward": (
        ("reward", "click", "clicked", "clicks", "conversion", "converted", "purchase", "purchased", "label", "y"),
        ("reward", "click", "conversion", "convert", "purchase", "label", "outcome", "rating", "revenue", "target"),
    ),
    "propensity": (
        ("propensity", "propensity_score", "prob", "probability", "pscore", "p", "action_prob", "pi_b"),
        ("propensity", "prob", "probability", "pscore", "logging", "p"),  # p_shown, p_action
    ),
    "position": (("position", "pos", "slot", "rank"), ("position", "slot", "rank")),
    "timestamp": (
        ("timestamp", "ts", "time", "datetime", "date", "event_time", "created_at"),
        ("timestamp", "time", "date"),
    ),
    "action": (
        ("action", "action_id", "arm", "arm_id", "item_id", "item", "chosen", "chosen_action", "shown_item"),
        ("action", "arm", "item", "chosen", "shown"),
    ),
}
ROLES = tuple(NAMES)


@dataclass(frozen=True)
class Guess:
    role: str
    column: str
    sure: str  # "sure" | "likely" | "a guess"
    why: str  # "name match; 0/1"

    def line(self) -> str:
        return f"{self.role:<10} <- {self.column}  ({self.sure}: {self.why})"


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+|(?<=[a-z])(?=[0-9])", name.lower()) if t]


def _name_match(role: str, name: str) -> str | None:
    exact, parts = NAMES[role]
    if name.lower() in exact:
        return "sure"
    if any(p in _tokens(name) for p in parts) or any(name.lower().startswith(p) for p in parts if len(p) > 3):
        return "likely"
    return None


def _fits(role: str, c: Column) -> str | None:
    """Why the content fits the role (and which sampled values ingestion will quarantine), or None."""
    reason = _content_fits(role, c)
    return reason if reason is None or not c.stray else f"{reason}; {_stray_note(c)}"


def _stray_note(c: Column) -> str:
    shown = ", ".join(repr(v) for v in list(dict.fromkeys(c.stray))[:3])
    return f"{len(c.stray)} not a number ({shown}): ingestion quarantines those rows (wrong_type)"


def _content_fits(role: str, c: Column) -> str | None:
    if role == "reward":
        if c.kind in (FLOAT, INT, BOOL):
            return "0/1" if c.binary else f"numbers, {_num(c.low)}..{_num(c.high)}"
        return None
    if role == "propensity":
        if c.kind in (FLOAT, INT) and c.low is not None and c.low > 0 and (c.high or 0) <= 1 and not c.binary:
            return f"probabilities in (0, 1], {_num(c.low)}..{_num(c.high)}"
        return None
    if role == "position":
        if c.kind == INT and 1 < c.distinct <= 100:
            return f"{c.distinct} distinct ints, {_num(c.low)}..{_num(c.high)}"
        return None
    if role == "timestamp":
        if c.kind == TIME:
            return "date-times"
        if c.kind == INT and c.low is not None and c.low >= 1e8:  # epoch seconds (or ms, us) since 1973
            return f"epoch-like ints from {_num(c.low)}"
        return None
    if role == "action":
        if c.kind == INT and (c.low or 0) >= 0 and 1 < c.distinct <= MAX_ACTIONS:
            return f"{c.distinct} distinct ints, {_num(c.low)}..{_num(c.high)}"
        if c.kind == STRING and not c.multivalent and 1 < c.distinct <= MAX_ACTIONS and not c.unique:
            return f"{c.distinct} distinct text ids"
        return None
    raise KeyError(role)


@dataclass
class Guesses:
    """The columns taken by a role (role -> Guess), and why a name match was not taken."""

    roles: dict[str, Guess] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # role -> "column 'reward' holds text"

    def column(self, role: str) -> str | None:
        g = self.roles.get(role)
        return g.column if g else None


def guess_roles(columns: list[Column], action_fits: Callable[[Column], str | None] | None = None) -> Guesses:
    """Each role's column: a name match whose content fits, else (reward and action only) the one
    column whose content alone fits. `action_fits` replaces the action check (per-arm logs: the
    column whose values are the item table's ids)."""
    out = Guesses()
    taken: set[str] = set()
    for role in ROLES:
        fits = action_fits if role == "action" and action_fits else lambda c, r=role: _fits(r, c)
        named = [(c, s) for c in columns if c.name not in taken and (s := _name_match(role, c.name))]
        named.sort(key=lambda cs: cs[1] != "sure")  # exact names first, then the file's order
        for c, sure in named:
            why = fits(c)
            if why:
                out.roles[role] = Guess(role, c.name, sure, f"name match; {why}")
                break
            out.rejected.setdefault(role, f"column '{c.name}' has a {role}'s name but holds {c.describe()}")
        if role not in out.roles and role in ("reward", "action"):
            by_content = [c for c in columns if c.name not in taken and fits(c)]
            if role == "reward":  # only a 0/1 column reads as a reward without its name
                by_content = [c for c in by_content if c.binary]
            if len(by_content) == 1:
                c = by_content[0]
                out.roles[role] = Guess(role, c.name, "a guess", f"content only; {fits(c)}")
        if role in out.roles:
            taken.add(out.roles[role].column)
            out.rejected.pop(role, None)
    return out


def is_row_index(c: Column) -> bool:
    """A pandas index written with the data (an unnamed first column of 0, 1, 2, ...)."""
    return c.kind == INT and c.unique and (c.name == "" or c.name.startswith("Unnamed")) and c.low == 0


def unused_reason(c: Column) -> str | None:
    """Why a column should not be a context feature as it stands (None: use it)."""
    if c.kind == EMPTY:
        return "empty in the sample"
    if is_row_index(c) or c.name == "":
        return "an unnamed column (a row index?)"
    if c.distinct <= 1:
        return "one value in the sample: it tells decisions apart by nothing"
    if c.kind in (STRING, INT) and c.unique and c.non_null >= 50:
        return f"unique per row ({c.distinct} of {c.non_null}): an id, not a feature"
    if c.kind == BOOL:
        return "true/false text; write it as 0/1 to use it"
    if c.kind == TIME:
        return "date-times: as a feature, derive an hour or weekday column"
    return None


# --- per-item columns -----------------------------------------------------------------------------

ITEM_ID_PLACEHOLDER = "{item_id}"  # experience_gen.config's: a per-arm column pattern's item id
MIN_PER_ITEM_SHARE = 0.5  # a pattern must name a column for at least this share of the items


@dataclass(frozen=True)
class PerItemColumns:
    """Numeric log columns that differ only by an item id (`affinity_sku1`, `affinity_sku2`, ...):
    one value per item and decision, i.e. one per-arm feature."""

    pattern: str  # e.g. "affinity_{item_id}"
    columns: dict[str, str]  # item id -> its column, in the log's order
    missing: tuple[str, ...]  # item ids without a column

    @property
    def name(self) -> str:
        """The feature's name: the pattern without the id and the separators around it."""
        head, tail = self.pattern.split(ITEM_ID_PLACEHOLDER)
        parts = [p for p in (head.rstrip("_-. "), tail.lstrip("_-. ")) if p]
        return "_".join(parts) or "per_item"


def per_item_columns(columns: list[Column], item_ids: Iterable[str], taken: Iterable[str] = ()) -> list[PerItemColumns]:
    """Groups of (mostly) numeric columns named `<head><item id><tail>`, one per pattern that names a column
    for at least MIN_PER_ITEM_SHARE of the items (every item when the ids are integers; two or more
    anyway), largest first; a column joins one group at most. `taken`: columns given a role."""
    ids = sorted({str(i) for i in item_ids if str(i)}, key=len, reverse=True)
    skip = set(taken)
    groups: dict[tuple[str, str], dict[str, str]] = {}
    numeric = {c.name for c in columns if c.kind in (FLOAT, INT)}
    for c in columns:
        # text too: one stray word ('abc') makes a number column text in the sample
        if c.name in skip or not (c.name in numeric or (c.kind == STRING and not c.multivalent)):
            continue
        for i in ids:  # every place an id occurs in the name: 'a_11' is ('a_', '11', '') and ('a_', '1', '1')
            start = c.name.find(i)
            while start >= 0:
                key = (c.name[:start], c.name[start + len(i) :])
                groups.setdefault(key, {}).setdefault(i, c.name)
                start = c.name.find(i, start + 1)
    # Integer ids name many columns by chance (x_0, x_1, ...): those must name one for every item.
    share = 1.0 if all(i.isdigit() for i in ids) else MIN_PER_ITEM_SHARE
    out: list[PerItemColumns] = []
    used: set[str] = set()
    for (head, tail), found in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        found = {i: col for i, col in found.items() if col not in used}
        if len(found) < max(2, share * len(ids)) or 2 * len(numeric.intersection(found.values())) <= len(found):
            continue  # too few items, or mostly text (ids, not values)
        order = {c.name: j for j, c in enumerate(columns)}
        ordered = dict(sorted(found.items(), key=lambda kv: order[kv[1]]))
        missing = tuple(sorted(set(ids) - set(found)))
        out.append(PerItemColumns(head + ITEM_ID_PLACEHOLDER + tail, ordered, missing))
        used.update(found.values())
    return out


# --- events (`rlops init --events`) -----------------------------------------------------------------
# A second file of events (clicks, purchases, ...) that the rewards are made from: which of its
# columns holds the decision's id (and which decisions column it joins), the times on both sides,
# the event's type, value and id. Each is a Guess of its own; where none fits the role is absent.

DECISION_ID, DECISION_TIME = "decision_id", "decision_time"
EVENT_DECISION_ID, EVENT_TIME, EVENT_TYPE, EVENT_VALUE, EVENT_ID = (
    "events.decision_id",
    "events.time",
    "events.type",
    "events.value",
    "events.event_id",
)
EVENT_ROLES = (DECISION_ID, DECISION_TIME, EVENT_DECISION_ID, EVENT_TIME, EVENT_TYPE, EVENT_VALUE, EVENT_ID)

JOIN_TOKENS = ("impression", "decision", "request", "recommendation", "prediction", "serving", "served", "offer")
TIME_NAMES = ("ts", "time", "timestamp", "datetime", "date", "event_time", "event_ts", "decision_time", "created_at")
TIME_TOKENS = ("ts", "time", "timestamp", "datetime", "date")
TYPE_NAMES = ("type", "event_type", "event", "event_name", "kind", "event_kind", "name", "action", "category")
TYPE_TOKENS = ("type", "event", "kind")
VALUE_NAMES = ("value", "amount", "revenue", "price", "total", "order_value", "purchase_value", "gmv", "sales")
VALUE_TOKENS = ("value", "amount", "revenue", "price", "total", "gmv", "sales", "spend")
CLICK_WORDS = ("click", "tap")
CONVERSION_WORDS = ("purchase", "order", "conversion", "convert", "buy", "checkout", "transaction", "sale")
MOSTLY_UNIQUE = 0.9  # an id column: at least this share of its sampled values distinct
MAX_EVENT_TYPES = 50  # more distinct values than this is not an event type column
# epoch times by magnitude (as experience_gen.events reads them), limited to 1979..2286
EPOCH_RANGES = (("seconds", 3e8, 1e10, 1), ("milliseconds", 3e11, 1e13, 1e3), ("microseconds", 3e14, 1e16, 1e6))


def id_like(name: str) -> bool:
    """id, *_id, *Id, *_uuid, *_key, ids."""
    tokens = _tokens(name)
    return (bool(tokens) and tokens[-1] in ("id", "ids", "uuid", "key")) or bool(re.search(r"[a-z0-9]I[dD]$", name))


def event_id_named(name: str) -> bool:
    """event_id, eventid, *_event_id, id (in an events file the row's own id), event_uuid."""
    low = name.lower()
    return low in ("id", "uuid", "event_uuid", "event_key") or low.endswith(("event_id", "eventid"))


def join_name_score(name: str) -> int:
    """2: an id named like a decision's (impression_id, request_id, ...); 1: another id; 0."""
    if not id_like(name) or event_id_named(name):
        return 0
    return 2 if any(t.startswith(JOIN_TOKENS) for t in _tokens(name)) else 1


def time_name_score(name: str) -> int:
    """2: ts, time, timestamp, event_time, ...; 1: a time token (send_time, date_local) or *_at; 0."""
    low = name.lower()
    if low in TIME_NAMES:
        return 2
    return 1 if any(t in TIME_TOKENS for t in _tokens(name)) or low.endswith("_at") else 0


def epoch_unit(c: Column) -> tuple[str, float] | None:
    """(unit, per second) of a number column whose whole range reads as epoch times, else None."""
    if c.kind not in (INT, FLOAT) or c.low is None or c.high is None or c.binary:
        return None
    for unit, low, high, per_second in EPOCH_RANGES:
        if low <= c.low and c.high < high:
            return unit, per_second
    return None


def time_fits(c: Column) -> str | None:
    """Why the column parses as a time (ISO-8601 text, or epoch seconds/milliseconds by magnitude)."""
    import datetime

    if c.kind == TIME:
        return "date-times"
    epoch = epoch_unit(c)
    if epoch is None:
        return None
    unit, per_second = epoch

    def day(v: float | None) -> str:
        when = datetime.datetime.fromtimestamp((v or 0) / per_second, datetime.timezone.utc)
        return when.strftime("%Y-%m-%d %H:%M")

    return f"epoch {unit}, {day(c.low)}..{day(c.high)} UTC"


def event_type_word(event_type: str) -> str | None:
    """'click' for a type named like a click, 'conversion' for a purchase/order/conversion, else None."""
    low = event_type.lower()
    if any(w in low for w in CLICK_WORDS):
        return "click"
    if any(w in low for w in CONVERSION_WORDS):
        return "conversion"
    return None


@dataclass
class EventGuesses:
    """Roles (EVENT_ROLES) -> Guess; `overlap`: (sampled events' join values found among the
    decisions', of how many distinct), None when no pair of columns shares a value."""

    roles: dict[str, Guess] = field(default_factory=dict)
    overlap: tuple[int, int] | None = None

    def column(self, role: str) -> str | None:
        g = self.roles.get(role)
        return g.column if g else None


def guess_event_roles(decisions: list[Column], events: list[Column], taken: Iterable[str] = ()) -> EventGuesses:
    """The join of a decisions sample and an events sample: see the section's comment. `taken`:
    decisions columns that have another role (the action, the propensity)."""
    out = EventGuesses()
    used_d, used_e = set(taken), set[str]()

    def keep(role: str, g: Guess | None) -> None:
        if g is not None:
            out.roles[role] = g
            (used_e if role.startswith("events.") else used_d).add(g.column)

    # the event's own id: named so, and (nearly) one row each
    for c in events:
        if event_id_named(c.name) and c.kind in (INT, STRING) and c.distinct >= MOSTLY_UNIQUE * c.non_null > 0:
            keep(EVENT_ID, Guess(EVENT_ID, c.name, "sure", f"name match; {c.distinct} distinct in {c.non_null} events"))
            break
    keep(DECISION_TIME, _time_guess(DECISION_TIME, decisions, used_d))
    keep(EVENT_TIME, _time_guess(EVENT_TIME, events, used_e))
    _join(out, decisions, events, used_d, used_e)
    for role in (DECISION_ID, EVENT_DECISION_ID):
        if role in out.roles:
            (used_e if role.startswith("events.") else used_d).add(out.roles[role].column)
    if DECISION_TIME not in out.roles:  # an unnamed epoch column, now that the id is known
        keep(DECISION_TIME, _time_guess(DECISION_TIME, decisions, used_d, by_content=True))
    if EVENT_TIME not in out.roles:
        keep(EVENT_TIME, _time_guess(EVENT_TIME, events, used_e, by_content=True))
    keep(EVENT_TYPE, _type_guess(events, used_e))
    keep(EVENT_VALUE, _value_guess(events, used_e))
    return out


def _time_guess(role: str, columns: list[Column], used: set[str], by_content: bool = False) -> Guess | None:
    """A time column: by name and content (by_content: content alone, the first epoch column)."""
    found = []
    for i, c in enumerate(columns):
        why = time_fits(c) if c.name not in used else None
        score = time_name_score(c.name)
        if why is None or (id_like(c.name) and not score) or (not score and not by_content and c.kind != TIME):
            continue
        side = "event" if role == EVENT_TIME else "decision"
        found.append(((-score, side not in c.name.lower(), c.kind != TIME, i), c, score, why))
    if not found:
        return None
    _, c, score, why = min(found, key=lambda f: f[0])
    sure = {2: "sure", 1: "likely"}.get(score, "likely" if c.kind == TIME else "a guess")
    return Guess(role, c.name, sure, f"{'name match' if score else 'content only'}; {why}")


def _join(out: EventGuesses, decisions: list[Column], events: list[Column], used_d: set[str], used_e: set[str]) -> None:
    """The events column whose sampled values are most often a decisions column's (an id column:
    nearly one row per decision), names like impression_id winning among the close ones; with none
    in common, the same-named id columns (overlap stays None)."""
    ids_d = [
        c
        for c in decisions
        if c.name not in used_d
        and c.kind in (INT, STRING)
        and not c.multivalent
        and c.values
        and c.distinct >= MOSTLY_UNIQUE * c.non_null
        and not time_name_score(c.name)
    ]
    ids_e = [
        c
        for c in events
        if c.name not in used_e
        and c.kind in (INT, STRING)
        and not c.multivalent
        and c.values
        and not event_id_named(c.name)
        and not time_name_score(c.name)
    ]
    pairs = [(d, e, len(d.values & e.values)) for d in ids_d for e in ids_e]
    pairs = [p for p in pairs if p[2]]
    if pairs:
        best = max(n / len(e.values) for _, e, n in pairs)

        def rank(p: tuple[Column, Column, int]) -> tuple:
            d, e, n = p
            share = n / len(e.values)
            names = join_name_score(d.name) + join_name_score(e.name) if share >= best / 2 else -1
            return (names, share, d.name == e.name)

        d, e, n = max(pairs, key=rank)
        share = n / len(e.values)
        sure = "sure" if share >= 0.5 else "likely"
        out.overlap = (n, len(e.values))
        out.roles[DECISION_ID] = Guess(
            DECISION_ID,
            d.name,
            sure,
            f"{n} of the events' {len(e.values)} sampled {e.name} values are among its values",
        )
        out.roles[EVENT_DECISION_ID] = Guess(
            EVENT_DECISION_ID, e.name, sure, f"{share:.0%} of its sampled values are the decisions' {d.name} values"
        )
        return
    named_d = [c for c in ids_d if join_name_score(c.name)]
    named_e = [c for c in ids_e if join_name_score(c.name)]
    same = [(d, e) for d in named_d for e in named_e if d.name == e.name]
    if same:
        d, e = max(same, key=lambda de: join_name_score(de[0].name))
    elif named_d and named_e:
        d = max(named_d, key=lambda c: join_name_score(c.name))
        e = max(named_e, key=lambda c: join_name_score(c.name))
    else:
        return
    why = (
        "an id column of the same name; their sampled values do not overlap"
        if d.name == e.name
        else ("an id column; no sampled value in common")
    )
    out.roles[DECISION_ID] = Guess(DECISION_ID, d.name, "a guess", why)
    out.roles[EVENT_DECISION_ID] = Guess(EVENT_DECISION_ID, e.name, "a guess", why)


def _type_guess(events: list[Column], used: set[str]) -> Guess | None:
    """A text column of a few repeated values: by name (type, event_type, ...), else by the values
    (click, purchase, ...), else the only such column."""
    found = []
    for i, c in enumerate(events):
        if c.name in used or c.kind != STRING or c.multivalent or not 0 < c.distinct <= MAX_EVENT_TYPES:
            continue
        if c.distinct == c.non_null and c.non_null > 1:
            continue  # every value once: not a type
        low = c.name.lower()
        score = 2 if low in TYPE_NAMES else 1 if any(t in TYPE_TOKENS for t in _tokens(c.name)) else 0
        words = sum(1 for v, _ in c.counts if event_type_word(v))
        found.append(((-score, -words, i), c, score, words))
    if not found:
        return None
    _, c, score, words = min(found, key=lambda f: f[0])
    if not score and not words and len(found) > 1:
        return None
    shown = f"{c.distinct} distinct strings"
    if score:
        return Guess(EVENT_TYPE, c.name, "sure" if score == 2 else "likely", f"name match; {shown}")
    return Guess(EVENT_TYPE, c.name, "a guess", f"content only; {shown}")


def _value_guess(events: list[Column], used: set[str]) -> Guess | None:
    """A number column named like an amount, else the only number column left."""
    numbers = [c for c in events if c.name not in used and c.kind in (FLOAT, INT) and not epoch_unit(c)]
    for c in numbers:
        low = c.name.lower()
        if low in VALUE_NAMES or any(t in VALUE_TOKENS for t in _tokens(c.name)):
            sure = "sure" if low in VALUE_NAMES else "likely"
            return Guess(EVENT_VALUE, c.name, sure, f"name match; {c.describe()} ({c.non_null} of {c.rows} events)")
    numbers = [c for c in numbers if not id_like(c.name)]
    if len(numbers) == 1:
        c = numbers[0]
        return Guess(EVENT_VALUE, c.name, "a guess", f"content only; {c.describe()} ({c.non_null} of {c.rows} events)")
    return None


def decision_id_column(columns: list[Column], taken: set[str]) -> str | None:
    """The one column that identifies each decision (named like impression_id, request_id, ...; its
    sampled values all distinct), else None: mapped as bandit_columns.decision_id, the split is
    drawn from it and does not move when a config selects other features."""
    found = [
        c.name
        for c in columns
        if c.name not in taken
        and join_name_score(c.name) == 2
        and c.kind in (STRING, INT)
        and c.unique
        and not is_row_index(c)
    ]
    return found[0] if len(found) == 1 else None
