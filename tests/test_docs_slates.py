"""docs/slates.md runs as written, top to bottom, in a directory of its own: the generator's files,
the YAML saved as slates.yaml (the name the page gives it), ExperienceGen's CLI on it, then
`rlops evaluate` on the slate Examples it wrote. Its `rlops run ranking` line is the run of
tests/pipelines/test_ranking_pipeline.py."""

from __future__ import annotations

import json
import runpy

import pytest
from test_docs import RUN, command_lines, page_blocks

from rlops.components.experience_gen.__main__ import main as experience_gen_main
from rlops.pipelines import cli

SLATES = "docs/slates.md"


@pytest.mark.slow
def test_slates_page_runs_to_estimates(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in page_blocks(SLATES) if b.lang != "text"]
    assert [b.lang for b in blocks] == ["python", "yaml", "bash", "python", "bash"], [str(b) for b in blocks]
    assert all(RUN.get(k) == "slates" for b in blocks for k in RUN if k in b.text)
    python, yaml_block, bash, ranking, pipeline = blocks
    assert pipeline.text.startswith(".venv/bin/rlops run ranking")  # tests/pipelines/test_ranking_pipeline.py runs it
    script = tmp_path / "block_0.py"
    script.write_text(python.text)
    runpy.run_path(str(script), run_name="__main__")
    (tmp_path / "slates.yaml").write_text(yaml_block.text)
    ingest, evaluate = command_lines(bash.text)
    assert ingest[:3] == [".venv/bin/python", "-m", "rlops.components.experience_gen"], ingest
    assert experience_gen_main(ingest[3:]) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts["record_kind"] == "slate" and counts["records_quarantined"] == 0
    assert counts["records_written"] == 15_000 and counts["examples_train"] + counts["examples_eval"] == 5_000
    assert evaluate[0] == ".venv/bin/rlops"
    assert cli.main(evaluate[1:]) == 0
    result = json.loads((tmp_path / "uniform.json").read_text())
    assert set(result["estimates"]) == {"sips", "iips", "rips", "snsips", "sniips", "snrips", "cascade_dr", "pi"}
    for name in ("rips", "snrips", "cascade_dr", "iips"):
        est = result["estimates"][name]
        assert est["value"] is not None and est["lower"] <= est["value"] <= est["upper"], (name, est)
    script = tmp_path / "block_3.py"  # the ranking policy's block asserts its own numbers
    script.write_text(ranking.text)
    runpy.run_path(str(script), run_name="__main__")


def test_the_page_s_bad_config_is_one_line(tmp_path, capsys):
    """ExperienceGen's CLI on a config with an unknown key: exit 2, one line naming the key."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("experience_gen:\n  record_kind: slate\n  slate_colums: {}\n")
    assert experience_gen_main(["--config", str(bad), "--examples-uri", "x", "--quarantine-uri", "y"]) == 2
    err = capsys.readouterr().err.strip()
    assert "slate_colums: unknown key; closest: slate_columns" in err and "\n" not in err
