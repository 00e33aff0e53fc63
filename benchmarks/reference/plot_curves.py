"""Learning curves of rlops and a reference side by side: per library the mean over seeds with a
min-max band, from the CSVs `benchmarks/ppo_mujoco.py --curve-dir` and
`benchmarks/reference/cleanrl_ppo_mujoco.py --curve-dir` write (env_step,return).

    .venv/bin/python benchmarks/reference/plot_curves.py --out hopper.png \\
        --runs "rlops=curves/Hopper-v5_cleanrl_seed*.csv" \\
        --runs "CleanRL's script=curves/Hopper-v5_cleanrl_reference_seed*.csv" \\
        --reference "CleanRL published (v4) 2,383=2383"

Prints one JSON line: the figure and, per library, each run's mean return over its last 100k
env steps.
"""
import argparse
import csv
import glob
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import emit  # noqa: E402

from rlops.envs.plots import plot_learning_curve_bands  # noqa: E402


def read_curve(path: str) -> tuple[list[int], list[float]]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [int(r["env_step"]) for r in rows], [float(r["return"]) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", action="append", required=True, metavar="NAME=GLOB")
    parser.add_argument("--reference", action="append", default=[], metavar="LABEL=VALUE")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="PPO, 1M steps")
    args = parser.parse_args()
    groups, last_100k = {}, {}
    for item in args.runs:
        name, _, pattern = item.partition("=")
        paths = sorted(glob.glob(pattern))
        if not paths:
            raise SystemExit(f"--runs {item!r}: no file matches {pattern!r}")
        groups[name] = [read_curve(p) for p in paths]
        last_100k[name] = [round(float(np.mean([r for s, r in zip(*c) if s > c[0][-1] - 100_000])), 1)
                           for c in groups[name]]
    references = {label: float(value) for label, _, value in (r.rpartition("=") for r in args.reference)}
    plot_learning_curve_bands(groups, args.out, args.title, references)
    emit("plot_curves", out=args.out, runs={k: len(v) for k, v in groups.items()}, last_100k_mean_return=last_100k)


if __name__ == "__main__":
    main()
