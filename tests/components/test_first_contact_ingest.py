"""First contact with production-shaped logs (issue 20, findings 4-7 and 9): e-commerce impressions
from a Thompson-sampling logger (34 items, hashed-string user columns, an item table) as CSV.

Malformed rows anywhere are quarantined with file and line; explicit kinds need no inference;
empty, header-only and wrongly mapped inputs fail in one line naming the file or column (and the
closest columns); a failed run keeps its quarantine; cloud inputs without credentials fail in
seconds; a file replaced in place is ingested again; the guide's split settings do what it says.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
import yaml

from rlops.components.experience_gen import ExperienceGenConfig, read_quarantine, run_experience_gen
from rlops.components.experience_gen.core import ExperienceGenError
from rlops.components.experience_gen.errors import CredentialsError, InputError
from rlops.envs.logged_feedback import LogConfig, LogGenerator

N = 2_000
USERS = ["user_feature_0", "user_feature_1", "user_feature_2", "user_feature_3"]
FLOATS = ["user_float_0", "user_float_1", "user_float_2"]
ITEM_FEATURES = ["item_category", "item_brand", "item_price", "item_popularity"]
EXPLICIT = (
    [{"name": c, "kind": "categorical", "dtype": "string"} for c in USERS]
    + [{"name": c, "kind": "float"} for c in FLOATS]
    + [{"name": "position", "kind": "categorical", "dtype": "int64"}]
)
EXPLICIT_ITEMS = [
    {"name": "item_category", "kind": "categorical", "dtype": "string"},
    {"name": "item_brand", "kind": "categorical", "dtype": "string"},
    {"name": "item_price", "kind": "float"},
    {"name": "item_popularity", "kind": "float"},
]
INGESTION = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ingestion.md")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """2,000 impressions and the 34-item table, as CSV; `lines` are the impressions file's lines."""
    d = tmp_path_factory.mktemp("first_contact")
    gen = LogGenerator(LogConfig(logging="thompson", seed=0))
    paths = gen.sample(N, seed=1).to_files(str(d), format="csv")
    with open(paths["impressions"]) as f:
        lines = f.read().splitlines()
    return {
        "dir": d,
        "items": paths["items"],
        "impressions": paths["impressions"],
        "lines": lines,
        "num_items": gen.num_items,
    }


def config(logs: dict, impressions: str, explicit: bool = False, **columns) -> ExperienceGenConfig:
    cols = {
        "features": EXPLICIT if explicit else USERS + FLOATS + [{"name": "position", "kind": "categorical"}],
        "item_id": "item_id",
        "item_features": EXPLICIT_ITEMS if explicit else ITEM_FEATURES,
        **columns,
    }
    return ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": impressions, "format": "csv"},
            "item_source": {"kind": "file", "pattern": logs["items"], "format": "csv"},
            "bandit_columns": cols,
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": logs["num_items"] - 1},
        }
    )


def write(path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + ("\n" if lines else ""))
    return str(path)


# --- finding 5: ragged rows anywhere; explicit kinds; empty and header-only inputs ---------------


@pytest.mark.parametrize("explicit", [False, True], ids=["inferred-kinds", "explicit-kinds"])
def test_ragged_rows_at_start_middle_and_end_are_quarantined_with_file_and_line(logs, tmp_path, explicit):
    lines = list(logs["lines"])
    bad = {1: "short", N // 2: "long", N: "short"}  # data rows (line index; the header is line 1)
    for i, how in bad.items():
        fields = lines[i].split(",")
        lines[i] = ",".join(fields[:-2] if how == "short" else fields + ["extra"])
    path = write(tmp_path / "impressions.csv", lines)
    r = run_experience_gen(config(logs, path, explicit), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_read, r.records_written, r.records_quarantined) == (N, N - 3, 3)
    assert sum(r.written_per_split.values()) == N - 3 and r.reasons == {"parse_error": 3}
    q = read_quarantine(str(tmp_path / "q"))
    assert sorted(e["line"] for e in q) == [i + 1 for i in sorted(bad)]  # 1-based file lines
    assert {e["source_file"] for e in q} == {path}
    assert sorted(e["payload"] for e in q) == sorted(lines[i] for i in bad)


def test_header_only_and_empty_files_fail_in_one_line_saying_so(logs, tmp_path):
    header_only = write(tmp_path / "header.csv", logs["lines"][:1])
    empty = write(tmp_path / "empty.csv", [])
    with pytest.raises(InputError, match=rf"no records to read: '{re.escape(header_only)}' is header-only"):
        run_experience_gen(config(logs, header_only), str(tmp_path / "ex"), str(tmp_path / "q"))
    for explicit in (False, True):
        with pytest.raises(InputError, match=rf"no records to read: '{re.escape(empty)}' is empty$"):
            run_experience_gen(config(logs, empty, explicit), str(tmp_path / "ex"), str(tmp_path / "q"))
    # Explicit kinds infer nothing: the run itself finds no records.
    with pytest.raises(ExperienceGenError, match="held no records"):
        run_experience_gen(config(logs, header_only, explicit=True), str(tmp_path / "ex"), str(tmp_path / "q"))


def test_an_empty_first_file_is_passed_over_for_kind_inference(logs, tmp_path):
    (tmp_path / "in").mkdir()
    write(tmp_path / "in" / "a.csv", logs["lines"][:1])
    write(tmp_path / "in" / "b.csv", logs["lines"])
    r = run_experience_gen(config(logs, str(tmp_path / "in" / "*.csv")), str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_read, r.records_written) == (N, N)


# --- finding 6: wrong names say which, and what is close ------------------------------------------


def test_wrong_reward_column_names_the_key_the_column_and_the_closest(logs, tmp_path):
    with pytest.raises(
        InputError,
        match=r"^experience_gen\.bandit_columns\.reward: column 'rewards' is not in "
        rf"{re.escape(logs['impressions'])}; closest: 'reward'",
    ):
        run_experience_gen(
            config(logs, logs["impressions"], reward="rewards"), str(tmp_path / "ex"), str(tmp_path / "q")
        )


@pytest.mark.parametrize("explicit", [False, True], ids=["inferred-kinds", "explicit-kinds"])
def test_missing_feature_column_names_the_closest_columns(logs, tmp_path, explicit):
    features = list(EXPLICIT) if explicit else USERS + FLOATS
    features[1] = {**features[1], "name": "user_featur_1"} if explicit else "user_featur_1"
    with pytest.raises(
        InputError,
        match=r"features\['user_featur_1'\]: column 'user_featur_1' is not in .*"
        r"closest: 'user_feature_1'",
    ):
        run_experience_gen(
            config(logs, logs["impressions"], explicit, features=features), str(tmp_path / "ex"), str(tmp_path / "q")
        )


def test_records_missing_a_column_fail_with_an_example_naming_it(logs, tmp_path):
    """JSON Lines have no header to check up front: the failure shows one record's message."""
    import pandas as pd

    path = str(tmp_path / "impressions.jsonl")
    pd.read_csv(logs["impressions"]).to_json(path, orient="records", lines=True)
    cfg = json_dict(config(logs, path, reward="clicked"))
    cfg["source"]["format"] = "jsonl"
    with pytest.raises(
        ExperienceGenError,
        match=r"Top reasons: missing_value: 2000 \(e\.g\. impressions\.jsonl "
        r"line 1: clicked \(reward\): missing value\)",
    ):
        run_experience_gen(ExperienceGenConfig.from_json(cfg), str(tmp_path / "ex"), str(tmp_path / "q"))


# --- finding 7: cloud inputs check credentials first ----------------------------------------------


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


@pytest.mark.parametrize(
    "source",
    [
        {"kind": "file", "pattern": "gs://my-logs/2026-11-20/*.csv", "format": "csv"},
        {"kind": "bigquery", "table": "my-proj:logs.impressions"},
    ],
    ids=["gcs", "bigquery"],
)
def test_cloud_inputs_without_credentials_fail_in_seconds_with_the_fix(logs, tmp_path, no_credentials, source):
    cfg = config(logs, logs["impressions"], explicit=True)
    cfg = ExperienceGenConfig.from_json({**json_dict(cfg), "source": source})
    start = time.perf_counter()
    with pytest.raises(CredentialsError, match="no Google Cloud credentials.*gcloud auth application-default login"):
        run_experience_gen(cfg, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert time.perf_counter() - start < 5.0


def json_dict(cfg: ExperienceGenConfig) -> dict:
    return json.loads(cfg.to_json())


# --- finding 9: the guide's split settings ------------------------------------------------------


def readme_split_blocks() -> list[dict]:
    """The YAML blocks of docs/ingestion.md's "Splits" section, in order: default, by key, by time,
    one split. tests/test_docs.py runs them nowhere else: this test is where they run."""
    with open(INGESTION) as f:
        text = f.read()
    section = text.split("\n## Splits\n", 1)[1].split("\n## ", 1)[0]
    return [yaml.safe_load(b)["experience_gen"] for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]


def test_readme_split_settings_do_what_it_says(logs, tmp_path):
    default, by_key, by_time, one = readme_split_blocks()
    from rlops.components.common import records

    lines = list(logs["lines"])  # a time column: the first 600 records before the boundary
    boundary = by_time["splits"]["time_boundaries"][0]
    lines = [lines[0] + ",ts"] + [f"{line},{boundary - 600 + i}" for i, line in enumerate(lines[1:])]
    path = write(tmp_path / "timed.csv", lines)
    base = json_dict(config(logs, path))

    def run(splits: dict, name: str):
        r = run_experience_gen(
            ExperienceGenConfig.from_json({**base, **splits}), str(tmp_path / name), str(tmp_path / f"q-{name}")
        )
        assert sum(r.written_per_split.values()) == r.records_written == N
        return r

    r = run(default, "default")
    assert r.split_names == ["train", "eval"] and abs(r.written_per_split["eval"] / N - 0.1) < 0.03  # 9 : 1
    run(by_key, "key")
    key = by_key["splits"]["key"]
    users = [
        set(records.read_logged_bandit(str(tmp_path / "key"), s)[records.FEATURES][key]) for s in ("train", "eval")
    ]
    assert not users[0] & users[1]  # a user's records stay together
    assert 0.05 < len(users[1]) / len(users[0] | users[1]) < 0.4  # 4 : 1 of the users (47 of them)
    assert run(by_time, "time").written_per_split == {"train": 600, "eval": N - 600}
    assert run(one, "one").written_per_split == {"eval": N}
    assert os.listdir(tmp_path / "one" / "Split-eval") and not os.path.exists(tmp_path / "one" / "Split-train")


def test_the_bandit_pipeline_refuses_a_config_without_train_or_eval(logs, tmp_path):
    from rlops.pipelines.config import ConfigError, load_config
    from rlops.pipelines.factories import create_pipeline

    args = pipeline_args(
        logs, tmp_path / "root", logs["impressions"], "--set", "experience_gen.splits={splits: [{name: eval}]}"
    )
    config = load_config("bandit", args[3], [a for a in args[4:] if a != "--set"])
    with pytest.raises(
        ConfigError,
        match=r"^experience_gen\.splits: the bandit pipeline trains on split 'train' "
        r"and evaluates on 'eval'; the config has \['eval'\]$",
    ):
        create_pipeline(config, local=True)


# --- finding 4: a file replaced in place is ingested again ------------------------------------


def pipeline_args(logs: dict, root, impressions: str, *sets: str) -> list[str]:
    """`rlops run bandit` arguments: a YAML file like the README's, the source set with --set."""
    path = os.path.join(str(root), "my.yaml")
    os.makedirs(str(root), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                "root": str(root),
                "experience_gen": {
                    "item_source": {"kind": "file", "pattern": logs["items"], "format": "csv"},
                    "bandit_columns": {
                        "features": USERS + FLOATS + [{"name": "position", "kind": "categorical"}],
                        "item_id": "item_id",
                        "item_features": ITEM_FEATURES,
                    },
                    "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": logs["num_items"] - 1},
                },
                "trainer": {"agent": "lin_ucb", "train_steps": 20, "batch_size": 64},
                "evaluator": {"num_bootstrap": 50},
            },
            f,
        )
    return [
        "run",
        "bandit",
        "--config",
        path,
        "--set",
        f"experience_gen.source={{kind: file, pattern: '{impressions}', format: csv}}",
        *sets,
    ]


def ingest_only(config) -> object:
    """The local pipeline's ExperienceGen as the factory builds it (fingerprint included), run
    alone by LocalDagRunner; the run's summary from ML Metadata."""
    from tfx.orchestration import metadata, pipeline as tfx_pipeline
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from rlops.pipelines.factories import create_pipeline
    from rlops.pipelines.local import summarize_latest_run

    node = next(c for c in create_pipeline(config, local=True).components if c.id == "ExperienceGen")
    gen = type(node)(config=config.experience_gen, input_fingerprint=node.exec_properties["input_fingerprint"])
    LocalDagRunner().run(
        tfx_pipeline.Pipeline(
            pipeline_name=config.name,
            pipeline_root=config.pipeline_root,
            components=[gen],
            enable_cache=True,
            metadata_connection_config=metadata.sqlite_metadata_connection_config(config.metadata_path),
            beam_pipeline_args=config.beam_args,
        )
    )
    return summarize_latest_run(config, 0.0)


def test_a_file_replaced_in_place_is_ingested_again_an_unchanged_one_is_cached(logs, tmp_path):
    from rlops.pipelines.config import load_config

    path = write(tmp_path / "impressions.csv", logs["lines"][:1001])
    args = pipeline_args(logs, tmp_path / "root", path)
    config = load_config("bandit", args[3], [a for a in args[4:] if a != "--set"])
    first = ingest_only(config)
    again = ingest_only(config)
    write(tmp_path / "impressions.csv", logs["lines"])  # same path, 2,000 records
    replaced = ingest_only(config)
    assert first.components["ExperienceGen"] == "COMPLETE" and first.ingest["records_written"] == 1000
    assert again.components["ExperienceGen"] == "CACHED" and again.ingest["records_written"] == 1000
    assert replaced.components["ExperienceGen"] == "COMPLETE" and replaced.ingest["records_written"] == N
    assert replaced.ingest["records_written_train"] + replaced.ingest["records_written_eval"] == N


def test_fingerprint_follows_size_mtime_and_the_date_placeholder(logs, tmp_path):
    import datetime

    from rlops.components.experience_gen.fingerprint import input_fingerprint

    day = datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)
    (tmp_path / day.isoformat()).mkdir()
    path = write(tmp_path / day.isoformat() / "impressions.csv", logs["lines"][:100])
    cfg = config(logs, str(tmp_path / "{date}" / "*.csv"), explicit=True)
    before = input_fingerprint(cfg)
    assert input_fingerprint(cfg) == before  # unchanged files, unchanged key
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    touched = input_fingerprint(cfg)
    write(tmp_path / day.isoformat() / "impressions.csv", logs["lines"][:200])
    assert len({before, touched, input_fingerprint(cfg)}) == 3


# --- every bad input above through `rlops run`: exit 2, one line, no traceback -----------------


def run_cli(capsys, args: list[str]) -> tuple[int, list[str], str, str]:
    """Exit status, the `rlops:` error lines, stderr and stdout of one in-process `rlops` call."""
    from rlops.pipelines.cli import main

    code = main(args)
    out, err = capsys.readouterr()
    return code, [line for line in err.splitlines() if line.startswith("rlops:")], err, out


@pytest.mark.slow
def test_bad_inputs_through_the_cli_exit_2_in_one_line(logs, tmp_path, capsys):
    many = list(logs["lines"])
    for i in range(1, N + 1, 25):  # 4% ragged rows: above max_bad_record_ratio
        many[i] = ",".join(many[i].split(",")[:-2])
    cases = {
        "header-only": (write(tmp_path / "h.csv", logs["lines"][:1]), [], r"'.*h\.csv' is header-only"),
        "empty": (write(tmp_path / "e.csv", []), [], r"'.*e\.csv' is empty"),
        "reward": (
            logs["impressions"],
            ["--set", "experience_gen.bandit_columns.reward=rewards"],
            r"bandit_columns\.reward: column 'rewards' is not in .*impressions\.csv; closest: 'reward'",
        ),
        "feature": (
            logs["impressions"],
            ["--set", "experience_gen.bandit_columns.features=[user_featur_1]"],
            r"column 'user_featur_1' is not in the data; closest: 'user_feature_1'",
        ),
        "ragged": (
            write(tmp_path / "many.csv", many),
            [],
            r"80 of 2000 records were bad .* parse_error: 80 \(e\.g\. many\.csv line 2: csv: expected 12 "
            r"fields, got 10\)\. .* is in (?P<kept>\S+)$",
        ),
    }
    for name, (path, sets, message) in cases.items():
        code, lines, err, _ = run_cli(capsys, pipeline_args(logs, tmp_path / name, path, *sets))
        assert code == 2 and len(lines) == 1, (name, err[-2000:])
        assert "Traceback" not in err and "looks like a bug" not in err, (name, err[-2000:])
        m = re.search(message, lines[0])
        assert m, (name, lines[0])
        if name == "ragged":  # the failed run's quarantine is kept where the message says
            assert len(read_quarantine(m.group("kept"))) == 80


@pytest.mark.parametrize(
    "source",
    [
        "{kind: file, pattern: 'gs://my-logs/2026-11-20/*.csv', format: csv}",
        "{kind: bigquery, table: 'my-proj:logs.impressions'}",
    ],
    ids=["gcs", "bigquery"],
)
def test_cloud_source_without_credentials_exits_2_in_one_line_within_5_s(logs, tmp_path, source):
    """`rlops run` in a fresh process, no credentials in the environment: the check runs before
    TensorFlow or Beam load, so the whole command takes about a second."""
    import subprocess
    import sys

    args = pipeline_args(logs, tmp_path / "cloud", "unused")[:4] + ["--set", f"experience_gen.source={source}"]
    env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST")}
    env.update(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "no-key.json"))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rlops.pipelines.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )
    took = time.perf_counter() - start
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr[-2000:]
    line = proc.stderr.strip()
    assert line.startswith("rlops: error: experience_gen.source") and "is on Google Cloud" in line, line
    assert "gcloud auth application-default login" in line and "GOOGLE_APPLICATION_CREDENTIALS" in line
    assert took < 5.0, f"{took:.1f} s"


@pytest.mark.slow
def test_run_prints_and_records_the_counts_and_reingests_a_replaced_file(logs, tmp_path, capsys):
    lines = list(logs["lines"])
    lines[7] = lines[7] + ",extra"
    path = write(tmp_path / "impressions.csv", lines[:1001])
    args = pipeline_args(logs, tmp_path / "root", path, "--set", "evaluator.min_ess=1")
    summaries, printed = [], []
    for n in (1000, N):
        write(tmp_path / "impressions.csv", lines[: n + 1])
        code, _, err, out = run_cli(capsys, args + ["--summary-json", str(tmp_path / f"s{n}.json")])
        assert code == 0, err[-3000:]
        printed.append(out)
        with open(tmp_path / f"s{n}.json") as f:
            summaries.append(json.load(f))
    for s, out, n in zip(summaries, printed, (1000, N)):
        assert s["components"]["ExperienceGen"] == "COMPLETE"  # the replaced file is ingested again
        assert s["records_read"] == n and s["records_quarantined"] == 1
        assert s["records_written_train"] + s["records_written_eval"] == n - 1
        # Nothing skipped downstream: the Evaluator read the whole eval split, the Trainer reports its count.
        assert s["metrics"]["eval_records"] == s["records_written_eval"] and s["metrics"]["train_records"] > 0
        assert (
            f"records: read {n}, written {n - 1} (train {s['records_written_train']}, eval "
            f"{s['records_written_eval']}), quarantined 1 (parse_error 1)"
        ) in out


# --- strings where numbers were ------------------------------------------------------------------


def test_a_few_strings_in_a_number_column_are_quarantined_and_the_column_stays_float(logs, tmp_path):
    """One 'abc' where a price was must not make `user_float_0` a categorical of ~2,000 prices: the
    column is inferred float, and the records holding a non-number are quarantined, with file and line."""
    from rlops.components.experience_gen.features import resolve_features
    from rlops.components.experience_gen.sources import source_of

    lines = list(logs["lines"])
    col = lines[0].split(",").index("user_float_0")
    bad_rows = {5: "abc", N - 3: "N/A"}
    for i, text in bad_rows.items():
        fields = lines[i].split(",")
        fields[col] = text
        lines[i] = ",".join(fields)
    path = write(tmp_path / "impressions.csv", lines)
    cfg = config(logs, path)
    source = source_of(cfg.source)
    inputs = source.plan(cfg).inputs
    resolved = resolve_features(cfg, source.peek(cfg, inputs), source.label)
    kinds = {f.name: f.kind for f in resolved.bandit_columns.features}
    assert kinds["user_float_0"] == "float" and kinds["user_feature_0"] == "categorical"
    r = run_experience_gen(cfg, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_read, r.records_written, r.records_quarantined) == (N, N - 2, 2)
    q = read_quarantine(str(tmp_path / "q"))
    assert sorted(e["line"] for e in q) == [i + 1 for i in sorted(bad_rows)]
    assert all(e["reason"] == "wrong_type" and "user_float_0" in e["message"] for e in q), q


def test_numbers_in_text_tells_a_number_column_with_strays_from_a_text_column():
    import pyarrow as pa

    from rlops.components.experience_gen.features import numbers_in_text

    prices = pa.chunked_array([[f"{i * 0.5:.2f}" for i in range(300)] + ["abc", None, ""]])
    assert numbers_in_text(prices) == (False, ["abc"], 301)
    ids = pa.chunked_array([[str(1000 + i) for i in range(200)] + ["N/A"]])
    assert numbers_in_text(ids) == (True, ["N/A"], 201)
    hashed = pa.chunked_array([["a3f9", "12", "b7", "99"] * 50])
    assert numbers_in_text(hashed) is None  # half are not numbers: a text column
    assert numbers_in_text(pa.chunked_array([["1.5", "2"]])) is None  # no stray: what Arrow typed it
