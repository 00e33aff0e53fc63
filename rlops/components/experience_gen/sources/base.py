"""Shared pieces of the readers: the `Source` protocol every source kind implements, what a
reader yields, work items, and file access."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Mapping, Protocol

import numpy as np
import pyarrow as pa

from rlops.components.experience_gen.config import ExperienceGenConfig, FileSource
from rlops.components.experience_gen.convert import RawColumn
from rlops.components.experience_gen.layout import Layout, SourceSchema

if TYPE_CHECKING:
    import apache_beam as beam

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
        return json.dumps(
            {
                "reason": self.code,
                "message": self.message,
                "source_file": self.source_file,
                "line": self.line,
                "offset": self.offset,
                "payload": text,
                "payload_encoding": encoding,
                "payload_truncated": len(self.payload) > PAYLOAD_LIMIT,
            }
        )


@dataclass
class Unreadable:
    """Bytes [start, end) of a file that could not be read (a torn row group, a corrupt TFRecord
    tail, a gzip stream cut short). How many records they held is unknown, so they cannot be
    quarantined one by one: the run fails and names the file and the byte range."""

    source_file: str
    start: int
    end: int  # -1: to the end of the file
    message: str

    def describe(self) -> str:
        end = "end of file" if self.end < 0 else str(self.end)
        return f"{self.source_file} bytes [{self.start}, {end}): {self.message}"

    REASON = "unreadable_bytes"  # its entry in the quarantine files (not a record: not counted as one)

    def to_json(self) -> str:
        return json.dumps(
            {
                "reason": self.REASON,
                "source_file": self.source_file,
                "start": self.start,
                "end": self.end,
                "message": self.message,
            }
        )


class SourceError(ValueError):
    """A source that cannot be read at all (undecodable header, CR-only line endings); names the file."""


@dataclass
class Block:
    """Parsed records from one place in one source. Rows index `columns`; `locate` / `payload`
    recover each row's line, byte offset and original bytes (only asked for bad rows, or for
    grouped rows: trajectory steps and slate pages, which carry them to their assembly)."""

    columns: dict[str, RawColumn]
    num_rows: int
    source_file: str
    text: bool
    locate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    payload: Callable[[int], bytes]
    # Many rows' payloads at once, where a source can do better than one call per row.
    many_payloads: Callable[[np.ndarray], list[bytes]] | None = None
    # The payloads can be read back later from source_file by row (sources.read_back_payloads):
    # grouped rows then carry no payload to their assembly (only a rejected group's rows need one).
    payload_from_file: bool = False

    def quarantine(self, row: int, code: str, message: str) -> Quarantined:
        line, offset = self.locate(np.array([row]))
        return Quarantined(code, message, self.source_file, int(line[0]), int(offset[0]), self.payload(row))

    def payloads(self, rows: np.ndarray) -> list[bytes]:
        """The payloads of `rows`, in order."""
        if self.many_payloads is not None:
            return self.many_payloads(rows)
        return [self.payload(int(r)) for r in rows]


# --- the protocol ----------------------------------------------------------------------------

# A sample of the data for kind inference: column -> (Arrow type, most common list length), and
# the sampled columns themselves.
Sample = tuple[dict[str, tuple[pa.DataType, int | None]], dict[str, pa.ChunkedArray]]


@dataclass(frozen=True)
class SourcePlan:
    """What a source resolved at pipeline construction."""

    config: ExperienceGenConfig  # with what the source settles (a simulation's columns and action spec)
    items: tuple = ()  # work items for `read_item` (empty: `read` produces them in the graph)
    inputs: tuple[tuple[str, int], ...] = ()  # the matched files (path, size): what peek / columns look at
    joins_items: bool = True  # per-arm: the item table (experience_gen.item_source) is joined to its records


class Source(Protocol):
    """One kind of input (`experience_gen.source.kind`). One class per kind, each in its own
    module under sources/, registered in sources.SOURCES by its `kind`; the pipeline, the feature
    inference, the runtime parameters and the cache key ask it, never branch on the kind."""

    kind: ClassVar[str]  # the config's `kind` tag
    label: ClassVar[str]  # how messages name it ("BigQuery")
    dated_fields: ClassVar[tuple[str, ...]]  # config fields that may hold {date} / {date_nodash}
    runtime_fields: ClassVar[Mapping[str, str]]  # per-run parameter -> the config field it replaces
    cacheable: ClassVar[bool]  # False: the data cannot be fingerprinted (a run is never served from cache)

    def plan(self, config: ExperienceGenConfig) -> SourcePlan:
        """Matches the inputs and cuts them into work items (fails naming what matched nothing)."""
        ...

    def peek(self, config: ExperienceGenConfig, inputs: tuple) -> Callable[[], Sample] | None:
        """Reads a sample of the records for feature-kind inference when called (only when the
        features need it); None: this source cannot sample, every kind must be configured."""
        ...

    def columns(self, config: ExperienceGenConfig, inputs: tuple) -> tuple[SourceSchema, str | None]:
        """The column names (and list widths) the data has, and the file whose header or schema
        lists them all (mapped columns are checked against it), else None."""
        ...

    def fingerprint(self, config: ExperienceGenConfig) -> list[list]:
        """Stamps of the inputs beyond the config (files: path, size, mtime); [] for none."""
        ...

    def read(self, p: beam.Pipeline, config: ExperienceGenConfig, items: tuple) -> beam.PCollection:
        """The work items as a PCollection (what `read_item` takes)."""
        ...

    def read_item(
        self, config: ExperienceGenConfig, layout: Layout, item: Any
    ) -> Iterator[Block | Quarantined | Unreadable]:
        """One work item -> Blocks of raw columns, Quarantined records, Unreadable byte ranges."""
        ...

    def cloud_inputs(self, config: ExperienceGenConfig) -> list[str]:
        """The config keys (with their values) this source reads from Google Cloud."""
        ...


# --- work items -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileRange:
    path: str
    start: int = 0
    end: int = -1  # -1: to the end of the file


def match_files(pattern: str) -> list[tuple[str, int]]:
    """Files of a comma-separated pattern; every part must match something (a typo in one part
    would otherwise drop that data silently)."""
    from apache_beam.io.filesystems import FileSystems

    patterns = [p.strip() for p in pattern.split(",")]
    if not all(patterns):
        raise FileNotFoundError(f"source pattern {pattern!r} has an empty part")
    out: list[tuple[str, int]] = []
    for part, result in zip(patterns, FileSystems.match(patterns)):
        if not result.metadata_list:
            raise FileNotFoundError(f"source pattern part {part!r} (of {pattern!r}) matched no files")
        out.extend((m.path, m.size_in_bytes) for m in result.metadata_list)
    return sorted(set(out))


def file_stamps(pattern: str) -> list[list]:
    """[path, size, modification stamp...] of every file a comma-separated pattern matches (local
    files: st_mtime_ns and inode; Cloud Storage: the object's update time, which every new
    generation changes): what the cache key of a file input is made of."""
    import os

    from apache_beam.io.filesystems import FileSystems

    parts = [p.strip() for p in pattern.split(",")]
    if not all(parts):
        raise FileNotFoundError(f"source pattern {pattern!r} has an empty part")
    out = []
    for part, result in zip(parts, FileSystems.match(parts)):
        if not result.metadata_list:  # as match_files says it
            raise FileNotFoundError(f"source pattern part {part!r} (of {pattern!r}) matched no files")
        for m in result.metadata_list:
            if "://" in m.path:
                out.append([m.path, m.size_in_bytes, m.last_updated_in_seconds])
            else:
                st = os.stat(m.path)
                out.append([m.path, st.st_size, st.st_mtime_ns, st.st_ino])
    return sorted(out)


def on_cloud_storage(pattern: str) -> bool:
    return any(p.strip().startswith("gs://") for p in pattern.split(","))


def create_items(p: beam.Pipeline, items: tuple) -> beam.PCollection:
    """Work items planned at construction, spread over the workers."""
    import apache_beam as beam

    return p | "WorkItems" >> beam.Create(list(items), reshuffle=len(items) > 1)


def compression_type(path: str, source: FileSource) -> str:
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
        plain = compression_type(path, source) == CompressionTypes.UNCOMPRESSED
        splittable = source.format in ("csv", "jsonl") and plain
        if not splittable or size <= source.range_bytes:
            out.append(FileRange(path))
            continue
        for start in range(0, size, source.range_bytes):
            out.append(FileRange(path, start, min(size, start + source.range_bytes)))
    return out


def open_file(path: str, source: FileSource) -> Any:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=compression_type(path, source))


def stream_cut_short(f: Any) -> bool:
    """After a read returned b"": did a compressed file end before its stream did? Beam's
    CompressedFile returns end-of-file there without an error (a gzip file cut short in a
    copy reads as fewer lines), so ask its decompressor whether it saw the end marker."""
    d = getattr(f, "_decompressor", None)
    return d is not None and hasattr(d, "eof") and not d.eof


def is_read_error(e: BaseException) -> bool:
    """Errors that mean the bytes cannot be read (torn or corrupt compressed data, I/O)."""
    import zlib

    return isinstance(e, (OSError, EOFError, zlib.error))


# --- blocks of rows without byte offsets ---------------------------------------------------------


def row_block(
    columns: dict[str, RawColumn],
    num_rows: int,
    source_file: str,
    row0: int,
    full: Callable[[], pa.Table] | None = None,
) -> Block:
    """Rows with no byte offsets (Parquet, BigQuery, simulation); the payload is the row as JSON
    (all its columns when `full` can re-read them, once per block)."""
    whole: list[pa.Table] = []

    def locate(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return row0 + rows + 1, np.full(len(rows), -1)

    def payloads(rows: np.ndarray) -> list[bytes]:
        rows = np.asarray(rows, np.int64)
        if full is not None:
            if not whole:
                whole.append(full())
            return json_payloads(whole[0].take(pa.array(rows)))  # one conversion, not one per row
        values = {c: _cells(v, rows) for c, v in columns.items()}
        records = [dict(zip(values, cells)) for cells in zip(*values.values())] if values else [{}] * len(rows)
        return [json.dumps(r, default=str).encode("utf-8") for r in records]

    def payload(row: int) -> bytes:
        return payloads(np.array([row]))[0]

    return Block(columns, num_rows, source_file, False, locate, payload, payloads, payload_from_file=full is not None)


def json_payloads(table: pa.Table) -> list[bytes]:
    """Each row of a table as the JSON object of its columns (a row block's payload)."""
    return [json.dumps(r, default=str).encode("utf-8") for r in table.to_pylist()]


def _cells(column: RawColumn, rows: np.ndarray) -> list:
    if isinstance(column, list):
        return [column[r] for r in rows.tolist()]
    assert column is not None  # a row block holds every column it names
    return column.take(pa.array(rows)).to_pylist()


def rows_block(rows: list[dict], columns: list[str], source_name: str, row0: int = 0) -> Block:
    """Python dict rows (BigQuery) -> a Block of Python-list columns."""
    values: dict[str, RawColumn] = {c: [r.get(c) for r in rows] for c in columns}
    block = row_block(values, len(rows), source_name, row0)
    block.payload = lambda row: json.dumps(rows[int(row)], default=str).encode("utf-8")
    block.many_payloads = None  # the rows as they came (per row: they are dicts already)
    return block


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
    return row_block(arrays, num_rows, source_name, row0)
