"""Schema peek at pipeline construction: column names and list widths from a file's start."""

from __future__ import annotations

import json
from collections import Counter

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.layout import SourceSchema
from rlops.components.experience_gen.sources.base import open_file
from rlops.components.experience_gen.sources.text import csv_header
from rlops.components.experience_gen.sources.tfrecord import iter_tfrecords


def peek_schema(path: str, source: FileSource) -> SourceSchema:
    """Column names (and list widths) of one file, read cheaply from its start."""
    fmt = source.format
    if fmt == "csv":
        return SourceSchema(tuple(csv_header(path, source)), {}, text=True)
    rows: list[dict] = []
    with open_file(path, source) as f:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(f)
            first = next(pf.iter_batches(batch_size=PEEK_ROWS), None)
            return _schema(tuple(pf.schema_arrow.names), first.to_pylist() if first is not None else [])
        if fmt == "jsonl":
            for line in iter(f.readline, b""):  # Beam's CompressedFile is not iterable
                try:
                    row = json.loads(line) if line.strip() else None
                except ValueError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
                if len(rows) >= PEEK_ROWS:
                    break
        elif fmt == "tfrecord":
            import tensorflow as tf

            for _, _, data, problem in iter_tfrecords(f):
                try:
                    ex = tf.train.Example.FromString(data) if not problem else None
                except Exception:  # noqa: BLE001 - keep looking for readable records
                    continue
                if ex is not None:
                    rows.append(
                        {
                            k: list(getattr(v, v.WhichOneof("kind")).value) if v.WhichOneof("kind") else []
                            for k, v in ex.features.feature.items()
                        }
                    )
                if len(rows) >= PEEK_ROWS:
                    break
        else:
            raise ValueError(f"unknown file format {fmt!r}")
    names = sorted({k for r in rows for k in r})
    return _schema(tuple(names), rows)


PEEK_ROWS = 100


def _schema(names: tuple[str, ...], rows: list[dict]) -> SourceSchema:
    """Names, and for list-valued columns their most common length among the sampled rows."""
    widths = {}
    for name in names:
        lengths = Counter(len(r[name]) for r in rows if isinstance(r.get(name), (list, tuple)))
        if lengths:
            widths[name] = lengths.most_common(1)[0][0]
    return SourceSchema(names, widths)
