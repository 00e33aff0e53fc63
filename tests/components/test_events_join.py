"""Events to rewards against a plain pandas reference (events_reference.py, written from the
contract alone): random streams over consecutive nights (windows, repeats, skew, late, unknown ids,
several types, each aggregate, decisions that wait across nights, a night run twice), the same
rewards per decision id and the same counts, on the in-process DirectRunner and with two workers."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from events_reference import EventsSpec, ReferenceState, random_nights, reference_night, write_night

from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import read_quarantine, run_experience_gen
from rlops.pipelines.cli_examples import read_examples

TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_threading"]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fmt: str
    spec: EventsSpec
    streams: dict
    beam_args: tuple[str, ...] = ()
    rerun_night: int | None = None  # run this night twice (the second run's output must be the same)


CASES = [
    Case(
        "csv-max-sum-rerun",
        "csv",
        EventsSpec(
            window="30m", rewards={"click": 1.0, "purchase": "value"}, aggregate={"click": "max", "purchase": "sum"}
        ),
        {},
        rerun_night=1,
    ),
    Case(
        "parquet-count-first-no-event-id-two-workers",
        "parquet",
        EventsSpec(
            window="1h",
            rewards={"click": 0.5, "purchase": "value", "view": 0.1},
            aggregate={"click": "count", "purchase": "first", "view": "max"},
            default_reward=-1.0,
        ),
        {"with_event_id": False, "window": "1h"},
        beam_args=tuple(TWO_WORKERS),
    ),
    Case(
        "jsonl-first",
        "jsonl",
        EventsSpec(window="30m", rewards={"click": 1.0, "purchase": "value"}, aggregate="first"),
        {"tie_rate": 0.1},
    ),
    Case(
        "csv-one-type-sum",
        "csv",
        EventsSpec(window="45m", rewards={"conversion": "value"}, aggregate="sum"),
        {"with_type": False, "window": "45m"},
    ),
]


def _config(case: Case, decisions: str, events: list[str], pending: str) -> ExperienceGenConfig:
    spec = case.spec
    columns = {"decision_id": "decision_id", "time": "time", "type": "type", "value": "value", "event_id": "event_id"}
    if not case.streams.get("with_type", True):
        columns["type"] = None
    if not case.streams.get("with_event_id", True):
        columns["event_id"] = None
    return ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": decisions, "format": case.fmt},
            "bandit_columns": {
                "context": ["action"],  # any number will do: the join is what is tested
                "action": "action",
                "propensity": "propensity",
                "decision_id": "decision_id",
                "decision_time": "decision_time",
            },
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 9},
            "max_bad_record_ratio": 1.0,
            "events": {
                "source": {"kind": "file", "pattern": ",".join(events), "format": case.fmt},
                "columns": columns,
                "window": spec.window,
                "rewards": spec.rewards,
                "aggregate": spec.aggregate,
                "default_reward": spec.default_reward,
                "pending_dir": pending,
            },
        }
    )


def _written(examples: str) -> dict[str, float]:
    header, rows = read_examples(examples, columns=["decision_id", "reward"])
    out: dict[str, float] = {}
    for decision_id, reward in rows:
        assert decision_id not in out, f"decision {decision_id} written twice"
        out[decision_id] = float(reward)
    return out


def _run(case: Case, night_dir: str, decisions, events, pending: str, out: str):
    d_path, e_paths, _ = write_night(night_dir, decisions, events, case.fmt)
    config = _config(case, str(d_path), [str(p) for p in e_paths], pending)
    result = run_experience_gen(config, os.path.join(out, "examples"), os.path.join(out, "quarantine"), case.beam_args)
    return result, _written(os.path.join(out, "examples"))


def _check(night: int, result, written: dict, ref) -> None:
    assert result.events == ref.events, f"night {night}: events {result.events} != reference {ref.events}"
    got = {"read": result.records_read, "written": result.records_written}
    got.update({"quarantined": result.records_quarantined, "pending": result.records_pending})
    assert got == ref.records, f"night {night}: records {got} != reference {ref.records}"
    assert set(written) == set(ref.rewards), f"night {night}: written ids differ from the reference's"
    ids = sorted(ref.rewards)
    np.testing.assert_allclose([written[i] for i in ids], [ref.rewards[i] for i in ids], rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("seed", [11, 23])
def test_join_equals_the_pandas_reference_over_nights(case: Case, seed: int, tmp_path):
    nights = random_nights(seed, n_nights=3, decisions_per_night=250, **case.streams)
    state = ReferenceState.empty()
    pending = str(tmp_path / "pending")
    for k, (decisions, events) in enumerate(nights):
        night_dir = str(tmp_path / f"night{k}")
        _, _, events_as_written = write_night(night_dir, decisions, events, case.fmt)
        ref, state_next = reference_night(decisions, events_as_written, case.spec, state)
        result, written = _run(case, night_dir, decisions, events, pending, str(tmp_path / f"run{k}"))
        _check(k, result, written, ref)
        if k == case.rerun_night:  # the same night again: the same output, and the next night is unaffected
            again, written_again = _run(case, night_dir, decisions, events, pending, str(tmp_path / f"rerun{k}"))
            assert written_again == written and again.events == result.events
            assert again.records_pending == result.records_pending
        state = state_next


def test_counts_cover_every_category_and_quarantine_names_file_and_line(tmp_path):
    """One night with every kind of event: each category is non-empty, late / early / unknown /
    malformed events are in the quarantine with their reason, file and line, and they do not make
    the run's bad-record ratio (the decisions' share) fail it."""
    case = CASES[0]
    (decisions, events), *_ = random_nights(5, n_nights=2, decisions_per_night=400, malformed_rate=0.02)
    night_dir = str(tmp_path / "night0")
    _, _, as_written = write_night(night_dir, decisions, events, "csv")
    ref, _ = reference_night(decisions, as_written, case.spec, None)
    config = dataclasses.replace(
        _config(
            case,
            os.path.join(night_dir, "decisions.csv"),
            [str(p) for p in sorted(as_written["_file"].unique())],
            str(tmp_path / "pending"),
        ),
        max_bad_record_ratio=0.05,
    )
    result = run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert result.events == ref.events
    assert all(
        result.events[c] > 0
        for c in (
            "attributed",
            "duplicate",
            "late",
            "before_decision",
            "unknown_decision",
            "unmapped_type",
            "pending",
            "malformed",
        )
    )
    quarantined = read_quarantine(str(tmp_path / "q"))
    events_q = [q for q in quarantined if q["reason"].startswith("event_")]
    by_reason = {r: sum(q["reason"] == r for q in events_q) for r in {q["reason"] for q in events_q}}
    assert by_reason == {
        f"event_{c}": result.events[c] for c in ("late", "before_decision", "unknown_decision", "malformed")
    }
    lines = {(q["source_file"], q["line"]) for q in events_q}
    expected = set(zip(as_written["_file"], as_written["_line"]))
    assert lines <= expected and len(lines) == len(events_q)
    assert result.records_quarantined == len([q for q in quarantined if not q["reason"].startswith("event_")])
