"""`rlops examples DIR`: the records ExperienceGen wrote, as CSV, checked against the logs they came from."""

from __future__ import annotations

import csv
import io
import os
import subprocess

import pytest
import tensorflow as tf
from helpers import child_env, fresh_python

from rlops.components.experience_gen import (
    ExperienceGenConfig,
    FileSource,
    SpecConfig,
    TrajectoryColumns,
    run_experience_gen,
)
from rlops.pipelines import cli
from rlops.pipelines.cli_examples import ExamplesError, read_examples

N = 200
USERS = ["u0", "u1", "ü2", "u,3"]  # a non-ASCII value and a comma: UTF-8 cells, quoted by the CSV writer


def _logs(n: int = N) -> list[dict]:
    """One decision per row; the timestamp (1000 + i) tells the rows apart."""
    return [
        {
            "user": USERS[i % len(USERS)],
            "age": round(18 + (i * 7919 % 500) / 10, 1),
            "action": i % 3,
            "reward": round((i * 37 % 100) / 100, 2),
            "propensity": [0.25, 0.5, 1.0][i % 3],
            "ts": 1000 + i,
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def bandit(tmp_path_factory):
    d = tmp_path_factory.mktemp("examples_bandit")
    logs = _logs()
    with open(d / "logs.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(logs[0]))
        w.writeheader()
        w.writerows(logs)
    config = ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": str(d / "logs.csv"), "format": "csv"},
            "bandit_columns": {"features": ["user", "age"], "timestamp": "ts"},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 2},
        }
    )
    result = run_experience_gen(config, str(d / "examples"), str(d / "quarantine"))
    assert result.records_quarantined == 0 and set(result.written_per_split) == {"train", "eval"}
    return {"dir": str(d / "examples"), "logs": {r["ts"]: r for r in logs}, "result": result}


def test_every_record_prints_once_with_the_values_it_was_logged_with(bandit):
    header, rows = read_examples(bandit["dir"])
    # split, the features in the schema's order (as configured), then the record's fields
    assert header == ["split", "user", "age", "action", "reward", "propensity", "timestamp", "split_content"]
    got = [dict(zip(header, row)) for row in rows]
    splits = [r["split"] for r in got]
    assert splits == sorted(splits)  # eval, then train
    assert {s: splits.count(s) for s in set(splits)} == bandit["result"].written_per_split
    assert sorted(int(r["timestamp"]) for r in got) == sorted(bandit["logs"])
    for r in got:
        logged = bandit["logs"][int(r["timestamp"])]
        assert r["user"] == logged["user"]
        assert int(r["action"]) == logged["action"]
        assert float(r["reward"]) == pytest.approx(logged["reward"])
        assert float(r["propensity"]) == pytest.approx(logged["propensity"])
        assert float(r["age"]) == pytest.approx(logged["age"])
        assert r["age"] == str(logged["age"])  # float32 at its shortest: 22.5, not 22.5000000001
        int(r["split_content"])


def test_split_columns_and_limit(bandit):
    per_split = bandit["result"].written_per_split
    header, rows = read_examples(bandit["dir"], split="train")
    assert len(rows) == per_split["train"] and {r[0] for r in rows} == {"train"}

    header, rows = read_examples(bandit["dir"], columns=["reward", "timestamp", "split"])
    assert header == ["reward", "timestamp", "split"] and len(rows) == sum(per_split.values())
    for reward, ts, _ in rows:
        assert float(reward) == pytest.approx(bandit["logs"][int(ts)]["reward"])

    limit = per_split["eval"] + 2  # the limit is over all splits: every eval row, then 2 of train
    header, rows = read_examples(bandit["dir"], columns=["split"], limit=limit)
    assert [r[0] for r in rows] == ["eval"] * per_split["eval"] + ["train"] * 2
    assert read_examples(bandit["dir"], split="train", limit=3)[1] == read_examples(bandit["dir"], split="train")[1][:3]
    header, rows = read_examples(bandit["dir"], limit=0)
    assert header == ["split"] and rows == []


def test_the_command_prints_the_same_rows_as_csv(bandit, capsys):
    assert cli.main(["examples", bandit["dir"], "--split", "eval", "--columns", "split, user,reward"]) == 0
    out = capsys.readouterr().out
    header, rows = read_examples(bandit["dir"], "eval", ["split", "user", "reward"])
    assert list(csv.reader(io.StringIO(out))) == [header, *rows]
    assert ('"u,3"' in out) == any(user == "u,3" for _, user, _ in rows)  # quoted: still one cell


@pytest.mark.parametrize(
    "args, message",
    [
        (["{root}/missing"], "no directory {root}/missing"),
        (["{root}"], "no Split-* folder in {root}: not an Examples directory"),
        (["{examples}", "--split", "test"], "no split 'test' in {examples}; its splits: eval, train"),
        (["{examples}", "--columns", "reward,rewrd"], "no column 'rewrd' in {examples}; closest: 'reward'"),
        (["{examples}", "--limit", "-1"], "--limit -1: give a number of rows, 0 or more"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(bandit, tmp_path, capsys, args, message):
    names = {"root": str(tmp_path), "examples": bandit["dir"]}
    assert cli.main(["examples", *(a.format(**names) for a in args)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["rlops: examples: " + message.format(**names)]


def test_read_examples_raises_examples_error(bandit):
    with pytest.raises(ExamplesError, match="no column 'rewards'.*closest: 'reward'"):
        read_examples(bandit["dir"], columns=["rewards"])


def test_the_cli_process_exits_2_with_one_line_for_an_unknown_column(bandit):
    proc = subprocess.run(
        [fresh_python(), "-m", "rlops.pipelines.cli", "examples", bandit["dir"], "--columns", "action,actoin"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"rlops: examples: no column 'actoin' in {bandit['dir']}; closest: 'action'"]


# --- fields beyond the features: lists, bytes, per-arm and slate fields, decision ids -------------


def _write(path: str, records: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for record in records:
            ex = tf.train.Example()
            for key, values in record.items():
                feature = ex.features.feature[key]
                if isinstance(values[0], bytes):
                    feature.bytes_list.value.extend(values)
                elif isinstance(values[0], int):
                    feature.int64_list.value.extend(values)
                else:
                    feature.float_list.value.extend(values)
            w.write(ex.SerializeToString())


def test_record_fields_lists_and_decision_ids(tmp_path):
    """No schema: the features sorted; the record's fields in their fixed order; list values
    joined with '|'; a field a record lacks is an empty cell; files in sorted order."""
    root = str(tmp_path / "examples")
    first = {
        "zone": [b"north"],
        "decision_id": ["d-0".encode()],
        "reward": [1.0],
        "action": [2],
        "propensity": [0.5],
        "per_arm/price": [1.5, 2.25, 3.0],
        "num_actions": [3],
        "tags": [b"a", "é".encode()],
        "split_unit": [7],
    }
    _write(f"{root}/Split-train/data-00001.gz", [{"action": [0], "reward": [0.0], "zone": [b"south"]}])
    _write(f"{root}/Split-train/data-00000.gz", [first])
    _write(f"{root}/Split-eval/data-00000.gz", [])
    header, rows = read_examples(root)
    assert header == [
        "split",
        "tags",
        "zone",
        "action",
        "reward",
        "propensity",
        "decision_id",
        "num_actions",
        "per_arm/price",
        "split_unit",
    ]
    assert rows == [
        ["train", "a|é", "north", "2", "1.0", "0.5", "d-0", "3", "1.5|2.25|3.0", "7"],
        ["train", "", "south", "0", "0.0", "", "", "", "", ""],
    ]
    assert read_examples(root, columns=["decision_id", "zone"], limit=1) == (
        ["decision_id", "zone"],
        [["d-0", "north"]],
    )


def test_slate_fields_follow_the_features(tmp_path):
    root = str(tmp_path / "examples")
    slate = {"user": [b"u"], "slate_id": [b"s-1"], "slate": [4, 0, 2], "slate_length": [3], "reward": [0.0, 1.0, 0.0]}
    _write(f"{root}/Split-eval/data-00000.gz", [slate])
    header, rows = read_examples(root)
    assert header == ["split", "user", "reward", "slate_id", "slate", "slate_length"]
    assert rows == [["eval", "u", "0.0|1.0|0.0", "s-1", "4|0|2", "3"]]


# --- trajectories: a row per step ---------------------------------------------------------------


def test_trajectories_print_a_row_per_step(tmp_path):
    with open(tmp_path / "steps.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["episode_id", "step", "o0", "o1", "action", "reward", "terminated"])
        for e in range(6):
            for s in range(e + 1):
                w.writerow([f"ep{e}", s, e + 0.5, s * 0.25, (e + s) % 3, e * 10 + s, s == e])
    config = ExperienceGenConfig(
        record_kind="trajectory",
        source=FileSource(pattern=str(tmp_path / "steps.csv"), format="csv"),
        action_spec=SpecConfig.discrete(3),
        trajectory_columns=TrajectoryColumns(observation_prefix="o"),
    )
    result = run_experience_gen(config, str(tmp_path / "examples"), str(tmp_path / "quarantine"))
    header, rows = read_examples(str(tmp_path / "examples"))
    assert header[:6] == ["split", "episode_id", "step", "observation", "action", "reward"]
    got = [dict(zip(header, row)) for row in rows]
    splits = [r["split"] for r in got]
    assert {s: splits.count(s) for s in result.written_per_split if splits.count(s)} == {
        s: n for s, n in result.written_per_split.items() if n
    }
    assert len(got) == 21
    for r in got:
        e, s = int(r["episode_id"][2:]), int(r["step"])
        assert 0 <= s <= e
        assert r["observation"] == f"{e + 0.5}|{s * 0.25}"
        assert int(r["action"]) == (e + s) % 3 and float(r["reward"]) == e * 10 + s
        assert int(r["length"]) == e + 1
    assert sorted((r["episode_id"], int(r["step"])) for r in got) == sorted(
        (f"ep{e}", s) for e in range(6) for s in range(e + 1)
    )
    header, rows = read_examples(str(tmp_path / "examples"), columns=["episode_id", "step"], limit=4)
    assert len(rows) == 4
