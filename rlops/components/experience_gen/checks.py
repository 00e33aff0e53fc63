"""The checks rows of every kind are put through: rejects (a reason per bad row, the first one
wins), column labels for messages, and the value checks several kinds share (finite numbers,
actions inside the spec, probabilities in (0, 1])."""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from rlops.components.common.records import ACTION
from rlops.components.experience_gen.config import ExperienceGenConfig, SpecConfig
from rlops.components.experience_gen.layout import Field, Layout

NOT_FINITE = "not_finite"
ACTION_OUT_OF_RANGE = "action_out_of_range"
PROPENSITY_OUT_OF_RANGE = "propensity_out_of_range"
PROPENSITY_BELOW_FLOOR = "propensity_below_floor"
ACTION_NOT_ALLOWED = "action_not_allowed"
BAD_MASK = "bad_action_mask"
OUT_OF_RANGE = "out_of_range"


class Rejects:
    """Each bad row of a batch of `n` and its first (reason code, message): later reasons are not kept."""

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


def label(field: Field, j: int | None = None) -> str:
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


def finite(values: np.ndarray, field: Field, rej: Rejects, as_float32: bool = True) -> None:
    v = values.astype(np.float32) if as_float32 and values.dtype != np.float32 else values
    ok = np.isfinite(v)
    if ok.ndim == 1:
        rej.add(
            ~ok,
            NOT_FINITE,
            lambda i: (
                f"{label(field)}: {values[i]!r} is not finite" + (" as float32" if np.isfinite(values[i]) else "")
            ),
        )
    else:
        bad_rows = ~ok.all(axis=1)
        if bad_rows.any():

            def msg(i: int) -> str:
                j = int(np.argmin(ok[i]))
                return f"{label(field, j)}: {values[i, j]!r} is not finite"

            rej.add(bad_rows, NOT_FINITE, msg)


def check_action(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: Rejects) -> None:
    spec = action_spec(config)
    field = layout.require(ACTION)
    a = values[ACTION]
    lo = -np.inf if spec.minimum is None else spec.minimum
    hi = np.inf if spec.maximum is None else spec.maximum
    if not spec.is_discrete:
        finite(a, field, rej)
    inside = (a >= lo) & (a <= hi)
    inside = inside if inside.ndim == 1 else inside.all(axis=1)
    rej.add(
        ~inside,
        ACTION_OUT_OF_RANGE,
        lambda i: f"{label(field)}: {a[i].tolist()!r} outside the action spec [{spec.minimum}, {spec.maximum}]",
    )


def check_probability(values: dict[str, np.ndarray], field: Field, rej: Rejects) -> None:
    p = values[field.name]
    with np.errstate(invalid="ignore"):
        ok = (p > 0) & (p <= 1)
    rej.add(~ok, PROPENSITY_OUT_OF_RANGE, lambda i: f"{label(field)}: {p[i]!r} outside (0, 1]")


def message(field: Field, what: str) -> Callable[[int], str]:
    return lambda i: f"{label(field)}: {what}"


def action_spec(config: ExperienceGenConfig) -> SpecConfig:
    """The action spec, which every record kind has by the time rows are validated (the config
    requires it, or a simulation or the item table sets it at planning)."""
    assert config.action_spec is not None
    return config.action_spec
