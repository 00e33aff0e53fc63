"""Events to rewards for slate logs (one row per shown item): an event names its page and its item,
and gives that slot its reward; pages whose window is open wait whole, and the next run writes
them with their events; each slot's reward equals a pandas computation of the same rule."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import run_experience_gen
from rlops.pipelines.cli_examples import read_examples

T0 = pd.Timestamp("2026-12-01T00:00:00Z")


def _night(rng, night: int, pages: int = 150):
    start = T0 + pd.Timedelta(days=night)
    times = start + pd.to_timedelta(np.sort(rng.integers(0, 86_400, pages)), unit="s")
    rows = []
    for i in range(pages):
        items = rng.choice(10, 3, replace=False)
        for pos, item in enumerate(items, start=1):
            rows.append(
                {
                    "page": f"n{night}p{i}",
                    "pos": pos,
                    "item": int(item),
                    "p": 0.1,
                    "u0": float(i % 7),
                    "shown_at": times[i].isoformat(),
                }
            )
    decisions = pd.DataFrame(rows)
    shown = decisions.sample(frac=0.3, random_state=night)
    delay = pd.to_timedelta(rng.integers(-60, 3 * 3600, len(shown)), unit="s")
    events = pd.DataFrame(
        {
            "page": shown["page"].to_numpy(),
            "item": shown["item"].to_numpy(),
            "at": (pd.to_datetime(shown["shown_at"]) + delay).map(lambda t: t.isoformat()).to_numpy(),
            "kind": "click",
        }
    )
    return decisions, events


def _config(tmp_path, night: int) -> ExperienceGenConfig:
    return ExperienceGenConfig.from_json(
        {
            "record_kind": "slate",
            "slate_length": 3,
            "source": {"kind": "file", "pattern": str(tmp_path / f"d{night}.csv"), "format": "csv"},
            "slate_columns": {
                "slate_id": "page",
                "position": "pos",
                "item_id": "item",
                "propensity": "p",
                "features": ["u0"],
                "decision_time": "shown_at",
            },
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 9},
            "events": {
                "source": {"kind": "file", "pattern": str(tmp_path / f"e{night}.csv"), "format": "csv"},
                "columns": {"decision_id": "page", "item": "item", "time": "at", "type": "kind"},
                "window": "1h",
                "rewards": {"click": 1.0},
                "pending_dir": str(tmp_path / "pending"),
            },
        }
    )


def test_each_slot_gets_its_item_s_clicks_and_open_pages_wait_whole(tmp_path):
    rng = np.random.default_rng(3)
    nights = [_night(rng, k) for k in (0, 1)]
    # night 1's events file also holds night 0's clicks that happened after midnight
    late = nights[0][1][pd.to_datetime(nights[0][1]["at"]) >= T0 + pd.Timedelta(days=1)]
    nights[0] = (nights[0][0], nights[0][1].drop(late.index))
    nights[1] = (nights[1][0], pd.concat([late, nights[1][1]]))
    written: dict[tuple[str, int], float] = {}
    for k, (decisions, events) in enumerate(nights):
        decisions.to_csv(tmp_path / f"d{k}.csv", index=False)
        events.to_csv(tmp_path / f"e{k}.csv", index=False)
        result = run_experience_gen(_config(tmp_path, k), str(tmp_path / f"ex{k}"), str(tmp_path / f"q{k}"))
        assert result.records_read == result.records_written + result.records_quarantined + result.records_pending
        assert result.records_pending % 3 == 0  # a page waits whole
        header, rows = read_examples(str(tmp_path / f"ex{k}"), columns=["slate_id", "slate", "reward"])
        for page, slate, reward in rows:
            for item, r in zip(slate.split("|"), reward.split("|")):
                assert (page, int(item)) not in written
                written[(page, int(item))] = float(r)
        if k == 0:
            assert result.records_pending > 0
    everything = pd.concat([n[0] for n in nights])
    clicks = pd.concat([n[1] for n in nights])
    merged = clicks.merge(everything[["page", "item", "shown_at"]], on=["page", "item"])
    lag = pd.to_datetime(merged["at"]) - pd.to_datetime(merged["shown_at"])
    hit = merged[(lag >= pd.Timedelta(0)) & (lag <= pd.Timedelta(hours=1))]
    expected = {(p, i): 0.0 for p, i in zip(everything["page"], everything["item"])}
    expected.update({(p, int(i)): 1.0 for p, i in zip(hit["page"], hit["item"])})
    night1_open = {key for key in expected if key[0].startswith("n1")} - set(written)
    assert all(key[0].startswith("n1") for key in set(expected) - set(written))  # only the last night's may wait
    assert {k: v for k, v in expected.items() if k not in night1_open} == written
    assert sum(written.values()) > 20
