"""Slate rows carry no payload through the grouping (only their file, row and byte offset): the
rows of a rejected page get theirs read back from the file (Parquet: the row as JSON, every column;
CSV: the line), the same payload a row rejected on its own gets, and the counts add up."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlops.components.experience_gen import (
    ExperienceGenConfig,
    FileSource,
    SlateColumns,
    SpecConfig,
    read_quarantine,
    run_experience_gen,
)
from rlops.components.experience_gen.config import FeatureColumn
from rlops.components.experience_gen.sources import FileRange, read_back_payloads
from rlops.components.experience_gen.sources.parquet import read_parquet

K, L = 6, 3


def page_table(pages: int) -> pa.Table:
    """Pages of L items (uniform without replacement), 1-based positions, one column no key maps;
    page r1 shows position 1 twice and misses position 2."""
    rng = np.random.default_rng(0)
    pos = np.tile(np.arange(1, L + 1), pages)
    pos[4] = 1
    return pa.table(
        {
            "request": np.repeat([f"r{i}" for i in range(pages)], L),
            "pos": pos,
            "item": np.argsort(rng.random((pages, K)), 1)[:, :L].ravel(),
            "click": rng.integers(0, 2, pages * L).astype(np.float64),
            "pscore": np.full(pages * L, 0.125),
            "user": np.repeat([f"u{i % 4}" for i in range(pages)], L),
            "note": [f"n{i}" for i in range(pages * L)],
        }
    )


def config(path: str, fmt: str) -> ExperienceGenConfig:
    columns = SlateColumns(
        slate_id="request", position="pos", item_id="item", reward="click", propensity="pscore",
        features=(FeatureColumn("user"),),
    )  # fmt: skip
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format=fmt),
        record_kind="slate",
        slate_columns=columns,
        slate_length=L,
        action_spec=SpecConfig.discrete(K),
        max_bad_record_ratio=0.5,
    )


def write(table: pa.Table, tmp_path, fmt: str) -> tuple[str, list[bytes]]:
    """The file, and each row's payload as a row rejected on its own gets it."""
    if fmt == "parquet":
        path = str(tmp_path / "pages.parquet")
        pq.write_table(table, path, row_group_size=50)  # pages across row groups
        return path, [json.dumps(r).encode() for r in table.to_pylist()]
    lines = [",".join(map(str, r.values())).encode() for r in table.to_pylist()]
    path = str(tmp_path / "pages.csv.gz")  # read back through the decompressed stream
    with gzip.open(path, "wb") as f:
        f.write(b"\r\n".join([",".join(table.column_names).encode(), *lines]) + b"\r\n")
    return path, lines


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_rejected_pages_quarantine_every_row_with_its_payload(tmp_path, fmt):
    table = page_table(60)
    path, payloads = write(table, tmp_path, fmt)
    result = run_experience_gen(config(path, fmt), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert result.records_read == 180 == result.records_written + result.records_quarantined
    assert result.records_quarantined == L and sum(result.outputs_per_split.values()) == 59
    bad = sorted(read_quarantine(str(tmp_path / "q")), key=lambda r: r["line"])
    assert all(r["reason"] == "slate_duplicate_position" for r in bad)
    first = 1 if fmt == "parquet" else 2  # a CSV's first row is its second line
    assert [r["line"] - first for r in bad] == [3, 4, 5]
    assert [r["payload"].encode() for r in bad] == payloads[3:6]


def test_read_back_parquet_payloads_equal_the_rows_own(tmp_path):
    path = str(tmp_path / "pages.parquet")
    pq.write_table(page_table(100), path, row_group_size=120)  # rows across three row groups
    cfg = config(path, "parquet")
    eager, lines = [], []
    for block in read_parquet(FileRange(path), cfg.source, _Columns(["request", "pos", "item"])):
        assert block.payload_from_file
        rows = np.array([0, 7, block.num_rows - 1])  # payloads while the reader holds the file open
        eager += block.payloads(rows)
        lines += block.locate(rows)[0].tolist()
    files = np.full(len(lines), path, object)
    assert read_back_payloads(cfg.source, files, np.array(lines), np.full(len(lines), -1)) == eager
    assert json.loads(eager[-1])["note"] == f"n{lines[-1] - 1}"  # every column, unmapped ones too
    gone = read_back_payloads(cfg.source, np.array([str(tmp_path / "gone.parquet")], object), [1], [-1])
    assert gone == [b""]  # a file gone since: the row keeps its file and row, without a payload


class _Columns:
    """What read_parquet asks of a Layout."""

    def __init__(self, columns: list[str]):
        self.columns = columns
