"""Validation and quarantine: malformed records never crash ingestion, each one is quarantined
with a reason, its source line/offset and its original payload, and the counts add up."""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    ExperienceGenError,
    FileSource,
    SpecConfig,
    TrajectoryColumns,
    batches,
    pipeline,
    read_quarantine,
    run_experience_gen,
)
from rlops.components.experience_gen.sources import Quarantined, Unreadable

K = 4
HEADER = "x0,x1,x2,action,reward,propensity"


def ingest_file(config: ExperienceGenConfig, unreadable: list | None = None) -> tuple[int, int, list[Quarantined]]:
    """(records read, valid rows, quarantined) for a file source, without Beam; Unreadable byte
    ranges go to `unreadable` (an error if it is not given)."""
    plan = pipeline.make_plan(config)
    read, valid, bad = 0, 0, []
    for item in plan.items:
        for n, out in pipeline.ingest(plan, item):
            read += n
            if isinstance(out, Quarantined):
                bad.append(out)
            elif isinstance(out, batches.ValidBatch):
                valid += len(out)
            elif isinstance(out, Unreadable):
                assert unreadable is not None, out.describe()
                unreadable.append(out)
    return read, valid, bad


def csv_config(path: str, **kw) -> ExperienceGenConfig:
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format="csv", **kw),
        bandit_columns=BanditColumns(context_prefix="x"),
        action_spec=SpecConfig.discrete(K),
    )


def test_csv_reasons_lines_and_payloads(tmp_path):
    lines = [
        HEADER,
        "0.1,0.2,0.3,1,0.5,0.25",  # 2 ok
        "0.1,,0.3,1,0.5,0.25",  # 3 missing value
        "0.1,0.2,0.3,1,abc,0.25",  # 4 wrong type
        "0.1,0.2,0.3,1,nan,0.25",  # 5 reward not finite
        "0.1,inf,0.3,1,0.5,0.25",  # 6 context not finite
        "0.1,0.2,0.3,7,0.5,0.25",  # 7 action out of range
        "0.1,0.2,0.3,1,0.5,0",  # 8 zero propensity
        "0.1,0.2,0.3,1,0.5",  # 9 a field short
        "",  # 10 blank: not a record
        "0.1,0.2,0.3,2.5,0.5,0.25",  # 11 action not an integer
        "0.4,0.5,0.6,3,1.0,1.0",  # 12 ok
        "0.1,0.2,0.3,1,0.",
    ]  # 13 truncated last line (no newline)
    path = tmp_path / "logs.csv"
    path.write_text("\n".join(lines))
    read, valid, bad = ingest_file(csv_config(str(path)))

    assert (read, valid, len(bad)) == (11, 2, 9)
    by_line = {q.line: q for q in bad}
    assert {ln: q.code for ln, q in by_line.items()} == {
        3: "missing_value",
        4: "wrong_type",
        5: "not_finite",
        6: "not_finite",
        7: "action_out_of_range",
        8: "propensity_out_of_range",
        9: "parse_error",
        11: "wrong_type",
        13: "parse_error",
    }
    assert "x1" in by_line[3].message and "reward" in by_line[4].message and "'abc'" in by_line[4].message
    assert "x1" in by_line[6].message and "[0, 3]" in by_line[7].message and "(0, 1]" in by_line[8].message
    for ln, q in by_line.items():
        assert q.payload.decode() == lines[ln - 1]
        assert q.source_file.endswith("logs.csv")
        assert q.offset == len("\n".join(lines[: ln - 1])) + 1


def test_csv_line_numbers_across_ranges(tmp_path):
    """A file cut into byte ranges still reports exact line numbers and keeps every record once."""
    rows = [HEADER] + [f"0.1,0.2,0.3,{i % K},0.5,0.25" for i in range(300)]
    rows[150] = "0.1,0.2,0.3,9,0.5,0.25"
    rows[299] = "0.1,0.2,0.3,1,0.5,-1"
    path = tmp_path / "big.csv"
    path.write_text("\n".join(rows) + "\n")
    config = csv_config(str(path), range_bytes=1000, block_bytes=300)
    assert len(pipeline.make_plan(config).items) > 5
    read, valid, bad = ingest_file(config)
    assert (read, valid) == (300, 298)
    assert sorted(q.line for q in bad) == [151, 300]
    assert [q.payload.decode() for q in sorted(bad, key=lambda q: q.line)] == [rows[150], rows[299]]


def test_few_bad_lines_keep_the_rest_of_the_block_on_the_fast_path(tmp_path, monkeypatch):
    from rlops.components.experience_gen.sources import text

    rows = [HEADER] + [f"0.1,0.2,0.3,{i % K},0.5,0.25" for i in range(5000)]
    for i in (10, 2500, 4999):
        rows[i] = "0.1,0.2,oops,1,0.5,0.25"
    path = tmp_path / "dirty.csv"
    path.write_text("\n".join(rows) + "\n")
    careful = []
    slow = text._csv_slow
    monkeypatch.setattr(
        text, "_csv_slow", lambda chunk, p, h, w, s, lo, hi: careful.append(hi - lo) or slow(chunk, p, h, w, s, lo, hi)
    )
    read, valid, bad = ingest_file(csv_config(str(path)))
    assert (read, valid, sorted(q.line for q in bad)) == (5000, 4997, [11, 2501, 5000])
    assert sum(careful) <= 3 * text.CAREFUL_LINES  # Python saw only the neighbourhoods of the bad lines


def test_jsonl_malformed(tmp_path):
    lines = [
        '{"context": [0.1, 0.2], "action": 1, "reward": 1.0, "propensity": 0.5}',
        '{"context": [0.1, 0.2], "action": 1, "reward": 1.0, "propensity": 0.5',  # broken JSON
        "[1, 2, 3]",  # not an object
        '{"context": [0.1], "action": 1, "reward": 1.0, "propensity": 0.5}',  # short context
        '{"context": [0.1, "a"], "action": 1, "reward": 1.0, "propensity": 0.5}',  # wrong type in list
        '{"context": [0.1, 0.2], "action": true, "reward": 1.0, "propensity": 0.5}',  # bool action
        '{"context": [0.1, 0.2], "action": 1, "propensity": 0.5}',  # no reward
        '{"context": [0.1, 0.2], "action": 1, "reward": "1.0", "propensity": 0.5}',
    ]  # string reward
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    config = ExperienceGenConfig(
        source=FileSource(pattern=str(path), format="jsonl"),
        bandit_columns=BanditColumns(context=("context",)),
        action_spec=SpecConfig.discrete(K),
    )
    read, valid, bad = ingest_file(config)
    assert (read, valid) == (8, 1)
    assert {q.line: q.code for q in bad} == {
        2: "parse_error",
        3: "parse_error",
        4: "wrong_shape",
        5: "wrong_type",
        6: "wrong_type",
        7: "missing_value",
        8: "wrong_type",
    }


def test_parquet_wrong_types_and_payload(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "typed.parquet")
    pq.write_table(
        pa.table(
            {
                "context": [[0.1, 0.2], [0.3], None],
                "action": [1, 2, 3],
                "reward": ["1", "x", "0"],
                "propensity": [0.5, 0.5, 0.5],
                "note": ["a", "b", "c"],
            }
        ),
        path,
    )
    read, valid, bad = ingest_file(_example_config(path, "parquet"))
    assert (read, valid) == (3, 0)
    assert [(q.line, q.code) for q in bad] == [(1, "wrong_type"), (2, "wrong_shape"), (3, "missing_value")]
    assert "reward: '1' is not a number" == bad[0].message  # typed formats: text is not a number
    assert json.loads(bad[1].payload) == {"context": [0.3], "action": 2, "reward": "x", "propensity": 0.5, "note": "b"}


def test_action_mask(tmp_path):
    lines = [
        "x0,action,reward,propensity,m0,m1,m2,m3",
        "0.1,1,1.0,0.5,0,1,1,0",  # ok
        "0.1,0,1.0,0.5,0,1,1,0",  # action 0 masked out
        "0.1,1,1.0,0.5,0,2,1,0",  # mask not 0/1
        "0.1,1,1.0,0.5,0,0,0,0",
    ]  # mask allows nothing
    path = tmp_path / "masked.csv"
    path.write_text("\n".join(lines) + "\n")
    config = ExperienceGenConfig(
        source=FileSource(pattern=str(path)),
        bandit_columns=BanditColumns(context=("x0",), action_mask_prefix="m"),
        action_spec=SpecConfig.discrete(K),
    )
    read, valid, bad = ingest_file(config)
    assert (read, valid) == (4, 1)
    assert {q.line: q.code for q in bad} == {3: "action_not_allowed", 4: "bad_action_mask", 5: "bad_action_mask"}


def _write_tfrecords(path: str, n: int) -> list[int]:
    """n valid records; returns the byte offset where each record ends."""
    import tensorflow as tf

    ends, size = [], 0
    with tf.io.TFRecordWriter(path) as w:
        for i in range(n):
            ex = tf.train.Example()
            ex.features.feature["context"].float_list.value.extend([0.1 * i, 0.2])
            ex.features.feature["action"].int64_list.value.append(i % K)
            ex.features.feature["reward"].float_list.value.append(1.0)
            ex.features.feature["propensity"].float_list.value.append(0.5)
            data = ex.SerializeToString()
            w.write(data)
            size += 16 + len(data)
            ends.append(size)
    return ends


def _example_config(path: str, fmt: str) -> ExperienceGenConfig:
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format=fmt),
        bandit_columns=BanditColumns(context=("context",), context_dim=2),
        action_spec=SpecConfig.discrete(K),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10_000), garbage=st.booleans())
def test_truncated_or_corrupt_tfrecord_file(tmp_path, cut, garbage):
    path = str(tmp_path / f"t-{cut}-{garbage}.tfrecord")
    ends = _write_tfrecords(path, 20)
    blob = open(path, "rb").read()
    cut = cut % (len(blob) + 1)
    blob = blob[:cut] + (b"\x07garbage-that-is-not-a-record" if garbage else b"")
    with open(path, "wb") as f:
        f.write(blob)
    unreadable: list[Unreadable] = []
    read, valid, bad = ingest_file(_example_config(path, "tfrecord"), unreadable)
    assert valid == sum(e <= cut for e in ends)  # every complete record before the damage
    assert read == valid + len(bad)
    if cut in [0] + ends and not garbage:
        assert not bad and not unreadable
    else:  # a torn tail hides how many records it held: an unreadable byte range (fails the run),
        # after at most one record whose length survived but whose data checksum is wrong
        assert len(unreadable) + len(bad) >= 1 and len(unreadable) <= 1 and len(bad) <= 1
        torn_at = max([0] + [e for e in ends if e <= cut]) + sum(16 + len(q.payload) for q in bad)
        assert [(u.source_file, u.start, u.end) for u in unreadable] in ([], [(path, torn_at, -1)])
    assert all(q.code == "parse_error" and "checksum" in q.message and q.offset >= 0 for q in bad)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(min_value=0.0, max_value=0.999))
def test_truncated_parquet_file(tmp_path, eg_data, frac):
    logs = eg_data.bandit_logs(30)
    path = eg_data.write_logs(str(tmp_path / f"p-{frac}.parquet"), "parquet", logs, "context", "x")
    blob = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(blob[: int(frac * len(blob))])
    config = ExperienceGenConfig(
        source=FileSource(pattern=path, format="parquet"),
        bandit_columns=BanditColumns(context=("context",), context_dim=eg_data.D),
        action_spec=SpecConfig.discrete(eg_data.K),
    )
    unreadable: list[Unreadable] = []
    read, valid, bad = ingest_file(config, unreadable)
    assert (read, valid, bad) == (0, 0, [])  # nothing counted as one bad "record"
    assert [(u.source_file, u.start, u.end) for u in unreadable] == [(path, 0, -1)]


# --- property: malformed rows --------------------------------------------------------------------

_NUM = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, width=32)
CORRUPTIONS = ["missing", "wrong_type", "nan", "inf_context", "action_range", "propensity", "field_count", "broken"]


@st.composite
def rows(draw):
    """(row values, corruption or None)."""
    row = {
        "x0": draw(_NUM),
        "x1": draw(_NUM),
        "x2": draw(_NUM),
        "action": draw(st.integers(0, K - 1)),
        "reward": draw(_NUM),
        "propensity": draw(st.sampled_from([0.1, 0.25, 0.5, 1.0])),
    }
    corruption = draw(st.one_of(st.none(), st.sampled_from(CORRUPTIONS)))
    return row, corruption, draw(st.sampled_from(list(row)))


def _csv_line(row: dict, corruption: str | None, field: str) -> str:
    values = {k: repr(v) for k, v in row.items()}
    if corruption == "missing":
        values[field] = ""
    elif corruption == "wrong_type":
        values[field] = "oops"
    elif corruption == "nan":
        values["reward"] = "nan"
    elif corruption == "inf_context":
        values["x1"] = "-inf"
    elif corruption == "action_range":
        values["action"] = str(K + 3)
    elif corruption == "propensity":
        values["propensity"] = "0"
    line = ",".join(values.values())
    if corruption == "field_count":
        line += ",1"
    if corruption == "broken":
        line = line[: line.rindex(",")]
    return line


def _json_line(row: dict, corruption: str | None, field: str) -> str:
    rec = {
        "context": [row["x0"], row["x1"], row["x2"]],
        "action": row["action"],
        "reward": row["reward"],
        "propensity": row["propensity"],
    }
    key = field if field in rec else "context"
    if corruption == "missing":
        del rec[key]
    elif corruption == "wrong_type":
        rec[key] = {"not": "a number"}
    elif corruption == "nan":
        rec["reward"] = float("nan")
    elif corruption == "inf_context":
        rec["context"][1] = float("-inf")
    elif corruption == "action_range":
        rec["action"] = -1
    elif corruption == "propensity":
        rec["propensity"] = 1.5
    elif corruption == "field_count":
        rec["context"] = rec["context"][:2]
    line = json.dumps(rec)  # NaN / -Infinity are JSON extensions Python reads back
    return line[: len(line) // 2] if corruption == "broken" else line


def _drop(line: str, fmt: str, column: str) -> str:
    """The line without one column (for CSV: by position in the header)."""
    if fmt == "csv":
        fields = line.split(",")
        j = HEADER.split(",").index(column)
        return ",".join(fields[:j] + fields[j + 1 :])
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    key = column if column in ("action", "reward", "propensity") else "context"
    return json.dumps({k: v for k, v in rec.items() if k != key}) if isinstance(rec, dict) else line


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(rows(), min_size=1, max_size=40),
    fmt=st.sampled_from(["csv", "jsonl"]),
    block_bytes=st.sampled_from([64, 1 << 20]),
    missing_column=st.one_of(st.none(), st.none(), st.sampled_from(HEADER.split(","))),
)
def test_malformed_rows_are_quarantined_with_reason(records, fmt, block_bytes, missing_column):
    """No crash; exactly the corrupted lines are quarantined (all of them when a column is
    missing from JSON Lines records), each with a reason, its line and its payload; the rest are
    kept. A CSV header without a mapped column fails at construction, naming the column."""
    make = _csv_line if fmt == "csv" else _json_line
    lines = [make(*r) for r in records]
    header = HEADER
    if missing_column is not None:
        lines = [_drop(line, fmt, missing_column) for line in lines]
        header = _drop(HEADER, "csv", missing_column)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"logs.{fmt}")
        with open(path, "w") as f:
            f.write("\n".join(([header] if fmt == "csv" else []) + lines) + "\n")
        cols = (
            BanditColumns(context=("x0", "x1", "x2"))
            if fmt == "csv"
            else BanditColumns(context=("context",), context_dim=3)
        )
        config = ExperienceGenConfig(
            source=FileSource(pattern=path, format=fmt, block_bytes=block_bytes),
            bandit_columns=cols,
            action_spec=SpecConfig.discrete(K),
        )
        if fmt == "csv" and missing_column is not None:
            with pytest.raises(ValueError, match=rf"column '{missing_column}' is not in {path}"):
                pipeline.make_plan(config)
            return
        read, valid, bad = ingest_file(config)
    first = 2 if fmt == "csv" else 1
    corrupted = {first + i for i, (_, c, _) in enumerate(records) if c is not None or missing_column}
    assert read == len(records) == valid + len(bad)
    assert {q.line for q in bad} == corrupted
    for q in bad:
        assert q.code and q.message and q.source_file.endswith(fmt)
        assert q.payload.decode() == lines[q.line - first]


# --- the component's own accounting and threshold (Beam) ------------------------------------------


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad_share=st.sampled_from([0.0, 0.05, 0.3]), threshold=st.sampled_from([0.01, 0.2]))
def test_threshold_and_accounting(tmp_path, bad_share, threshold):
    n = 200
    rng = np.random.default_rng(int(bad_share * 100))
    bad_rows = set(rng.choice(n, int(bad_share * n), replace=False).tolist())
    lines = [HEADER] + [f"0.1,0.2,0.3,{(i % K) if i not in bad_rows else 99},0.5,0.25" for i in range(n)]
    out = tmp_path / f"run-{bad_share}-{threshold}"
    out.mkdir()
    (out / "logs.csv").write_text("\n".join(lines) + "\n")
    config = ExperienceGenConfig(
        source=FileSource(pattern=str(out / "logs.csv")),
        bandit_columns=BanditColumns(context_prefix="x"),
        action_spec=SpecConfig.discrete(K),
        max_bad_record_ratio=threshold,
    )
    try:
        result = run_experience_gen(config, str(out / "examples"), str(out / "quarantine"))
        assert bad_share <= threshold
    except ExperienceGenError as e:
        assert bad_share > threshold
        result = e.result
        assert f"{len(bad_rows)} of {n} records were bad" in str(e)
        assert f"action_out_of_range: {len(bad_rows)}" in str(e)
        assert str(out / "quarantine") in str(e)
    assert result.records_read == n == result.records_written + result.records_quarantined
    assert result.records_quarantined == len(bad_rows)
    quarantined = read_quarantine(str(out / "quarantine"))
    assert sorted(q["line"] for q in quarantined) == sorted(i + 2 for i in bad_rows)
    assert all(q["reason"] == "action_out_of_range" and ",99," in q["payload"] for q in quarantined)


def test_episode_checks_quarantine_whole_episodes(tmp_path, eg_uris):
    lines = [
        "episode_id,step,o0,o1,action,reward,terminated",
        "a,0,0.1,0.2,1,1.0,0",
        "a,1,0.1,0.2,1,1.0,1",  # ok, terminal
        "b,0,0.1,0.2,1,1.0,0",
        "b,2,0.1,0.2,1,1.0,0",  # gap: step 1 missing
        "c,0,0.1,0.2,1,1.0,0",
        "c,0,0.1,0.2,1,1.0,0",  # duplicate step
        "d,0,0.1,0.2,1,1.0,1",
        "d,1,0.1,0.2,1,1.0,0",  # terminal inside
        "e,0,0.1,0.2,1,1.0,0",
        "e,1,0.1,0.2,9,1.0,0",  # a bad step spoils the episode
        "f,1,0.1,0.2,1,1.0,0",
    ]  # does not start at 0
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(lines) + "\n")
    config = ExperienceGenConfig(
        record_kind="trajectory",
        source=FileSource(pattern=str(path)),
        trajectory_columns=TrajectoryColumns(observation_prefix="o"),
        action_spec=SpecConfig.discrete(K),
        max_bad_record_ratio=1.0,
    )
    result = run_experience_gen(config, *eg_uris)
    assert (result.records_read, result.records_written, result.records_quarantined) == (11, 2, 9)
    assert result.outputs_per_split["train"] + result.outputs_per_split["eval"] == 1  # episode a
    q = {(r["line"], r["reason"]) for r in read_quarantine(eg_uris[1])}
    assert q == {
        (4, "episode_not_contiguous"),
        (5, "episode_not_contiguous"),
        (6, "episode_duplicate_step"),
        (7, "episode_duplicate_step"),
        (8, "episode_terminal_inside"),
        (9, "episode_terminal_inside"),
        (10, "episode_has_bad_step"),
        (11, "action_out_of_range"),
        (12, "episode_not_contiguous"),
    }


def test_quarantine_file_is_gzipped_json_lines(tmp_path, eg_uris):
    path = tmp_path / "logs.csv"
    path.write_text(HEADER + "\n0.1,0.2,0.3,1,0.5,0.25\n\xff\xfe,1\n")
    config = csv_config(str(path))
    config = ExperienceGenConfig(**{**config.__dict__, "max_bad_record_ratio": 1.0})
    run_experience_gen(config, *eg_uris)
    files = os.listdir(eg_uris[1])
    assert len(files) == 1 and files[0].endswith(".jsonl.gz")
    rec = json.loads(gzip.open(os.path.join(eg_uris[1], files[0])).read())
    assert set(rec) >= {"reason", "message", "source_file", "line", "offset", "payload", "payload_encoding"}
    assert rec["line"] == 3 and rec["reason"] == "parse_error"
