"""PNG plots a person would rather look at than read: learning curves, cumulative regret."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # files only; no display on servers and CI
    import matplotlib.pyplot as plt
    return plt


def plot_learning_curve(env_steps: Sequence[int], returns: Sequence[float], path: str, title: str = "",
                        target: float | None = None, window: int = 20) -> str:
    """Episode returns against env steps, with a moving average over `window` episodes."""
    plt = _pyplot()
    steps, rets = np.asarray(env_steps), np.asarray(returns, dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rets, ".", alpha=0.25, label="episode return")
    if len(rets) >= window:
        smooth = np.convolve(rets, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, label=f"mean of last {window}")
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_learning_curves(curves: dict[str, tuple[Sequence[int], Sequence[float]]], path: str, title: str = "",
                         window: int = 20) -> str:
    """Several runs' episode returns (e.g. one per seed), each as its moving average over `window`
    episodes against env steps."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (env_steps, returns) in curves.items():
        steps, rets = np.asarray(env_steps), np.asarray(returns, dtype=float)
        if len(rets) >= window:
            ax.plot(steps[window - 1:], np.convolve(rets, np.ones(window) / window, mode="valid"), label=name)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"return (mean of last {window} episodes)")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_curves(curves: dict[str, Sequence[float]], path: str, xlabel: str, ylabel: str, title: str = "") -> str:
    """Several named curves on one axis (e.g. cumulative regret per agent)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in curves.items():
        ax.plot(np.arange(1, len(ys) + 1), ys, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
