"""Every example in README.md and docs/ runs, so the docs cannot drift from the code.

The test reads the fenced blocks of README.md and of every page under docs/. Each block is either
run (pipeline YAML loaded and run with `rlops run bandit --config` on small generated data to a
push the Pusher verifies, the BigQuery block on rows of the logging table's shape, Vertex YAML
loaded; each CLI line run through `rlops`'s own `main`, cloud-bound ones parsed; Python executed)
or named in NOT_RUN with the reason. ```text blocks are output and illustrations (a summary, a CSV
header, a REST body), not commands. A new block that is neither fails
`test_every_block_is_run_or_listed`, and so does a listed block that no longer exists.
Placeholders (gs://my-logs/..., gs://BUCKET, DIR, $IMAGE, versions) are replaced by small local
data and what the earlier lines produced. docs/bring-your-own-logs.md runs as written, top to
bottom, in a directory of its own: its blocks are the newcomer's path to a verified push.

The site itself builds with `mkdocs build --strict` in the test command (the Makefile's lint
part); the generated reference pages are checked here against their generator.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shlex
import subprocess
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest
import yaml

from rlops.pipelines import cli
from rlops.pipelines.config import load_config
from rlops.pipelines.config_types import load_yaml

if TYPE_CHECKING:
    import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
BYOL = "docs/bring-your-own-logs.md"

# A distinctive line of each block -> how the test runs it.
RUN = {
    "make run ": "cli",
    ".venv/bin/rlops run ppo": "cli",
    "from rlops.train.on_policy import PPOConfig, train_ppo": "python",
    'pattern: "gs://my-logs/': "pipeline yaml",
    'pattern: "logs/*.csv"': "pipeline yaml",
    "logging_rlops_42.request_response_logging": "pipeline yaml",
    "the default: ~90% train": "pipeline yaml",
    "key: user_feature_3": "pipeline yaml",
    "time_column: ts": "pipeline yaml",
    "# every key, its value and its doc": "cli",
    "splits: {splits: [{name: eval}]}": "pipeline yaml",
    "rlops evaluate --examples pipeline_root": "cli",
    "rlops serving list gs://BUCKET": "cli",
    "rlops compile bandit --output bandit.json": "cli",
    "image: us-central1-docker.pkg.dev/my-proj/rlops/rlops:0.1.0-gpu": "vertex yaml",
    "custom_job:": "vertex yaml",
    "rlops submit bandit.json": "cli",
    "rlops schedule create bandit.json": "cli",
    "from rlops.components import kfp as rlops_kfp": "python",
    "from rlops.testing.vertex_emulator import VertexEmulator": "python",
    "from ai_edge_litert.interpreter import Interpreter": "python",  # test_litert_client_block_runs
    'serving = "pipeline_root/bandit/serving"': "python",  # test_readme_serving_block_runs
    "pages = interpreter.Interpreter(": "python",  # tests/train/test_litert_ranked.py runs it
    # docs/bring-your-own-logs.md, run top to bottom by test_bring_your_own_logs_page_runs_to_a_verified_push
    'LogConfig(logging="uniform", ctr=0.05, seed=0)': "byol",
    "name: my-logs": "byol",
    ".venv/bin/rlops run bandit --config my_logs.yaml": "byol",
    ".venv/bin/rlops serving list pipeline_root/my-logs/serving": "byol",
    'serve = tf.saved_model.load(f"{serving}/{version}")': "byol",
    "# the closed loop's settings for per-arm click logs": "config yaml",  # test_config_yaml_blocks_load
    # docs/slates.md, run top to bottom by tests/test_docs_slates.py
    "from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator": "slates",
    "record_kind: slate": "slates",
    # docs/events.md, run top to bottom by tests/test_docs_events.py
    "decision_id: impression_id     # carried": "events",
    "from rlops.envs.shop_events import ShopConfig, ShopEventLogs": "events",
    ".venv/bin/rlops ingest --config shop.yaml": "events",
    "FROM `my-proj.shop.events`": "events",
    "# rewards as events: no reward column": "events",  # docs/bring-your-own-logs.md's second shape
    "python -m rlops.components.experience_gen --config slates.yaml": "slates",
    "from rlops.heads.slate.head import slate_head": "slates",
}
# Blocks not run, with the reason (where they are covered instead).
NOT_RUN = {
    "gcloud config set project my-proj": "Google Cloud project setup (gcloud, IAM); no cloud here",
    "docker build -t $IMAGE": "needs a Docker engine; tests/pipelines/test_vertex.py checks the Dockerfiles statically",
    "curl -s -d @request.json": "needs a running tensorflow_model_server (not installable here); "
    "docs/bring-your-own-logs.md calls the same signature in Python, test_pipelines.py serves REST instances",
    "per_arm_columns: {affinity:": "run by tests/components/test_per_arm_columns.py: the config its wide logs are "
    "ingested, trained, pushed and served with",
    ".venv/bin/rlops run ranking": "run by tests/pipelines/test_ranking_pipeline.py: its pipeline run is this line "
    "(with a smaller bootstrap), checked to a verified push",
}
# CLI lines of run blocks that are only parsed (argparse), not sent: they talk to Vertex AI.
# The requests they build are checked against fakes in test_vertex_submit.py.
PARSE_ONLY = ("submit", "schedule")
# CLI lines of run blocks that do not pass yet, with the finding that fixes them (the coordinator
# removes an entry when its fix lands).
PENDING: dict[str, str] = {}
# Optional `[...]` arguments left out of the "everything" variant, with the reason.
OPTIONAL_SKIP = {"--action-minimum 1": "the digits bandit's action ids start at 0"}

SMALL = {
    "bandit": [
        "experience_gen.source.num_records=2000",
        "trainer.train_steps=100",
        "trainer.steps_per_run=50",
        "evaluator.num_bootstrap=50",
    ],
    "ppo": ["trainer.ppo.total_env_steps=2048", "evaluator.num_episodes=5"],
}
# `make run`'s default bandit run, small but big enough to be blessed and pushed: run here only when
# the evaluate and serving lines run without test_run_lines before them.
DEFAULT_RUN = [
    "rlops",
    "run",
    "bandit",
    "--set",
    "experience_gen.source.num_records=6000",
    "--set",
    "trainer.train_steps=400",
    "--set",
    "evaluator.num_bootstrap=200",
]
IMAGE = "us-central1-docker.pkg.dev/my-proj/rlops/rlops:0.1.0"


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int
    path: str = "README.md"

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ```{self.lang}: {self.text.splitlines()[0][:70]}"


def doc_pages() -> list[str]:
    """README.md and every page under docs/, as paths relative to the repository root."""
    pages = sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
    return ["README.md"] + [os.path.relpath(p, ROOT) for p in pages]


def page_blocks(path: str) -> list[Block]:
    """A page's fenced blocks, indented ones (inside a list) included."""
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    out = []
    for m in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.S | re.M):
        body = "".join(line[len(m.group(1)) :] + "\n" for line in m.group(3).splitlines())
        out.append(Block(m.group(2), body, text[: m.start()].count("\n") + 1, path))
    return out


def readme_blocks() -> list[Block]:
    """Every block of README.md and docs/ that could be a command: ```text blocks are output."""
    return [b for path in doc_pages() for b in page_blocks(path) if b.lang != "text"]


def block(key: str) -> Block:
    (found,) = [b for b in readme_blocks() if key in b.text]
    return found


def command_lines(text: str) -> list[list[str]]:
    """Shell lines as words, continuations joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [words for words in (shlex.split(line, comments=True) for line in joined.splitlines()) if words]


def variants(words: list[str]) -> list[list[str]]:
    """`a|b` alternatives expanded; `[--opt x]` groups left out, and all put in (but OPTIONAL_SKIP)."""
    base, full, group = [], [], None
    for w in words:
        if group is None and w.startswith("["):
            group = []
        if group is None:
            base.append(w)
            full.append(w)
            continue
        group.append(w.strip("[]"))
        if w.endswith("]"):
            if " ".join(group) not in OPTIONAL_SKIP:
                full.extend(group)
            group = None
    out = []
    for option in [base, full] if full != base else [base]:
        expanded = [option]
        for i, w in enumerate(option):
            if re.fullmatch(r"[\w-]+(\|[\w-]+)+", w):
                expanded = [e[:i] + [alt] + e[i + 1 :] for e in expanded for alt in w.split("|")]
        out.extend(expanded)
    return out


def test_every_block_is_run_or_listed():
    keys = {**RUN, **NOT_RUN}
    assert not set(RUN) & set(NOT_RUN)
    for b in readme_blocks():
        matched = [k for k in keys if k in b.text]
        assert len(matched) == 1, f"{b}: add it to RUN (and run it) or to NOT_RUN with the reason; matched {matched}"
        assert b.lang in ("bash", "python", "yaml"), f"{b}: say its language (```text for output)"
    for key in keys:
        found = [b for b in readme_blocks() if key in b.text]
        assert len(found) == 1, f"{key!r} names {len(found)} doc blocks; it should name exactly one"


def test_pending_and_skipped_lines_exist():
    lines = [" ".join(words) for key, how in RUN.items() if how == "cli" for words in command_lines(block(key).text)]
    for listed in (*PENDING, *OPTIONAL_SKIP):
        assert any(listed in line for line in lines), f"{listed!r} is in no docs CLI line: remove it"


def test_run_blocks_hold_only_runnable_lines():
    """Every line of a CLI block is an rlops or make command this test knows how to run."""
    for key, how in RUN.items():
        if how != "cli":
            continue
        for words in command_lines(block(key).text):
            assert words[0] in ("rlops", ".venv/bin/rlops", "make"), f"{key}: cannot run {' '.join(words)!r}"


# --- YAML blocks ----------------------------------------------------------------------------------


def _column_values(name: str, spec: dict | None, n: int, rng: np.random.Generator) -> list:
    """Values for a named feature column: strings unless the spec says float/categorical ints."""
    kind = (spec or {}).get("kind", "auto")
    if kind == "float" or name in ("price",):
        return rng.normal(size=n).round(3).tolist()
    if kind == "categorical":
        return rng.integers(0, 3, size=n).tolist()
    return [f"{name}_{v}" for v in rng.integers(0, 20, size=n)]


def small_logs(experience_gen: dict, path: str, n: int = 2000) -> tuple[str, pd.DataFrame]:
    """A CSV or Parquet file with the columns an experience_gen section maps (generated data; a
    split's time column spans its boundaries), and its rows."""
    import pandas as pd

    rng = np.random.default_rng(0)
    cols = experience_gen.get("bandit_columns") or {}
    spec = experience_gen.get("action_spec") or {}
    low, high = int(spec.get("minimum", 0)), int(spec.get("maximum", 9))
    data: dict[str, list] = {}
    if cols.get("context_prefix"):
        for i in range(4):
            data[f"{cols['context_prefix']}{i}"] = rng.normal(size=n).tolist()
    for c in cols.get("context") or ():
        data[c] = rng.normal(size=n).tolist()
    for f in cols.get("features") or ():
        f = {"name": f} if isinstance(f, str) else f
        data[f.get("column") or f["name"]] = _column_values(f["name"], f, n, rng)
    data[cols.get("action", "action")] = rng.integers(low, high + 1, size=n).tolist()
    data[cols.get("reward", "reward")] = (rng.random(n) < 0.3).astype(int).tolist()
    data[cols.get("propensity", "propensity")] = [1.0 / (high - low + 1)] * n
    splits = experience_gen.get("splits") or {}
    if splits.get("time_column"):
        first, last = min(splits["time_boundaries"]), max(splits["time_boundaries"])
        data[splits["time_column"]] = rng.integers(first - 3 * 86400, last + 86400, size=n).tolist()
    frame = pd.DataFrame(data)
    fmt = experience_gen["source"].get("format", "csv")
    path = f"{path}.{fmt}"
    if fmt == "parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path, frame


def pipeline_yaml(key: str, directory: str) -> str:
    """The README block as a --config file, its file source pointed at generated data."""
    os.makedirs(directory, exist_ok=True)
    raw = load_yaml(block(key).text)
    source = raw["experience_gen"].get("source") or {}  # none: the default simulation's
    if source.get("kind") == "file":
        source["pattern"], _ = small_logs(raw["experience_gen"], os.path.join(directory, "logs"))
    path = os.path.join(directory, "my.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(raw, f)
    return path


@pytest.mark.parametrize("key", [k for k, how in RUN.items() if how == "pipeline yaml"])
def test_pipeline_yaml_blocks_load(key, tmp_path):
    path = pipeline_yaml(key, str(tmp_path))
    config = load_config("bandit", path, [f"root={tmp_path}/root"])
    given = load_yaml(block(key).text)["experience_gen"]
    source = config.experience_gen.source
    given_source = given.get("source") or load_config("bandit").raw["experience_gen"]["source"]
    assert source.kind == given_source["kind"]  # the block's source, not a mix with the default's
    assert {k for k, v in dataclasses.asdict(source).items() if v != getattr(type(source)(), k, v)} <= set(
        given_source
    ) | {"pattern"}
    if "splits" in given:
        assert config.experience_gen.splits.names == [s["name"] for s in given["splits"]["splits"]]
    for name, value in (given.get("bandit_columns") or {}).items():
        if isinstance(value, str):
            assert getattr(config.experience_gen.bandit_columns, name) == value


# A block that is a fragment (a `splits` section, no source) runs on small logs of named features
# that hold the columns it names (small_logs adds a time split's column).
FRAGMENT_FEATURES = ["user_feature_3", {"name": "device", "vocab_size": 50}, "price"]
# The push path is where a block failed before (the named-features block, at its first blessed
# push): each block is pushed, whatever its random rewards, by a gate that blesses any candidate
# with an interval, and the Pusher verifies the pushed policy in a fresh process.
BLESS_ANY = ["evaluator.min_improvement=-1", "evaluator.use_lower_bound=false", "evaluator.min_ess=5"]
# Blocks run end to end with `rlops run bandit --config`, and where the others run. The split
# fragments run through ExperienceGen in tests/components/test_first_contact_ingest.py, which checks
# each split's exact counts (a split by key keeps a user's records together, a split by time cuts at
# the boundary); the named-features block runs to a push here.
PIPELINE_RUNS = ('pattern: "logs/*.csv"',)
RUN_ELSEWHERE = {  # block -> the test that runs it
    'pattern: "gs://my-logs/': "test_run_lines",  # it is the README's `--config my.yaml`
    "the default: ~90% train": "test_readme_split_settings_do_what_it_says",
    "key: user_feature_3": "test_readme_split_settings_do_what_it_says",
    "time_column: ts": "test_readme_split_settings_do_what_it_says",
    "logging_rlops_42.request_response_logging": "test_the_bigquery_block_maps_rows_of_the_logging_tables_shape",
    "splits: {splits: [{name: eval}]}": "test_the_eval_only_block_runs_experience_gen_alone_and_the_pipeline_refuses_it",
}


def test_every_pipeline_yaml_block_runs_somewhere():
    assert set(PIPELINE_RUNS) | set(RUN_ELSEWHERE) == {k for k, how in RUN.items() if how == "pipeline yaml"}
    assert not set(PIPELINE_RUNS) & set(RUN_ELSEWHERE)
    elsewhere = open(os.path.join(ROOT, "tests", "components", "test_first_contact_ingest.py")).read()
    for test in RUN_ELSEWHERE.values():
        assert callable(globals().get(test)) or f"def {test}(" in elsewhere, test


def completed_block(key: str, directory: str) -> tuple[dict, pd.DataFrame]:
    """The README block as a config dict on small local logs (and those logs): a file source is
    pointed at generated rows with the columns it maps; a fragment gets a file source too."""
    raw = load_yaml(block(key).text)
    section = raw.setdefault("experience_gen", {})
    if "source" not in section:
        section["source"] = {"kind": "file", "pattern": "logs/*.csv", "format": "csv"}
        section.setdefault("bandit_columns", {"features": FRAGMENT_FEATURES})
    section["source"]["pattern"], frame = small_logs(section, os.path.join(directory, "logs"), n=1000)
    return raw, frame


@pytest.mark.slow
@pytest.mark.parametrize("key", PIPELINE_RUNS)
def test_pipeline_yaml_blocks_run_to_a_verified_push(key, tmp_path):
    raw, frame = completed_block(key, str(tmp_path))
    path, summary_path = tmp_path / "my.yaml", tmp_path / "summary.json"
    path.write_text(yaml.safe_dump(raw))
    overrides = [f"root={tmp_path}/root", "trainer.train_steps=60", "evaluator.num_bootstrap=50", *BLESS_ANY]
    args = ["run", "bandit", "--config", str(path), *[a for o in overrides for a in ("--set", o)]]
    assert cli.main([*args, "--summary-json", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    assert summary["pushed"], summary.get("blessing_reason")
    train, evaluated = summary["records_written_train"], summary["records_written_eval"]
    assert train + evaluated + summary["records_quarantined"] == len(frame)
    assert 0.8 < train / len(frame) < 0.97  # the default split: ~9 in 10 train


def test_the_eval_only_block_runs_experience_gen_alone_and_the_pipeline_refuses_it(tmp_path, capsys):
    """As the README says: ExperienceGen on its own, then `rlops evaluate --split eval`; the
    bandit pipeline needs both splits and says so in one line (exit 2)."""
    from rlops.components.experience_gen.__main__ import main as experience_gen_main

    raw, frame = completed_block("splits: {splits: [{name: eval}]}", str(tmp_path))
    raw["experience_gen"]["action_spec"] = {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 9}
    path, examples = tmp_path / "my.yaml", tmp_path / "examples"
    path.write_text(yaml.safe_dump(raw))
    section = load_config("bandit", str(path)).experience_gen.to_json()
    argv = ["--config", section, "--examples-uri", str(examples), "--quarantine-uri", str(tmp_path / "q")]
    assert experience_gen_main(argv) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts["records_written_eval"] == len(frame)
    evaluate = f"evaluate --examples {examples} --policy uniform --split eval --num-bootstrap 50".split()
    assert cli.main(evaluate) == 0
    capsys.readouterr()
    assert cli.main(["run", "bandit", "--config", str(path), "--set", f"root={tmp_path}/root"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "experience_gen.splits" in line and "'train'" in line


def test_the_bigquery_block_maps_rows_of_the_logging_tables_shape(tmp_path, monkeypatch):
    """No BigQuery here: the block's own config ingests rows as BigQuery hands them over (Beam's
    BigQuery read replaced by them: the logging table's REPEATED STRING payloads, one request missing
    its payload; the events table's clicks, one late, one for a request nobody logged), end to end
    through ExperienceGen: each request's reward comes from its clicks in the window."""
    import apache_beam as beam

    from rlops.components.experience_gen import core
    from rlops.components.experience_gen.sources import bigquery
    from rlops.pipelines.cli_examples import read_examples

    raw = load_yaml(block("logging_rlops_42.request_response_logging").text)
    raw["experience_gen"]["action_spec"] = {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 3}
    raw["experience_gen"]["max_bad_record_ratio"] = 0.5
    raw["experience_gen"]["min_split_records"] = {"train": 0, "eval": 0}  # four requests: any split will do
    raw["root"] = str(tmp_path / "root")
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config("bandit", str(path)).experience_gen

    def row(i: int, request: dict | None, action: int, propensity: float) -> dict:
        payload = {"action": action, "propensity": propensity, "greedy_action": action}
        return {
            "request_id": 1000 + i,
            "logging_time": f"2026-11-23T10:0{i}:00Z",
            "request_payload": [json.dumps(request)] if request is not None else [],
            "response_payload": [json.dumps(payload)],
        }

    requests = [
        row(i, {"user_a": u, "price": p}, a, 0.25)
        for i, (u, p, a) in enumerate([("fr", 1.5, 1), ("us", -0.5, 3), ("fr", 0.5, 0), ("de", 2.0, 2)])
    ]
    requests.append(row(4, None, 2, 0.3))
    clicks = [
        {"request_id": "1000", "event_time": "2026-11-23T10:05:00Z", "event_type": "click"},
        {"request_id": "1002", "event_time": "2026-11-23T11:30:00Z", "event_type": "click"},  # after its 30m
        {"request_id": "9999", "event_time": "2026-11-23T10:06:00Z", "event_type": "click"},  # nobody's
        {"request_id": "1003", "event_time": "2026-11-23T12:00:00Z", "event_type": "click"},  # the latest: the cutoff
    ]
    monkeypatch.setattr(
        bigquery, "bigquery_read", lambda src: beam.Create(clicks if "feedback" in src.query else requests)
    )
    monkeypatch.setattr(core, "check_credentials", lambda config: None)
    result = core.run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (result.records_read, result.records_written, result.records_quarantined) == (5, 4, 1)
    assert result.events == {
        "attributed": 1,
        "duplicate": 0,
        "late": 2,
        "before_decision": 0,
        "unknown_decision": 1,
        "unmapped_type": 0,
        "pending": 0,
        "malformed": 0,
    }
    _, rows = read_examples(str(tmp_path / "ex"), columns=["decision_id", "action", "reward", "price"])
    got = {r[0]: (int(r[1]), float(r[2]), float(r[3])) for r in rows}
    assert got == {"1000": (1, 1.0, 1.5), "1001": (3, 0.0, -0.5), "1002": (0, 0.0, 0.5), "1003": (2, 0.0, 2.0)}
    [bad] = [q for q in core.read_quarantine(str(tmp_path / "q")) if not q["reason"].startswith("event_")]
    assert "request_payload[0]" in bad["message"]


@pytest.mark.parametrize("key", [k for k, how in RUN.items() if how == "config yaml"])
def test_config_yaml_blocks_load(key, tmp_path):
    """A block of settings (no source of its own) overlays the bring-your-own-logs config (per-arm
    click logs, the data these settings are for) and validates, each key landing where it says."""
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    paths = LogGenerator(LogConfig(seed=0)).sample(200, seed=1).to_files(str(tmp_path / "logs"))
    raw = load_yaml(block("name: my-logs").text)
    raw["experience_gen"]["source"]["pattern"] = paths["impressions"]
    raw["experience_gen"]["item_source"]["pattern"] = paths["items"]
    raw["experience_gen"]["bandit_columns"]["reward"] = "reward"
    raw["experience_gen"]["bandit_columns"]["propensity"] = "propensity"
    settings = load_yaml(block(key).text)
    for section, values in settings.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config("bandit", str(path), [f"root={tmp_path}/root"])
    for section, values in settings.items():
        for name, value in values.items():
            got = getattr(getattr(config, section), name)
            assert (list(got) if isinstance(got, tuple) else got) == value, (section, name)


@pytest.mark.parametrize("key", [k for k, how in RUN.items() if how == "vertex yaml"])
def test_vertex_yaml_blocks_load(key, tmp_path):
    from rlops.pipelines.vertex.settings import load_vertex_config

    path = tmp_path / "vertex.yaml"
    path.write_text(block(key).text)
    config = load_vertex_config(str(path))
    for name in load_yaml(block(key).text):
        assert getattr(config, name) is not None


# --- Python blocks ----------------------------------------------------------------------------------


def test_kfp_python_block_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(
        compile(
            block("from rlops.components import kfp as rlops_kfp").text,
            block("from rlops.components import kfp as rlops_kfp").path,
            "exec",
        ),
        scope,
    )
    assert scope["trainer"].component_spec.implementation.container.image == "rlops:0.1.0"


def test_testing_aids_block_runs(monkeypatch, tmp_path):
    import runpy

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "readme_block.py"  # a file, not exec: kfp's @dsl.component reads the source
    path.write_text(block("from rlops.testing.vertex_emulator import VertexEmulator").text)
    scope = runpy.run_path(str(path))
    assert scope["run"].task("double").output_parameters["Output"] == 42
    assert scope["store"].mutations == 2 and scope["store"].exists("a.txt")


def test_litert_client_block_runs(tmp_path):
    """The LiteRT client, in a fresh process without TensorFlow, on a digits-shaped pushed policy."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from policy_inference import export_digits_policy

    from rlops.train import litert

    version_dir = str(tmp_path / "1795555600")
    export_digits_policy(version_dir)
    litert.convert_to_dir(version_dir, version=1795555600)
    text = block("from ai_edge_litert.interpreter import Interpreter").text
    text = text.replace("pipeline_root/bandit/serving/1795555600", version_dir)
    text += "\nimport sys; assert 'tensorflow' not in sys.modules\n"
    proc = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1].endswith("[1795555600]")


@pytest.mark.slow
def test_notebook_ppo_block_runs():
    text = block("from rlops.train.on_policy import PPOConfig, train_ppo").text
    assert "total_env_steps=100_000" in text
    scope: dict = {}
    path = block("from rlops.train.on_policy import PPOConfig, train_ppo").path
    exec(compile(text.replace("total_env_steps=100_000", "total_env_steps=2_048"), path, "exec"), scope)
    assert scope["policy"] is scope["result"].agent.policy


# --- CLI blocks -----------------------------------------------------------------------------------


class Runner:
    """Runs README CLI lines in a tmp directory: the pipeline root, small budgets, placeholders
    replaced by what earlier lines produced."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.roots = {kind: os.path.join(tmp, "pipeline_root", kind) for kind in ("bandit", "ppo")}
        self.my_yaml = pipeline_yaml('pattern: "gs://my-logs/', os.path.join(tmp, "my_yaml"))

    def serving(self) -> str:
        return os.path.join(self.roots["bandit"], "serving")

    def latest_version(self) -> str:
        versions = sorted((v for v in os.listdir(self.serving()) if v.isdigit()), key=int)
        assert versions, "no pushed version"
        return versions[-1]

    def substitute(self, words: list[str]) -> list[str]:
        out = []
        for w in words:
            if w == "my.yaml":
                w = self.my_yaml
            elif w == "$IMAGE":
                w = IMAGE
            elif w in ("bandit.json", "bandit_kfp.yaml"):
                w = os.path.join(self.tmp, w)
            elif w == "gs://BUCKET/serving":
                w = self.serving()
            elif w == "1795555600":
                w = self.latest_version()
            elif re.fullmatch(r"pipeline_root/bandit/serving/\d+", w):
                w = os.path.join(self.serving(), self.latest_version())
            elif w.startswith("pipeline_root/"):
                pattern = os.path.join(self.tmp, w.replace("...", "**"))
                found = glob.glob(pattern, recursive=True)
                assert found, f"README path {w} matches nothing under a run's root"
                w = found[0]
            elif w == "DIR":
                w = glob.glob(
                    os.path.join(self.roots["bandit"], "**", "ExperienceGen", "examples", "*"), recursive=True
                )[0]
            out.append(w)
        return out

    def argv(self, words: list[str]) -> list[str]:
        args = self.substitute(words[1:])
        if args[0] == "evaluate":
            args += ["--num-bootstrap", "100"]  # a small budget; the README's own flags still apply
        if args[0] in ("run", "lineage", "config"):
            kind = args[1]
            extra = [f"root={self.roots[kind]}"] + (SMALL[kind] if args[0] == "run" else [])
            if "--config" in args:  # its own file source: the simulation's num_records does not apply
                extra = [e for e in extra if not e.startswith("experience_gen.source.")]
            args = args[:2] + [a for e in extra for a in ("--set", e)] + args[2:]  # the line's own --set wins
        return args

    def run(self, line: list[str]) -> None:
        for words in variants(line):
            if words[0] == "make":
                proc = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True)
                assert proc.returncode == 0, (words, proc.stderr)
                continue
            args = self.argv(words)
            if args[0] in PARSE_ONLY:
                cli._parser().parse_args(args)  # argparse exits 2 on a bad flag
                continue
            code = cli.main(args)
            assert code == 0, f"README line {' '.join(line)!r} -> rlops {' '.join(args)} exited {code}"


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("readme"))
    cwd = os.getcwd()
    os.chdir(tmp)  # anything a command writes into the current directory stays here
    try:
        yield Runner(tmp)
    finally:
        os.chdir(cwd)


def run_block(runner: Runner, key: str) -> None:
    failures = []
    for line in command_lines(block(key).text):
        pending = [reason for cmd, reason in PENDING.items() if cmd in " ".join(line)]
        start = time.monotonic()
        try:
            runner.run(line)
        except (AssertionError, SystemExit, Exception) as e:  # noqa: B014 - report every line
            if not pending:
                failures.append(f"{' '.join(line)}: {type(e).__name__}: {str(e)[:500]}")
            continue
        finally:
            print(f"{time.monotonic() - start:6.1f}s  {' '.join(line)}")  # shown with -s or on failure
        assert not pending, f"{' '.join(line)!r} passes now: remove it from PENDING ({pending[0]})"
    assert not failures, "\n".join(failures)


def test_make_lines_are_targets(runner):
    run_block(runner, "make run ")


@pytest.mark.slow
def test_run_lines(runner):
    # `make run` is checked as a target (test_make_lines_are_targets): its default bandit run to a
    # verified push is tests/pipelines/test_pipelines.py's, on a small budget. Here the README's
    # own `--set trainer.agent=lin_ucb` line blesses and pushes the policy the lines after it show.
    run_block(runner, ".venv/bin/rlops run ppo")
    runner.latest_version()  # asserts a pushed version


@pytest.mark.slow
def test_evaluate_and_serving_lines(runner):
    if not os.path.isdir(runner.serving()):
        runner.run(DEFAULT_RUN)
    run_block(runner, "rlops evaluate --examples pipeline_root")
    before = runner.latest_version()
    run_block(runner, "rlops serving list gs://BUCKET")
    assert int(runner.latest_version()) > int(before)  # rollback re-published as a new version


@pytest.mark.slow
def test_readme_serving_block_runs(runner):
    """The README's serving call, in a fresh process, on the version the README's lines pushed: it
    answers as the exploration contract says (an action drawn with the propensity it reports)."""
    import sys

    if not os.path.isdir(runner.serving()):
        runner.run(DEFAULT_RUN)
    version = runner.latest_version()
    text = block('serving = "pipeline_root/bandit/serving"').text
    text = text.replace('"pipeline_root/bandit/serving"', repr(runner.serving()))
    text += (
        "\nassert int(out['policy_version'][0]) == int(version)"
        "\neps = float(tf.saved_model.load(os.path.join(serving, version)).signatures['get_metadata']()"
        "['serving_epsilon'])"
        "\nk, a, g, p = 10, int(out['action'][0]), int(out['greedy_action'][0]), float(out['propensity'][0])"
        "\nassert abs(p - ((1 - eps) * (a == g) + eps / k)) < 1e-6, (a, g, p, eps)"
        "\nactions = [int(serve(context=tf.constant(np.full((1, 64), 0.5), tf.float32))['action'][0]) for _ in range(300)]"
        "\nassert eps == 0 or len(set(actions)) > 1, actions  # fresh draws on every call"
    )
    proc = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=300, cwd=runner.tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f"[{version}], shape=(1,), dtype=int64)"), proc.stdout[-500:]


def test_config_lines(runner):
    run_block(runner, "# every key, its value and its doc")


def test_cloud_lines_compile_and_parse(runner):
    run_block(runner, "rlops compile bandit --output bandit.json")
    assert os.path.getsize(os.path.join(runner.tmp, "bandit.json")) > 0
    run_block(runner, "rlops submit bandit.json")
    run_block(runner, "rlops schedule create bandit.json")


def test_the_block_parsers_themselves():
    assert command_lines("a \\\n   b  # c\n# d\n\ne 'x # y'\n") == [["a", "b"], ["e", "x # y"]]
    assert variants(["s", "pause|resume", "X", "[--json]", "[--action-minimum", "1]"]) == [
        ["s", "pause", "X"],
        ["s", "resume", "X"],
        ["s", "pause", "X", "--json"],
        ["s", "resume", "X", "--json"],
    ]


# --- docs/bring-your-own-logs.md: the newcomer's page, run as written ---------------------------------


@pytest.mark.slow
def _runs_as(b: Block, how: str) -> bool:
    return any(RUN.get(k) == how for k in RUN if k in b.text)


def test_bring_your_own_logs_page_runs_to_a_verified_push(tmp_path, monkeypatch, capsys):
    """The page's blocks in page order, in a directory of their own, as a reader would run them:
    Python blocks as scripts, the YAML block saved as my_logs.yaml (the name the page gives it),
    each CLI line through `rlops`'s main. No budget is cut and no gate is opened: the page's own
    settings must bless and push, and the serving call must answer from the pushed version."""
    import runpy

    monkeypatch.chdir(tmp_path)
    blocks = [b for b in page_blocks(BYOL) if b.lang != "text" and not _runs_as(b, "events")]
    assert [b.lang for b in blocks] == ["python", "yaml", "bash", "bash", "python"], [str(b) for b in blocks]
    assert all(RUN.get(k) == "byol" for b in blocks for k in RUN if k in b.text)
    for i, b in enumerate(blocks):
        if b.lang == "python":
            script = tmp_path / f"block_{i}.py"
            script.write_text(b.text)
            runpy.run_path(str(script), run_name="__main__")
        elif b.lang == "yaml":
            (tmp_path / "my_logs.yaml").write_text(b.text)
        else:
            for words in command_lines(b.text):
                assert words[0] == ".venv/bin/rlops", words
                assert cli.main(words[1:]) == 0, f"{b}: {' '.join(words)}"
        if b.lang == "bash" and "rlops run bandit" in b.text:
            summary = json.loads((tmp_path / "my_logs_summary.json").read_text())
            assert summary["records_quarantined"] == 0 and summary["blessed"], summary.get("blessing_reason")
            assert summary["pushed"], summary
    version = max(int(v) for v in os.listdir(tmp_path / "pipeline_root" / "my-logs" / "serving") if v.isdigit())
    assert os.path.exists(tmp_path / "pipeline_root" / "my-logs" / "serving" / str(version) / "policy.tflite")
    item, propensity, same_version = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert item.startswith("item_") and 0.0 < float(propensity) <= 1.0 and same_version == "True"


# --- generated reference pages ----------------------------------------------------------------------


def test_reference_pages_are_what_the_generator_writes():
    from rlops.pipelines import reference_docs

    stale = reference_docs.stale(ROOT)
    assert not stale, f"{stale} differ from the code: run python -m rlops.pipelines.reference_docs --write"


def test_the_config_reference_names_every_field():
    import typing

    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.experience_gen.config import BanditColumns, ExperienceGenConfig, FileSource
    from rlops.components.trainer.config import TrainerConfig
    from rlops.pipelines import reference_docs
    from rlops.pipelines.config import TOP_LEVEL_KEYS, PusherConfig

    page = reference_docs.config_page()
    for key in TOP_LEVEL_KEYS:
        assert f"| `{key}` |" in page
    for cls in (ExperienceGenConfig, BanditColumns, FileSource, TrainerConfig, EvaluatorConfig, PusherConfig):
        section = page.split(f"({cls.__name__})", 1)[1].split("\n#", 1)[0]
        for f in dataclasses.fields(cls):
            if f.name != "raw":
                assert f"| `{f.name}` |" in section, (cls.__name__, f.name)
        assert typing.get_type_hints(cls)


@dataclasses.dataclass
class _Documented:
    """How config classes document their fields (the generator reads all three forms)."""

    # the comment block above,
    # both lines of it
    above: int = 1
    beside: str = "x"  # the comment at the end of the line
    below: float = 0.5
    """a string right below"""
    none: bool = False


def test_field_docs_are_read_from_comments_above_beside_and_below():
    from rlops.pipelines import reference_docs

    assert reference_docs.field_docs(_Documented) == {
        "above": "the comment block above, both lines of it",
        "beside": "the comment at the end of the line",
        "below": "a string right below",
        "none": "",
    }


@dataclasses.dataclass(frozen=True)
class _Undocumented:
    """A planted violation: a config section one of whose fields says nothing."""

    documented: int = 1  # what it does
    bare: str = "x"


def test_an_undocumented_field_fails_the_config_reference(monkeypatch):
    """A config key without a doc would be a blank row: the generator (and so the docs test) fails."""
    import rlops.pipelines.config as pipeline_config
    from rlops.pipelines import reference_docs

    with pytest.raises(reference_docs.UndocumentedField, match=r"_Undocumented\.bare has no documentation"):
        reference_docs.field_doc(_Undocumented, "bare", reference_docs.field_docs(_Undocumented))
    assert reference_docs.field_doc(_Undocumented, "documented", reference_docs.field_docs(_Undocumented))
    monkeypatch.setattr(pipeline_config, "PusherConfig", _Undocumented)  # the pusher section gains it
    with pytest.raises(reference_docs.UndocumentedField, match=r"_Undocumented\.bare has no documentation"):
        reference_docs.config_page()


def test_the_cli_reference_names_every_command_and_flag():
    from rlops.pipelines import reference_docs

    page = reference_docs.cli_page()
    for command in ("run", "lineage", "config", "compile", "submit", "schedule create", "evaluate", "serving list"):
        assert f"## `rlops {command}`" in page or f"# `rlops {command}`" in page, command
    assert "`--summary-json SUMMARY_JSON`" in page and "`--num-bootstrap" in page


def test_no_page_points_outside_the_repository():
    for path in doc_pages():
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        assert "../shared" not in text and "shared/DESIGN" not in text, path
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if re.match(r"[a-z]+:", target):
                continue
            where = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), target))
            assert where.startswith(ROOT + os.sep) and os.path.exists(where), f"{path}: link {target}"


# What a comment would say only about the code's past (an issue, a session, a commit, a figure that
# changed): that history belongs in the commit messages and the benchmarks page.
HISTORY = re.compile(r"\b[Ii]ssue \d+|\bsession \d+|\bas before\b|\bno longer\b|\bcommit [0-9a-f]{7,}\b|\bwas [\d.,]+")


def test_no_comment_or_docstring_in_the_package_tells_its_history():
    hits = [
        f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}"
        for path in sorted(glob.glob(os.path.join(ROOT, "rlops", "**", "*.py"), recursive=True))
        for number, line in enumerate(open(path, encoding="utf-8"), 1)
        if HISTORY.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_the_readme_is_a_first_page_and_every_benchmark_has_its_current_row():
    assert len(open(README, encoding="utf-8").read().splitlines()) <= 150
    page = open(os.path.join(DOCS, "benchmarks.md"), encoding="utf-8").read()
    scripts = [p for p in sorted(os.listdir(os.path.join(ROOT, "benchmarks"))) if p.endswith(".py") and p[0] != "_"]
    missing = [s for s in scripts if f"benchmarks/{s}" not in page]
    assert not missing, f"benchmarks without their command and figures on docs/benchmarks.md: {missing}"


def test_the_test_command_builds_the_site_strictly_and_a_failed_build_fails_it():
    """`make test`'s lint part builds the site with --strict; a failed build sets the part's status
    (the other parts still run: each command is `|| status=1`, none stops the shell)."""
    proc = subprocess.run(["make", "-n", "lint"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if "mkdocs build" in line]
    assert "mkdocs build --strict" in line and re.search(r"mkdocs build --strict[^;]*\|\| status=1", line)
    test = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "mkdocs build --strict" in test
