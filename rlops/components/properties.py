"""Properties written to ML Metadata (TFX custom properties) or KFP artifact metadata: finite or
absent, never NaN or Inf.

ML Metadata's SQLite store writes a NaN double as the SQL token `nan` ("no such column: nan"), and
KFP serializes metadata to JSON, where NaN is not a value. A number that is not finite means "no
such number" (e.g. the lower bound of an interval the data cannot support): the property is left
out and the reason travels in its own string property. Every component imports this module (it
sits under rlops/components/, below the components, so no component imports a sibling).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np


def is_finite_number(value: Any) -> bool:
    """A number (bools and numpy scalars included) that is not NaN or +-Inf."""
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, (int, np.integer)):
        return True
    if isinstance(value, (float, np.floating)):
        return math.isfinite(float(value))
    return False


def finite_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """`properties` without its non-finite numbers; nested dicts and lists are cleaned the same
    way (a non-finite number inside one becomes None, so the structure stays JSON)."""
    return {
        key: json_safe(value)
        for key, value in properties.items()
        if not (isinstance(value, (float, np.floating)) and not is_finite_number(value))
    }


def json_safe(value: Any) -> Any:
    """`value` as strict JSON can hold it: non-finite numbers become None (null), numpy scalars
    Python ones, at any depth."""
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    return value


def number(value: float, sign: str = "", digits: int = 4) -> str:
    """`value` printed to `digits` decimals, never `-0.0000`: a value that rounds to zero is 0
    (`sign` "+" prints the sign of the others)."""
    return f"{round(float(value), digits) + 0.0:{sign}.{digits}f}"


def set_custom_properties(artifact: Any, properties: Mapping[str, Any]) -> None:
    """Typed TFX custom properties (int, float, string) on an artifact, non-finite floats left
    out. bool is written as int (what TFX's own `blessed` property is)."""
    for key, value in finite_properties(properties).items():
        if isinstance(value, (bool, int)):
            artifact.set_int_custom_property(key, int(value))
        elif isinstance(value, float):
            artifact.set_float_custom_property(key, value)
        else:
            artifact.set_string_custom_property(key, value if isinstance(value, str) else str(value))
