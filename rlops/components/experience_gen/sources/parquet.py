"""Parquet reader: record batches of a row group at a time, columns read only if mapped."""
from __future__ import annotations

from typing import Iterator

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.layout import Layout
from rlops.components.experience_gen.sources.base import (UNREADABLE, Block, FileRange, Quarantined, open_file,
                                                          row_block)


PARQUET_BATCH_ROWS = 32_768


def read_parquet(rng: FileRange, source: FileSource, layout: Layout) -> Iterator[Block | Quarantined]:
    import pyarrow.parquet as pq

    path = rng.path
    f = None
    try:
        f = open_file(path, source)
        pf = pq.ParquetFile(f)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file is a bad record, not a crash
        if f is not None:
            f.close()
        yield Quarantined(UNREADABLE, f"parquet: cannot open file: {e}", path, payload=b"")
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
            except Exception as e:  # noqa: BLE001 - a corrupt row group: quarantine what is left of it
                yield Quarantined(UNREADABLE, f"parquet: cannot read row group {g} past row {start}: {e}", path,
                                  line=row0 + start + 1)
            row0 += group_rows
    finally:
        f.close()
