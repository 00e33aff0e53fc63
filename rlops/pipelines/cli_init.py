"""`rlops init`: a commented starter config for the bandit pipeline, from a log file.

    rlops init --from logs.csv [--items item_table.csv] [--events events.csv] [--out my.yaml] [--force]

Reads a sample of the logs as ingestion does (the first MiB, rows that do not parse skipped:
experience_gen.sources.sample), profiles each column (infer_columns), guesses the action, reward,
propensity, position and timestamp columns, joins an item table's features as per-arm features,
reads columns named by item id (`affinity_<id>` for the table's items) as one per-arm feature each,
lists every other column as a context feature (commented out, with the reason, where it looks
unusable), and ends with the command that runs it. What it cannot decide is one `DECIDE:` line.

With --events (a file of clicks, purchases, ...: one row per event) the rewards come from the
events instead of a reward column (experience_gen.events): the events file is sampled and profiled
the same way, and the section proposes the join (the events column whose sampled values are most
often a decisions id column's: bandit_columns.decision_id, events.columns.decision_id), the time on
both sides (ISO-8601 text or epoch seconds/milliseconds: bandit_columns.decision_time,
events.columns.time), the type column with the types seen and their counts, a value and an event id
column where there is one, and rewards by type name (click: 1.0; a purchase, order or conversion:
its value; other types commented out). The decisions' id and time are not context features, and a
column named like a reward is left out of them (the outcome would leak into the features).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from rlops.features import schema
from rlops.pipelines.infer_columns import (
    DECISION_ID,
    DECISION_TIME,
    EVENT_DECISION_ID,
    EVENT_ID,
    EVENT_ROLES,
    EVENT_TIME,
    EVENT_TYPE,
    EVENT_VALUE,
    FLOAT,
    INT,
    LIST,
    STRING,
    Column,
    EventGuesses,
    Guess,
    Guesses,
    PerItemColumns,
    decision_id_column,
    describe_columns,
    event_type_word,
    guess_event_roles,
    guess_roles,
    is_row_index,
    per_item_columns,
    profile,
    unused_reason,
)

DEFAULT_OUT = "rlops-bandit.yaml"
VOCAB_SIZE = 1000  # FeatureColumn.vocab_size's default: more distinct values share the OOV bucket
RESERVED = (*schema.RESERVED, "item_id", "candidates", "num_actions")  # record keys a feature cannot be named


class InitError(ValueError):
    """Bad input to `rlops init`; the message names the flag and the file."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("init", help="write a commented starter config for the bandit pipeline from a log file")
    p.add_argument("--from", dest="logs", required=True, metavar="LOGS", help="a log file: CSV, JSON Lines or Parquet")
    p.add_argument("--items", help="an item table (one row per item: its id and features) for per-arm features")
    p.add_argument(
        "--events",
        help="an events file (one row per click, purchase, ...: the decision's id, a time, a type) to make the "
        "rewards from: proposes experience_gen.events (the join, times, types and their rewards) instead of a "
        "reward column",
    )
    p.add_argument(
        "--out", default=DEFAULT_OUT, help=f"where to write the config (default {DEFAULT_OUT}; - for stdout)"
    )
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.set_defaults(handler=main)
    return p


def main(args: argparse.Namespace) -> int:
    try:
        if args.out != "-" and os.path.exists(args.out) and not args.force:
            raise InitError(f"--out {args.out}: the file exists; pass --force to overwrite it")
        if args.out != "-" and not os.path.isdir(os.path.dirname(args.out) or "."):
            raise InitError(f"--out {args.out}: no such folder: {os.path.dirname(args.out)}")
        text, plan = starter_config(args.logs, args.items, args.out, getattr(args, "events", None))
    except InitError as e:
        print(f"rlops: error: {e}", file=sys.stderr)
        return 2
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    for line in plan.summary():
        print(line)
    print(f"wrote {args.out}; next: rlops run bandit --config {args.out}")
    return 0


# --- reading a sample -------------------------------------------------------------------------


def file_format(path: str) -> str:
    """The FileSource format a file's name says (compressed names too); CSV otherwise."""
    name = path.lower().removesuffix(".gz").removesuffix(".gzip")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    return "csv"


def read_columns(path: str, flag: str) -> list[Column]:
    """The profiled columns of the file's sample; InitError naming `flag` and the file otherwise."""
    from rlops.components.experience_gen.config import FileSource
    from rlops.components.experience_gen.errors import closest
    from rlops.components.experience_gen.sources.sample import sample_types

    if not os.path.exists(path):
        folder = os.path.dirname(path) or "."
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        hint = closest(os.path.basename(path), names) if names else f"no such folder: {folder}"
        raise InitError(f"{flag} {path}: file not found ({hint.replace('column', 'file')})")
    if os.path.isdir(path):
        raise InitError(f"{flag} {path}: is a folder; give one file of it")
    source = FileSource(pattern=path, format=file_format(path))
    try:
        _, samples = sample_types([(path, os.path.getsize(path))], source)
    except ValueError as e:
        text = " ".join(str(e).split())
        if "no records to read" in text:
            raise InitError(f"{flag} {path}: no records to read: {text.split(': ', 2)[-1]}") from None
        raise InitError(
            f"{flag} {path}: cannot read a sample as {source.format}: {text.split('(', 1)[-1][:300]}"
        ) from None
    if not samples:
        raise InitError(f"{flag} {path}: no columns in the sample")
    return profile(samples)


# --- the plan: which column does what ------------------------------------------------------------


@dataclass
class Feature:
    column: Column
    spec: dict  # the YAML feature entry
    note: str  # the comment beside it
    unused: str | None = None  # why it is commented out


@dataclass
class EventReward:
    """One event type's entry in events.rewards; `reward` None: left out (counted as unmapped_type)."""

    type: str
    reward: float | str | None
    count: int
    note: str


@dataclass
class EventsPlan:
    path: str
    columns: list[Column]  # the events' profiled columns
    guesses: EventGuesses
    rewards: list[EventReward] = field(default_factory=list)

    @property
    def binary(self) -> bool:
        """Every reward 0 or 1: max of constants 1.0, 0 by default (clicks)."""
        return all(r.reward in (None, 1.0) for r in self.rewards)


@dataclass
class Plan:
    logs: str
    columns: list[Column]  # the logs' profiled columns
    guesses: Guesses
    features: list[Feature]
    action_spec: dict | None
    items: str | None = None
    item_rows: int = 0
    item_table_id: str | None = None
    item_features: list[Feature] = field(default_factory=list)
    per_item: list[PerItemColumns] = field(default_factory=list)  # log columns named by item id
    per_item_names: list[tuple[str, PerItemColumns]] = field(default_factory=list)  # their feature names
    decide: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    events: EventsPlan | None = None  # --events: rewards from the events
    decision_id: str | None = None  # a column of each decision's own id (impression_id, ...): the split's key

    def guess_lines(self) -> list[str]:
        lines = []
        for role in ("action", "reward", "propensity", "position", "timestamp"):
            if role == "reward" and self.events is not None:
                lines.append(
                    f"{role:<10} <- the events of {os.path.basename(self.events.path)} (experience_gen.events)"
                )
                continue
            g = self.guesses.roles.get(role)
            if g is None:
                lines.append(f"{role:<10} <- (none found)")
                continue
            if role == "action" and self.items:
                g = Guess("item_id", g.column, g.sure, g.why)
            lines.append(g.line())
        if self.events is not None:
            for role in EVENT_ROLES:
                eg = self.events.guesses.roles.get(role)
                lines.append(eg.line() if eg else f"{role} <- (none found)")
        return lines

    def summary(self) -> list[str]:
        return self.guess_lines() + [f"note: {n}" for n in self.notes] + [f"DECIDE: {d}" for d in self.decide]


def plan_config(
    log_columns: list[Column],
    logs: str,
    item_columns: list[Column] | None,
    items: str | None,
    event_columns: list[Column] | None = None,
    events: str | None = None,
) -> Plan:
    join: dict[str, tuple[Column, float]] = {}  # log column -> (item table id column, share found)
    action_fits = None
    if item_columns is not None:
        join = _item_joins(log_columns, item_columns)

        def action_fits(c: Column) -> str | None:
            if c.name not in join:
                return None
            ic, share = join[c.name]
            return f"{c.describe()}; {share:.0%} of them are ids in {os.path.basename(items or '')}'s {ic.name}"

    guesses = guess_roles(log_columns, action_fits)
    outcome = None  # with events: a decisions column named like a reward, left out of the features
    if event_columns is not None:
        guesses.rejected.pop("reward", None)
        reward = guesses.roles.pop("reward", None)
        if reward is not None and reward.sure != "a guess":
            outcome = reward
    plan = Plan(logs, log_columns, guesses, [], None, items)
    _decide_roles(plan, log_columns, item_columns is not None, event_columns is not None)
    roles = {g.column for r, g in guesses.roles.items() if r != "position"}  # position stays a feature
    if event_columns is None:
        plan.decision_id = decision_id_column(log_columns, roles)
    if event_columns is not None and events is not None:
        plan.events = _plan_events(plan, event_columns, events)
        roles |= {g.column for r, g in plan.events.guesses.roles.items() if r in (DECISION_ID, DECISION_TIME)}
    action = guesses.roles.get("action")
    if item_columns is not None and action is not None:  # columns named by item id: per-arm features
        plan.per_item = per_item_columns(log_columns, join[action.column][0].values, roles)
    per_item = {col for group in plan.per_item for col in group.columns.values()}
    plan.features = [_feature(c, table=False) for c in log_columns if c.name not in roles | per_item]
    for f in plan.features:
        if outcome is not None and f.column.name == outcome.column:
            f.unused = (
                f"named like a reward ({outcome.why.removeprefix('name match; ')}): the rewards come from the "
                "events, and the outcome as a feature would leak into the policy"
            )
    if not [f for f in plan.features if f.unused is None]:
        raise InitError(
            f"--from {logs}: no column is left for context features (columns: "
            + ", ".join(repr(c.name) for c in log_columns)
            + "); the bandit pipeline needs at least one"
        )
    _note_size(plan)
    _note_stray(plan)
    if item_columns is None and action is not None:
        _note_per_action_columns(plan, log_columns, action.column)
    if item_columns is not None and action is not None:  # per-arm without an action: _decide_roles raised
        _plan_items(plan, item_columns, join[action.column][0])
    elif action is not None:
        column = next(c for c in log_columns if c.name == action.column)
        if column.kind == INT:
            low, high = int(column.low or 0), int(column.high or 0)
            plan.action_spec = {"shape": [], "dtype": "int32", "minimum": low, "maximum": high}
    return plan


def _note_size(plan: Plan) -> None:
    """A log small enough to be sampled whole, whose eval split would be too small to bless from."""
    from rlops.components.evaluator.config import DEFAULT_MIN_RECORDS
    from rlops.components.experience_gen.sources.sample import SAMPLE_BYTES

    rows = max(c.rows for c in plan.columns)
    whole = file_format(plan.logs) != "parquet" and not plan.logs.endswith((".gz", ".gzip"))  # bytes = sample
    if whole and os.path.getsize(plan.logs) < SAMPLE_BYTES and rows < 10 * DEFAULT_MIN_RECORDS:
        plan.notes.append(
            f"the log holds {rows} rows: its eval split (1 in 10 by default) gets about {rows // 10}, under the "
            f"{DEFAULT_MIN_RECORDS} the Evaluator needs for an estimate (evaluator.min_eval_records), so a run trains "
            "but does not bless; give it more logs"
        )


def _note_stray(plan: Plan) -> None:
    """Number columns with a few values that are not numbers: their rows are quarantined, and past
    max_bad_record_ratio of the records the run stops at ingestion."""
    stray = {c.name: len(c.stray) for c in plan.columns if c.stray}
    if stray:
        which = ", ".join(f"{name} ({n})" for name, n in stray.items())
        plan.notes.append(
            f"values that are not numbers in number columns ({which}) make their rows quarantined as wrong_type; "
            "past experience_gen.max_bad_record_ratio (1% of the records by default) the run stops at ingestion, "
            "naming them: fix those rows, or raise the ratio"
        )


def _note_per_action_columns(plan: Plan, columns: list[Column], action: str) -> None:
    """Columns named by the action ids (`affinity_0`, `affinity_1`, ...) without an item table: say
    how they become one per-arm feature instead of one global feature each."""
    ids = next(c for c in columns if c.name == action).values
    for group in per_item_columns(columns, ids, {action}):
        plan.notes.append(
            f"{len(group.columns)} columns {group.pattern} hold one value per action: give an item table "
            f"(--items; one id column will do) and they become one per-arm feature "
            f"(bandit_columns.per_arm_columns), not {len(group.columns)} context features"
        )


def _item_joins(log_columns: list[Column], item_columns: list[Column]) -> dict[str, tuple[Column, float]]:
    """Log column -> the item table's id column (unique per row) holding most of its values: the
    same name first, then the largest share found (at least half)."""
    ids = [c for c in item_columns if c.unique and c.kind in (INT, STRING) and not is_row_index(c)]
    out = {}
    for c in log_columns:
        if c.kind not in (INT, STRING) or not c.values or c.multivalent:
            continue
        scored = [(ic.name == c.name, len(c.values & ic.values) / len(c.values), ic) for ic in ids]
        scored = [s for s in scored if s[1] >= 0.5]
        if scored:
            same, share, ic = max(scored, key=lambda s: (s[0], s[1]))
            out[c.name] = (ic, share)
    return out


def _decide_roles(plan: Plan, columns: list[Column], per_arm: bool, events: bool = False) -> None:
    g = plan.guesses
    for role, why in g.rejected.items():
        plan.notes.append(f"not taken as the {role}: {why}")
    if "action" not in g.roles:
        if per_arm:  # a config without the join would not load: say so instead
            raise InitError(
                f"--items {plan.items}: no column of it is an id column (one row per value) whose values a "
                f"column of {plan.logs} holds; the join needs the logged item's id in both files"
            )
        plan.decide.append(
            "no action column found: set bandit_columns.action to the column of the logged action "
            "(integer ids) and action_spec's minimum/maximum to their range"
        )
    elif not per_arm and next(c for c in columns if c.name == g.roles["action"].column).kind != INT:
        plan.decide.append(
            f"the action column '{g.roles['action'].column}' holds text ids: give the item table (--items, "
            "per-arm features joined by id) or write the actions as integers 0..K-1"
        )
    if "reward" not in g.roles and not events:
        plan.decide.append(
            "no reward column found: set bandit_columns.reward to the column of the observed reward "
            "(a number per row; clicks as 0/1)"
        )
    if "propensity" not in g.roles:
        plan.decide.append(
            "no propensity column found: off-policy evaluation needs the logging policy's probability of "
            "each logged action; add it to the logs and set bandit_columns.propensity (the run stops at "
            "ingestion until then)"
        )
    if "position" in g.roles:
        pos = next(c for c in columns if c.name == g.roles["position"].column)
        plan.decide.append(
            f"'{pos.name}' ({pos.distinct} values) says a row is one slot of a slate: each row trains as its own "
            f"decision with {pos.name} as a context feature (serving: one call per position); keep that, or "
            f"delete the {pos.name} feature line to learn one choice for all slots"
        )


def _plan_events(plan: Plan, event_columns: list[Column], events: str) -> EventsPlan:
    """The events section: the join and time columns (a DECIDE line each where none is found), the
    types seen and the reward of each."""
    taken = {g.column for r, g in plan.guesses.roles.items() if r in ("action", "propensity", "position")}
    eg = guess_event_roles(plan.columns, event_columns, taken)
    ev = EventsPlan(events, event_columns, eg)
    d, e = eg.column(DECISION_ID), eg.column(EVENT_DECISION_ID)
    if eg.overlap is None and d and e:
        plan.decide.append(
            f"the sampled values of {events}'s '{e}' and {plan.logs}'s '{d}' did not overlap (no id in common in "
            "the samples), so the join is a guess by name: check that both hold the decision's id in the same form, "
            "or set bandit_columns.decision_id and events.columns.decision_id to the columns that do"
        )
    elif eg.overlap is None:
        plan.decide.append(
            f"no id column of {events} shares a sampled value with an id column of {plan.logs} (one value per "
            "decision): set bandit_columns.decision_id and events.columns.decision_id to the columns holding the "
            "decision's id"
        )
    if not eg.column(DECISION_TIME):
        plan.decide.append(
            f"no time column found in {plan.logs} (ISO-8601 text, or epoch seconds or milliseconds): each decision's "
            "events are counted from its time; set bandit_columns.decision_time"
        )
    if not eg.column(EVENT_TIME):
        plan.decide.append(
            f"no time column found in {events} (ISO-8601 text, or epoch seconds or milliseconds): set "
            "events.columns.time to the column of when each event happened"
        )
    value = eg.column(EVENT_VALUE)
    type_column = next((c for c in event_columns if c.name == eg.column(EVENT_TYPE)), None)
    if type_column is None:
        name = os.path.basename(events).lower()
        word = event_type_word(name)
        key = "click" if word == "click" else "purchase" if word == "conversion" else "event"
        rows = max((c.rows for c in event_columns), default=0)
        note = f"no type column: every event is this one type ({rows} in the sample)"
        ev.rewards = [EventReward(key, 1.0, rows, note + (f"; or value: the reward is its {value}" if value else ""))]
        return ev
    for event_type, n in type_column.counts:
        word = event_type_word(event_type)
        if word == "click":
            ev.rewards.append(EventReward(event_type, 1.0, n, f"{n} in the sample"))
        elif word == "conversion" and value:
            ev.rewards.append(EventReward(event_type, "value", n, f"{n} in the sample; the reward is its {value}"))
        elif word == "conversion":
            ev.rewards.append(EventReward(event_type, 1.0, n, f"{n} in the sample; no value column found: a constant"))
        else:
            ev.rewards.append(EventReward(event_type, None, n, f"{n} in the sample: no reward (unmapped_type)"))
    if ev.rewards and all(r.reward is None for r in ev.rewards):
        first = ev.rewards[0]
        first.reward, first.note = 1.0, f"{first.count} in the sample: the most frequent type"
        plan.decide.append(
            f"no event type of {events} reads as a click or a purchase ({_type_counts(type_column)}): the most "
            f"frequent, '{first.type}', rewards 1.0 and the others none; give each type its reward in events.rewards"
        )
    left = [r for r in ev.rewards if r.reward is None]
    if left:
        plan.notes.append(
            f"event types {', '.join(f'{r.type} ({r.count})' for r in left)} give no reward (each counted as "
            "unmapped_type): uncomment them in events.rewards to give them one"
        )
    return ev


def _type_counts(column: Column) -> str:
    return ", ".join(f"{t} ({n})" for t, n in column.counts)


def _plan_items(plan: Plan, item_columns: list[Column], id_column: Column) -> None:
    from rlops.components.experience_gen.sources.sample import SAMPLE_BYTES

    plan.item_rows = max((c.rows for c in item_columns), default=0)
    action = plan.guesses.roles["action"].column
    plan.item_table_id = id_column.name if id_column.name != action else None
    plan.item_features = [_feature(c, table=True) for c in item_columns if c.name != id_column.name]
    plan.action_spec = {"shape": [], "dtype": "int32", "minimum": 0, "maximum": id_column.distinct - 1}
    if not [f for f in plan.item_features if f.unused is None] and not plan.per_item:
        raise InitError(
            f"--items {plan.items}: no usable feature column besides its ids ({id_column.name}); per-arm "
            "training needs at least one item feature"
        )
    # The config sets trainer.network (render), which keeps the loader from adding the item id as an
    # item feature (pipelines.config._with_item_id_feature): it is written out instead, as that adds it.
    plan.item_features.append(
        Feature(
            id_column,
            {"name": id_column.name, "kind": "categorical"},
            "the item's own id: an embedding per item (a new item gets the out-of-vocabulary one)",
        )
    )
    _name_per_item(plan)
    if plan.items and os.path.getsize(plan.items) > SAMPLE_BYTES:
        plan.decide.append(
            f"the item table is larger than the 1 MiB sample ({id_column.distinct} items in it): set "
            "action_spec.maximum to the number of items - 1"
        )


def _name_per_item(plan: Plan) -> None:
    """Per-item column groups need names no item feature or reserved key has; items without a
    column stop ingestion, so each such group is one DECIDE line."""
    names = {f.spec["name"] for f in plan.item_features} | set(RESERVED)
    named = []
    for group in plan.per_item:
        name = group.name
        while name in names:
            name += "_by_item"
        names.add(name)
        named.append((name, group))
        if group.missing:
            shown = ", ".join(repr(i) for i in group.missing[:3]) + (", ..." if len(group.missing) > 3 else "")
            plan.decide.append(
                f"{len(group.missing)} item(s) of the item table have no column {group.pattern} ({shown}): ingestion "
                f"stops until every item has one; add the columns, or drop per_arm_columns.{name}"
            )
    plan.per_item_names = named


def _feature(c: Column, table: bool) -> Feature:
    """The feature entry for a column, its comment, and why it is left out (None: kept)."""
    name = f"{c.name}_feature" if c.name in RESERVED else c.name or "unnamed"
    spec: dict = {"name": name} if name == c.name else {"name": name, "column": c.name}
    note = c.describe()
    if c.kind == FLOAT:
        spec["kind"] = "float"
    elif c.kind == LIST:
        spec["kind"] = "float_list" if c.list_of == FLOAT else "categorical"
        if c.list_of != FLOAT:
            spec["multivalent"] = True
    elif c.kind in (INT, STRING):
        spec.update(kind="categorical", dtype="int64" if c.kind == INT else "string")
        if c.multivalent:
            spec["separator"] = "|"
        if c.kind == INT and c.distinct > 20:
            note += "; kind: float if it is a quantity"
        if c.distinct > VOCAB_SIZE:
            note += f"; the {VOCAB_SIZE} most frequent get their own slot (vocab_size), the rest share one"
    unused = unused_reason(c)
    if table and unused and unused.startswith("unique per row"):
        unused = None  # one value per item is what an item table holds
    return Feature(c, spec, note, unused)


# --- the YAML ---------------------------------------------------------------------------------


def _flow(value: object) -> str:
    """One YAML flow value (`{name: a, kind: float}`, `"a b"`), as the strict loader reads it."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _feature_lines(features: list[Feature], indent: str) -> list[str]:
    kept = [f for f in features if f.unused is None]
    width = max((len(_flow(f.spec)) for f in features), default=0)
    lines = [f"{indent}- {_flow(f.spec):<{width}}  # {f.note}" for f in kept]
    lines += [f"{indent[:-2]}# - {_flow(f.spec):<{width}}  # left out: {f.unused}" for f in features if f.unused]
    return lines


def render(plan: Plan, command: str, out: str) -> str:
    """The commented YAML for `plan`."""
    g = plan.guesses
    items = plan.items
    ev = plan.events
    lines = [
        f"# Bandit pipeline config for {plan.logs}{f' with the item table {items}' if items else ''}"
        + (f" and rewards from the events in {ev.path}" if ev else "")
        + ", written by",
        f"#   {command}",
        f"# from {max(c.rows for c in plan.columns)} sampled rows of {os.path.basename(plan.logs)}"
        + (f" and {plan.item_rows} of {os.path.basename(items)}" if items else "")
        + (f" and {max((c.rows for c in ev.columns), default=0)} of {os.path.basename(ev.path)}" if ev else "")
        + " (rows that do not parse are skipped, as ingestion quarantines them).",
        "# Column guesses (check them; each says why and how sure):",
        *[f"#   {line}" for line in plan.guess_lines()],
        *[f"# note: {n}" for n in plan.notes],
        *[f"# DECIDE: {d}" for d in plan.decide],
        "name: rlops-bandit",
        "root: pipeline_root/bandit          # artifacts and ML Metadata; pushed policies in <root>/serving",
        "experience_gen:",
        f"  source: {_flow({'kind': 'file', 'pattern': plan.logs, 'format': file_format(plan.logs)})}"
        + ("   # relative paths are read from where rlops runs" if not os.path.isabs(plan.logs) else ""),
    ]
    if items:
        lines.append(f"  item_source: {_flow({'kind': 'file', 'pattern': items, 'format': file_format(items)})}")
    if plan.action_spec is not None:
        spec = plan.action_spec
        why = (
            f"one action per item of {os.path.basename(items)}"
            if items
            else f"the action ids seen in the sample ({spec['minimum']}..{spec['maximum']}): widen it if the logs have more"
        )
        lines.append(f"  action_spec: {_flow(spec)}   # {why}")
    lines.append("  bandit_columns:")
    action = g.column("action")
    if items:
        if action:
            lines.append(
                f"    item_id: {_flow(action)}               # the logged item; the action is its index among the items"
            )
        if plan.item_table_id:
            lines.append(f"    item_table_id: {_flow(plan.item_table_id)}   # the item table's id column")
    elif action:
        lines.append(f"    action: {_flow(action)}")
    if ev is None:
        lines.append(f"    reward: {_flow(g.column('reward') or 'reward')}")
    lines.append(f"    propensity: {_flow(g.column('propensity'))}")
    if g.column("timestamp"):
        lines.append(f"    timestamp: {_flow(g.column('timestamp'))}")
    if plan.decision_id:
        lines.append(
            f"    decision_id: {_flow(plan.decision_id)}   # each decision's id: the split is drawn from it, so "
            "configs that select other features score the same eval rows"
        )
    if ev is not None:
        eg = ev.guesses
        lines += [
            _entry(
                "    ",
                "decision_id",
                eg.column(DECISION_ID) or "decision_id",
                "joins the events (events.columns.decision_id)"
                if eg.column(DECISION_ID)
                else "DECIDE: the column of each decision's id",
            ),
            _entry(
                "    ",
                "decision_time",
                eg.column(DECISION_TIME) or "decision_time",
                "where each decision's events window starts"
                if eg.column(DECISION_TIME)
                else "DECIDE: the column of each decision's time",
            ),
        ]
    lines.append("    features:                       # context features: kinds from the sample")
    lines += _feature_lines(plan.features, "      ")
    if items:
        lines.append(
            f"    item_features:                  # per-arm features of {os.path.basename(items)}, joined by id"
        )
        lines += _feature_lines(plan.item_features, "      ")
    if plan.per_item_names:
        lines.append("    per_arm_columns:                # log columns named by item id: one per-arm feature each")
        for name, group in plan.per_item_names:
            first = next(iter(group.columns.values()))
            members = set(group.columns.values())
            described = describe_columns(c for c in plan.columns if c.name in members)  # all of them, not the first
            lines.append(
                f"      {_flow(name)}: {_flow(group.pattern)}   # {len(group.columns)} columns ({first}, ...: {described})"
            )
    if ev is not None:
        lines += _events_lines(ev)
    if g.column("timestamp"):
        lines += [
            "  # Split by time instead of by a hash of each decision (train before the boundary, eval after):",
            f"  # splits: {{splits: [{{name: train}}, {{name: eval}}], time_column: {g.column('timestamp')},"
            " time_boundaries: [<epoch microseconds for date-times, else units as logged>]}",
        ]
    lines += ["trainer:", *_trainer_lines(plan)]
    lines += [
        "evaluator:",
        "  kind: bandit",
        "  estimator: dr                    # the gate: bless a candidate when its estimate beats the baseline",
        "",
        "# Run it (ingest, train, evaluate off-policy, push when blessed):",
        f"#   rlops run bandit --config {out if out != '-' else DEFAULT_OUT}",
    ]
    return "\n".join(lines) + "\n"


def _trainer_lines(plan: Plan) -> list[str]:
    """The trainer section: the reward network's loss from the rewards seen (0/1: the log loss of
    clicks; other numbers: squared error) and, with an item table, the two-tower network the per-arm
    defaults use, each set rather than left to a default the reader cannot see."""
    ev, reward = plan.events, plan.guesses.column("reward")
    column = next((c for c in plan.columns if c.name == reward), None)
    if ev is not None:
        binary: bool | None = ev.binary
        seen = "every event type's reward is 0 or 1" if ev.binary else "events give rewards other than 0/1"
    elif column is not None:
        binary, seen = column.binary, f"{reward} is {column.describe()} in the sample"
    else:
        binary, seen = None, ""
    extra = ["network"] if plan.items else []
    if binary is not None:
        extra.append("reward_loss")
    lines = [
        _entry(
            "  ",
            "agent",
            "neural_epsilon_greedy",
            "or lin_ucb, lin_ts" + (f" (then delete {' and '.join(extra)})" if extra else ""),
        ),
        _entry("  ", "serving_epsilon", 0.1, "the pushed policy explores this share and reports each propensity"),
    ]
    if plan.items:
        lines.append(
            _entry(
                "  ",
                "network",
                "dot_product",
                "the per-arm default: a user tower and an item tower (common_tower: one MLP)",
            )
        )
    if binary:
        lines.append(
            _entry("  ", "reward_loss", "sigmoid_cross_entropy", f"the log loss of 0/1 rewards (clicks): {seen}")
        )
    elif binary is False:
        lines.append(_entry("  ", "reward_loss", "squared_error", f"rewards are not 0/1: {seen}"))
    else:
        lines.append(
            "  # reward_loss: sigmoid_cross_entropy     # DECIDE with the reward column: 0/1 rewards (clicks); "
            "squared_error for others"
        )
    return lines


def _entry(indent: str, key: str, value: object, note: str, width: int = 34) -> str:
    """`key: value` in flow style, its comment beside it at `width` (further when it is longer)."""
    text = f"{indent}{key}: {_flow(value)}"
    return f"{text:<{width}}  # {note}"


def _why(g: Guess | None, missing: str) -> str:
    return f"{g.sure}: {g.why}" if g else missing


def _events_lines(ev: EventsPlan) -> list[str]:
    """The experience_gen.events section."""
    eg = ev.guesses
    name = os.path.basename(ev.path)
    r = eg.roles
    value = eg.column(EVENT_VALUE)
    source = {"kind": "file", "pattern": ev.path, "format": file_format(ev.path)}
    lines = [
        f"{'  events:':<34}  # the rewards: events of {name} joined to each decision by its id",
        f"    source: {_flow(source)}"
        + ("   # relative paths are read from where rlops runs" if not os.path.isabs(ev.path) else ""),
        "    columns:",
        _entry(
            "      ",
            "decision_id",
            eg.column(EVENT_DECISION_ID) or "decision_id",
            _why(r.get(EVENT_DECISION_ID), "DECIDE: the column of the decision's id"),
        ),
        _entry(
            "      ",
            "time",
            eg.column(EVENT_TIME) or "time",
            _why(r.get(EVENT_TIME), "DECIDE: when each event happened"),
        ),
        _entry(
            "      ",
            "type",
            eg.column(EVENT_TYPE),
            _why(r.get(EVENT_TYPE), "no type column found: every event is one type, rewards' only entry"),
        ),
        _entry("      ", "value", value, _why(r.get(EVENT_VALUE), "no value column found (a purchase's amount)")),
        _entry(
            "      ",
            "event_id",
            eg.column(EVENT_ID),
            f"{_why(r.get(EVENT_ID), '')}: an event sent twice counts once"
            if r.get(EVENT_ID)
            else "no event id column found: exact repeats of a row count once",
        ),
        _entry(
            "    ",
            "window",
            "30m",
            "how long after a decision its events count: the window defines the reward (later events are late), "
            "so keep it fixed once chosen",
        ),
    ]
    type_column = next((c for c in ev.columns if c.name == eg.column(EVENT_TYPE)), None)
    if type_column is not None:
        lines.append(f"    # event types in the sample: {_type_counts(type_column)}")
    lines.append(
        f"{'    rewards:':<34}  # per event type: a constant, or value (the event's {value or 'value column'})"
    )
    for reward in ev.rewards:
        if reward.reward is None:
            lines.append(_entry("      # ", reward.type, 1.0, reward.note))
        else:
            lines.append(_entry("      ", reward.type, reward.reward, reward.note))
    lines += [
        _entry("    ", "aggregate", "max", "how a decision's events of one type combine: max, sum, first or count"),
        _entry("    ", "default_reward", 0.0, "the reward of a decision none of whose events counts"),
        _entry(
            "    ",
            "cutoff",
            "auto",
            "decisions whose window is still open at the latest event read wait for the next run",
        ),
    ]
    return lines


def starter_config(
    logs: str, items: str | None = None, out: str = DEFAULT_OUT, events: str | None = None
) -> tuple[str, Plan]:
    """The starter YAML for these files, and the plan behind it."""
    log_columns = read_columns(logs, "--from")
    item_columns = read_columns(items, "--items") if items else None
    event_columns = read_columns(events, "--events") if events else None
    plan = plan_config(log_columns, logs, item_columns, items, event_columns, events)
    command = (
        f"rlops init --from {logs}"
        + (f" --items {items}" if items else "")
        + (f" --events {events}" if events else "")
        + f" --out {out}"
    )
    return render(plan, command, out), plan
