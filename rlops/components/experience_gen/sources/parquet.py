"""Parquet reader: record batches of a row group at a time, columns read only if mapped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.layout import Layout
from rlops.components.experience_gen.sources.base import (
    Block,
    FileRange,
    Unreadable,
    json_payloads,
    open_file,
    row_block,
)

if TYPE_CHECKING:
    import pyarrow.parquet as pq

PARQUET_BATCH_ROWS = 32_768


def _row_group_bytes(meta: pq.FileMetaData, g: int) -> tuple[int, int]:
    """[start, end) of row group g's column chunks in the file."""
    rg = meta.row_group(g)
    starts = []
    for i in range(rg.num_columns):
        c = rg.column(i)
        starts.append(c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset)
    start = min(starts) if starts else 0
    return start, start + sum(rg.column(i).total_compressed_size for i in range(rg.num_columns))


def read_parquet(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Unreadable]:
    import pyarrow.parquet as pq

    path = rng.path
    f = None
    try:
        f = open_file(path, source)
        pf = pq.ParquetFile(f)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: its records are unknown
        if f is not None:
            f.close()
        yield Unreadable(path, 0, -1, f"parquet: cannot open file: {e}")
        return
    try:
        names = set(pf.schema_arrow.names)
        wanted = [c for c in layout.columns if c in names]
        row0 = 0
        for g in range(pf.num_row_groups):
            group_rows = pf.metadata.row_group(g).num_rows
            start = 0
            try:
                for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[g], columns=wanted):
                    full = lambda g=g, s=start, n=batch.num_rows: pf.read_row_group(g).slice(s, n)  # noqa: E731
                    yield row_block({c: batch.column(c) for c in wanted}, batch.num_rows, path, row0 + start, full)
                    start += batch.num_rows
            except Exception as e:  # noqa: BLE001 - a corrupt row group: its rows are lost, fail the run
                lo, hi = _row_group_bytes(pf.metadata, g)
                yield Unreadable(
                    path,
                    lo,
                    hi,
                    f"parquet: cannot read row group {g} (rows {row0 + start + 1}-{row0 + group_rows}): {e}",
                )
            row0 += group_rows
    finally:
        f.close()


def parquet_payloads(path: str, source: FileSource, rows: np.ndarray) -> list[bytes]:
    """The payloads of rows of a Parquet file (1-based row numbers, as a Block locates them), read
    back: each row group that holds one of them is read once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = np.asarray(rows, np.int64) - 1
    out: list[bytes] = [b""] * len(index)
    with open_file(path, source) as f:
        pf = pq.ParquetFile(f)
        sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        group = np.searchsorted(starts, index, side="right") - 1
        for g in np.unique(group).tolist():
            picked = np.flatnonzero(group == g)
            table = pf.read_row_group(g).take(pa.array(index[picked] - starts[g]))
            for i, payload in zip(picked.tolist(), json_payloads(table)):
                out[i] = payload
    return out
