"""A night at production volume: N logged impressions through ingest, train (LinUCB and
NeuralEpsilonGreedy) and evaluate, each step in its own process so its peak RSS is its own.

    python benchmarks/scale.py --records 1000000
    python benchmarks/scale.py --records 1000000 --records 10000000 --records 30000000
    python benchmarks/scale.py --records 4000000 --steps ingest,evaluate_uniform

The impressions are production-shaped (benchmarks/ingest.py's categorical case: four hashed
32-hex-char user columns, four floats and a position as named features, 10 actions, a uniform
logging policy), written as Parquet, then ExperienceGen (Beam DirectRunner) splits them by user
into train and eval (`--eval-share`, default 50%). The Trainer trains each agent on the train
split; the Evaluator scores the LinUCB policy on the eval split (the Beam path above its size
threshold), and `rlops evaluate --policy uniform` scores the uniform policy there on the Beam
engine, with the number of actions read from the Examples (`evaluate_uniform`). `--steps` runs
a subset (ingest always runs). Prints one JSON line: per N and step wall_s, records,
records_per_s and peak_rss_mb; the peak-RSS growth per extra 10M rows of each step, and the step
that limits a nightly run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

STEPS = ("ingest", "train_lin_ucb", "train_neural_epsilon_greedy", "evaluate", "evaluate_uniform")
TRAINERS = {"train_lin_ucb": "lin_ucb", "train_neural_epsilon_greedy": "neural_epsilon_greedy"}


def ingest(work: str, eval_share: int) -> dict:
    from ingest import CATEGORICAL_FEATURES, NUM_ACTIONS

    from rlops.components.experience_gen import (
        BanditColumns,
        ExperienceGenConfig,
        FileSource,
        SpecConfig,
        SplitConfig,
        run_experience_gen,
    )
    from rlops.components.experience_gen.config import FeatureColumn, Split

    config = ExperienceGenConfig(
        source=FileSource(pattern=os.path.join(work, "logs.parquet"), format="parquet"),
        bandit_columns=BanditColumns(features=tuple(FeatureColumn(c) for c in CATEGORICAL_FEATURES)),
        action_spec=SpecConfig.discrete(NUM_ACTIONS),
        splits=SplitConfig(splits=(Split("train", 100 - eval_share), Split("eval", eval_share)), key="user_id"),
    )
    result = run_experience_gen(config, os.path.join(work, "examples"), os.path.join(work, "quarantine"), [])
    return {
        "records": result.records_written,
        "quarantined": result.records_quarantined,
        "records_train": result.written_per_split.get("train", 0),
        "records_eval": result.written_per_split.get("eval", 0),
    }


def train(work: str, agent: str) -> dict:
    from ingest import NUM_ACTIONS

    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    config = TrainerConfig(agent=agent, num_actions=NUM_ACTIONS, seed=0)
    result = run_trainer(
        config,
        os.path.join(work, f"model_{agent}"),
        os.path.join(work, f"run_{agent}"),
        examples_uri=os.path.join(work, "examples"),
    )
    metrics = result.as_dict()
    return {"records": int(metrics["train_records"]), "train_steps": result.train_steps}


def evaluate(work: str, policy: str) -> dict:
    """`rlops evaluate` on the eval split: the LinUCB model, or `uniform` on the Beam engine with
    no --num-actions (read from the Examples)."""
    out = os.path.join(work, f"evaluate_{os.path.basename(policy)}.json")
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "rlops"),
        "evaluate",
        "--examples",
        os.path.join(work, "examples"),
        "--policy",
        policy,
        "--json",
        out,
    ]
    if policy == "uniform":
        cmd += ["--engine", "beam"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        result = json.load(f)
    records = result.get("eval_records", result.get("num_records", 0))
    return {"records": int(records), "engine": result.get("engine")}


def _child(step: str, work: str, eval_share: int) -> None:
    start = time.perf_counter()
    if step == "ingest":
        out = ingest(work, eval_share)
    elif step in TRAINERS:
        out = train(work, TRAINERS[step])
    elif step == "evaluate":
        out = evaluate(work, os.path.join(work, "model_lin_ucb"))
    else:
        out = evaluate(work, "uniform")
    out["wall_s"] = round(time.perf_counter() - start, 2)
    out["records_per_s"] = round(out["records"] / out["wall_s"]) if out["wall_s"] else None
    # The step's own peak and its children's (Beam's multi-processing workers, `rlops evaluate`).
    peak_kb = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    )
    out["peak_rss_mb"] = round(peak_kb / 1024.0)
    out["load_avg_1m"] = round(os.getloadavg()[0], 1)  # other work on the machine slows wall_s
    print(json.dumps(out))


def _run_step(step: str, work: str, eval_share: int) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", step, "--work", work, "--eval-share", str(eval_share)],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(f"scale: step {step} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _growth_gb_per_10m(rows: list[dict], step: str) -> float | None:
    """Peak-RSS slope between the smallest and largest N, per 10M extra impressions."""
    if len(rows) < 2:
        return None
    a, b = rows[0], rows[-1]
    extra = (b["records"] - a["records"]) / 1e7
    return round((b["steps"][step]["peak_rss_mb"] - a["steps"][step]["peak_rss_mb"]) / 1024 / extra, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, action="append", help="impressions (repeat for several N)")
    parser.add_argument("--eval-share", type=int, default=50, help="percent of users in the eval split")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    parser.add_argument("--workdir", default=None, help="keep the data here (default: a temp dir, removed)")
    parser.add_argument("--child", choices=STEPS, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child, args.work, args.eval_share)

    from ingest import generate

    steps = [s for s in STEPS if s == "ingest" or s in args.steps.split(",")]
    if unknown := sorted(set(args.steps.split(",")) - set(STEPS)):
        parser.error(f"--steps: unknown step(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    if "evaluate" in steps and "train_lin_ucb" not in steps:
        parser.error("--steps: evaluate scores the LinUCB model; add train_lin_ucb")
    rows = []
    for n in sorted(args.records or [1_000_000]):
        work = tempfile.mkdtemp(prefix=f"scale_{n}_", dir=args.workdir)
        try:
            start = time.perf_counter()
            generate(os.path.join(work, "logs.parquet"), "parquet", n, 0, case="categorical")
            row = {"records": n, "generate_s": round(time.perf_counter() - start, 1), "steps": {}}
            for step in steps:
                row["steps"][step] = _run_step(step, work, args.eval_share)
                print(f"scale: N={n} {step}: {row['steps'][step]}", file=sys.stderr, flush=True)
            rows.append(row)
        finally:
            if not args.workdir:
                shutil.rmtree(work, ignore_errors=True)
    largest = rows[-1]["steps"]
    print(
        json.dumps(
            {
                "benchmark": "scale",
                "cpus": os.cpu_count(),
                "rows": rows,
                "rss_growth_gb_per_10m_rows": {s: _growth_gb_per_10m(rows, s) for s in steps},
                "limiting_step": max(steps, key=lambda s: largest[s]["wall_s"]),
            }
        )
    )


if __name__ == "__main__":
    main()
