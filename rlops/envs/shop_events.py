"""A shop that logs decisions and events as two streams, night after night (docs/events.md).

Each night, a uniform logging policy shows one of K items to each request (user features, the
item, its propensity, an impression id and time). Outcomes arrive as a second stream: a click
with the item's probability for that user, some time after the impression (most within minutes,
some hours late), sometimes a purchase after the click with an amount; a share of events is sent
twice (same event id, a later time), a share is stamped a little before its impression (clock
skew), and a share names impressions nobody logged. An event lands in the events file of the day
it happened, so the late clicks of night k's last impressions are in night k+1's file.

The same seed gives the same nights, and night k is generated without generating the others.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

DAY = 86_400  # seconds


@dataclass(frozen=True)
class ShopConfig:
    decisions_per_night: int = 10_000
    num_items: int = 5
    num_features: int = 4
    click_rate: float = 0.08  # the mean click probability over users and items
    purchase_rate: float = 0.2  # purchases per click
    delay_minutes: float = 4.0  # a click's median delay
    late_share: float = 0.1  # clicks that arrive hours after the impression
    duplicate_share: float = 0.05  # events sent twice
    skew_share: float = 0.01  # events stamped up to two minutes before their impression
    unknown_share: float = 0.005  # events for impressions nobody logged
    start: str = "2026-12-01"  # night 0's date (UTC)
    seed: int = 0


@dataclass
class Night:
    decisions: Any  # pandas DataFrame: impression_id, ts (ISO-8601), u0.., item, propensity
    events: Any  # pandas DataFrame: impression_id, event_time, event_type, amount, event_id


class ShopEventLogs:
    def __init__(self, config: ShopConfig = ShopConfig()):
        self.config = config
        rng = np.random.default_rng([config.seed, 0])
        self.weights = rng.normal(0.0, 1.0, (config.num_items, config.num_features))
        self.bias = np.log(config.click_rate / (1 - config.click_rate))

    def day(self, night: int) -> datetime.date:
        return datetime.date.fromisoformat(self.config.start) + datetime.timedelta(days=night)

    def _epoch(self, night: int) -> int:
        d = self.day(night)
        return int(datetime.datetime(d.year, d.month, d.day, tzinfo=datetime.timezone.utc).timestamp())

    def click_probability(self, features: np.ndarray) -> np.ndarray:
        """[N, K] probability that each item is clicked (within minutes or late) for each user."""
        return 1.0 / (1.0 + np.exp(-(self.bias + features @ self.weights.T)))

    def _decisions(self, night: int) -> tuple[dict, np.ndarray]:
        c = self.config
        rng = np.random.default_rng([c.seed, 1, night])
        n = c.decisions_per_night
        t = self._epoch(night) + np.sort(rng.integers(0, DAY, n))
        x = rng.normal(0.0, 1.0, (n, c.num_features)).astype(np.float32)
        item = rng.integers(0, c.num_items, n)
        cols = {
            "impression_id": np.char.add(f"n{night}-", np.arange(n).astype(str)),
            "ts": t,
            **{f"u{j}": x[:, j] for j in range(c.num_features)},
            "item": item,
            "propensity": np.full(n, 1.0 / c.num_items, np.float32),
        }
        return cols, self.click_probability(x)[np.arange(n), item]

    def _events_of(self, night: int) -> dict:
        """Every event caused by night `night`'s decisions, wherever in time it falls."""
        c = self.config
        cols, p = self._decisions(night)
        rng = np.random.default_rng([c.seed, 2, night])
        n = len(p)
        clicked = np.flatnonzero(rng.random(n) < p)
        delay = rng.lognormal(np.log(c.delay_minutes * 60), 1.0, len(clicked))
        late = rng.random(len(clicked)) < c.late_share
        delay[late] = rng.uniform(2 * 3600, 8 * 3600, int(late.sum()))
        skew = rng.random(len(clicked)) < c.skew_share
        delay[skew] = -rng.uniform(1, 120, int(skew.sum()))
        ids = cols["impression_id"][clicked]
        times = cols["ts"][clicked] + np.round(delay).astype(np.int64)
        bought = rng.random(len(clicked)) < c.purchase_rate
        p_times = times[bought] + rng.integers(60, 1200, int(bought.sum()))
        amount = np.round(rng.lognormal(3.0, 0.6, int(bought.sum())), 2)
        unknown = rng.integers(0, DAY, max(0, int(round(c.unknown_share * n)))) + self._epoch(night)
        ev = {
            "impression_id": np.concatenate(
                [ids, ids[bought], np.char.add(f"x{night}-", np.arange(len(unknown)).astype(str))]
            ),
            "event_time": np.concatenate([times, p_times, unknown]),
            "event_type": np.array(["click"] * len(ids) + ["purchase"] * len(p_times) + ["click"] * len(unknown)),
            "amount": np.concatenate([np.full(len(ids), np.nan), amount, np.full(len(unknown), np.nan)]),
        }
        ev["event_id"] = np.char.add(f"e{night}-", np.arange(len(ev["event_time"])).astype(str))
        again = np.flatnonzero(rng.random(len(ev["event_time"])) < c.duplicate_share)
        resend = {k: v[again] for k, v in ev.items()}
        resend["event_time"] = resend["event_time"] + rng.integers(1, 30, len(again))
        return {k: np.concatenate([ev[k], resend[k]]) for k in ev}

    def night(self, night: int, iso_times: bool = True) -> Night:
        """Night `night`'s decisions, and the events that happened on its day (late ones of the
        night before included). Times as ISO-8601 with an offset, or epoch seconds."""
        import pandas as pd

        decisions, _ = self._decisions(night)
        parts = [self._events_of(k) for k in (night - 1, night) if k >= 0]
        ev = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        start = self._epoch(night)
        on_day = (ev["event_time"] >= start) & (ev["event_time"] < start + DAY)
        if night == 0:  # the first file also holds what was stamped just before midnight
            on_day |= ev["event_time"] < start
        ev = {k: v[on_day] for k, v in ev.items()}
        order = np.argsort(ev["event_time"], kind="stable")
        ev = {k: v[order] for k, v in ev.items()}
        d, e = pd.DataFrame(decisions), pd.DataFrame(ev)
        if iso_times:
            d["ts"] = _iso(d["ts"].to_numpy())
            e["event_time"] = _iso(e["event_time"].to_numpy())
        return Night(d, e)

    def write_night(self, night: int, directory: str, fmt: str = "csv") -> tuple[str, str]:
        """Night `night` as directory/decisions/<date>.<fmt> and directory/events/<date>.<fmt>."""
        got = self.night(night)
        paths = []
        for name, frame in (("decisions", got.decisions), ("events", got.events)):
            os.makedirs(os.path.join(directory, name), exist_ok=True)
            path = os.path.join(directory, name, f"{self.day(night).isoformat()}.{fmt}")
            if fmt == "parquet":
                frame.to_parquet(path, index=False)
            else:
                frame.to_csv(path, index=False)
            paths.append(path)
        return paths[0], paths[1]


def _iso(seconds: np.ndarray) -> np.ndarray:
    """Epoch seconds as ISO-8601 text with a +00:00 offset."""
    text = np.datetime_as_string(seconds.astype("datetime64[s]"), unit="s")
    return np.char.add(text.astype(str), "+00:00")
