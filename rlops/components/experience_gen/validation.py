"""Per-record validation: typed extraction, then the checks that make data safe to train on.

Everything is vectorized over a batch; messages are only built for the rows that fail. Each bad
row gets its first failing reason: a code (counted, for the top-reasons summary) and a message
naming the column and value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from rlops.components.common.decision_kinds import BANDIT, SLATE, decision_kind
from rlops.components.experience_gen import convert, records, slates
from rlops.components.experience_gen.config import ExperienceGenConfig, SpecConfig
from rlops.components.experience_gen.convert import MISSING_VALUE, RawColumn
from rlops.components.experience_gen.layout import INT, Field, Layout

NOT_FINITE = "not_finite"
ACTION_OUT_OF_RANGE = "action_out_of_range"
PROPENSITY_OUT_OF_RANGE = "propensity_out_of_range"
PROPENSITY_BELOW_FLOOR = "propensity_below_floor"
ACTION_NOT_ALLOWED = "action_not_allowed"
BAD_MASK = "bad_action_mask"
OUT_OF_RANGE = "out_of_range"


@dataclass
class Validated:
    columns: dict[str, np.ndarray]  # canonical field -> values of the valid rows
    rows: np.ndarray  # int64 indices of the valid rows in the input batch
    rejects: dict[int, tuple[str, str]]  # input row -> (reason code, message)
    split_key: np.ndarray | None = None  # valid rows' split key (UTF-8 bytes objects)
    split_time: np.ndarray | None = None  # valid rows' split time (int64)
    # grouped kinds (trajectories, slates): rejected row -> its episode / slate id, if readable
    reject_episodes: dict[int, str] | None = None


class _Rejects:
    def __init__(self, n: int):
        self.bad = np.zeros(n, bool)
        self.items: dict[int, tuple[str, str]] = {}

    def add(self, mask: np.ndarray, code: str, message: Callable[[int], str]) -> None:
        new = mask & ~self.bad
        if new.any():
            for i in np.flatnonzero(new):
                self.items[int(i)] = (code, message(int(i)))
            self.bad |= new

    def add_errors(self, errors: Mapping[int, tuple[str, str]]) -> None:
        for i, e in errors.items():
            if not self.bad[i]:
                self.bad[i] = True
                self.items[i] = e


def _label(field: Field, j: int | None = None) -> str:
    """The user's column name for messages (and the output field when it differs)."""
    if len(field.columns) > 1 and j is not None:
        return field.columns[j]
    col = field.columns[0]
    base = col if col == field.name else f"{col} ({field.name})"
    return base if j is None or field.width in (None, 1) else f"{base}[{j}]"


def present_key(name: str) -> str:
    """Where an optional field's "had a value" mask travels next to its values."""
    return name + ":present"


TRUNCATED_SUFFIX = ":truncated"


def truncated_key(name: str) -> str:
    """Where a multivalent feature's "had more values than its dim" mask travels (counted, not written)."""
    return name + TRUNCATED_SUFFIX


def validate(
    raw: Mapping[str, RawColumn], num_rows: int, layout: Layout, config: ExperienceGenConfig, text: bool
) -> Validated:
    """Typed extraction of every layout field from `raw` (num_rows rows), then the semantic
    checks of the record kind. `text`: values arrive as strings to parse (CSV)."""
    rej = _Rejects(num_rows)
    values: dict[str, np.ndarray] = {}
    present: dict[str, np.ndarray] = {}
    id_ok = None
    group_key = decision_kind(layout.kind).group_key
    for field in layout.all_fields:
        if field is layout.split_key:
            ex = convert.extract_keys(raw, num_rows, field, text)
        else:
            ex = convert.extract(raw, num_rows, field, text)
        if field.name == group_key:
            id_ok = ~ex.missing & (ex.values != "")
            id_ok[list(ex.errors)] = False
        absent = all(raw.get(c) is None for c in field.columns)
        if not field.required and absent:
            continue  # an optional column this source does not have
        rej.add_errors(ex.errors)
        if field.required:
            rej.add(ex.missing, MISSING_VALUE, _message(field, "missing value"))
        else:
            present[field.name] = ~ex.missing
        values[field.name] = ex.values
        if field.multivalent and ex.counts is not None:
            if layout.kind == SLATE:  # a slate's slot lists: a longer one is quarantined, not cut
                values[slates.COUNT_PREFIX + field.name] = ex.counts
            else:
                present[truncated_key(field.name)] = ex.counts > int(field.width or 0)
    if layout.kind == BANDIT:
        _check_bandit(values, layout, config, rej)
    elif layout.kind == SLATE and config.slate_columns.position:
        _check_slate_row(values, layout, config, rej)
    elif layout.kind == SLATE:
        _check_slate_lists(values, layout, config, rej)
    else:
        _check_trajectory(values, present, layout, config, rej)
    rows = np.flatnonzero(~rej.bad)
    pick = (lambda v: v) if len(rows) == num_rows else (lambda v: v[rows])  # all good: no copies
    out = {name: pick(v) for name, v in values.items() if not name.startswith("_")}
    for name, mask in present.items():  # optional values: keep "absent" visible to assembly
        out[name if name.endswith(TRUNCATED_SUFFIX) else present_key(name)] = pick(mask)
    for name in (
        records.REWARD,
        records.PROPENSITY,
        records.PROPENSITY_CASCADE,
        records.WEIGHT,
        records.DISCOUNT,
        records.LOG_PROBABILITY,
        records.VALUE_PREDICTION,
    ):
        if name in out:
            out[name] = out[name].astype(np.float32)
    key = pick(values["_split_key"]) if "_split_key" in values else None
    time = pick(values["_split_time"]) if "_split_time" in values else None
    episodes = None
    if id_ok is not None and group_key is not None:  # assembly drops the rest of a group that lost a row
        ids = values[group_key]
        episodes = {i: str(ids[i]) for i in rej.items if id_ok[i]}
    return Validated(out, rows, rej.items, key, time, episodes)


def _finite(values: np.ndarray, field: Field, rej: _Rejects, as_float32: bool = True) -> None:
    v = values.astype(np.float32) if as_float32 and values.dtype != np.float32 else values
    ok = np.isfinite(v)
    if ok.ndim == 1:
        rej.add(
            ~ok,
            NOT_FINITE,
            lambda i: (
                f"{_label(field)}: {values[i]!r} is not finite" + (" as float32" if np.isfinite(values[i]) else "")
            ),
        )
    else:
        bad_rows = ~ok.all(axis=1)
        if bad_rows.any():

            def msg(i: int) -> str:
                j = int(np.argmin(ok[i]))
                return f"{_label(field, j)}: {values[i, j]!r} is not finite"

            rej.add(bad_rows, NOT_FINITE, msg)


def _check_action(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: _Rejects) -> None:
    spec = _spec(config)
    field = layout.require(records.ACTION)
    a = values[records.ACTION]
    lo = -np.inf if spec.minimum is None else spec.minimum
    hi = np.inf if spec.maximum is None else spec.maximum
    if not spec.is_discrete:
        _finite(a, field, rej)
    inside = (a >= lo) & (a <= hi)
    inside = inside if inside.ndim == 1 else inside.all(axis=1)
    rej.add(
        ~inside,
        ACTION_OUT_OF_RANGE,
        lambda i: f"{_label(field)}: {a[i].tolist()!r} outside the action spec [{spec.minimum}, {spec.maximum}]",
    )


def _check_bandit(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: _Rejects) -> None:
    f = layout.require
    for feature in layout.features:
        if feature.feature_kind != "categorical":
            _finite(values[feature.name], feature, rej)
    if records.ACTION in values:  # per-arm records get theirs from the item join
        _check_action(values, layout, config, rej)
    if records.REWARD in values:  # else events give the rewards (events.py)
        _finite(values[records.REWARD], f(records.REWARD), rej)
    if records.DECISION_ID in values:  # an empty id ("" in Parquet or JSON) joins nothing: not a decision id
        rej.add(values[records.DECISION_ID] == "", MISSING_VALUE, _message(f(records.DECISION_ID), "empty id"))
    if records.PROPENSITY in values:
        p = values[records.PROPENSITY]
        with np.errstate(invalid="ignore"):
            ok = (p > 0) & (p <= 1)
        rej.add(~ok, PROPENSITY_OUT_OF_RANGE, lambda i: f"{_label(f(records.PROPENSITY))}: {p[i]!r} outside (0, 1]")
        floor = config.propensity_floor
        low = ok & (p < floor)  # e.g. 1e-46 would be written as 0.0 in float32
        if config.propensity_floor_action == "clip":
            values[records.PROPENSITY] = np.where(low, floor, p)
        else:
            rej.add(
                low,
                PROPENSITY_BELOW_FLOOR,
                lambda i: (
                    f"{_label(f(records.PROPENSITY))}: {p[i]!r} is below "
                    f"propensity_floor {floor} (set propensity_floor_action: clip to raise it to the floor)"
                ),
            )
    if records.ACTION_MASK in values and records.ACTION in values:
        m, field = values[records.ACTION_MASK], f(records.ACTION_MASK)
        binary = ((m == 0) | (m == 1)).all(axis=1)
        rej.add(~binary, BAD_MASK, lambda i: f"{_label(field)}: {m[i].tolist()} is not all 0/1")
        rej.add(binary & ~m.any(axis=1), BAD_MASK, lambda i: f"{_label(field)}: allows no action")
        a = values[records.ACTION]
        lo = int(_spec(config).minimum or 0)
        idx = np.clip(a - lo, 0, m.shape[1] - 1)
        allowed = m[np.arange(len(a)), idx] == 1
        rej.add(
            ~allowed,
            ACTION_NOT_ALLOWED,
            lambda i: f"{_label(f(records.ACTION))}: {a[i]} is masked out by {_label(field)} {m[i].tolist()}",
        )
    if records.WEIGHT in values:
        w = values[records.WEIGHT]
        _finite(w, f(records.WEIGHT), rej)
        rej.add(w < 0, OUT_OF_RANGE, lambda i: f"{_label(f(records.WEIGHT))}: {w[i]!r} is negative")


def _check_probability(values: dict[str, np.ndarray], field: Field, rej: _Rejects) -> None:
    p = values[field.name]
    with np.errstate(invalid="ignore"):
        ok = (p > 0) & (p <= 1)
    rej.add(~ok, PROPENSITY_OUT_OF_RANGE, lambda i: f"{_label(field)}: {p[i]!r} outside (0, 1]")


def _check_slate_row(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: _Rejects) -> None:
    """One shown item's row: its slate id, a position inside the slate (made 0-based here), an
    item inside the action spec, a finite reward and propensities in (0, 1]."""
    f = layout.require
    for feature in layout.features:
        if feature.feature_kind != "categorical":
            _finite(values[feature.name], feature, rej)
    ids = values[records.SLATE_ID]
    rej.add(ids == "", MISSING_VALUE, lambda i: f"{_label(f(records.SLATE_ID))}: empty slate id")
    first = int(config.slate_columns.first_position or 0)
    length = int(config.slate_length or 0)
    pos = values[records.POSITION]
    rej.add(
        (pos < first) | (pos >= first + length),
        OUT_OF_RANGE,
        lambda i: (
            f"{_label(f(records.POSITION))}: {pos[i]} outside positions {first}..{first + length - 1} "
            f"(slate_length {length}, first_position {first})"
        ),
    )
    values[records.POSITION] = pos - first
    if config.events is not None:  # a shown item's events name its page and the item as logged
        from rlops.components.experience_gen.events import slot_ids

        values[records.DECISION_ID] = slot_ids(ids, values[records.SLATE_ITEM])
    if f(records.SLATE_ITEM).dtype == INT:  # indices; an item table's ids are mapped after validation
        spec = _spec(config)
        lo = int(spec.minimum or 0)
        hi = int(spec.maximum if spec.maximum is not None else np.iinfo(np.int64).max)
        item = values[records.SLATE_ITEM]
        rej.add(
            (item < lo) | (item > hi),
            ACTION_OUT_OF_RANGE,
            lambda i: f"{_label(f(records.SLATE_ITEM))}: item {item[i]} outside the action spec [{lo}, {hi}]",
        )
        values[records.SLATE_ITEM] = item - lo
    if records.REWARD in values:  # else events give each slot its reward
        _finite(values[records.REWARD], f(records.REWARD), rej)
    _check_probability(values, f(records.PROPENSITY), rej)
    if records.PROPENSITY_CASCADE in values:
        _check_probability(values, f(records.PROPENSITY_CASCADE), rej)


def _message(field: Field, what: str) -> Callable[[int], str]:
    return lambda i: f"{_label(field)}: {what}"


def _lists_differ(field: Field, counts: np.ndarray, items: Field, item_counts: np.ndarray) -> Callable[[int], str]:
    return lambda i: f"{_label(field)}: {counts[i]} values for the {item_counts[i]} items of {_label(items)}"


def _not_all_probabilities(field: Field, p: np.ndarray, shown: np.ndarray) -> Callable[[int], str]:
    return lambda i: f"{_label(field)}: {p[i][shown[i]].tolist()} not all in (0, 1]"


def _spec(config: ExperienceGenConfig) -> SpecConfig:
    """The action spec, which every record kind has by the time rows are validated (the config
    requires it, or a simulation or the item table sets it at planning)."""
    assert config.action_spec is not None
    return config.action_spec


def _check_slate_lists(
    values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: _Rejects
) -> None:
    """One slate per row, its slot fields lists in display order: lists of one length, at most
    slate_length, items inside the action spec and shown once, finite rewards, propensities in
    (0, 1] and a cascade propensity that never increases (and starts at the first propensity)."""
    f = layout.require
    for feature in layout.features:
        if feature.feature_kind != "categorical":
            _finite(values[feature.name], feature, rej)
    if records.SLATE_ID in values:
        ids = values[records.SLATE_ID]
        rej.add(ids == "", MISSING_VALUE, lambda i: f"{_label(f(records.SLATE_ID))}: empty slate id")
    count = values[slates.COUNT_PREFIX + records.SLATE_ITEM]
    for name in (records.REWARD, records.PROPENSITY, records.PROPENSITY_CASCADE):
        other = values.get(slates.COUNT_PREFIX + name)
        if other is not None:
            rej.add(
                other != count, slates.SLATE_LISTS_DIFFER, _lists_differ(f(name), other, f(records.SLATE_ITEM), count)
            )
    length = int(config.slate_length or 0)
    rej.add(count == 0, MISSING_VALUE, lambda i: f"{_label(f(records.SLATE_ITEM))}: no items shown")
    rej.add(
        count > length,
        slates.SLATE_TOO_LONG,
        lambda i: f"{_label(f(records.SLATE_ITEM))}: {count[i]} items, more than slate_length {length}",
    )
    shown = np.arange(length)[None, :] < count[:, None]
    items = values[records.SLATE_ITEM]
    if f(records.SLATE_ITEM).dtype == INT:  # indices; an item table's ids are mapped after validation
        spec = _spec(config)
        lo = int(spec.minimum or 0)
        hi = int(spec.maximum if spec.maximum is not None else np.iinfo(np.int64).max)
        outside = ((items < lo) | (items > hi)) & shown
        rej.add(
            outside.any(1),
            ACTION_OUT_OF_RANGE,
            lambda i: f"{_label(f(records.SLATE_ITEM))}: items {items[i][shown[i]].tolist()} outside [{lo}, {hi}]",
        )
        values[records.SLATE_ITEM] = np.where(shown, items - lo, slates.PADDING_ITEM)
        rej.add(
            slates.shows_an_item_twice(values[records.SLATE_ITEM], shown),
            slates.SLATE_DUPLICATE_ITEM,
            lambda i: f"{_label(f(records.SLATE_ITEM))}: an item is shown twice in {items[i][shown[i]].tolist()}",
        )
    r = values[records.REWARD]
    rej.add(
        ~np.isfinite(np.where(shown, r, 0.0)).all(1),
        NOT_FINITE,
        lambda i: f"{_label(f(records.REWARD))}: {r[i][shown[i]].tolist()} holds a value that is not finite",
    )
    for name in (records.PROPENSITY, records.PROPENSITY_CASCADE):
        if name in values:
            p = values[name]
            with np.errstate(invalid="ignore"):
                bad = (~((p > 0) & (p <= 1)) & shown).any(1)
            rej.add(bad, PROPENSITY_OUT_OF_RANGE, _not_all_probabilities(f(name), p, shown))
    if records.PROPENSITY_CASCADE in values:
        c, p = values[records.PROPENSITY_CASCADE], values[records.PROPENSITY]
        with np.errstate(invalid="ignore"):
            rises = (np.diff(c, axis=1) > slates.CASCADE_TOLERANCE * c[:, :-1]) & shown[:, 1:]
            mismatch = np.abs(c[:, 0] - p[:, 0]) > slates.CASCADE_TOLERANCE * np.maximum(c[:, 0], p[:, 0])
        rej.add(
            rises.any(1),
            slates.SLATE_CASCADE_INCREASES,
            lambda i: f"{_label(f(records.PROPENSITY_CASCADE))}: {c[i][shown[i]].tolist()} rises down the slate",
        )
        rej.add(
            mismatch,
            slates.SLATE_CASCADE_MISMATCH,
            lambda i: (
                f"{_label(f(records.PROPENSITY_CASCADE))}: {c[i, 0]!r} at the first slot differs from "
                f"its propensity {p[i, 0]!r}"
            ),
        )


def _check_trajectory(
    values: dict[str, np.ndarray],
    present: dict[str, np.ndarray],
    layout: Layout,
    config: ExperienceGenConfig,
    rej: _Rejects,
) -> None:
    f = layout.require
    ids = values[records.EPISODE_ID]
    rej.add(ids == "", MISSING_VALUE, lambda i: f"{_label(f(records.EPISODE_ID))}: empty episode id")
    step = values[records.STEP]
    rej.add(step < 0, OUT_OF_RANGE, lambda i: f"{_label(f(records.STEP))}: {step[i]} is negative")
    _finite(values[records.OBSERVATION], f(records.OBSERVATION), rej)
    _check_action(values, layout, config, rej)
    _finite(values[records.REWARD], f(records.REWARD), rej)
    if records.DISCOUNT in values:
        d = values[records.DISCOUNT]
        with np.errstate(invalid="ignore"):
            ok = (d >= 0) & (d <= 1)
        rej.add(~ok, OUT_OF_RANGE, lambda i: f"{_label(f(records.DISCOUNT))}: {d[i]!r} outside [0, 1]")
    if records.LOG_PROBABILITY in values:
        lp = values[records.LOG_PROBABILITY]
        _finite(lp, f(records.LOG_PROBABILITY), rej)
        if _spec(config).is_discrete:  # a probability mass is at most 1
            rej.add(
                lp > 1e-6,
                OUT_OF_RANGE,
                lambda i: f"{_label(f(records.LOG_PROBABILITY))}: {lp[i]!r} > 0 for a discrete action",
            )
    if records.VALUE_PREDICTION in values:
        _finite(values[records.VALUE_PREDICTION], f(records.VALUE_PREDICTION), rej)
    for name, v in values.items():
        if name.startswith(records.DIST_PARAMS_PREFIX):  # -inf logits are legal (masked actions)
            nan = np.isnan(v).any(axis=1)
            rej.add(nan, NOT_FINITE, _message(f(name), "NaN in distribution parameters"))
