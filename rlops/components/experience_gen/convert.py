"""Typed extraction of one field from a batch of raw source values, vectorized.

A column arrives as an Arrow array (fast paths: CSV/JSON/Parquet/TFRecord readers) or a Python
list (slow paths: rows that broke the fast parser, BigQuery rows). Either way the result is a
NumPy array plus which rows were missing and which had the wrong type or shape, with a message
that names the column. Arrow arrays are converted with Arrow/NumPy kernels; only a column whose
vectorized cast fails falls back to per-value Python, to find the offending rows.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlops.components.experience_gen import json_paths
from rlops.components.experience_gen.layout import BOOL, FLOAT, INT, STRING, TIMESTAMP, Field

# Reason codes for malformed values (the semantic checks add their own in validation.py).
MISSING_COLUMN, MISSING_VALUE, WRONG_TYPE, WRONG_SHAPE = "missing_column", "missing_value", "wrong_type", "wrong_shape"

RawColumn: TypeAlias = pa.Array | pa.ChunkedArray | list[Any] | None


@dataclass
class Extracted:
    values: np.ndarray  # [N] or [N, W]; rows flagged below hold filler
    missing: np.ndarray  # bool [N]: no value (null, empty cell, absent key or column)
    errors: dict[int, tuple[str, str]]  # row -> (reason code, message): wrong type / shape
    counts: np.ndarray | None = None  # multivalent: values per record before truncation to the width


class _Bad(Exception):
    pass


_NP = {FLOAT: np.float64, INT: np.int64, BOOL: np.bool_, TIMESTAMP: np.int64, STRING: object}


def extract(columns: Mapping[str, RawColumn], num_rows: int, field: Field, text: bool) -> Extracted:
    """Values of `field` for `num_rows` rows. `text`: values arrive as strings (CSV) and are parsed."""
    columns = json_paths.with_paths(columns, field.columns, num_rows)  # `payload[0].key` columns
    one = columns.get(field.columns[0])
    if field.multivalent:
        return _multi(one, num_rows, field, text)
    if field.width is None or (len(field.columns) == 1 and field.width == 1 and not _is_list(one)):
        out = _scalar(one, num_rows, field.dtype, field.columns[0], text)
        if field.width is not None:
            out.values = out.values.reshape(num_rows, 1)
        return out
    if len(field.columns) == 1:
        return _list(one, num_rows, field, text)
    parts = [_scalar(columns.get(c), num_rows, field.dtype, c, text) for c in field.columns]
    dtype = np.float32 if field.dtype == FLOAT else _NP[field.dtype]
    values = np.empty((len(parts), num_rows), dtype)  # filled column by column (contiguous writes)
    missing = np.zeros(num_rows, bool)
    errors: dict[int, tuple[str, str]] = {}
    for j, p in enumerate(parts):
        values[j] = p.values
        for i, e in p.errors.items():
            errors.setdefault(i, e)
        for i in np.flatnonzero(p.missing & ~missing):  # name the empty cell, not just the field
            errors.setdefault(int(i), (MISSING_VALUE, f"{field.columns[j]} ({field.name}): missing value"))
        missing |= p.missing
    return Extracted(values.T, missing, errors)  # [N, W], column-major until encoding copies it


def extract_keys(columns: Mapping[str, RawColumn], num_rows: int, field: Field, text: bool) -> Extracted:
    """Split keys (a text field) as their UTF-8 bytes: splits.key_hash hashes bytes as it hashes the
    text they encode, and bytes straight from Arrow skip a Python str per row and its re-encoding
    (most of the cost of hashing a million keys)."""
    arr = json_paths.with_paths(columns, field.columns, num_rows).get(field.columns[0])
    if isinstance(arr, (pa.Array, pa.ChunkedArray)) and pa.types.is_integer(arr.type):  # as extract: to text
        arr = pc.cast(arr, pa.string())
    if isinstance(arr, (pa.Array, pa.ChunkedArray)) and (
        pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
    ):
        arr = _chunk(arr)
        missing = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.zeros(len(arr), bool)
        binary = pc.cast(arr, pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
        return Extracted(np.asarray(binary.fill_null(b"").to_numpy(zero_copy_only=False), object), missing, {})
    out = extract(columns, num_rows, field, text)
    encoded = np.empty(len(out.values), object)
    encoded[:] = [v.encode() for v in out.values.tolist()]
    out.values = encoded
    return out


def _is_list(arr: RawColumn) -> bool:
    if isinstance(arr, (pa.Array, pa.ChunkedArray)):
        return pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)
    return False


def _width(field: Field) -> int:
    assert field.width is not None, field.name  # list-valued and multivalent fields have one
    return int(field.width)


def _chunk(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _all_missing(num_rows: int, dtype: str, column: str, code: str = MISSING_COLUMN) -> Extracted:
    errors = {} if code == MISSING_VALUE else {i: (code, f"column {column!r} is absent") for i in range(num_rows)}
    return Extracted(np.zeros(num_rows, _NP[dtype]), np.ones(num_rows, bool), errors)


# --- scalars ----------------------------------------------------------------------------------


def _scalar(arr: RawColumn, num_rows: int, dtype: str, column: str, text: bool) -> Extracted:
    if arr is None:
        return _all_missing(num_rows, dtype, column)
    if isinstance(arr, list):
        return _scalar_py(arr, dtype, column, text)
    return _scalar_arrow(_chunk(arr), num_rows, dtype, column, text)


def _scalar_arrow(arr: pa.Array, num_rows: int, dtype: str, column: str, text: bool) -> Extracted:
    t = arr.type
    if _is_list(arr):  # tf.Example features are lists: a scalar is a list of one
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        lengths = np.nan_to_num(lengths.astype(np.float64), nan=0.0).astype(np.int64)
        flat = pc.list_flatten(arr)
        starts = np.cumsum(lengths) - lengths
        one = lengths == 1
        inner = _scalar(flat.take(pa.array(starts[one])), int(one.sum()), dtype, column, text)
        values = np.zeros(num_rows, inner.values.dtype)
        values[one] = inner.values
        missing = lengths == 0
        missing[one] = inner.missing
        idx = np.flatnonzero(one)
        errors = {int(idx[i]): e for i, e in inner.errors.items()}
        for i in np.flatnonzero(lengths > 1):
            errors[int(i)] = (WRONG_SHAPE, f"{column}: expected one value, got {lengths[i]}")
        return Extracted(values, missing, errors)
    if pa.types.is_dictionary(t):  # Parquet categoricals
        arr = arr.dictionary_decode()
        t = arr.type
    missing = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.zeros(len(arr), bool)
    try:
        if dtype == STRING:
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                return Extracted(np.asarray(arr.fill_null("").to_numpy(zero_copy_only=False), object), missing, {})
            if pa.types.is_integer(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
                return Extracted(
                    np.asarray(pc.cast(arr, pa.string()).fill_null("").to_numpy(zero_copy_only=False), object),
                    missing,
                    {},
                )
            raise _Bad()
        if (pa.types.is_string(t) or pa.types.is_large_string(t)) and dtype == TIMESTAMP:
            return Extracted(_numpy(text_timestamps(arr), np.int64), missing, {})
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if not text:
                raise _Bad()
            arr = pc.cast(arr, _STRING_TARGET[dtype])  # raises on any unparseable value
            t = arr.type
        if dtype == FLOAT and pa.types.is_floating(t):  # keep float32 as float32: no copy
            return Extracted(_numpy(arr, None), missing, {})
        if dtype == FLOAT and (pa.types.is_integer(t) or pa.types.is_decimal(t)):
            return Extracted(_numpy(pc.cast(arr, pa.float64()), np.float64), missing, {})
        if dtype in (INT, TIMESTAMP) and pa.types.is_integer(t):
            return Extracted(_numpy(pc.cast(arr, pa.int64()), np.int64), missing, {})
        if dtype == TIMESTAMP and pa.types.is_timestamp(t):  # epoch microseconds
            return Extracted(_numpy(pc.cast(pc.cast(arr, pa.timestamp("us")), pa.int64()), np.int64), missing, {})
        if dtype in (INT, TIMESTAMP) and pa.types.is_floating(t):
            f = _numpy(arr, np.float64)
            ok = missing | (np.isfinite(f) & (np.floor(f) == f) & (np.abs(f) < 2.0**63))
            values = np.where(ok & ~missing, f, 0).astype(np.int64)
            errors = {int(i): (WRONG_TYPE, f"{column}: {f[i]!r} is not an integer") for i in np.flatnonzero(~ok)}
            return Extracted(values, missing, errors)
        if dtype == BOOL and pa.types.is_boolean(t):
            return Extracted(_numpy(arr, np.bool_), missing, {})
        if dtype == BOOL and pa.types.is_integer(t):
            v = _numpy(pc.cast(arr, pa.int64()), np.int64)
            ok = missing | (v == 0) | (v == 1)
            errors = {int(i): (WRONG_TYPE, f"{column}: {v[i]} is not a boolean (0/1)") for i in np.flatnonzero(~ok)}
            return Extracted(v == 1, missing, errors)
        raise _Bad()
    except (_Bad, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return _scalar_py(arr.to_pylist(), dtype, column, text)


_OFFSET = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def text_timestamps(arr: pa.Array) -> pa.Array:
    """Text times as int64: integers as logged, date-times (ISO 8601; naive ones as UTC) as epoch
    microseconds. The first value picks which parse to try first (a failed cast costs as much as
    several good ones); ArrowInvalid when none fits every value (then each is parsed alone)."""
    present = arr.drop_null()
    first = present[0].as_py() if len(present) else None
    parses = [
        lambda: pc.cast(arr, pa.int64()),
        lambda: pc.cast(pc.cast(arr, pa.timestamp("us")), pa.int64()),
        lambda: pc.cast(pc.cast(arr, pa.timestamp("us", tz="UTC")), pa.int64()),
    ]
    if isinstance(first, str) and not first.strip().lstrip("-").isdigit():
        parses = parses[2:] + parses[1:2] if _OFFSET.search(first.strip()) else parses[1:]
    for parse in parses[:-1]:
        try:
            return parse()
        except pa.ArrowInvalid:
            continue
    return parses[-1]()


_STRING_TARGET = {FLOAT: pa.float64(), INT: pa.int64(), TIMESTAMP: pa.int64(), BOOL: pa.bool_()}


def _numpy(arr: pa.Array, dtype: Any) -> np.ndarray:
    """Arrow -> NumPy (zero-copy when there are no nulls); nulls become 0/False."""
    if arr.null_count:
        arr = arr.fill_null(False if dtype is np.bool_ else 0)
    out = arr.to_numpy(zero_copy_only=False)
    return out if dtype is None else np.asarray(out, dtype)


def _scalar_py(values: Sequence[Any], dtype: str, column: str, text: bool) -> Extracted:
    n = len(values)
    out = np.zeros(n, _NP[dtype]) if dtype != STRING else np.full(n, "", object)
    missing = np.zeros(n, bool)
    errors: dict[int, tuple[str, str]] = {}
    conv = _PY[dtype]
    for i, v in enumerate(values):
        if isinstance(v, (list, tuple)):  # tf.Example convention: a scalar is a list of one
            if len(v) > 1:
                errors[i] = (WRONG_SHAPE, f"{column}: expected one value, got {len(v)}")
                continue
            v = v[0] if v else None
        if v is None or (text and isinstance(v, str) and v == ""):
            missing[i] = True
            continue
        try:
            out[i] = conv(v, text)
        except (_Bad, ValueError, TypeError, OverflowError):
            errors[i] = (WRONG_TYPE, f"{column}: {_show(v)} is not {_WHAT[dtype]}")
    return Extracted(out, missing, errors)


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _py_float(v: Any, text: bool) -> float:
    if isinstance(v, bool):
        raise _Bad()
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    if text and isinstance(v, (str, bytes)):
        return float(v)
    raise _Bad()


def _py_int(v: Any, text: bool) -> int:
    if isinstance(v, bool):
        raise _Bad()
    if isinstance(v, (int, np.integer)):
        if not -(2**63) <= int(v) < 2**63:
            raise _Bad()
        return int(v)
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer() and abs(float(v)) < 2.0**63:
        return int(v)
    if text and isinstance(v, (str, bytes)):
        s = v.decode() if isinstance(v, bytes) else v
        try:
            return _py_int(int(s), False)
        except ValueError:
            return _py_int(float(s), False)
    raise _Bad()


def _py_bool(v: Any, text: bool) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)) and v in (0, 1):
        return bool(v)
    if text and isinstance(v, str) and v.strip().lower() in ("0", "1", "true", "false"):
        return v.strip().lower() in ("1", "true")
    raise _Bad()


def _py_timestamp(v: Any, text: bool) -> int:
    """Integers as logged; date-times (datetime, ISO 8601 or BigQuery's "... UTC" text) as epoch
    microseconds (naive ones taken as UTC)."""
    if isinstance(v, str):
        try:
            return _py_int(v, True)
        except (_Bad, ValueError):
            s = v.strip()
            s = s[:-4] + "+00:00" if s.endswith(" UTC") else s[:-1] + "+00:00" if s.endswith("Z") else s
            v = datetime.datetime.fromisoformat(s)
    if isinstance(v, datetime.datetime):
        v = v if v.tzinfo is not None else v.replace(tzinfo=datetime.timezone.utc)
        return int(round(v.timestamp() * 1e6))
    return _py_int(v, text)


def _py_string(v: Any, text: bool) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(v)
    raise _Bad()


_PY = {FLOAT: _py_float, INT: _py_int, BOOL: _py_bool, TIMESTAMP: _py_timestamp, STRING: _py_string}
_WHAT = {
    FLOAT: "a number",
    INT: "an integer",
    BOOL: "a boolean",
    TIMESTAMP: "an integer timestamp",
    STRING: "a string or integer id",
}


# --- vectors from one list-valued column ------------------------------------------------------


def _list(arr: RawColumn, num_rows: int, field: Field, text: bool) -> Extracted:
    column, width = field.columns[0], _width(field)
    dtype = np.float32 if field.dtype == FLOAT else _NP[field.dtype]
    if arr is None:
        e = _all_missing(num_rows, field.dtype, column)
        return Extracted(np.zeros((num_rows, width), dtype), e.missing, e.errors)
    if isinstance(arr, list) or not _is_list(arr):
        return _list_py(arr if isinstance(arr, list) else _chunk(arr).to_pylist(), field, text)
    arr = _chunk(arr)
    lengths = pc.list_value_length(arr)
    missing = lengths.is_null().to_numpy(zero_copy_only=False)
    lengths = np.asarray(lengths.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    flat = pc.list_flatten(arr)
    inner = _scalar(flat, len(flat), field.dtype, column, text)
    starts = np.cumsum(lengths) - lengths
    good = (lengths == width) & ~missing
    values = np.zeros((num_rows, width), dtype)
    if good.any():
        take = starts[good][:, None] + np.arange(width)
        values[good] = inner.values[take]
    errors: dict[int, tuple[str, str]] = {}
    for i in np.flatnonzero(~good & ~missing):
        errors[int(i)] = (WRONG_SHAPE, f"{column}: expected {width} values, got {lengths[i]}")
    bad_inner = np.zeros(len(flat), bool)
    bad_inner[list(inner.errors)] = True
    bad_inner |= inner.missing
    if bad_inner.any():
        row_of = np.repeat(np.arange(num_rows), lengths)
        for j in np.flatnonzero(bad_inner):
            i = int(row_of[j])
            what = "null" if inner.missing[j] else inner.errors[j][1].split(": ", 1)[-1]
            errors.setdefault(i, (WRONG_TYPE, f"{column}[{j - starts[i]}]: {what}"))
    return Extracted(values, missing, errors)


def _list_py(values: Sequence[Any], field: Field, text: bool) -> Extracted:
    column, width = field.columns[0], _width(field)
    dtype = np.float32 if field.dtype == FLOAT else _NP[field.dtype]
    n = len(values)
    out = np.zeros((n, width), dtype)
    missing = np.zeros(n, bool)
    errors: dict[int, tuple[str, str]] = {}
    conv = _PY[field.dtype]
    for i, v in enumerate(values):
        if v is None:
            missing[i] = True
            continue
        if width == 1 and not isinstance(v, (list, tuple, np.ndarray)):
            v = [v]
        if not isinstance(v, (list, tuple, np.ndarray)):
            errors[i] = (WRONG_TYPE, f"{column}: {_show(v)} is not a list of {width} values")
            continue
        if len(v) != width:
            errors[i] = (WRONG_SHAPE, f"{column}: expected {width} values, got {len(v)}")
            continue
        try:
            out[i] = [conv(x, text) for x in v]
        except (_Bad, ValueError, TypeError, OverflowError):
            errors[i] = (WRONG_TYPE, f"{column}: {_show(v)} holds a value that is not {_WHAT[field.dtype]}")
    return Extracted(out, missing, errors)


# --- multivalent categoricals: a list of ids per record ----------------------------------------


def _pad(field: Field) -> Any:
    """Padding past a list's end: "" for ids, -1 for integer ids, NaN for numbers (a slate's slot
    rewards and propensities, where -1 is a value)."""
    return "" if field.dtype == STRING else np.nan if field.dtype == FLOAT else -1


def _multi(arr: RawColumn, num_rows: int, field: Field, text: bool) -> Extracted:
    """[N, width] values, each row's values first then padding ("" / -1), and per-row counts.

    Arrow lists (Parquet, JSON arrays) and text cells split on the field's separator go through
    Arrow kernels; Python lists (rows that broke the fast parser) value by value. Null / "" / -1
    elements are padding, a null list is an empty one; an element of the wrong type rejects the row
    (wrong_type, naming the column and position)."""
    column = field.columns[0]
    if arr is None:
        e = _all_missing(num_rows, field.dtype, column)
        return Extracted(
            np.full((num_rows, _width(field)), _pad(field), _NP[field.dtype]),
            e.missing,
            e.errors,
            np.zeros(num_rows, np.int64),
        )
    if isinstance(arr, list):
        return _multi_py(arr, field, text)
    return _multi_arrow(_chunk(arr), num_rows, field, text)


def _multi_arrow(arr: pa.Array, num_rows: int, field: Field, text: bool) -> Extracted:
    column = field.columns[0]
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    parse = text
    if not _is_list(arr):
        if field.separator and (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t) or pa.types.is_integer(t)
        ):
            arr = pc.split_pattern(pc.cast(arr, pa.string()), field.separator)
            parse = True  # ids split from text are parsed as text
        else:
            return _multi_py(arr.to_pylist(), field, text)
    lengths = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    flat = pc.list_flatten(arr)
    inner = _scalar(flat, len(flat), field.dtype, column, parse)
    row_of = np.repeat(np.arange(num_rows), lengths)
    starts = np.cumsum(lengths) - lengths
    errors: dict[int, tuple[str, str]] = {}
    for j, (_, message) in sorted(inner.errors.items()):
        i = int(row_of[j])
        errors.setdefault(i, (WRONG_TYPE, f"{column}[{j - starts[i]}] ({field.name}): {message.split(': ', 1)[-1]}"))
    keep = ~inner.missing & (inner.values != _pad(field))
    if errors:
        keep[np.isin(row_of, list(errors))] = False
    return _packed(inner.values, keep, row_of, num_rows, field, errors)


def _packed(
    values: np.ndarray,
    keep: np.ndarray,
    row_of: np.ndarray,
    num_rows: int,
    field: Field,
    errors: dict[int, tuple[str, str]],
) -> Extracted:
    """Flat values with their rows -> [N, width], each row's kept values first (in order)."""
    width = _width(field)
    rows = row_of[keep]
    counts = np.bincount(rows, minlength=num_rows).astype(np.int64)
    pos = np.arange(len(rows)) - (np.cumsum(counts) - counts)[rows]  # rank within the row
    out = np.full((num_rows, width), _pad(field), _NP[field.dtype])
    fits = pos < width
    out[rows[fits], pos[fits]] = values[keep][fits]
    return Extracted(out, np.zeros(num_rows, bool), errors, counts)


def _multi_py(values: Sequence[Any], field: Field, text: bool) -> Extracted:
    column, n = field.columns[0], len(values)
    conv, pad = _PY[field.dtype], _pad(field)
    flat: list[Any] = []
    rows: list[int] = []
    errors: dict[int, tuple[str, str]] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, (str, bytes, int)) and not isinstance(v, bool) and field.separator:
            v = (v.decode() if isinstance(v, bytes) else str(v)).split(field.separator)
        if not isinstance(v, (list, tuple, np.ndarray)):
            errors[i] = (
                WRONG_TYPE,
                f"{column} ({field.name}): {_show(v)} is not a list of {_WHAT[field.dtype]}s"
                + ("" if field.separator else " (set `separator` for text cells)"),
            )
            continue
        got = []
        for j, x in enumerate(v):
            if x is None or (isinstance(x, str) and x == ""):
                continue
            try:
                got.append(conv(x, text or bool(field.separator)))
            except (_Bad, ValueError, TypeError, OverflowError):
                errors[i] = (WRONG_TYPE, f"{column}[{j}] ({field.name}): {_show(x)} is not {_WHAT[field.dtype]}")
                break
        else:
            got = [x for x in got if x != pad]
            flat.extend(got)
            rows.extend([i] * len(got))
    arr = np.empty(len(flat), object) if field.dtype == STRING else np.asarray(flat, np.int64)
    if field.dtype == STRING:
        arr[:] = flat
    return _packed(arr, np.ones(len(flat), bool), np.asarray(rows, np.int64), n, field, errors)
