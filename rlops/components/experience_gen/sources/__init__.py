"""Readers: source records -> Blocks (raw columns + provenance) and Quarantined records.

Files are read through Beam filesystems (local, gs://, ...), many records at a time: CSV and
JSON Lines as line-aligned byte chunks parsed by Arrow (text.py), Parquet as record batches
(parquet.py), TFRecord(tf.Example) decoded in batches by tfx_bsl (tfrecord.py). Whatever
cannot be parsed becomes a Quarantined record with its source file, line/offset and payload;
bytes that cannot be read at all (so their records cannot be counted) become an Unreadable
range, which fails the run.
"""

from rlops.components.experience_gen.sources.base import (
    PARSE_ERROR,
    TRUNCATED,
    UNREADABLE,
    Block,
    FileRange,
    Quarantined,
    SourceError,
    Unreadable,
    match_files,
    numpy_block,
    plan_ranges,
    rows_block,
)
from rlops.components.experience_gen.sources.parquet import read_parquet
from rlops.components.experience_gen.sources.peek import peek_schema
from rlops.components.experience_gen.sources.text import read_csv, read_jsonl
from rlops.components.experience_gen.sources.tfrecord import read_tfrecord

READERS = {"csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet, "tfrecord": read_tfrecord}

__all__ = [
    "PARSE_ERROR",
    "TRUNCATED",
    "UNREADABLE",
    "Block",
    "FileRange",
    "Quarantined",
    "READERS",
    "SourceError",
    "Unreadable",
    "match_files",
    "numpy_block",
    "peek_schema",
    "plan_ranges",
    "rows_block",
]
