"""PNG plots a person would rather look at than read: learning curves, cumulative regret."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def pyplot():
    """matplotlib.pyplot drawing to files only (no display on servers and CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def moving_average(values: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """Mean of each `window` consecutive values (len(values) - window + 1 of them)."""
    return np.convolve(np.asarray(values, dtype=float), np.ones(window) / window, mode="valid")


def _save(plt, fig, ax, path: str, xlabel: str, ylabel: str, title: str, legend_loc: str = "best") -> str:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc=legend_loc)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_learning_curve(
    env_steps: Sequence[int],
    returns: Sequence[float],
    path: str,
    title: str = "",
    target: float | None = None,
    window: int = 20,
) -> str:
    """Episode returns against env steps, with a moving average over `window` episodes."""
    plt = pyplot()
    steps, rets = np.asarray(env_steps), np.asarray(returns, dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rets, ".", alpha=0.25, label="episode return")
    if len(rets) >= window:
        ax.plot(steps[window - 1 :], moving_average(rets, window), label=f"mean of last {window}")
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
    return _save(plt, fig, ax, path, "environment steps", "return", title, "lower right")


def plot_learning_curves(
    curves: dict[str, tuple[Sequence[int], Sequence[float]]], path: str, title: str = "", window: int = 20
) -> str:
    """Several runs' episode returns (e.g. one per seed), each as its moving average over `window`
    episodes against env steps."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (env_steps, returns) in curves.items():
        steps, rets = np.asarray(env_steps), np.asarray(returns, dtype=float)
        if len(rets) >= window:
            ax.plot(steps[window - 1 :], moving_average(rets, window), label=name)
    return _save(
        plt, fig, ax, path, "environment steps", f"return (mean of last {window} episodes)", title, "lower right"
    )


def plot_curves(curves: dict[str, Sequence[float]], path: str, xlabel: str, ylabel: str, title: str = "") -> str:
    """Several named curves on one axis (e.g. cumulative regret per agent)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in curves.items():
        ax.plot(np.arange(1, len(ys) + 1), ys, label=name)
    return _save(plt, fig, ax, path, xlabel, ylabel, title)


def smoothed_on_grid(
    runs: Sequence[tuple[Sequence[int], Sequence[float]]], window: int = 20, points: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Each run's moving average over `window` episodes, interpolated onto one grid of env steps
    (where every run has a value): returns (grid [points], values [runs, points])."""
    smooth = []
    for env_steps, returns in runs:
        steps, rets = np.asarray(env_steps, dtype=float), np.asarray(returns, dtype=float)
        if len(rets) < window:
            raise ValueError(f"a run has {len(rets)} episodes, fewer than the window of {window}")
        smooth.append((steps[window - 1 :], moving_average(rets, window)))
    lo, hi = max(s[0] for s, _ in smooth), min(s[-1] for s, _ in smooth)
    grid = np.linspace(lo, hi, points)
    return grid, np.stack([np.interp(grid, s, v) for s, v in smooth])


def plot_learning_curve_bands(
    groups: dict[str, Sequence[tuple[Sequence[int], Sequence[float]]]],
    path: str,
    title: str = "",
    references: dict[str, float] | None = None,
    window: int = 20,
) -> str:
    """Several groups of runs (e.g. two libraries, several seeds each): per group the mean over
    its runs of the `window`-episode moving average, with a band from the lowest to the highest
    run; `references` draws published figures as dashed lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, runs in groups.items():
        grid, values = smoothed_on_grid(runs, window)
        (line,) = ax.plot(grid, values.mean(0), label=f"{name} (mean of {len(runs)})")
        ax.fill_between(grid, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
    for name, value in (references or {}).items():
        ax.axhline(value, color="k", ls="--", lw=1)
        ax.annotate(name, (ax.get_xlim()[0], value), xytext=(4, 3), textcoords="offset points", fontsize=8)
    return _save(
        plt, fig, ax, path, "environment steps", f"return (mean of last {window} episodes)", title, "lower right"
    )
