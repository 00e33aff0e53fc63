"""CSV and JSON Lines readers: line-aligned byte chunks, one Arrow parse per chunk.

Only a chunk that the fast parser rejects is bisected until the pieces that still fail are
small, and those few hundred lines go through Python one by one; so a bad line is quarantined
with its exact line number and byte offset while the rest of its chunk stays on the fast path.
Uncompressed files are cut into byte ranges; a range owns the lines that start inside it.
"""

from __future__ import annotations

import contextlib
import csv
import json
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from rlops.components.experience_gen import json_paths
from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.convert import RawColumn
from rlops.components.experience_gen.layout import BOOL, FLOAT, INT, STRING, TIMESTAMP, Layout
from rlops.components.experience_gen.sources.base import (
    PARSE_ERROR,
    Block,
    FileRange,
    Quarantined,
    SourceError,
    Unreadable,
    is_read_error,
    open_file,
    stream_cut_short,
)

HEADER_LIMIT = 1 << 20  # a header line longer than this is not a header (e.g. a CR-only file)


def csv_header(path: str, source: FileSource) -> list[str]:
    """Column names: configured, or the file's first line (UTF-8, optional BOM)."""
    if source.csv_column_names:
        return list(source.csv_column_names)
    with open_file(path, source) as f:
        try:
            raw = f.readline(HEADER_LIMIT)
        except TypeError:  # Beam's CompressedFile.readline takes no size
            raw = f.readline()
    first = raw.rstrip(b"\r\n")
    if b"\r" in first:
        raise SourceError(
            f"{path}: the header line contains a bare carriage return: the file uses CR-only "
            "(classic Mac) line endings; convert it to LF or CRLF line endings"
        )
    if len(raw) >= HEADER_LIMIT and not raw.endswith(b"\n"):
        raise SourceError(f"{path}: no line break in the first {HEADER_LIMIT} bytes: not a CSV file with a header")
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SourceError(
            f"{path}: the header line is not UTF-8 ({e.reason} at byte {e.start}); re-encode the "
            "file as UTF-8 or name the columns in csv_column_names"
        ) from None
    return next(csv.reader([text], delimiter=source.csv_delimiter), [])


# --- text files: line-aligned chunks of a byte range ------------------------------------------


@dataclass
class _Chunk:
    data: bytes  # whole lines; the last may lack its newline only at the end of the file
    offset: int  # file offset of data[0]
    first_line: Callable[[], int]  # 1-based line number of data[0] (may read the file prefix)
    newlines: int  # data.count(b"\n"), counted once by the reader (a scan of the whole chunk)
    _starts: np.ndarray | None = field(default=None, repr=False)

    @property
    def line_starts(self) -> np.ndarray:
        if self._starts is None:
            nl = np.flatnonzero(np.frombuffer(self.data, np.uint8) == 10)
            starts = np.concatenate([[0], nl + 1]).astype(np.int64)
            self._starts = starts[starts < len(self.data)]
        return self._starts

    @property
    def num_lines(self) -> int:
        return self.newlines + (0 if self.data.endswith(b"\n") else 1)

    def line(self, i: int) -> bytes:
        return self.lines(i, i + 1).rstrip(b"\r\n")

    def lines(self, lo: int, hi: int) -> bytes:
        """Lines [lo, hi), newlines included (the whole chunk without computing line starts)."""
        if lo == 0 and hi >= self.num_lines:
            return self.data
        s = self.line_starts
        return self.data[s[lo] : s[hi] if hi < len(s) else len(self.data)]


def _text_chunks(path: str, rng: FileRange, source: FileSource, skip_header: bool) -> Iterator[_Chunk | Unreadable]:
    """Chunks of whole lines; an Unreadable for bytes that cannot be read (then stops)."""
    pos = rng.start
    try:
        yield from _text_chunks_unchecked(path, rng, source, skip_header)
    except Exception as e:  # noqa: BLE001 - corrupt compressed data, I/O: fail the run, naming the bytes
        if not is_read_error(e):
            raise
        yield Unreadable(path, pos, rng.end, f"cannot read the file: {type(e).__name__}: {e}")


def _text_chunks_unchecked(
    path: str, rng: FileRange, source: FileSource, skip_header: bool
) -> Iterator[_Chunk | Unreadable]:
    f = open_file(path, source)
    try:
        pos = 0
        lines_before = 0
        if rng.start > 0:
            f.seek(rng.start - 1)
            pos = rng.start - 1 + len(f.readline())  # finish the line that straddles the start
        elif skip_header:
            pos = len(f.readline())
            lines_before = 1
        known = rng.start == 0
        end = rng.end if rng.end >= 0 else None

        def counter(offset: int, known_lines: int | None) -> Callable[[], int]:
            cache: list[int] = []

            def first_line() -> int:
                if not cache:
                    cache.append(known_lines + 1 if known_lines is not None else _count_lines(path, source, offset) + 1)
                return cache[0]

            return first_line

        leftover = b""
        while end is None or pos < end:
            more = f.read(source.block_bytes)
            if not more and stream_cut_short(f):
                yield Unreadable(
                    path,
                    pos,
                    -1,
                    f"compressed stream cut short: decompressed bytes from {pos} (the "
                    "torn line and everything after it) are lost",
                )
                return
            if not more and not leftover:
                return
            if more:
                cut = more.rfind(b"\n") + 1
                if cut == 0:  # one line longer than a block: keep reading
                    leftover += more
                    continue
                # One copy of the block: the partial line before it + its whole lines.
                data = b"".join((leftover, memoryview(more)[:cut])) if leftover else more[:cut]
                leftover = more[cut:]
            else:
                data, leftover = leftover, b""
            if end is not None and pos + len(data) > end:  # stop at the first line starting >= end
                k = data.find(b"\n", end - pos - 1)
                if k != -1:
                    data = data[: k + 1]
            newlines = data.count(b"\n")
            chunk = _Chunk(data, pos, counter(pos, lines_before if known else None), newlines)
            if known:
                lines_before += newlines
            pos += len(data)
            yield chunk
            if not more:
                return
    finally:
        f.close()


def _count_lines(path: str, source: FileSource, upto: int) -> int:
    """Newlines before byte `upto`: only needed for line numbers of bad rows in later ranges."""
    n = 0
    with open_file(path, source) as f:
        left = upto
        while left > 0:
            b = f.read(min(left, 1 << 24))
            if not b:
                break
            n += b.count(b"\n")
            left -= len(b)
    return n


@contextlib.contextmanager
def no_heap_scan() -> Iterator[None]:
    """pyarrow (<= 14) on Python 3.10 calls gc.get_referrers() on every read_csv, a scan of the
    whole heap: ~0.1 s per call once TensorFlow and Beam are loaded, more than parsing a 16 MiB
    block. It works around a CPython bug (bpo-42248) whose cost is one frame cycle for the
    garbage collector; skip the scan for our calls."""
    import pyarrow.lib

    before = getattr(pyarrow.lib, "have_signal_refcycle", None)
    if before:
        pyarrow.lib.have_signal_refcycle = False
    try:
        yield
    finally:
        if before:
            pyarrow.lib.have_signal_refcycle = before


def _text_block(
    chunk: _Chunk, path: str, columns: dict[str, RawColumn], rows_to_lines: np.ndarray | None, num_rows: int, text: bool
) -> Block:
    def locate(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        li = rows if rows_to_lines is None else rows_to_lines[rows]
        return chunk.first_line() + li, chunk.offset + chunk.line_starts[li]

    def payload(row: int) -> bytes:
        return chunk.line(int(row if rows_to_lines is None else rows_to_lines[row]))

    return Block(columns, num_rows, path, text, locate, payload, payload_from_file=True)


def text_payloads(path: str, source: FileSource, offsets: np.ndarray) -> list[bytes]:
    """The payloads of rows of a text file (the line starting at each byte offset, as a Block
    locates them, without its line end), read back in offset order."""
    offsets = np.asarray(offsets, np.int64)
    out: list[bytes] = [b""] * len(offsets)
    with open_file(path, source) as f:
        for i in np.argsort(offsets, kind="stable").tolist():
            f.seek(int(offsets[i]))
            out[i] = f.readline().rstrip(b"\r\n")
    return out


def _bad_line(chunk: _Chunk, path: str, i: int, code: str, message: str) -> Quarantined:
    return Quarantined(
        code, message, path, chunk.first_line() + i, chunk.offset + int(chunk.line_starts[i]), chunk.line(i)
    )


def _bad_line_or_cr(chunk: _Chunk, path: str, i: int, message: str) -> Quarantined | Unreadable:
    """A line that does not parse is one bad record, unless it holds bare carriage returns: then it
    is many records joined by CR-only line endings, which cannot be counted (so the run fails)."""
    if b"\r" in chunk.line(i):
        start = chunk.offset + int(chunk.line_starts[i])
        return Unreadable(
            path,
            start,
            start + len(chunk.lines(i, i + 1)),
            f"line {chunk.first_line() + i} holds bare carriage returns (CR-only line endings?); "
            "convert the file to LF or CRLF line endings",
        )
    return _bad_line(chunk, path, i, PARSE_ERROR, message)


# Timestamps stay text: numbers or date-times, converted in convert.py.
_PARSE_TYPES = {FLOAT: pa.float64(), INT: pa.int64(), STRING: pa.string(), BOOL: pa.bool_(), TIMESTAMP: pa.string()}


def _column_types(layout: Layout) -> dict[str, pa.DataType | None]:
    """The Arrow type each source column is parsed into by the fast text paths."""
    types: dict[str, pa.DataType | None] = {}
    for f in layout.all_fields:
        for c in f.columns:
            t = _PARSE_TYPES[f.dtype]
            if f.dtype == FLOAT and f.width is not None:
                t = pa.float32()  # contexts/observations end up float32: parse straight into it
            if f.multivalent:  # CSV: "a|b" cells, split in convert.py; JSON: arrays, inferred
                t = pa.string()
            path = json_paths.parse(c)
            if path:  # not in the file: read its base column, untyped (JSON strings)
                types.setdefault(path[0], None)
            else:
                types.setdefault(c, t)
    return types


CAREFUL_LINES = 256  # below this many lines, a block that broke the fast parser goes line by line

FastParse = Callable[[bytes], "dict[str, pa.Array | pa.ChunkedArray] | None"]  # whole lines -> columns, or None
SlowParse = Callable[[_Chunk, int, int], Iterator["Block | Quarantined | Unreadable"]]


def _parse_chunk(
    chunk: _Chunk, path: str, fast: FastParse, slow: SlowParse, text: bool, lo: int = 0, hi: int | None = None
) -> Iterator[Block | Quarantined | Unreadable]:
    """Lines [lo, hi) of a chunk: one fast (Arrow) parse when it succeeds; else bisect, so a few bad
    lines cost a few extra fast parses plus Python over a few hundred lines, not the whole chunk."""
    whole = hi is None
    hi = chunk.num_lines if hi is None else hi
    cols = fast(chunk.lines(lo, hi))
    if cols is not None:
        n = len(next(iter(cols.values()))) if cols else hi - lo
        if n == hi - lo:  # else blank lines were skipped: rows do not map to lines
            yield _text_block(chunk, path, cols, None if whole else np.arange(lo, hi), n, text)
            return
    if hi - lo <= CAREFUL_LINES:
        yield from slow(chunk, lo, hi)
        return
    mid = (lo + hi) // 2
    yield from _parse_chunk(chunk, path, fast, slow, text, lo, mid)
    yield from _parse_chunk(chunk, path, fast, slow, text, mid, hi)


def read_csv(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Quarantined | Unreadable]:
    import pyarrow.csv as pcsv

    try:
        header = csv_header(rng.path, source)
    except SourceError as e:
        yield Unreadable(rng.path, rng.start, rng.end, str(e).removeprefix(rng.path + ": "))
        return
    except Exception as e:  # noqa: BLE001
        if not is_read_error(e):
            raise
        yield Unreadable(rng.path, 0, -1, f"cannot read the header: {type(e).__name__}: {e}")
        return
    wanted = [c for c in layout.columns if c in header]
    types = {c: t for c, t in _column_types(layout).items() if c in wanted and t is not None}
    options = dict(
        read_options=pcsv.ReadOptions(column_names=header),
        parse_options=pcsv.ParseOptions(delimiter=source.csv_delimiter, newlines_in_values=False),
        convert_options=pcsv.ConvertOptions(
            column_types=types, include_columns=wanted, null_values=[""], strings_can_be_null=True
        ),
    )

    def fast(data: bytes) -> dict[str, pa.Array | pa.ChunkedArray] | None:
        if not wanted:  # none of the mapped columns in this file: every row is missing them
            return {}
        try:
            with no_heap_scan():
                # A native buffer, not a Python file: Arrow's reader threads never need the GIL.
                table = pcsv.read_csv(pa.BufferReader(data), **options)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
            return None
        return {c: table.column(c) for c in wanted}

    def slow(chunk: _Chunk, lo: int, hi: int) -> Iterator[Block | Quarantined | Unreadable]:
        return _csv_slow(chunk, rng.path, header, wanted, source, lo, hi)

    for chunk in _text_chunks(rng.path, rng, source, skip_header=source.csv_header):
        if isinstance(chunk, Unreadable):
            yield chunk
        else:
            yield from _parse_chunk(chunk, rng.path, fast, slow, text=True)


def _csv_slow(
    chunk: _Chunk, path: str, header: list[str], wanted: list[str], source: FileSource, lo: int, hi: int
) -> Iterator[Block | Quarantined | Unreadable]:
    """Line by line: each malformed line is quarantined, the rest form one block."""
    index = {c: header.index(c) for c in wanted}
    values: dict[str, list] = {c: [] for c in wanted}
    rows_to_lines = []
    for i in range(lo, hi):
        raw = chunk.line(i)
        if not raw.strip():
            continue  # blank lines are not records
        try:
            fields = next(csv.reader([raw.decode("utf-8")], delimiter=source.csv_delimiter))
        except (UnicodeDecodeError, csv.Error) as e:
            yield _bad_line_or_cr(chunk, path, i, f"csv: {e}")
            continue
        if len(fields) != len(header):
            yield _bad_line(chunk, path, i, PARSE_ERROR, f"csv: expected {len(header)} fields, got {len(fields)}")
            continue
        for c, j in index.items():
            values[c].append(fields[j])
        rows_to_lines.append(i)
    if rows_to_lines:
        yield _text_block(chunk, path, dict(values), np.array(rows_to_lines), len(rows_to_lines), text=True)


def read_jsonl(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Quarantined | Unreadable]:
    import pyarrow.json as pj

    types = _column_types(layout)
    # Numbers get a fixed type; ids, booleans and timestamps may be numbers or strings in JSON, so
    # Arrow infers those (and every unmapped field) and convert.py takes it from there.
    fixed = {c: t for c, t in types.items() if t in (pa.float32(), pa.float64(), pa.int64())}
    schema = pa.schema([(c, pa.list_(t) if _is_list_field(layout, c) else t) for c, t in fixed.items()])
    behavior = "ignore" if len(fixed) == len(types) else "infer"

    def fast(data: bytes) -> dict[str, pa.Array | pa.ChunkedArray] | None:
        try:
            table = pj.read_json(
                pa.BufferReader(data),
                read_options=pj.ReadOptions(block_size=len(data) + 1),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior=behavior),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        names = set(table.column_names)
        return {c: table.column(c) if c in names else pa.nulls(table.num_rows) for c in types}

    def slow(chunk: _Chunk, lo: int, hi: int) -> Iterator[Block | Quarantined | Unreadable]:
        return _jsonl_slow(chunk, rng.path, list(types), lo, hi)

    for chunk in _text_chunks(rng.path, rng, source, skip_header=False):
        if isinstance(chunk, Unreadable):
            yield chunk
        else:
            yield from _parse_chunk(chunk, rng.path, fast, slow, text=False)


def _is_list_field(layout: Layout, column: str) -> bool:
    return any(
        len(f.columns) == 1 and f.columns[0] == column and ((f.width or 1) > 1 or f.multivalent)
        for f in layout.all_fields
    )


def _jsonl_slow(
    chunk: _Chunk, path: str, wanted: list[str], lo: int, hi: int
) -> Iterator[Block | Quarantined | Unreadable]:
    values: dict[str, list] = {c: [] for c in wanted}
    rows_to_lines = []
    for i in range(lo, hi):
        raw = chunk.line(i)
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            yield _bad_line_or_cr(chunk, path, i, f"json: {e}")
            continue
        if not isinstance(row, dict):
            yield _bad_line(chunk, path, i, PARSE_ERROR, f"json: expected an object, got {type(row).__name__}")
            continue
        for c in wanted:
            values[c].append(row.get(c))
        rows_to_lines.append(i)
    if rows_to_lines:
        yield _text_block(chunk, path, dict(values), np.array(rows_to_lines), len(rows_to_lines), text=False)
