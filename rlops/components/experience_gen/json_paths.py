"""Column paths into JSON payload columns: `request_payload[0].user_a`, `response_payload[0].action`.

Vertex AI's request-response logging writes one BigQuery row per request: `request_payload` and
`response_payload` are REPEATED STRING columns, each element one instance / prediction as a JSON
string. A BanditColumns / FeatureColumn column written as a path reads the base column (JSON
strings, or values already parsed by the reader) and walks `[index]` and `.key` steps. Only
columns written as paths pay for JSON parsing; a step that finds nothing leaves the value missing,
so the record is quarantined with a message naming the path.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

_PATH = re.compile(r"^([A-Za-z_]\w*)((?:\[\d+\]|\.[A-Za-z_]\w*)+)$")
_STEP = re.compile(r"\[(\d+)\]|\.([A-Za-z_]\w*)")
_MISSING = object()


def parse(column: str) -> tuple[str, tuple[int | str, ...]] | None:
    """(base column, steps) when `column` is a path, else None (a plain column name)."""
    m = _PATH.match(column)
    if m is None:
        return None
    steps = tuple(int(i) if i else key for i, key in _STEP.findall(m.group(2)))
    return m.group(1), steps


def base_column(column: str) -> str | None:
    parsed = parse(column)
    return parsed[0] if parsed else None


@functools.lru_cache(maxsize=1 << 16)
def _loads(text: str | bytes) -> Any:
    """Parsed once for every path into the same payload (action and propensity of one response);
    the cache spans a block's fields. Callers only read the result."""
    try:
        return json.loads(text)
    except ValueError:
        return _MISSING


def _step(value: Any, step: int | str) -> Any:
    if isinstance(value, (str, bytes)):  # a JSON string (BigQuery STRING), parsed on demand
        value = _loads(value)
        if value is _MISSING:
            return _MISSING
    if isinstance(step, int):
        return value[step] if isinstance(value, (list, tuple)) and step < len(value) else _MISSING
    return value.get(step, _MISSING) if isinstance(value, dict) else _MISSING


def resolve(raw: Any, num_rows: int, steps: tuple[int | str, ...]) -> list:
    """The value at `steps` in each row of the base column (Arrow array or list); None if absent."""
    if raw is None:
        return [None] * num_rows
    values = raw.to_pylist() if hasattr(raw, "to_pylist") else list(raw)
    out = []
    for value in values:
        for step in steps:
            if value is None or value is _MISSING:
                break
            value = _step(value, step)
        out.append(None if value is _MISSING else value)
    return out


def with_paths(columns: Any, names: tuple[str, ...] | list[str], num_rows: int) -> Any:
    """`columns` plus each path in `names` resolved from its base column; unchanged (the same
    object, no copying) when no name is a path."""
    parsed = [(name, parse(name)) for name in names]
    paths = [(name, p) for name, p in parsed if p is not None and p[0] in columns]
    if not paths:
        return columns
    out = dict(columns)
    for name, (base, steps) in paths:
        out[name] = resolve(columns[base], num_rows, steps)
    return out
