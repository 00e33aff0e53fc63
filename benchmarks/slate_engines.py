"""Slate evaluation's two engines on the same Examples: their estimates agree, and the Beam engine's
memory does not grow with the number of slates.

Writes n slates of the slate generator (Plackett-Luce logging, cascade clicks) as slate Examples
(the layout ExperienceGen writes), then evaluates the uniform policy with the in-memory engine and
with the Beam engine (one and two DirectRunner workers), each in its own process so peak RSS is its
own. Prints one JSON line: per n, the largest difference between the engines over every
estimator's value and bounds, and each run's seconds and peak RSS.

    python benchmarks/slate_engines.py --slates 100000 400000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ENGINES = {
    "memory": (),
    "beam_1": ("--direct_num_workers=1",),
    "beam_2": ("--direct_num_workers=2", "--direct_running_mode=multi_threading"),
}


def write_examples(directory: str, n: int, seed: int = 0) -> None:
    """n slates as gzipped slate Examples in Split-eval (chunked: the writer's memory is bounded)."""
    import numpy as np
    import tensorflow as tf

    from rlops.components.common import records
    from rlops.components.common.slates import PROPENSITY_CASCADE, SLATE, SLATE_ID, SLATE_LENGTH
    from rlops.components.experience_gen.records import encode_slates
    from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator

    gen = SlateLogGenerator(SlateConfig(num_items=10, num_slots=3, click_model="cascade", seed=seed))
    split = os.path.join(directory, "Split-eval")
    os.makedirs(split, exist_ok=True)
    chunk = 50_000
    with tf.io.TFRecordWriter(os.path.join(split, "slates.gz"), options="GZIP") as writer:
        for start in range(0, n, chunk):
            logs = gen.sample(min(chunk, n - start), seed=seed + 1 + start)
            m = len(logs)
            ids = np.array([f"s{start + i}".encode() for i in range(m)], object)
            columns = {
                SLATE_ID: ids,
                SLATE: logs.slates.astype(np.int64),
                SLATE_LENGTH: np.full(m, logs.num_slots, np.int64),
                records.REWARD: logs.rewards.astype(np.float64),
                records.PROPENSITY: logs.propensity,
                PROPENSITY_CASCADE: logs.propensity_cascade,
                records.NUM_ACTIONS: np.full(m, 10, np.int64),
                records.SPLIT_UNIT: np.arange(start, start + m, dtype=np.int64) * 7919,
            }
            for record in encode_slates(columns):
                writer.write(record)


def evaluate(directory: str, engine: str) -> dict:
    from rlops.components.evaluator.slate_evaluation import SlateOptions, evaluate_slates_on_logs

    options = SlateOptions(
        num_bootstrap=200,
        engine="memory" if engine == "memory" else "beam",
        beam_pipeline_args=ENGINES[engine],
    )
    t = time.perf_counter()
    result = evaluate_slates_on_logs(directory, "uniform", "eval", options)
    return {
        "seconds": time.perf_counter() - t,
        "estimates": result["estimates"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def measure(directory: str, engine: str) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, "--data", directory]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def largest_difference(a: dict, b: dict) -> float:
    worst = 0.0
    for name, est in a.items():
        for field in ("value", "lower", "upper"):
            x, y = est[field], b[name][field]
            if (x is None) != (y is None):
                return float("inf")
            if x is not None:
                worst = max(worst, abs(x - y))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slates", type=int, nargs="+", default=[100_000])
    ap.add_argument("--child", choices=list(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(evaluate(args.data, args.child)))
        return
    report: dict = {"benchmark": "slate_engines", "cpus": os.cpu_count(), "runs": {}}
    for n in args.slates:
        with tempfile.TemporaryDirectory(prefix="rlops-slates-") as directory:
            write_examples(directory, n)
            runs = {engine: measure(directory, engine) for engine in ENGINES}
        memory = runs["memory"]["estimates"]
        report["runs"][str(n)] = {
            "max_abs_difference": max(
                largest_difference(memory, runs[e]["estimates"]) for e in ENGINES if e != "memory"
            ),
            **{e: {"seconds": round(r["seconds"], 1), "peak_rss_mb": round(r["peak_rss_mb"])} for e, r in runs.items()},
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
