"""Fault suite, ingestion: every record is counted once (read = written + quarantined), bytes that
cannot be read fail the run naming the file and byte range, and empty input fails saying which."""

from __future__ import annotations

import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    ExperienceGenError,
    FileSource,
    SpecConfig,
    pipeline,
    read_quarantine,
    run_experience_gen,
)
from rlops.components.experience_gen.config import Split, SplitConfig
from rlops.components.experience_gen.sources import Quarantined, SourceError, Unreadable

K = 4
HEADER = "x0,x1,action,reward,propensity"


def rows(n: int, propensity: str = "0.25") -> list[str]:
    return [f"{i * 0.1:.1f},{i * 0.2:.1f},{i % K},1.0,{propensity}" for i in range(n)]


def config(pattern: str, fmt: str = "csv", **kw) -> ExperienceGenConfig:
    src = FileSource(pattern=pattern, format=fmt)
    return ExperienceGenConfig(
        source=src, bandit_columns=BanditColumns(context_prefix="x"), action_spec=SpecConfig.discrete(K), **kw
    )


def ingest(cfg: ExperienceGenConfig) -> tuple[int, int, list[Quarantined], list[Unreadable]]:
    """(records read, valid, quarantined, unreadable ranges) without Beam."""
    plan = pipeline.make_plan(cfg)
    read, valid, bad, lost = 0, 0, [], []
    for item in plan.items:
        for n, out in pipeline.ingest(plan, item):
            read += n
            if isinstance(out, Quarantined):
                bad.append(out)
            elif isinstance(out, Unreadable):
                lost.append(out)
            else:
                valid += len(out)
    return read, valid, bad, lost


def parquet_blob(n: int, row_group: int) -> bytes:
    t = pa.table(
        {
            "x0": np.arange(n, dtype=np.float64),
            "x1": np.ones(n),
            "action": np.arange(n) % K,
            "reward": np.ones(n),
            "propensity": np.full(n, 0.25),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink, row_group_size=row_group)
    return sink.getvalue().to_pybytes()


# --- empty input -------------------------------------------------------------------------------


def test_header_only_csv_fails_saying_no_records(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text(HEADER + "\n")
    with pytest.raises(ExperienceGenError, match="held no records") as e:
        run_experience_gen(config(str(path)), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert e.value.result.records_read == 0


def test_split_smaller_than_a_batch_fails_naming_the_split(tmp_path):
    path = tmp_path / "small.csv"
    path.write_text("\n".join([HEADER] + rows(40)) + "\n")
    cfg = config(str(path), min_split_records={"train": 64})
    with pytest.raises(ExperienceGenError, match=r"split 'train' got \d+ valid record\(s\) of 40, fewer than the 64"):
        run_experience_gen(cfg, str(tmp_path / "ex"), str(tmp_path / "q"))
    # Enough records: the same minimum passes, and the counts add up per record.
    path.write_text("\n".join([HEADER] + rows(400)) + "\n")
    r = run_experience_gen(cfg, str(tmp_path / "ex2"), str(tmp_path / "q2"))
    assert r.records_read == r.records_written == 400 and r.written_per_split["train"] >= 64


# --- whole files / blocks are never one quarantined record --------------------------------------


def test_unreadable_parquet_file_fails_naming_file_and_bytes(tmp_path):
    blob = parquet_blob(2000, 500)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.parquet").write_bytes(blob)
    (tmp_path / "in" / "b.parquet").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ExperienceGenError, match=r"b\.parquet bytes \[0, end of file\): parquet: cannot open") as e:
        run_experience_gen(
            config(str(tmp_path / "in" / "*.parquet"), "parquet"), str(tmp_path / "ex"), str(tmp_path / "q")
        )
    r = e.value.result  # the readable file's records are all counted; the torn one is not "one record"
    assert (r.records_read, r.records_written, r.records_quarantined, len(r.unreadable)) == (2000, 2000, 0, 1)
    assert read_quarantine(str(tmp_path / "q")) == []  # the byte range is listed there, but is not a record


def test_corrupt_parquet_row_group_is_a_byte_range_not_one_record(tmp_path):
    blob = bytearray(parquet_blob(2000, 500))
    meta = pq.ParquetFile(pa.BufferReader(bytes(blob))).metadata.row_group(1)
    lo = meta.column(0).dictionary_page_offset  # column chunks are laid out in order, dictionary first
    hi = lo + sum(meta.column(i).total_compressed_size for i in range(meta.num_columns))
    blob[lo + 40 : hi - 40] = b"\x00" * (hi - lo - 80)  # destroy row group 1's pages, keep the footer
    path = tmp_path / "rg.parquet"
    path.write_bytes(bytes(blob))
    read, valid, bad, lost = ingest(config(str(path), "parquet"))
    assert bad == [] and read == valid  # counted records are all accounted for
    assert [(u.source_file, u.start, u.end) for u in lost] == [(str(path), lo, hi)]
    assert "row group 1 (rows 501-1000)" in lost[0].message


def test_corrupt_tfrecord_tail_fails_with_its_byte_range(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "t.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(300):
            ex = tf.train.Example()
            for name, v in (("x0", 1.0), ("x1", 2.0), ("reward", 1.0), ("propensity", 0.5)):
                ex.features.feature[name].float_list.value.append(v)
            ex.features.feature["action"].int64_list.value.append(i % K)
            w.write(ex.SerializeToString())
    blob = bytearray(open(path, "rb").read())
    size = len(blob) // 300  # equal-size records
    blob[150 * size : 150 * size + 8] = b"\xff" * 8  # the length of record 151
    open(path, "wb").write(bytes(blob))
    read, valid, bad, lost = ingest(config(path, "tfrecord"))
    assert (read, valid, bad) == (150, 150, [])
    assert [(u.start, u.end) for u in lost] == [(150 * size, -1)]
    with pytest.raises(ExperienceGenError, match=rf"t\.tfrecord bytes \[{150 * size}, end of file\)"):
        run_experience_gen(config(path, "tfrecord"), str(tmp_path / "ex"), str(tmp_path / "q"))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_gzip_cut_short_fails_instead_of_reading_fewer_records(tmp_path, fmt):
    lines = (
        ([HEADER] + rows(3000))
        if fmt == "csv"
        else [f'{{"x0": {i}, "x1": 1, "action": {i % K}, "reward": 1, "propensity": 0.5}}' for i in range(3000)]
    )
    blob = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / f"cut.{fmt}.gz"
    path.write_bytes(blob[: len(blob) // 2])
    read, valid, bad, lost = ingest(config(str(path), fmt))
    assert read == valid + len(bad) and 0 < read < 3000
    assert len(lost) == 1 and "cut short" in lost[0].message and lost[0].end == -1


def test_cr_only_csv_is_a_clear_error_not_a_traceback(tmp_path):
    path = tmp_path / "mac.csv"
    path.write_bytes(("\r".join([HEADER] + rows(500)) + "\r").encode())
    with pytest.raises(SourceError, match=r"mac\.csv: .*CR-only"):
        pipeline.make_plan(config(str(path)))
    # CR-only lines after a normal header: the block of joined records fails, naming its bytes.
    path.write_bytes((HEADER + "\n" + "\r".join(rows(500)) + "\r").encode())
    read, valid, bad, lost = ingest(config(str(path)))
    assert (read, valid, bad) == (0, 0, [])
    assert [(u.start, u.end) for u in lost] == [(len(HEADER) + 1, path.stat().st_size)]


def test_non_utf8_csv_header_is_a_clear_error(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(
        "x0,x1,action,reward,propensit\xe9,r\xe9gion\n".encode("latin-1") + ("\n".join(rows(5)) + "\n").encode()
    )
    with pytest.raises(SourceError, match=r"latin1\.csv: the header line is not UTF-8"):
        pipeline.make_plan(config(str(path)))


def test_per_record_accounting_with_bad_lines(tmp_path):
    lines = [HEADER] + rows(500)
    lines[10] = "\xff\xfe,1"  # undecodable
    lines[20] = "0.1,0.2,1"  # short
    lines[30] = "0.1,0.2,9,1.0,0.5"  # action out of range
    path = tmp_path / "mixed.csv"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    r = run_experience_gen(config(str(path), max_bad_record_ratio=0.05), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_read, r.records_written, r.records_quarantined) == (500, 497, 3)
    assert sorted(q["line"] for q in read_quarantine(str(tmp_path / "q"))) == [11, 21, 31]


# --- propensities ------------------------------------------------------------------------------


def test_tiny_propensity_is_quarantined_not_written_as_zero(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text("\n".join([HEADER] + rows(3) + rows(1, "1e-46") + rows(1, "1e-7")) + "\n")
    read, valid, bad, lost = ingest(config(str(path)))
    assert (read, valid, lost) == (5, 3, [])
    assert [(q.code, q.line) for q in bad] == [("propensity_below_floor", 5), ("propensity_below_floor", 6)]
    assert "1e-46" in bad[0].message and "propensity_floor 1e-06" in bad[0].message


def test_tiny_propensity_clipped_when_configured(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text("\n".join([HEADER] + rows(2) + rows(1, "1e-46")) + "\n")
    cfg = config(str(path), propensity_floor=1e-4, propensity_floor_action="clip")
    plan = pipeline.make_plan(cfg)
    outs = [o for item in plan.items for _, o in pipeline.ingest(plan, item)]
    assert not [o for o in outs if isinstance(o, (Quarantined, Unreadable))]
    p = np.concatenate([o.columns["propensity"] for o in outs])
    np.testing.assert_allclose(p, np.float32([0.25, 0.25, 1e-4]))
    with pytest.raises(ValueError, match="propensity_floor_action"):
        config(str(path), propensity_floor_action="ignore")


# --- config checks done by ExperienceGen -------------------------------------------------------


@pytest.mark.parametrize("name", ["../evil", "a/b", "", "eval set"])
def test_split_names_that_are_not_plain_names_are_rejected(tmp_path, name):
    with pytest.raises(ValueError, match="split name"):
        config(str(tmp_path / "x.csv"), splits=SplitConfig(splits=(Split("train", 9), Split(name, 1))))


def test_comma_pattern_with_a_part_matching_nothing_fails(tmp_path):
    (tmp_path / "a.csv").write_text("\n".join([HEADER] + rows(5)) + "\n")
    good = str(tmp_path / "a.csv")
    assert len(pipeline.make_plan(config(f"{good},{good}")).items) == 1
    with pytest.raises(FileNotFoundError, match=r"part '.*typo\*\.csv'"):
        pipeline.make_plan(config(f"{good},{tmp_path}/typo*.csv"))
    with pytest.raises(FileNotFoundError, match="empty part"):
        pipeline.make_plan(config(f"{good},"))
