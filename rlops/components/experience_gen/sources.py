"""Readers: source records -> Blocks (raw columns + provenance) and Quarantined records.

Files are read through Beam filesystems (local, gs://, ...), a block of many records at a
time. Text files (CSV, JSON Lines) take a vectorized Arrow parse of the whole block; only a
block that the fast parser rejects (a broken row somewhere in it) is re-read line by line in
Python, so that each bad line is quarantined with its line number and the good ones still go
through. Uncompressed text files are cut into byte ranges so several workers share a big file.
"""
from __future__ import annotations

import base64
import csv
import io
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.convert import RawColumn
from rlops.components.experience_gen.layout import BOOL, FLOAT, INT, STRING, TIMESTAMP, Layout, SourceSchema

PARSE_ERROR, UNREADABLE, TRUNCATED = "parse_error", "unreadable", "truncated"
PAYLOAD_LIMIT = 1 << 16  # bytes of a bad record kept in the quarantine


@dataclass
class Quarantined:
    """A record that will not be written, with why and where it came from."""
    code: str
    message: str
    source_file: str
    line: int = -1  # 1-based line (text), record (TFRecord) or row (Parquet) number; -1 unknown
    offset: int = -1  # byte offset of the record in the file; -1 where it has none
    payload: bytes = b""

    def to_json(self) -> str:
        payload = self.payload[:PAYLOAD_LIMIT]
        try:
            text, encoding = payload.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(payload).decode("ascii"), "base64"
        return json.dumps({"reason": self.code, "message": self.message, "source_file": self.source_file,
                           "line": self.line, "offset": self.offset, "payload": text,
                           "payload_encoding": encoding, "payload_truncated": len(self.payload) > PAYLOAD_LIMIT})


@dataclass
class Block:
    """Parsed records from one place in one source. Rows index `columns`; `locate` / `payload`
    recover each row's line, byte offset and original bytes (only asked for bad rows, or for
    trajectory steps, which carry them to episode assembly)."""
    columns: dict[str, RawColumn]
    num_rows: int
    source_file: str
    text: bool
    locate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    payload: Callable[[int], bytes]

    def quarantine(self, row: int, code: str, message: str) -> Quarantined:
        line, offset = self.locate(np.array([row]))
        return Quarantined(code, message, self.source_file, int(line[0]), int(offset[0]), self.payload(row))


# --- work items -------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileRange:
    path: str
    start: int = 0
    end: int = -1  # -1: to the end of the file


def match_files(pattern: str) -> list[tuple[str, int]]:
    from apache_beam.io.filesystems import FileSystems
    patterns = [p for p in pattern.split(",") if p]
    out = []
    for result in FileSystems.match(patterns):
        out.extend((m.path, m.size_in_bytes) for m in result.metadata_list)
    out = sorted(set(out))
    if not out:
        raise FileNotFoundError(f"source pattern {pattern!r} matched no files")
    return out


def _compression(path: str, source: FileSource) -> str:
    from apache_beam.io.filesystem import CompressionTypes
    if source.compression == "gzip":
        return CompressionTypes.GZIP
    if source.compression == "none":
        return CompressionTypes.UNCOMPRESSED
    return CompressionTypes.detect_compression_type(path)


def plan_ranges(files: list[tuple[str, int]], source: FileSource) -> list[FileRange]:
    """Uncompressed CSV/JSONL files are cut into `range_bytes` ranges; other files stay whole."""
    from apache_beam.io.filesystem import CompressionTypes
    out = []
    for path, size in files:
        splittable = source.format in ("csv", "jsonl") and _compression(path, source) == CompressionTypes.UNCOMPRESSED
        if not splittable or size <= source.range_bytes:
            out.append(FileRange(path))
            continue
        for start in range(0, size, source.range_bytes):
            out.append(FileRange(path, start, min(size, start + source.range_bytes)))
    return out


def _open(path: str, source: FileSource) -> Any:
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.open(path, compression_type=_compression(path, source))


# --- schema peek (pipeline construction) ------------------------------------------------------

def peek_schema(path: str, source: FileSource) -> SourceSchema:
    """Column names (and list widths) of one file, read cheaply from its start."""
    fmt = source.format
    if fmt == "csv":
        return SourceSchema(tuple(_csv_header(path, source)), {}, text=True)
    if fmt == "parquet":
        import pyarrow.parquet as pq
        with _open(path, source) as f:
            pf = pq.ParquetFile(f)
            names = tuple(pf.schema_arrow.names)
            widths = {}
            if pf.metadata.num_rows:
                first = pf.read_row_group(0).slice(0, 1)
                for name in names:
                    v = first.column(name)[0].as_py()
                    if isinstance(v, (list, tuple)):
                        widths[name] = len(v)
        return SourceSchema(names, widths)
    if fmt == "jsonl":
        with _open(path, source) as f:
            for line in f:
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(row, dict):
                        return SourceSchema(tuple(row), {k: len(v) for k, v in row.items() if isinstance(v, list)})
        return SourceSchema()
    if fmt == "tfrecord":
        import tensorflow as tf
        with _open(path, source) as f:
            for _, _, data, _ in _tfrecords(f):
                if data is None:
                    continue
                try:
                    ex = tf.train.Example.FromString(data)
                except Exception:  # noqa: BLE001 - keep looking for a readable record
                    continue
                widths = {}
                for name, feat in ex.features.feature.items():
                    kind = feat.WhichOneof("kind")
                    widths[name] = len(getattr(feat, kind).value) if kind else 0
                return SourceSchema(tuple(sorted(widths)), widths)
        return SourceSchema()
    raise ValueError(f"unknown file format {fmt!r}")


def _csv_header(path: str, source: FileSource) -> list[str]:
    if source.csv_column_names:
        return list(source.csv_column_names)
    with _open(path, source) as f:
        first = f.readline().decode("utf-8-sig").rstrip("\r\n")
    return next(csv.reader([first], delimiter=source.csv_delimiter), [])


# --- text files: line-aligned chunks of a byte range ------------------------------------------

@dataclass
class _Chunk:
    data: bytes  # whole lines; the last may lack its newline only at the end of the file
    offset: int  # file offset of data[0]
    first_line: Callable[[], int]  # 1-based line number of data[0] (may read the file prefix)
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
        return self.data.count(b"\n") + (0 if self.data.endswith(b"\n") else 1)

    def line(self, i: int) -> bytes:
        s = self.line_starts
        end = s[i + 1] if i + 1 < len(s) else len(self.data)
        return self.data[s[i]:end].rstrip(b"\r\n")


def _text_chunks(path: str, rng: FileRange, source: FileSource, skip_header: bool) -> Iterator[_Chunk]:
    f = _open(path, source)
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
            buf = leftover + more
            if not buf:
                return
            if more:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:  # one line longer than a block: keep reading
                    leftover = buf
                    continue
                data, leftover = buf[:cut], buf[cut:]
            else:
                data, leftover = buf, b""
            if end is not None and pos + len(data) > end:  # stop at the first line starting >= end
                k = data.find(b"\n", end - pos - 1)
                if k != -1:
                    data = data[:k + 1]
            chunk = _Chunk(data, pos, counter(pos, lines_before if known else None))
            if known:
                lines_before += data.count(b"\n")
            pos += len(data)
            yield chunk
            if not more:
                return
    finally:
        f.close()


def _count_lines(path: str, source: FileSource, upto: int) -> int:
    """Newlines before byte `upto`: only needed for line numbers of bad rows in later ranges."""
    n = 0
    with _open(path, source) as f:
        left = upto
        while left > 0:
            b = f.read(min(left, 1 << 24))
            if not b:
                break
            n += b.count(b"\n")
            left -= len(b)
    return n


def _has_blank_lines(data: bytes) -> bool:
    return data.startswith((b"\n", b"\r\n")) or b"\n\n" in data or b"\n\r\n" in data


def _text_block(chunk: _Chunk, path: str, columns: dict[str, RawColumn], rows_to_lines: np.ndarray | None,
                num_rows: int, text: bool) -> Block:
    def locate(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        li = rows if rows_to_lines is None else rows_to_lines[rows]
        return chunk.first_line() + li, chunk.offset + chunk.line_starts[li]

    def payload(row: int) -> bytes:
        return chunk.line(int(row if rows_to_lines is None else rows_to_lines[row]))

    return Block(columns, num_rows, path, text, locate, payload)


def _bad_line(chunk: _Chunk, path: str, i: int, code: str, message: str) -> Quarantined:
    return Quarantined(code, message, path, chunk.first_line() + i, chunk.offset + int(chunk.line_starts[i]),
                       chunk.line(i))


_CSV_TYPES = {FLOAT: pa.float64(), INT: pa.int64(), STRING: pa.string(), BOOL: pa.bool_(), TIMESTAMP: pa.int64()}


def _column_types(layout: Layout, vector_float32: bool = True) -> dict[str, pa.DataType]:
    types: dict[str, pa.DataType] = {}
    for f in layout.all_fields:
        for c in f.columns:
            t = _CSV_TYPES[f.dtype]
            if f.dtype == FLOAT and f.width is not None and vector_float32:
                t = pa.float32()  # contexts/observations end up float32: parse straight into it
            types.setdefault(c, t)
    return types


def read_csv(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Quarantined]:
    import pyarrow.csv as pcsv

    header = _csv_header(rng.path, source)
    wanted = [c for c in layout.columns if c in header]
    types = {c: t for c, t in _column_types(layout).items() if c in wanted}
    for chunk in _text_chunks(rng.path, rng, source, skip_header=source.csv_header):
        n_lines = chunk.num_lines
        if True:
            try:
                table = pcsv.read_csv(
                    io.BytesIO(chunk.data),
                    read_options=pcsv.ReadOptions(column_names=header),
                    parse_options=pcsv.ParseOptions(delimiter=source.csv_delimiter, newlines_in_values=False),
                    convert_options=pcsv.ConvertOptions(column_types=types, include_columns=wanted,
                                                        null_values=[""], strings_can_be_null=True))
                if table.num_rows == n_lines:
                    cols = {c: table.column(c) for c in wanted}
                    yield _text_block(chunk, rng.path, cols, None, n_lines, text=True)
                    continue
            except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
                pass
        yield from _csv_slow(chunk, rng.path, header, wanted, source)


def _csv_slow(chunk: _Chunk, path: str, header: list[str], wanted: list[str],
              source: FileSource) -> Iterator[Block | Quarantined]:
    """Line by line: each malformed line is quarantined, the rest form one block."""
    index = {c: header.index(c) for c in wanted}
    values: dict[str, list] = {c: [] for c in wanted}
    rows_to_lines = []
    for i in range(len(chunk.line_starts)):
        raw = chunk.line(i)
        if not raw.strip():
            continue  # blank lines are not records
        try:
            fields = next(csv.reader([raw.decode("utf-8")], delimiter=source.csv_delimiter))
        except (UnicodeDecodeError, csv.Error) as e:
            yield _bad_line(chunk, path, i, PARSE_ERROR, f"csv: {e}")
            continue
        if len(fields) != len(header):
            yield _bad_line(chunk, path, i, PARSE_ERROR, f"csv: expected {len(header)} fields, got {len(fields)}")
            continue
        for c, j in index.items():
            values[c].append(fields[j])
        rows_to_lines.append(i)
    if rows_to_lines:
        yield _text_block(chunk, path, dict(values), np.array(rows_to_lines), len(rows_to_lines), text=True)


def read_jsonl(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Quarantined]:
    import pyarrow.json as pj

    types = _column_types(layout)
    schema = pa.schema([(c, pa.list_(t) if _is_list_field(layout, c) else t) for c, t in types.items()])
    for chunk in _text_chunks(rng.path, rng, source, skip_header=False):
        n_lines = chunk.num_lines
        if True:
            try:
                table = pj.read_json(io.BytesIO(chunk.data),
                                     read_options=pj.ReadOptions(block_size=len(chunk.data) + 1),
                                     parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                   unexpected_field_behavior="ignore"))
                if table.num_rows == n_lines:
                    cols = {c: table.column(c) for c in types}
                    yield _text_block(chunk, rng.path, cols, None, n_lines, text=False)
                    continue
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass
        yield from _jsonl_slow(chunk, rng.path, list(types))


def _is_list_field(layout: Layout, column: str) -> bool:
    return any(len(f.columns) == 1 and f.columns[0] == column and (f.width or 1) > 1 for f in layout.all_fields)


def _jsonl_slow(chunk: _Chunk, path: str, wanted: list[str]) -> Iterator[Block | Quarantined]:
    values: dict[str, list] = {c: [] for c in wanted}
    rows_to_lines = []
    for i in range(len(chunk.line_starts)):
        raw = chunk.line(i)
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            yield _bad_line(chunk, path, i, PARSE_ERROR, f"json: {e}")
            continue
        if not isinstance(row, dict):
            yield _bad_line(chunk, path, i, PARSE_ERROR, f"json: expected an object, got {type(row).__name__}")
            continue
        for c in wanted:
            values[c].append(row.get(c))
        rows_to_lines.append(i)
    if rows_to_lines:
        yield _text_block(chunk, path, dict(values), np.array(rows_to_lines), len(rows_to_lines), text=False)


# --- Parquet ----------------------------------------------------------------------------------

def read_parquet(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Quarantined]:
    import pyarrow.parquet as pq

    path = rng.path
    try:
        f = _open(path, source)
        pf = pq.ParquetFile(f)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file is a bad record, not a crash
        yield Quarantined(UNREADABLE, f"parquet: cannot open file: {e}", path, payload=b"")
        return
    try:
        names = set(pf.schema_arrow.names)
        wanted = [c for c in layout.columns if c in names]
        row0 = 0
        for g in range(pf.num_row_groups):
            try:
                table = pf.read_row_group(g, columns=wanted)
            except Exception as e:  # noqa: BLE001
                yield Quarantined(UNREADABLE, f"parquet: cannot read row group {g}: {e}", path, line=row0 + 1)
                row0 += pf.metadata.row_group(g).num_rows
                continue
            yield _row_block({c: table.column(c) for c in wanted}, table.num_rows, path, row0,
                             lambda g=g: pf.read_row_group(g))
            row0 += table.num_rows
    finally:
        f.close()


def _row_block(columns: dict[str, RawColumn], num_rows: int, source_file: str, row0: int,
               full: Callable[[], pa.Table] | None = None) -> Block:
    """Rows with no byte offsets (Parquet, BigQuery, simulation); the payload is the row as JSON."""
    def locate(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return row0 + rows + 1, np.full(len(rows), -1)

    def payload(row: int) -> bytes:
        if full is not None:
            record = full().slice(int(row), 1).to_pylist()[0]
        else:
            record = {c: (v[int(row)] if isinstance(v, list) else v[int(row)].as_py()) for c, v in columns.items()}
        return json.dumps(record, default=str).encode("utf-8")

    return Block(columns, num_rows, source_file, False, locate, payload)


# --- TFRecord(tf.Example) ---------------------------------------------------------------------

def _tfrecords(f: Any) -> Iterator[tuple[int, int, bytes | None, str]]:
    """(record number, byte offset, data or None, problem) per TFRecord; stops after a framing error."""
    from rlops.components.experience_gen.sinks import _crc32c, _mask
    offset, number = 0, 0
    while True:
        header = f.read(12)
        if not header:
            return
        number += 1
        if len(header) < 12:
            yield number, offset, header, f"truncated record header at offset {offset}"
            return
        length, length_crc = struct.unpack("<QI", header)
        if int(_mask(np.array([_crc32c(header[:8])], np.uint32))[0]) != length_crc:
            rest = f.read(PAYLOAD_LIMIT)
            yield number, offset, header + rest, f"corrupt record length at offset {offset}; rest of file skipped"
            return
        body = f.read(length + 4)
        if len(body) < length + 4:
            yield number, offset, header + body, f"truncated record at offset {offset} ({len(body)} of {length + 4} bytes)"
            return
        data = body[:length]
        if int(_mask(np.array([_crc32c(data)], np.uint32))[0]) != struct.unpack("<I", body[length:])[0]:
            yield number, offset, data, f"data checksum mismatch at offset {offset}"
        else:
            yield number, offset, data, ""
        offset += 12 + length + 4


def read_tfrecord(rng: FileRange, source: FileSource, layout: Layout,
                  batch_size: int = 4096) -> Iterator[Block | Quarantined]:
    path = rng.path
    try:
        f = _open(path, source)
    except Exception as e:  # noqa: BLE001
        yield Quarantined(UNREADABLE, f"tfrecord: cannot open file: {e}", path)
        return
    batch: list[tuple[int, int, bytes]] = []
    try:
        for number, offset, data, problem in _tfrecords(f):
            if problem:
                code = TRUNCATED if "truncated" in problem else PARSE_ERROR
                yield Quarantined(code, f"tfrecord: {problem}", path, number, offset, data or b"")
                continue
            batch.append((number, offset, data))
            if len(batch) >= batch_size:
                yield from _example_block(batch, path, layout)
                batch = []
    except Exception as e:  # noqa: BLE001 - e.g. a truncated gzip stream
        yield Quarantined(TRUNCATED, f"tfrecord: cannot read past record {len(batch)}: {e}", path)
    finally:
        f.close()
    if batch:
        yield from _example_block(batch, path, layout)


def _example_block(batch: list[tuple[int, int, bytes]], path: str, layout: Layout) -> Iterator[Block | Quarantined]:
    from tfx_bsl.coders import example_coder

    wanted = layout.columns
    numbers = np.array([b[0] for b in batch])
    offsets = np.array([b[1] for b in batch])
    payloads = [b[2] for b in batch]
    try:
        rb = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(payloads)
        names = set(rb.schema.names)
        columns: dict[str, RawColumn] = {c: rb.column(rb.schema.get_field_index(c)) for c in wanted if c in names}
        keep = np.arange(len(batch))
    except RuntimeError:  # an unparseable example or a feature whose type varies: go one by one
        columns, keep, bad = _examples_py(payloads, wanted)
        for i, message in bad:
            yield Quarantined(PARSE_ERROR, f"tf.Example: {message}", path, int(numbers[i]), int(offsets[i]), payloads[i])
        if not len(keep):
            return

    def locate(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return numbers[keep[rows]], offsets[keep[rows]]

    yield Block(columns, len(keep), path, False, locate, lambda row: payloads[int(keep[row])])


def _examples_py(payloads: list[bytes], wanted: list[str]) -> tuple[dict[str, list], np.ndarray, list]:
    import tensorflow as tf
    values: dict[str, list] = {c: [] for c in wanted}
    keep, bad = [], []
    for i, data in enumerate(payloads):
        try:
            ex = tf.train.Example.FromString(data)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            bad.append((i, f"cannot parse: {e}"))
            continue
        feats = ex.features.feature
        for c in wanted:
            feat = feats.get(c)
            kind = feat.WhichOneof("kind") if feat is not None else None
            values[c].append(list(getattr(feat, kind).value) if kind else None)
        keep.append(i)
    return values, np.array(keep, np.int64), bad


READERS = {"csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet, "tfrecord": read_tfrecord}


def rows_block(rows: list[dict], columns: list[str], source_name: str, row0: int = 0) -> Block:
    """Python dict rows (BigQuery) -> a Block of Python-list columns."""
    values = {c: [r.get(c) for r in rows] for c in columns}
    block = _row_block(values, len(rows), source_name, row0)
    block.payload = lambda row: json.dumps(rows[int(row)], default=str).encode("utf-8")
    return block


def source_name(path: str) -> str:
    return os.path.basename(path)


def numpy_block(columns: dict[str, np.ndarray], source_name: str, row0: int = 0) -> Block:
    """Column arrays (2-D ones become list columns) -> a Block, e.g. for simulated records."""
    arrays: dict[str, RawColumn] = {}
    for name, v in columns.items():
        v = np.asarray(v)
        if v.dtype == object:
            arrays[name] = pa.array(v.tolist())
        elif v.ndim == 2:
            n, w = v.shape
            offsets = pa.array(np.arange(0, n * w + 1, w, dtype=np.int32))
            arrays[name] = pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(v).reshape(-1)))
        else:
            arrays[name] = pa.array(v)
    num_rows = len(next(iter(columns.values()))) if columns else 0
    return _row_block(arrays, num_rows, source_name, row0)
