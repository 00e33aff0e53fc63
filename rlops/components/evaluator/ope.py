"""Off-policy estimates of a target policy's value from logged bandit feedback.

Logged data: contexts x_i, actions a_i, rewards r_i, propensities p_i = mu(a_i | x_i) of the
logging policy mu. The target policy is given as action probabilities pi [N, K] (one-hot for a
greedy policy). With importance weights w_i = pi(a_i | x_i) / p_i and a reward model q(x, a):

    IPS   = mean(w_i r_i)                                  unbiased when p_i > 0 wherever pi > 0
    SNIPS = sum(w_i r_i) / sum(w_i)                        slightly biased, much lower variance
    DM    = mean(sum_a pi(a | x_i) q(x_i, a))              biased by q, low variance
    DR    = DM + mean(w_i (r_i - q(x_i, a_i)))             unbiased if either p or q is right

Confidence intervals come from a (vectorized) bootstrap over rows. Comparisons of two policies
resample the same rows for both, so the interval of the difference is paired.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ESTIMATORS = ("ips", "snips", "dm", "dr")


@dataclass(frozen=True)
class LoggedFeedback:
    contexts: np.ndarray     # [N, D]
    actions: np.ndarray      # [N] int
    rewards: np.ndarray      # [N]
    propensities: np.ndarray  # [N] in (0, 1]
    features: dict | None = None  # raw named context features (policies exported with preprocessing act on them)

    def __post_init__(self):
        n = len(self.actions)
        for name in ("contexts", "rewards", "propensities"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"LoggedFeedback.{name} has {len(getattr(self, name))} rows, actions has {n}")
        if n == 0:
            raise ValueError("LoggedFeedback is empty: no eval records to estimate from")
        bad = ~((self.propensities > 0) & (self.propensities <= 1))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"propensity must be in (0, 1]; row {i} has {self.propensities[i]}")


@dataclass(frozen=True)
class Estimate:
    value: float
    lower: float
    upper: float

    def as_dict(self) -> dict:
        return {"value": self.value, "lower": self.lower, "upper": self.upper}


def fit_reward_model(contexts: np.ndarray, actions: np.ndarray, rewards: np.ndarray, num_actions: int,
                     l2: float = 1.0, folds: int = 2, seed: int = 0) -> np.ndarray:
    """Cross-fitted per-action ridge regression q(x, a) -> [N, K] predictions.

    Each row's prediction comes from a model fitted on the other folds, so DM/DR do not reuse a
    row's own reward to predict it (that would make DR's correction term shrink towards 0).
    """
    n, d = contexts.shape
    x = np.concatenate([contexts, np.ones((n, 1))], 1)
    fold = np.random.default_rng(seed).integers(0, folds, n)
    q = np.zeros((n, num_actions))
    for f in range(folds):
        train, test = fold != f, fold == f
        for a in range(num_actions):
            rows = train & (actions == a)
            xa, ra = x[rows], rewards[rows]
            theta = np.linalg.solve(xa.T @ xa + l2 * np.eye(d + 1), xa.T @ ra)
            q[test, a] = x[test] @ theta
    return q


def _per_row_terms(data: LoggedFeedback, target_probs: np.ndarray, q: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per-row quantities whose (ratio of) means are the estimates; bootstrapping resamples rows."""
    n = len(data.actions)
    rows = np.arange(n)
    w = target_probs[rows, data.actions] / data.propensities
    terms = {"w": w, "wr": w * data.rewards}
    if q is not None:
        dm = (target_probs * q).sum(1)
        terms["dm"] = dm
        terms["dr"] = dm + w * (data.rewards - q[rows, data.actions])
    return terms


def _logging_policy_terms(data: LoggedFeedback) -> dict[str, np.ndarray]:
    """The logging policy evaluated on its own data: every estimator is the observed mean reward."""
    ones = np.ones_like(data.rewards, dtype=float)
    r = data.rewards.astype(float)
    return {"w": ones, "wr": r, "dm": r, "dr": r}


LOGGING_POLICY = "logging"


def _estimates_from_means(means: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {"ips": means["wr"], "snips": means["wr"] / np.maximum(means["w"], 1e-12)}
    if "dm" in means:
        out["dm"], out["dr"] = means["dm"], means["dr"]
    return out


def _bootstrap_means(terms: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx].mean(1) for k, v in terms.items()}


def estimate(data: LoggedFeedback, target_probs: np.ndarray, q: np.ndarray | None = None,
             num_bootstrap: int = 500, confidence: float = 0.95, seed: int = 0) -> dict[str, Estimate]:
    """Point estimates with percentile-bootstrap intervals for every estimator available
    (DM and DR need the reward model predictions q)."""
    return compare(data, target_probs, None, q, num_bootstrap, confidence, seed)[0]


def compare(data: LoggedFeedback, candidate_probs: np.ndarray, baseline_probs: np.ndarray | str | None,
            q: np.ndarray | None = None, num_bootstrap: int = 500, confidence: float = 0.95,
            seed: int = 0) -> tuple[dict[str, Estimate], dict[str, Estimate] | None, dict[str, Estimate] | None]:
    """Estimates of candidate and baseline and of their difference (candidate - baseline), all
    from the same bootstrap resamples. `baseline_probs=LOGGING_POLICY` compares against the
    policy that logged the data (its value is the observed mean reward)."""
    n = len(data.actions)
    idx = np.random.default_rng(seed).integers(0, n, size=(num_bootstrap, n))
    alpha = (1.0 - confidence) / 2.0

    def summarize(point: dict[str, np.ndarray], boot: dict[str, np.ndarray]) -> dict[str, Estimate]:
        return {k: Estimate(float(point[k]), float(np.quantile(boot[k], alpha)), float(np.quantile(boot[k], 1 - alpha)))
                for k in point}

    cand_terms = _per_row_terms(data, candidate_probs, q)
    cand_point = _estimates_from_means({k: v.mean() for k, v in cand_terms.items()})
    cand_boot = _estimates_from_means(_bootstrap_means(cand_terms, idx))
    if baseline_probs is None:
        return summarize(cand_point, cand_boot), None, None
    if isinstance(baseline_probs, str):
        if baseline_probs != LOGGING_POLICY:
            raise ValueError(f"baseline_probs must be an array or '{LOGGING_POLICY}', got '{baseline_probs}'")
        base_terms = _logging_policy_terms(data)
        if q is None:
            base_terms = {k: base_terms[k] for k in ("w", "wr")}
    else:
        base_terms = _per_row_terms(data, baseline_probs, q)
    base_point = _estimates_from_means({k: v.mean() for k, v in base_terms.items()})
    base_boot = _estimates_from_means(_bootstrap_means(base_terms, idx))
    diff_point = {k: cand_point[k] - base_point[k] for k in cand_point}
    diff_boot = {k: cand_boot[k] - base_boot[k] for k in cand_boot}
    return summarize(cand_point, cand_boot), summarize(base_point, base_boot), summarize(diff_point, diff_boot)


def greedy_probs(actions: np.ndarray, num_actions: int) -> np.ndarray:
    """One-hot action probabilities of a deterministic policy."""
    probs = np.zeros((len(actions), num_actions))
    probs[np.arange(len(actions)), actions] = 1.0
    return probs


def difference_interval(candidate: np.ndarray, baseline: np.ndarray, confidence: float = 0.95,
                        num_bootstrap: int = 1000, seed: int = 0) -> Estimate:
    """mean(candidate) - mean(baseline) for two independent samples (e.g. episode returns)."""
    rng = np.random.default_rng(seed)
    c, b = np.asarray(candidate, float), np.asarray(baseline, float)
    boot = (c[rng.integers(0, len(c), (num_bootstrap, len(c)))].mean(1)
            - b[rng.integers(0, len(b), (num_bootstrap, len(b)))].mean(1))
    alpha = (1.0 - confidence) / 2.0
    return Estimate(float(c.mean() - b.mean()), float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)))


def mean_confidence_interval(values: np.ndarray, confidence: float = 0.95, num_bootstrap: int = 1000,
                             seed: int = 0) -> Estimate:
    """Mean with a bootstrap interval (PPO: returns over evaluation episodes)."""
    values = np.asarray(values, float)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(num_bootstrap, len(values)))
    boot = values[idx].mean(1)
    alpha = (1.0 - confidence) / 2.0
    return Estimate(float(values.mean()), float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)))
