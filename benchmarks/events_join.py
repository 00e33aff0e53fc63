"""Events to rewards at volume: ExperienceGen with the events join against the same decisions with
their rewards already in a column, in the same run.

The decisions (impression id, ISO-8601 time, four user floats, the item, its propensity, and a
`clicked` column the plain run maps as its reward) come from the shop generator
(rlops/envs/shop_events.py) as Parquet files of 1M rows, one simulated day each; its events
(clicks with minutes-to-hours delays, purchases with amounts; with the defaults here about 0.3
events per decision, a quarter of them late or sent twice, some early or for unknown impressions)
are Parquet files of the same days. Each run is its own process (its peak RSS its own: VmHWM, not
ru_maxrss, which survives exec and would show the generating parent's); the clock starts after
the imports. Prints one JSON line: per size the records per second of both runs,
their ratio, and both peak RSS; and the join's peak RSS at the largest size over the smallest.

    python benchmarks/events_join.py --decisions 1000000 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, peak_rss_mb  # noqa: E402

CHUNK = 1_000_000  # decisions per file (one simulated day)


def shop_config(seed: int, per_file: int):
    from rlops.envs.shop_events import ShopConfig

    return ShopConfig(
        decisions_per_night=per_file,
        click_rate=0.15,
        purchase_rate=0.3,
        late_share=0.15,
        duplicate_share=0.1,
        seed=seed,
    )


def write_logs(directory: str, decisions: int, seed: int) -> dict:
    """Decision and event files for `decisions` decisions; returns their counts."""
    import numpy as np

    from rlops.envs.shop_events import ShopEventLogs

    files = max(1, -(-decisions // CHUNK))
    shop = ShopEventLogs(shop_config(seed, min(decisions, CHUNK)))
    os.makedirs(os.path.join(directory, "decisions"))
    os.makedirs(os.path.join(directory, "events"))
    events = 0
    for k in range(files):
        night = shop.night(k)
        rng = np.random.default_rng([seed, k])
        night.decisions["clicked"] = (rng.random(len(night.decisions)) < 0.2).astype(np.float32)
        night.decisions.to_parquet(os.path.join(directory, "decisions", f"{k:03d}.parquet"), index=False)
        night.events.to_parquet(os.path.join(directory, "events", f"{k:03d}.parquet"), index=False)
        events += len(night.events)
    return {"decisions": files * min(decisions, CHUNK), "events": events}


def config(directory: str, mode: str) -> dict:
    columns = {
        "features": ["u0", "u1", "u2", "u3"],
        "action": "item",
        "propensity": "propensity",
        "decision_id": "impression_id",
    }
    cfg = {
        "source": {"kind": "file", "pattern": os.path.join(directory, "decisions", "*.parquet"), "format": "parquet"},
        "bandit_columns": columns,
        "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 4},
        "max_bad_record_ratio": 0.05,
    }
    if mode == "plain":
        columns["reward"] = "clicked"
    else:
        columns["decision_time"] = "ts"
        cfg["events"] = {
            "source": {"kind": "file", "pattern": os.path.join(directory, "events", "*.parquet"), "format": "parquet"},
            "columns": {
                "decision_id": "impression_id",
                "time": "event_time",
                "type": "event_type",
                "value": "amount",
                "event_id": "event_id",
            },
            "window": "30m",
            "rewards": {"click": 1.0, "purchase": "value"},
            "aggregate": {"click": "max", "purchase": "sum"},
            "pending_dir": os.path.join(directory, f"pending-{time.time_ns()}"),
        }
    return cfg


def child(directory: str, mode: str, out: str) -> None:
    """One ExperienceGen run in this process: its time, CPU and peak RSS as one JSON line."""
    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.experience_gen.core import run_experience_gen

    cfg = ExperienceGenConfig.from_json(config(directory, mode))
    start, cpu = time.perf_counter(), time.process_time()
    result = run_experience_gen(cfg, os.path.join(out, "examples"), os.path.join(out, "quarantine"))
    wall = time.perf_counter() - start
    line = {
        "records": result.records_read,
        "written": result.records_written,
        "pending": result.records_pending,
        "events": result.events,
        "wall_s": round(wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "records_per_s": round(result.records_read / wall),
        "peak_rss_mb": round(peak_rss_of_this_program_mb()),
    }
    print(json.dumps(line), flush=True)


def peak_rss_of_this_program_mb() -> float:
    """This process's own peak RSS (VmHWM, reset by exec), not getrusage's ru_maxrss, which a
    child started by fork + exec inherits from its parent: here the parent that wrote 10M rows."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return peak_rss_mb()  # not Linux: the best there is


def run_child(directory: str, mode: str, scratch: str) -> dict:
    out = tempfile.mkdtemp(dir=scratch)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", mode, directory, out],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--decisions", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", nargs=3, metavar=("MODE", "DIR", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[1], args.child[0], args.child[2])
        return
    scratch = tempfile.mkdtemp(prefix="rlops-events-bench-")
    sizes = {}
    try:
        for n in args.decisions:
            directory = os.path.join(scratch, f"logs-{n}")
            counts = write_logs(directory, n, args.seed)
            plain = run_child(directory, "plain", scratch)
            join = run_child(directory, "join", scratch)
            sizes[str(n)] = {
                **counts,
                "plain_records_per_s": plain["records_per_s"],
                "join_records_per_s": join["records_per_s"],
                "ratio": round(join["records_per_s"] / plain["records_per_s"], 3),
                "plain_peak_rss_mb": plain["peak_rss_mb"],
                "join_peak_rss_mb": join["peak_rss_mb"],
                "join_wall_s": join["wall_s"],
                "plain_wall_s": plain["wall_s"],
                "join_events": join["events"],
                "join_pending": join["pending"],
            }
            shutil.rmtree(directory, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first, last = sizes[str(args.decisions[0])], sizes[str(args.decisions[-1])]
    emit(
        "events_join",
        sizes=sizes,
        min_ratio=min(s["ratio"] for s in sizes.values()),
        join_memory_growth=round(last["join_peak_rss_mb"] / first["join_peak_rss_mb"], 3),
    )


if __name__ == "__main__":
    main()
