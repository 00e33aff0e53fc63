"""Events to rewards on wrong input, as a user meets it through `rlops ingest`: each mistake is one
line naming the key or column (with the closest names) and exit 2; a rewards type no event had is a
note; empty and header-only events files; strings where numbers were; constant rewards warned."""

from __future__ import annotations

import json

import pytest
import yaml

from rlops.pipelines import cli

DECISIONS = "impression_id,ts,u0,item,propensity\n" + "".join(
    f"i{i},2026-12-01T10:{i % 60:02d}:00+00:00,{i / 10},{i % 3},0.3333\n" for i in range(60)
)
EVENTS = (
    "impression_id,event_time,event_type,amount\n"
    + "".join(f"i{i},2026-12-01T10:{i % 60 + 1:02d}:00+00:00,click,\n" for i in range(0, 60, 3))
    + "i5,2026-12-01T10:07:00+00:00,purchase,abc\n"
    + "i7,2026-12-01T13:00:00+00:00,click,\n"
)


def _config(tmp_path, events: str = EVENTS, **events_section) -> str:
    (tmp_path / "decisions.csv").write_text(DECISIONS)
    (tmp_path / "events.csv").write_text(events)
    section = {
        "source": {"kind": "file", "pattern": str(tmp_path / "events.csv"), "format": "csv"},
        "columns": {"decision_id": "impression_id", "time": "event_time", "type": "event_type", "value": "amount"},
        "window": "30m",
        "rewards": {"click": 1.0, "purchase": "value"},
        "aggregate": "max",
    }
    section.update(events_section)
    config = {
        "root": str(tmp_path / "root"),
        "experience_gen": {
            "source": {"kind": "file", "pattern": str(tmp_path / "decisions.csv"), "format": "csv"},
            "bandit_columns": {
                "context": ["u0"],
                "action": "item",
                "propensity": "propensity",
                "decision_id": "impression_id",
                "decision_time": "ts",
            },
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 2},
            "max_bad_record_ratio": 0.2,
            "events": section,
        },
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _one_line_error(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and "looks like a bug" not in err, err
    return err


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            {"columns": {"decision_id": "impression_id", "time": "event_tme", "type": "event_type", "value": "amount"}},
            "experience_gen.events.columns.time: column 'event_tme' is not in",
        ),
        ({"window": "0m"}, "experience_gen.events.window: '0m' must be longer than 0"),
        ({"window": "-5m"}, "experience_gen.events.window: '-5m' is not a duration"),
        ({"window": "half an hour"}, "experience_gen.events.window: 'half an hour' is not a duration"),
        (
            {"aggregate": "maxx"},
            "experience_gen.events.aggregate: 'maxx' is not one of first, max, sum, count; did you mean 'max'?",
        ),
        ({"aggregate": {"clik": "max"}}, "experience_gen.events.aggregate['clik']: not a type in events.rewards"),
        ({"cutoff": "tomorrow"}, "experience_gen.events.cutoff: 'tomorrow' is not a time"),
        ({"rewards": {"purchase": "amount"}}, "experience_gen.events.rewards['purchase']: a number or 'value'"),
    ],
)
def test_each_mistake_is_one_line(tmp_path, capsys, change, expected):
    err = _one_line_error(capsys, ["ingest", "--config", _config(tmp_path, **change)])
    assert expected in err, err
    if "event_tme" in expected:
        assert "event_time" in err  # the closest of the file's columns


def test_reward_and_events_together_is_one_line(tmp_path, capsys):
    path = _config(tmp_path)
    raw = yaml.safe_load(open(path))
    raw["experience_gen"]["bandit_columns"]["reward"] = "clicked"
    open(path, "w").write(yaml.safe_dump(raw))
    err = _one_line_error(capsys, ["ingest", "--config", path])
    assert "experience_gen.bandit_columns.reward: the rewards come from experience_gen.events" in err


def test_header_only_events_with_auto_cutoff_is_one_line(tmp_path, capsys):
    err = _one_line_error(capsys, ["ingest", "--config", _config(tmp_path, events=EVENTS.splitlines()[0] + "\n")])
    assert "experience_gen.events.source: no event was read" in err and "cutoff" in err


def test_empty_events_with_a_cutoff_settles_every_decision_and_warns(tmp_path, capsys):
    """No events at all and an explicit cutoff: every decision gets the default reward, the run says
    every reward is the same, and the Examples are marked so the Evaluator will not bless."""
    from rlops.components.evaluator.core import constant_reward

    path = _config(tmp_path, events="", cutoff="2026-12-02T00:00:00+00:00")
    out_dir = str(tmp_path / "ex")
    assert cli.main(["ingest", "--config", path, "--out", out_dir, "--summary-json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "warning: every written reward is 0" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["records"] == {"read": 60, "written": 60, "quarantined": 0, "pending": 0}
    assert summary["constant_reward"] == 0.0 and constant_reward(out_dir) == 0.0


def test_strings_where_numbers_were_and_a_type_never_seen(tmp_path, capsys):
    """A purchase whose amount is text is malformed (quarantined with its line), a late click is
    late, and a rewards entry for a type no event had is a note, not an error."""
    path = _config(tmp_path, rewards={"click": 1.0, "purchase": "value", "signup": 5.0})
    assert cli.main(["ingest", "--config", path, "--summary-json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["events"]["malformed"] == 1 and summary["events"]["late"] == 1
    assert summary["events"]["attributed"] == 20
    assert "note: experience_gen.events.rewards['signup']: no event of this type was read" in out
    quarantine = [json.loads(line) for line in _quarantine_lines(tmp_path / "root" / "ingest" / "examples")]
    malformed = [q for q in quarantine if q["reason"] == "event_malformed"]
    assert len(malformed) == 1 and malformed[0]["line"] == 22 and "'amount'" in malformed[0]["message"]


def _quarantine_lines(examples):
    import gzip

    for path in sorted((examples / "quarantine").glob("quarantine*")):
        yield from gzip.decompress(path.read_bytes()).decode().splitlines()


def test_compile_refuses_a_local_events_path_for_a_cloud_run(tmp_path, capsys):
    path = _config(tmp_path)
    raw = yaml.safe_load(open(path))
    raw["root"] = "gs://my-bucket/rlops/shop"
    raw["serving_dir"] = "gs://my-bucket/rlops/shop/serving"
    raw["experience_gen"]["source"]["pattern"] = "gs://my-logs/decisions/*.csv"
    open(path, "w").write(yaml.safe_dump(raw))
    err = _one_line_error(capsys, ["compile", "bandit", "--config", path, "--output", str(tmp_path / "p.json")])
    assert "experience_gen.events.source.pattern: a cloud step cannot read local files" in err, err
