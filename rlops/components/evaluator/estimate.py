"""An estimate and its interval: what every estimator, the bootstrap and the gate hand each other.

At the bottom of the Evaluator's modules: bootstrap.py builds Estimates, estimators.py and the
engines return them, and nothing here imports either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    value: float
    lower: float
    upper: float
    reason: str | None = None  # why there is no interval (NaN bounds), None when trusted

    @property
    def trusted(self) -> bool:
        return self.reason is None and math.isfinite(self.lower) and math.isfinite(self.upper)

    def as_dict(self) -> dict:
        """What metrics.json and the CLIs' JSON hold: strict JSON, never NaN. An untrusted estimate
        has no value (null) and says why; the estimator's raw output is kept apart, under
        `untrusted_value`, so nobody reads it as a result."""
        if self.reason or not self.trusted:
            raw = self.value if math.isfinite(self.value) else None
            why = self.reason or "no interval"
            return {"value": None, "lower": None, "upper": None, "reason": why, "untrusted_value": raw}
        return {"value": self.value, "lower": self.lower, "upper": self.upper}
