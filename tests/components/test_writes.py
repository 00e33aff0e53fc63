"""One write for every file of a run: each split's TFRecords (sharded or as the runner bundles them)
and the quarantine's JSON lines land under their final names with the right records and counters;
a failed run leaves no final file, and a retried bundle or finalize leaves one copy of each record."""

from __future__ import annotations

import glob
import gzip
import os
import struct

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from rlops.components.common.direct_runner import in_process_runner
from rlops.components.experience_gen import sinks, writes

RECORDS = {"train": [f"t{i}".encode() * (i % 5) for i in range(40)], "eval": [b"e1", b"e22", b"e333"]}
LINES = ['{"reason": "bad", "line": 1}', '{"reason": "worse", "line": 2}']


def tfrecords(path: str) -> list[bytes]:
    """The records of a gzipped TFRecord file (framing checked: lengths and masked CRCs)."""
    data, out = gzip.decompress(open(path, "rb").read()), []
    while data:
        (n,) = struct.unpack("<Q", data[:8])
        record = data[12 : 12 + n]
        assert sinks.frame_records([record]) == data[: 16 + n]
        out.append(record)
        data = data[16 + n :]
    return out


def destinations(root: str, train_shards: int = 0) -> dict[str, writes.Destination]:
    return {
        "train": writes.tfrecord_split(str(root), "train", 1, train_shards),
        "eval": writes.tfrecord_split(str(root), "eval", 1, 0),
        "q": writes.Destination("q", os.path.join(root, "quarantine"), ".jsonl.gz", writes.TEXT),
    }


def run(root: str, dests: dict, inputs: dict, fail_on: bytes | None = None) -> dict[str, int]:
    """Writes batches of 4 records per split and the lines; the Beam counters it reported."""

    def batches(records: list[bytes]) -> list[tuple[list[bytes], int]]:
        return [(records[i : i + 4], 2 * len(records[i : i + 4])) for i in range(0, len(records), 4)]

    def check(batch: tuple[list[bytes], int]) -> tuple[list[bytes], int]:
        if fail_on in batch[0]:
            raise RuntimeError("a bundle fails after others were written")
        return batch

    options = PipelineOptions([])
    p = beam.Pipeline(runner=in_process_runner(options), options=options)
    pcolls = {}
    for name, values in inputs.items():
        if name == "q":
            pcolls[name] = p | f"Create[{name}]" >> beam.Create(values)
        else:
            pcolls[name] = p | f"Create[{name}]" >> beam.Create(batches(values)) | f"Check[{name}]" >> beam.Map(check)
    writes.write_all(pcolls, dests)
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace(sinks.METRICS_NAMESPACE))["counters"]
    return {c.key.metric.name: c.committed for c in counters}


def files(root: str) -> list[str]:
    return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "**"), recursive=True))


def test_splits_and_quarantine_land_under_their_final_names_with_counters(tmp_path):
    counters = run(str(tmp_path), destinations(str(tmp_path), train_shards=3), {**RECORDS, "q": LINES})
    assert files(str(tmp_path)) == [
        ".",
        "Split-eval",
        "Split-eval/data_tfrecord-00000-of-00001.gz",
        "Split-train",
        "Split-train/data_tfrecord-00000-of-00003.gz",
        "Split-train/data_tfrecord-00001-of-00003.gz",
        "Split-train/data_tfrecord-00002-of-00003.gz",
        "quarantine-00000-of-00001.jsonl.gz",
    ]  # no beam-temp-* folder left
    train = [tfrecords(p) for p in sorted(glob.glob(str(tmp_path / "Split-train" / "*")))]
    assert all(train)  # 10 batches over 3 shards in turn: none empty
    assert sorted(r for shard in train for r in shard) == sorted(RECORDS["train"])
    assert tfrecords(str(tmp_path / "Split-eval" / "data_tfrecord-00000-of-00001.gz")) == RECORDS["eval"]
    quarantine = gzip.decompress(open(tmp_path / "quarantine-00000-of-00001.jsonl.gz", "rb").read())
    assert quarantine.decode().splitlines() == LINES
    assert counters == {
        "written_records:train": 40,
        "written_units:train": 80,
        "written_records:eval": 3,
        "written_units:eval": 6,
    }


def test_a_destination_with_nothing_gets_one_empty_file_and_shards_are_padded(tmp_path):
    run(str(tmp_path), destinations(str(tmp_path), train_shards=2), {"train": [], "eval": [b"x"]})
    assert files(str(tmp_path)) == [
        ".",
        "Split-eval",
        "Split-eval/data_tfrecord-00000-of-00001.gz",
        "Split-train",
        "Split-train/data_tfrecord-00000-of-00002.gz",
        "Split-train/data_tfrecord-00001-of-00002.gz",
        "quarantine-00000-of-00001.jsonl.gz",
    ]
    assert [tfrecords(p) for p in sorted(glob.glob(str(tmp_path / "Split-train" / "*")))] == [[], []]
    assert gzip.decompress(open(tmp_path / "quarantine-00000-of-00001.jsonl.gz", "rb").read()) == b""


def test_a_failed_run_leaves_no_final_file(tmp_path):
    with pytest.raises(Exception, match="a bundle fails"):  # the last batch, after the others were written
        run(str(tmp_path), destinations(str(tmp_path)), {**RECORDS, "q": LINES}, fail_on=RECORDS["train"][-1])
    assert glob.glob(str(tmp_path / "Split-train" / "beam-temp-*" / "*"))  # the partial file stays a temp one
    assert [f for f in files(str(tmp_path)) if "-of-" in os.path.basename(f)] == []


def _attempt(dest: writes.Destination, run_id: str, values: list) -> list[str]:
    """One bundle attempt of WriteTempFilesFn: the temp files it reports."""
    fn = writes.WriteTempFilesFn(dest, run_id)
    fn.setup()
    fn.start_bundle()
    for v in values:
        fn.process(v)
    return [w.value[1][1] for w in fn.finish_bundle()]


def test_a_retried_bundle_and_a_retried_finalize_leave_one_copy(tmp_path):
    dest = destinations(str(tmp_path))["eval"]
    batch = (RECORDS["eval"], 3)
    failed = _attempt(dest, "run1", [batch])  # its output never reached the finalize
    committed = _attempt(dest, "run1", [batch]) + _attempt(dest, "run1", [([b"more"], 1)])
    assert len(set(failed + committed)) == 3  # every attempt has a name of its own
    finals = writes.finalize(dest, sorted(committed), "run1")
    assert [os.path.basename(f) for f in finals] == [
        "data_tfrecord-00000-of-00002.gz",
        "data_tfrecord-00001-of-00002.gz",
    ]
    assert sorted(tfrecords(f) for f in finals) == sorted([RECORDS["eval"], [b"more"]])
    assert not os.path.exists(dest.temp_dir("run1"))  # the failed attempt's file went with it
    assert writes.finalize(dest, sorted(committed), "run1") == finals  # retried: skips what is done
    assert sorted(tfrecords(f) for f in finals) == sorted([RECORDS["eval"], [b"more"]])
    assert files(str(tmp_path / "Split-eval")) == [".", *[os.path.basename(f) for f in finals]]


def test_finalize_refuses_more_files_than_shards(tmp_path):
    dest = destinations(str(tmp_path), train_shards=1)["train"]
    temp = _attempt(dest, "r", [(0, [([b"a"], 1)]), (1, [([b"b"], 1)])])  # two shard groups
    with pytest.raises(Exception, match="2 temp files for 1 shards"):
        writes.finalize(dest, sorted(temp), "r")
