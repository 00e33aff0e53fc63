"""PPO on CartPole-v1: throughput and sample efficiency over several seeds.

Config (the issue's): 8 envs x 32 steps, 20 epochs on the full batch, Adam 1e-3 decaying
linearly to 0, gamma 0.98, GAE lambda 0.8 with TD(lambda) value targets, clip 0.2, no entropy,
100k env steps per seed. One seed is not a measurement (seed 0 reached 475 at 35,584 steps on
one machine and 57,088 on another), so `--seeds N` (default 5) trains N seeds in turn.

Prints one JSON line: steps_to_475 per seed (null: not reached within the budget) with their
median and spread (min, max, interquartile range over the seeds that reached it), solved count,
env_steps_per_s (median over seeds of the whole training loop's wall time, first update's
tracing and XLA compilation included), env_steps_per_s_after_compile (without that one-off
cost), eval_mean_return per seed, peak_rss_mb.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, peak_rss_mb  # noqa: E402

from rlops.train.on_policy import PPOConfig, train_ppo  # noqa: E402


def _median_with_unsolved(steps: list) -> float | None:
    """Median over all seeds, an unsolved seed counting as infinitely many steps (None if the
    median itself is unsolved)."""
    median = float(np.median([np.inf if s is None else s for s in steps]))
    return None if np.isinf(median) else median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds, trained one after another")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--plot", help="write the first seed's learning curve PNG here")
    args = parser.parse_args()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    steps, rates, rates_compiled, evals, first_calls = [], [], [], [], []
    for seed in seeds:
        result = train_ppo(PPOConfig(total_env_steps=args.env_steps, seed=seed, log_every=0))
        steps.append(result.steps_to_target)
        rates.append(result.env_steps / result.train_wall_s)
        rates_compiled.append(result.summary()["env_steps_per_s_after_compile"])
        evals.append(round(result.eval_mean_return, 1))
        first_calls.append(result.first_train_s)
        if args.plot and seed == seeds[0]:
            from rlops.envs.plots import plot_learning_curve

            plot_learning_curve(
                result.episode_env_steps, result.episode_returns, args.plot, title="PPO CartPole-v1", target=475.0
            )
    reached = np.array([s for s in steps if s is not None], float)
    spread = (
        {
            "min": int(reached.min()),
            "max": int(reached.max()),
            "iqr": float(np.subtract(*np.percentile(reached, [75, 25]))),
        }
        if len(reached)
        else None
    )
    emit(
        "ppo_cartpole",
        seeds=seeds,
        env_steps=args.env_steps,
        steps_to_475=steps,
        steps_to_475_median=_median_with_unsolved(steps),
        steps_to_475_spread=spread,
        solved=f"{len(reached)}/{len(steps)}",
        env_steps_per_s=round(float(np.median(rates)), 1),
        env_steps_per_s_after_compile=round(float(np.median(rates_compiled)), 1),
        first_train_call_s=round(float(np.median(first_calls)), 2),
        eval_mean_return=evals,
        peak_rss_mb=round(peak_rss_mb(), 1),
    )


if __name__ == "__main__":
    main()
