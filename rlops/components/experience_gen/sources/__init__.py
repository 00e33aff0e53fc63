"""Readers: source records -> Blocks (raw columns + provenance) and Quarantined records.

Files are read through Beam filesystems (local, gs://, ...), many records at a time: CSV and
JSON Lines as line-aligned byte chunks parsed by Arrow (text.py), Parquet as record batches
(parquet.py), TFRecord(tf.Example) decoded in batches by tfx_bsl (tfrecord.py). Whatever
cannot be parsed becomes a Quarantined record with its source file, line/offset and payload;
bytes that cannot be read at all (so their records cannot be counted) become an Unreadable
range, which fails the run.

Each source kind (`experience_gen.source.kind`) is one class implementing the `Source` protocol
(base.py), in its own module: file.py, bigquery.py, simulation.py. SOURCES maps the kind to it;
a new source is its module, its line in SOURCES and its config dataclass in config.Source.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.sources.base import (
    PARSE_ERROR,
    TRUNCATED,
    UNREADABLE,
    Block,
    FileRange,
    Quarantined,
    Sample,
    Source,
    SourceError,
    SourcePlan,
    Unreadable,
    match_files,
    numpy_block,
    plan_ranges,
    rows_block,
)
from rlops.components.experience_gen.sources.bigquery import BigQuery
from rlops.components.experience_gen.sources.file import READERS, Files
from rlops.components.experience_gen.sources.parquet import parquet_payloads
from rlops.components.experience_gen.sources.peek import peek_schema
from rlops.components.experience_gen.sources.simulation import Simulation
from rlops.components.experience_gen.sources.text import text_payloads

# The one table of source kinds: `kind` -> the class that reads it.
SOURCES: dict[str, Source] = {
    Files.kind: Files(),
    BigQuery.kind: BigQuery(),
    Simulation.kind: Simulation(),
}


def source_of(source_config: Any) -> Source:
    """The Source for a config's source section (FileSource, BigQuerySource, ...), by its `kind`."""
    kind = getattr(source_config, "kind", None)
    if kind not in SOURCES:
        raise TypeError(f"experience_gen.source: unknown source kind {kind!r}; known: {', '.join(SOURCES)}")
    return SOURCES[kind]


def read_back_payloads(source_config: Any, files: np.ndarray, lines: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """The payloads of rows whose Block left them to be read back (`Block.payload_from_file`):
    Parquet rows by file and 1-based row, CSV / JSON Lines lines by file and byte offset. A file
    that cannot be read again leaves its rows' payloads empty (they are still quarantined, with
    their file, line and offset)."""
    assert isinstance(source_config, FileSource) and source_config.format in ("parquet", "csv", "jsonl")
    by_row = source_config.format == "parquet"
    out: list[bytes] = [b""] * len(files)
    files = np.asarray(files, object)
    for path in sorted(set(files.tolist())):
        picked = np.flatnonzero(files == path)
        try:
            if by_row:
                payloads = parquet_payloads(path, source_config, np.asarray(lines)[picked])
            else:
                payloads = text_payloads(path, source_config, np.asarray(offsets)[picked])
        except Exception as e:  # noqa: BLE001 - changed or gone since it was read: keep the rest
            logging.getLogger(__name__).warning("quarantine: cannot read back rows of %s: %s", path, e)
            continue
        for i, payload in zip(picked.tolist(), payloads):
            out[i] = payload
    return out


def runtime_parameters(source_config: Any) -> dict[str, tuple[type, Any]]:
    """The per-run parameters a source takes, name -> (type, default): each of its runtime fields
    (its current value) and `data_date` ('' = yesterday, UTC) where it has dated fields."""
    source = source_of(source_config)
    out: dict[str, tuple[type, Any]] = {}
    for name, field_name in source.runtime_fields.items():
        value = getattr(source_config, field_name)
        out[name] = (type(value), value)
    if source.dated_fields:
        out["data_date"] = (str, "")
    return out


__all__ = [
    "PARSE_ERROR",
    "TRUNCATED",
    "UNREADABLE",
    "Block",
    "FileRange",
    "Quarantined",
    "READERS",
    "SOURCES",
    "Sample",
    "Source",
    "SourceError",
    "SourcePlan",
    "Unreadable",
    "match_files",
    "numpy_block",
    "peek_schema",
    "plan_ranges",
    "read_back_payloads",
    "rows_block",
    "runtime_parameters",
    "source_of",
]
