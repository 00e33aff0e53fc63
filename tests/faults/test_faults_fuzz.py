"""Fault suite, fuzzing: malformed CSV, JSON Lines and Parquet (truncation, wrong encodings, BOMs,
ragged rows, NaN/Inf, huge lines, gzip cut short, CR line endings).

Invariant: either the input fails honestly (an unreadable byte range, or a clear error at plan
time), or every record is counted exactly once: records read = the records the bytes hold =
valid + quarantined. No exception escapes ingestion, and no record disappears.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings, strategies as st

from rlops.components.experience_gen import BanditColumns, ExperienceGenConfig, FileSource, SpecConfig, pipeline
from rlops.components.experience_gen.sources import Quarantined, SourceError, Unreadable

K = 4
COLUMNS = ["x0", "x1", "action", "reward", "propensity"]
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))

_num = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32).map(repr),
    st.integers(-5, 5).map(str),
    st.sampled_from(["", "nan", "-inf", "1e-46", "0.25", "abc", '"q"']),
)


@st.composite
def text_rows(draw, fmt: str) -> list[bytes]:
    """Record lines: mostly valid, some ragged, non-UTF-8, huge, with NaN/Inf or odd values."""
    out = []
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["ok", "ok", "ok", "values", "ragged", "latin1", "huge", "blank"]))
        vals = [
            f"{draw(st.floats(-3, 3)):.3f}",
            f"{draw(st.floats(-3, 3)):.3f}",
            str(draw(st.integers(0, K - 1))),
            "1.0",
            "0.25",
        ]
        if kind == "values":
            vals = [draw(_num) for _ in COLUMNS]
        elif kind == "ragged":
            vals = vals[: draw(st.integers(0, 4))] if draw(st.booleans()) else vals + ["7"]
        elif kind == "huge":
            vals[0] = "1" * draw(st.integers(70_000, 200_000))
        if fmt == "csv":
            line = ",".join(vals).encode()
        else:
            pairs = [f'"{c}": {v if v not in ("", "abc") else chr(34) + v + chr(34)}' for c, v in zip(COLUMNS, vals)]
            line = ("{" + ", ".join(pairs) + "}").encode()
        if kind == "latin1":
            line = line.replace(b"1.0", "\xe91.0".encode("latin-1"))
        out.append(b"   " if kind == "blank" else line)
    return out


def _config(path: str, fmt: str) -> ExperienceGenConfig:
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format=fmt),
        bandit_columns=BanditColumns(context=("x0", "x1")),
        action_spec=SpecConfig.discrete(K),
    )


def ingest(path: str, fmt: str) -> tuple[int, int, int, list[Unreadable]] | None:
    """(read, valid, quarantined, unreadable) without Beam; None when the plan fails with a clear error."""
    try:
        plan = pipeline.make_plan(_config(path, fmt))
    except (SourceError, ValueError) as e:
        assert str(e) and "Traceback" not in str(e)
        return None
    read, valid, bad, lost = 0, 0, 0, []
    for item in plan.items:
        for n, out in pipeline.ingest(plan, item):
            read += n
            if isinstance(out, Quarantined):
                bad += 1
            elif isinstance(out, Unreadable):
                lost.append(out)
            else:
                valid += len(out)
    return read, valid, bad, lost


def records_in(data: bytes, header: bool) -> int:
    """The records the bytes truly hold: non-blank lines after the header, whatever the line
    endings (\\n, \\r\\n or a bare \\r)."""
    if header:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return sum(1 for line in re.split(rb"\r\n|\n|\r", data) if line.strip())


def check_honest(result, expected: int | None) -> None:
    if result is None:
        return  # a clear error before reading: the run fails, nothing is reported as done
    read, valid, bad, lost = result
    assert read == valid + bad
    if lost:
        assert all(u.message and u.source_file for u in lost)
        return  # the run fails, naming these byte ranges
    if expected is not None:
        assert read == expected  # no record disappeared


@FUZZ
@given(
    fmt=st.sampled_from(["csv", "jsonl"]),
    rows=st.data(),
    bom=st.booleans(),
    crlf=st.booleans(),
    cr_only=st.integers(0, 3),
    cut=st.floats(0.0, 1.0),
    damage=st.sampled_from(["none", "truncate", "gzip", "gzip_cut"]),
)
def test_text_files(fmt, rows, bom, crlf, cr_only, cut, damage):
    lines = rows.draw(text_rows(fmt))
    eol = b"\r" if cr_only == 0 else b"\r\n" if crlf else b"\n"  # CR-only in one case of four
    data = eol.join(lines) + (eol if lines and cut > 0.5 else b"")
    if fmt == "csv":  # a CR-only header fails at plan time; CR-only rows after it must not count as one
        data = ",".join(COLUMNS).encode() + (eol if cr_only == 0 and cut < 0.2 else b"\n") + data
    data = (b"\xef\xbb\xbf" if bom else b"") + data
    if damage == "truncate":
        data = data[: int(cut * len(data))]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"f.{fmt}" + (".gz" if damage.startswith("gzip") else ""))
        blob = gzip.compress(data) if damage.startswith("gzip") else data
        if damage == "gzip_cut":
            blob = blob[: int(cut * (len(blob) - 1))]
        with open(path, "wb") as f:
            f.write(blob)
        result = ingest(path, fmt)
    if damage == "gzip_cut" and result is not None:
        assert result[3], "a gzip stream cut short must fail the run"
    expected = None if damage == "gzip_cut" else records_in(data, header=fmt == "csv")
    check_honest(result, expected)


@FUZZ
@given(
    n=st.integers(0, 300),
    group=st.integers(1, 120),
    special=st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 1e-46, None]), max_size=5),
    damage=st.sampled_from(["none", "truncate", "garbage", "flip_footer"]),
    cut=st.floats(0.0, 0.999),
)
def test_parquet_files(n, group, special, damage, cut):
    rng = np.random.default_rng(n)
    x0 = rng.normal(size=n).astype(object)
    for i, v in enumerate(special[:n]):
        x0[i] = v
    table = pa.table(
        {
            "x0": pa.array(list(x0), pa.float64()),
            "x1": rng.normal(size=n),
            "action": rng.integers(0, K, n),
            "reward": np.ones(n),
            "propensity": np.full(n, 0.5),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=group)
    blob = sink.getvalue()
    if damage == "truncate":
        blob = blob[: int(cut * len(blob))]
    elif damage == "garbage":
        blob = blob + b"\x00garbage"
    elif damage == "flip_footer":  # the metadata length before the closing magic
        blob = blob[:-8] + bytes(b ^ 0x5A for b in blob[-8:-4]) + blob[-4:]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.parquet")
        with open(path, "wb") as f:
            f.write(blob)
        result = ingest(path, "parquet")
    if damage != "none" and result is not None:
        assert result[3], f"a damaged Parquet file ({damage}) must fail the run"
    check_honest(result, n if damage == "none" else None)
    if damage == "none":  # NaN/Inf/null values are quarantined one by one
        assert result is not None and result[2] == sum(1 for v in special[:n] if v is None or not np.isfinite(v))
