"""The blessing rule, in one place: what the Evaluator blesses on (core.run_evaluator) and what the
certification of a larger serving epsilon tries (comparisons.certify).

Three rules, by `use_lower_bound` and `max_regression`:
- the point estimate of the improvement above `min_improvement` (use_lower_bound: false);
- the lower bound above `min_improvement` (max_regression 0): only a confidently better policy ships;
- non-inferior and estimated better (max_regression > 0, the default): the point estimate above
  `min_improvement` and the lower bound above -max_regression x |the baseline's estimated value|
  (or above a negative `min_improvement`, where that is lower).
  A policy that the interval cannot tell from the incumbent ships when it is estimated better and
  confidently not worse by more than that share: the chance of pushing one worse than the
  incumbent by more than the margin is the chance the interval misses low (2.5% at 95%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlops.components.evaluator.estimate import Estimate

# The regression the default gate tolerates, a share of the baseline's value (docs/ope.md)
DEFAULT_MAX_REGRESSION = 0.05


@dataclass(frozen=True)
class Verdict:
    clears: bool
    clause: str  # what was compared, e.g. "lower 95% bound -0.0120 > -0.0109 (5% of the baseline's 0.2173)"


def margin(config: Any, baseline_value: float | None) -> float | None:
    """The regression the non-inferior rule tolerates, in the reward's units; None: the rule is off
    (max_regression 0, a config without it, or no baseline estimate to scale it by)."""
    share = float(getattr(config, "max_regression", 0.0) or 0.0)
    if not config.use_lower_bound or share <= 0 or baseline_value is None or not math.isfinite(baseline_value):
        return None
    return share * abs(baseline_value)


def judge(config: Any, improvement: Estimate, baseline_value: float | None = None) -> Verdict:
    """Whether a trusted `improvement` clears the config's rule (see the module docstring)."""
    level = f"lower {config.confidence:.0%} bound"
    if not config.use_lower_bound:
        clears = bool(improvement.value > config.min_improvement)
        return Verdict(clears, f"point estimate {improvement.value:.4f} {_sign(clears)} {config.min_improvement}")
    tolerated = margin(config, baseline_value)
    if tolerated is None:
        clears = bool(improvement.lower > config.min_improvement)
        return Verdict(clears, f"{level} {improvement.lower:.4f} {_sign(clears)} {config.min_improvement}")
    better = bool(improvement.value > config.min_improvement)
    # A negative min_improvement tolerates more than the margin does: the looser bound applies.
    bound = min(config.min_improvement, -tolerated)
    not_worse = bool(improvement.lower > bound)
    share = (
        f"{config.max_regression:.0%} of the baseline's {baseline_value:.4f}"
        if bound == -tolerated
        else "min_improvement"
    )
    clause = (
        f"point estimate {improvement.value:.4f} {_sign(better)} {config.min_improvement} and "
        f"{level} {improvement.lower:.4f} {_sign(not_worse)} {bound:.4f} ({share})"
    )
    return Verdict(better and not_worse, clause)


def baseline_value_of(metrics: dict[str, Any], estimator: str) -> float | None:
    """The baseline's estimated value in metrics.json's `baseline_estimates` (None: not there)."""
    value = ((metrics.get("baseline_estimates") or {}).get(estimator) or {}).get("value")
    return None if value is None else float(value)


def _sign(clears: bool) -> str:
    return ">" if clears else "<="
