"""The slate kind's Evaluator config (`evaluator.kind: slate`, the ranking pipeline's): which slate
estimator blesses, and the gate, as the bandit EvaluatorConfig's fields of the same names."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlops.components.common.decision_kinds import SLATE, kind_named
from rlops.components.evaluator.estimators import DEFAULT_MIN_ESS, DEFAULT_MIN_RECORDS
from rlops.components.evaluator.gate import DEFAULT_MAX_REGRESSION
from rlops.components.evaluator.slate_estimators import ESTIMATORS
from rlops.components.json_config import JsonConfig, closest


@dataclass
class SlateEvaluatorConfig(JsonConfig):
    """How a ranking policy is estimated from logged pages, and the blessing gate: bless when the
    improvement of the page the candidate serves over the baseline's (the last blessed ranking
    model; on a first run the logging policy), by `estimator`, is above `min_improvement` -- its
    lower confidence bound when `use_lower_bound`. No estimate is trusted, so nothing blesses, with
    fewer than `min_eval_records` eval pages or an effective sample size under `min_ess`."""

    SECTION = "evaluator"

    kind: str = (
        SLATE  # slate estimators on the eval split's logged pages (`ranking`, the pipeline's name, reads the same)
    )
    # The estimator that decides (docs/slates.md, "Which estimator to trust when"). snrips: prefix
    # weights, self-normalized per slot; unbiased in the limit under position-based, cascade and DCM
    # clicks alike, needs no reward model, and on the slate generator's exact truth its RMSE equals
    # cascade_dr's and its intervals cover 94-96% (docs/benchmarks.md).
    estimator: str = "snrips"
    min_improvement: float = 0.0  # bless only above this improvement, in slate reward per page
    use_lower_bound: bool = True  # the improvement's lower bound must clear min_improvement
    # With use_lower_bound: the regression tolerated, as a share of the baseline's estimated value
    # (the bandit gate's rule, docs/ope.md "What the gate promises"); 0: the lower bound must clear
    max_regression: float = DEFAULT_MAX_REGRESSION
    confidence: float = 0.95  # the intervals' confidence level, in [0.5, 1)
    num_bootstrap: int = 500  # bootstrap resamples behind each interval (>= 50)
    min_eval_records: int = DEFAULT_MIN_RECORDS  # gate: fewer eval pages (of weight > 0) give no interval
    min_ess: float = DEFAULT_MIN_ESS  # gate: a smaller effective sample size of the weights gives no interval
    seed: int = 0  # the bootstrap's seed

    def __post_init__(self) -> None:
        self.kind = kind_named(self.kind, "evaluator.kind").name
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"evaluator.estimator: unknown slate estimator '{self.estimator}'; {closest(self.estimator, ESTIMATORS)}"
            )
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"evaluator.confidence must be a number in [0.5, 1), got {self.confidence!r}")
        if not math.isfinite(self.min_improvement):
            raise ValueError(f"evaluator.min_improvement must be a finite number, got {self.min_improvement!r}")
        if not (isinstance(self.max_regression, (int, float)) and 0.0 <= self.max_regression < 1.0):
            raise ValueError(
                f"evaluator.max_regression must be a share in [0, 1) of the baseline's value, got {self.max_regression!r}"
            )
        if self.num_bootstrap < 50:
            raise ValueError(f"evaluator.num_bootstrap must be an integer >= 50, got {self.num_bootstrap!r}")
        if self.min_eval_records < 1:
            raise ValueError(f"evaluator.min_eval_records must be an integer >= 1, got {self.min_eval_records!r}")
        if not (math.isfinite(self.min_ess) and self.min_ess >= 0):
            raise ValueError(f"evaluator.min_ess must be a number >= 0, got {self.min_ess!r}")
