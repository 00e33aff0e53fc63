"""docs/events.md runs as written, top to bottom, in a directory of its own: the shop generator's two
nights, the config saved as shop.yaml (the name the page gives it), `rlops ingest` for each night
and `rlops examples` on the second; its BigQuery events block runs on the same events handed over
as BigQuery rows (Beam's BigQuery read replaced by those rows: no BigQuery here) and gives the
same rewards as the files."""

from __future__ import annotations

import json
import runpy

import pytest
import yaml
from test_docs import RUN, command_lines, page_blocks

from rlops.pipelines import cli

EVENTS = "docs/events.md"


def _blocks():
    blocks = [b for b in page_blocks(EVENTS) if b.lang != "text"]
    assert [b.lang for b in blocks] == ["yaml", "python", "bash", "yaml"], [str(b) for b in blocks]
    assert all(RUN.get(k) == "events" for b in blocks for k in RUN if k in b.text)
    return blocks


def _nights(tmp_path, python) -> None:
    script = tmp_path / "block_1.py"
    script.write_text(python.text)
    runpy.run_path(str(script), run_name="__main__")


@pytest.mark.slow
def test_events_page_runs_two_nights(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config, python, bash, _ = _blocks()
    _nights(tmp_path, python)
    (tmp_path / "shop.yaml").write_text(config.text)
    night1, night2, examples = command_lines(bash.text)
    capsys.readouterr()
    summaries = []
    for i, words in enumerate((night1, night2)):
        assert words[0] == ".venv/bin/rlops" and words[1] == "ingest", words
        assert cli.main([*words[1:], "--summary-json", f"night{i + 1}.json"]) == 0
        summaries.append(json.loads((tmp_path / f"night{i + 1}.json").read_text()))
        assert "events: read" in capsys.readouterr().out
    first, second = summaries
    for s in summaries:  # every decision and every event accounted for, with the page's keys
        r = s["records"]
        assert set(r) == {"read", "written", "quarantined", "pending"}
        assert r["read"] == r["written"] + r["quarantined"] + r["pending"]
        assert set(s["events"]) == {
            "attributed",
            "duplicate",
            "late",
            "before_decision",
            "unknown_decision",
            "unmapped_type",
            "pending",
            "malformed",
        }
        assert s["events_read"] + s["events_carried"] == sum(s["events"].values())
        assert s["events"]["attributed"] > 0 and s["events"]["late"] > 0 and s["events"]["duplicate"] > 0
    assert first["records"]["pending"] > 0  # the night's last impressions wait ...
    assert second["records"]["read"] == 5_000 + first["records"]["pending"]  # ... and are read the next night
    assert second["events_carried"] == first["events"]["pending"]
    assert cli.main(examples[1:]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "decision_id,action,reward,split" and len(lines) == 6
    from rlops.pipelines.cli_examples import read_examples

    ids = {}
    for night in ("night1", "night2"):
        _, rows = read_examples(f"pipeline_root/shop/{night}", columns=["decision_id", "reward"])
        ids[night] = [r[0] for r in rows]
    late_deciders = [i for i in ids["night2"] if i.startswith("n0-")]
    assert len(late_deciders) == first["records"]["pending"]  # written the next night, each once
    assert not set(ids["night1"]) & set(ids["night2"]) and len(set(ids["night2"])) == len(ids["night2"])


def test_the_bring_your_own_logs_events_block_overlays_a_config(tmp_path, monkeypatch):
    """docs/bring-your-own-logs.md's second shape: its block over the page's shop config (reward
    column dropped) loads, with the events section it shows."""
    from test_docs import block

    from rlops.pipelines.config import build_config, load_raw, merge_raw, schema

    monkeypatch.chdir(tmp_path)
    config, python, _, _ = _blocks()
    _nights(tmp_path, python)
    base = yaml.safe_load(config.text)
    del base["experience_gen"]["events"]
    for key in ("decision_id", "decision_time"):
        del base["experience_gen"]["bandit_columns"][key]
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    raw = merge_raw(
        schema("bandit"), load_raw("bandit", "base.yaml"), load_yaml_text(block("# rewards as events").text)
    )
    built = build_config("bandit", raw).experience_gen
    assert built.bandit_columns.decision_id == "impression_id" and built.bandit_columns.decision_time == "ts"
    assert built.events is not None and built.events.rewards == {"click": 1.0, "purchase": "value"}
    assert built.events.pending_dir == "pipeline_root/shop/events_pending"


def load_yaml_text(text: str) -> dict:
    return yaml.safe_load(text)


@pytest.mark.slow
def test_the_bigquery_events_block_gives_the_files_rewards(tmp_path, monkeypatch):
    """The page's BigQuery events section on the same events as rows (as Beam's BigQuery read
    hands them over: dicts, times as text): the same rewards and counts as the CSV files."""
    import apache_beam as beam
    import pandas as pd

    from rlops.components.experience_gen import core
    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.experience_gen.sources import bigquery
    from rlops.pipelines.cli_examples import read_examples

    monkeypatch.chdir(tmp_path)
    config, python, _, bq = _blocks()
    _nights(tmp_path, python)
    section = yaml.safe_load(config.text)["experience_gen"]
    section["events"]["pending_dir"] = str(tmp_path / "pending-files")
    events = pd.read_csv("shop/events/2026-12-01.csv", dtype={"impression_id": str, "event_id": str})
    rows = [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in events.to_dict("records")]
    queries = []

    def bigquery_read(src):  # the service's read, replaced by its rows
        queries.append(src.query)
        return beam.Create(rows)

    monkeypatch.setattr(bigquery, "bigquery_read", bigquery_read)
    monkeypatch.setattr(core, "check_credentials", lambda config: None)

    def rewards(section: dict, out: str) -> tuple[dict, dict]:
        result = core.run_experience_gen(ExperienceGenConfig.from_json(section), f"{out}/ex", f"{out}/q")
        _, got = read_examples(f"{out}/ex", columns=["decision_id", "reward"])
        return {i: float(r) for i, r in got}, result.events

    from_files = rewards(section, "files")
    bq_events = yaml.safe_load(bq.text)["experience_gen"]["events"]
    section["events"] = {**section["events"], **bq_events, "pending_dir": str(tmp_path / "pending-bq")}
    from_bigquery = rewards(section, "bigquery")
    assert queries and "my-proj.shop.events" in queries[0]
    assert from_bigquery == from_files and sum(from_files[1].values()) == len(rows)
