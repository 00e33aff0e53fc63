"""Draw statistics shared by every head's verifier: does a stream of served decisions match the
probabilities reported with them, and is it fresh (no repeats across calls or processes)?

The Pusher's verifiers (rlops.heads.epsilon_greedy.draws_error for single decisions,
rlops.heads.slate.verifier for pages) build their checks from these; numpy only.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np

Array = np.ndarray[Any, Any]

# A push runs 16 draw tests (2 artifacts x 2 batch sizes x frequencies, repeats in each of two
# processes, repeats across them): each fails below 1e-3 / 16, so an honest push fails one with
# probability < 1e-3, and `confirmed` draws again before it fails the push: < 1e-6 a night. With
# ~30 draws off the most likely action (draw_calls), a head that never explores, or repeats its
# draws across calls or processes, fails at p < 1e-6, on the fresh draws too.
SIGNIFICANCE = 1e-3 / 16
PROPENSITY_TOLERANCE = 1e-6  # a reported probability against the exact one (float32 graphs)

log = logging.getLogger(__name__)


class ChanceFailure(str):
    """A failed statistical draw check: an honest head fails one with probability < SIGNIFICANCE,
    so a verifier confirms it on fresh draws (`confirmed`) before it fails a push. Failures chance
    cannot explain (an action the row cannot take, a wrong propensity) are plain strings."""


def confirmed(check: Callable[[], str | None]) -> str | None:
    """Runs `check` (fresh draws on each call; it returns an error or None). A ChanceFailure is
    drawn again, and the error stands only when the fresh draws fail too: returns the second run's
    answer. An honest push then fails with probability < (1e-3)^2, a dishonest head fails twice."""
    error = check()
    if isinstance(error, ChanceFailure):
        log.warning("a draw check failed (%s); confirming on fresh draws", error)
        return check()
    return error


def draw_calls(rare: float) -> int:
    """Calls at batch 1 to check a row that leaves its most likely action with probability `rare`:
    ~30 such draws expected, 100 to 2000 calls (rarer exploration is checked with less power)."""
    return int(np.clip(np.ceil(30 / max(rare, 1e-9)), 100, 2000))


def frequency_pvalue(actions: Array, probs: Array) -> float:
    """Pearson chi-square p-value of actions [R, B] against probs [B, K]: cells 'the row's most
    likely action' and each other action index, expected counts summed over rows and calls, cells
    expecting < 5 pooled. (Rows differ, so the counts vary less than a multinomial: conservative.)"""
    calls, batch = actions.shape
    rows = np.arange(batch)
    top = probs.argmax(1)
    others = probs.copy()
    others[rows, top] = 0
    expected = calls * np.concatenate([[probs[rows, top].sum()], others.sum(0)])
    is_top = actions == top[None, :]
    observed = np.concatenate([[is_top.sum()], np.bincount(actions[~is_top], minlength=probs.shape[1])])
    return pearson_pvalue(observed, expected)


def pearson_pvalue(observed: Array, expected: Array) -> float:
    """Pearson chi-square p-value of counts against expected counts, the cells expecting < 5
    pooled into one (1.0 when fewer than two cells are left: nothing random to test)."""
    big = expected >= 5
    expected = np.append(expected[big], expected[~big].sum())
    observed = np.append(observed[big], observed[~big].sum())
    keep = expected > 0
    expected, observed = expected[keep], observed[keep]
    if len(expected) < 2:
        return 1.0
    stat = float(((observed - expected) ** 2 / expected).sum())
    return chi2_sf(stat, len(expected) - 1)


def repeat_pvalue(a: Array, b: Array, probs: Array) -> float:
    """One-sided p-value of 'a and b agree this often' for independent draws [R, B] from probs
    [B, K]: a position agrees with probability sum_k p_k^2 (normal approximation to the count)."""
    if a.size == 0:
        return 1.0
    q = (probs**2).sum(1)
    mean = len(a) * q.sum()
    var = len(a) * (q * (1 - q)).sum()
    if var <= 1e-12:
        return 1.0  # deterministic rows: agreement is certain
    z = (float((a == b).sum()) - mean) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def chi2_sf(x: float, df: int) -> float:
    """P(chi-square(df) > x): the regularized upper incomplete gamma Q(df/2, x/2)."""
    a, x = df / 2.0, x / 2.0
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300  # continued fraction for Q(a, x) (modified Lentz)
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * h
