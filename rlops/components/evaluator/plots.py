"""The Evaluator's pictures: every estimator's value and interval, for one policy (`rlops evaluate
--plot`) or for the candidate beside the baseline (the evaluation artifact's estimates.png)."""

from __future__ import annotations

from typing import Any

import numpy as np


def plot_policy_estimates(result: dict[str, Any], path: str) -> None:
    """Every estimator's value and interval for one policy, the logging policy's mean as a line."""
    from rlops.envs.plots import pyplot

    plt = pyplot()
    names = list(result["estimates"])
    values, err = _error_bars(result["estimates"], names)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.errorbar(np.arange(len(names)), values, yerr=err, fmt="o", capsize=4, label=f"policy: {result['policy']}"[:50])
    ax.axhline(result["observed_mean_reward"], color="gray", ls="--", label="logging policy (observed)")
    ax.set_xticks(np.arange(len(names)), [n.upper() if len(n) <= 5 else n for n in names])
    ax.set_ylabel("estimated value")
    title = f"{result['num_records']} records, ESS {result['ess']:.0f}"
    ax.set_title(title if result["trusted"] else title + " (no trustworthy interval)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_comparison(metrics: dict[str, Any], path: str) -> None:
    """Candidate vs baseline per estimator, with confidence intervals."""
    from rlops.envs.plots import pyplot

    plt = pyplot()
    names = list(metrics["candidate"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (label, key) in zip(
        (-0.15, 0.15), (("candidate", "candidate"), (f"baseline ({metrics['baseline']})"[:40], "baseline_estimates"))
    ):
        values, err = _error_bars(metrics[key], names)
        ax.errorbar(np.arange(len(names)) + offset, values, yerr=err, fmt="o", capsize=4, label=label)
    ax.set_xticks(np.arange(len(names)), [n.upper() if len(n) <= 5 else n for n in names])
    ax.set_ylabel("estimated value")
    ax.set_title(("BLESSED: " if metrics["blessed"] else "not blessed: ") + metrics["rule"]["measure"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _error_bars(estimates: dict[str, dict[str, Any]], names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(values, [2, n] error bars) of written estimates: an untrusted one (null) is not drawn, one
    without an interval is a dot; a bound clipped to the reward range past the point is a 0 bar."""

    def num(x: float | None) -> float:
        return float("nan") if x is None else float(x)

    values = np.array([num(estimates[n]["value"]) for n in names])
    lower = np.array([num(estimates[n]["lower"]) for n in names])
    upper = np.array([num(estimates[n]["upper"]) for n in names])
    err = np.nan_to_num(np.stack([values - lower, upper - values]))
    return values, np.maximum(err, 0.0)
