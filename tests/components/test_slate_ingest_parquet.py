"""Slate rows from Parquet: a page's rows carry no payload through the grouping (only its file and
row); the rows of a rejected page get theirs read back from the file, the same JSON a row rejected
on its own gets, and the counts add up."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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
    """Pages of L items (uniform without replacement), 1-based positions, one extra column no key maps."""
    rng = np.random.default_rng(0)
    items = np.argsort(rng.random((pages, K)), 1)[:, :L].ravel()
    return pa.table(
        {
            "request": np.repeat([f"r{i}" for i in range(pages)], L),
            "pos": np.tile(np.arange(1, L + 1), pages),
            "item": items,
            "click": rng.integers(0, 2, pages * L).astype(np.float64),
            "pscore": np.full(pages * L, 1 / K),
            "user": np.repeat([f"u{i % 4}" for i in range(pages)], L),
            "note": [f"n{i}" for i in range(pages * L)],
        }
    )


def config(path: str) -> ExperienceGenConfig:
    columns = SlateColumns(
        slate_id="request", position="pos", item_id="item", reward="click", propensity="pscore",
        features=(FeatureColumn("user"),),
    )  # fmt: skip
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format="parquet"),
        record_kind="slate",
        slate_columns=columns,
        slate_length=L,
        action_spec=SpecConfig.discrete(K),
        max_bad_record_ratio=0.5,
    )


def test_read_back_payloads_equal_the_rows_own(tmp_path):
    path = str(tmp_path / "pages.parquet")
    pq.write_table(page_table(100), path, row_group_size=120)  # rows across three row groups
    cfg = config(path)
    eager, lines = [], []
    for block in read_parquet(FileRange(path), cfg.source, _Columns(["request", "pos", "item"])):
        assert block.payload_from_file
        rows = np.array([0, 7, block.num_rows - 1])  # payloads while the reader holds the file open
        eager += block.payloads(rows)
        lines += block.locate(rows)[0].tolist()
    lines = np.array(lines)
    assert read_back_payloads(cfg.source, np.full(len(lines), path, object), lines) == eager
    assert json.loads(eager[-1])["note"] == f"n{lines[-1] - 1}"  # every column, unmapped ones too
    gone = read_back_payloads(cfg.source, np.array([str(tmp_path / "gone.parquet")], object), np.array([1]))
    assert gone == [b""]  # a file gone since: the row keeps its file and row, without a payload


class _Columns:
    """What read_parquet asks of a Layout."""

    def __init__(self, columns: list[str]):
        self.columns = columns


def test_rejected_pages_quarantine_every_row_with_its_payload(tmp_path):
    table = page_table(60)
    pos = table.column("pos").to_numpy().copy()
    pos[4] = 1  # page r1: position 1 twice, 2 missing
    table = table.set_column(1, "pos", pa.array(pos))
    path = str(tmp_path / "pages.parquet")
    pq.write_table(table, path, row_group_size=50)
    result = run_experience_gen(config(path), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert result.records_read == 180 == result.records_written + result.records_quarantined
    assert result.records_quarantined == L and sum(result.outputs_per_split.values()) == 59
    bad = sorted(read_quarantine(str(tmp_path / "q")), key=lambda r: r["line"])
    assert [r["line"] for r in bad] == [4, 5, 6]
    rows = table.to_pylist()
    assert [json.loads(r["payload"]) for r in bad] == rows[3:6]
    assert all(r["reason"] == "slate_duplicate_position" for r in bad)
