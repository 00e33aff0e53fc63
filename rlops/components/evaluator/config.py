"""Evaluator config: how to estimate, what to compare against, when to bless."""
from __future__ import annotations

from dataclasses import dataclass

from rlops.components.evaluator.ope import ESTIMATORS
from rlops.components.json_config import JsonConfig

KINDS = ("bandit", "ppo")


@dataclass
class EvaluatorConfig(JsonConfig):
    SECTION = "evaluator"

    kind: str = "bandit"
    # Blessing rule: bless when the improvement over the baseline, measured by `estimator`
    # (bandits) or mean return (PPO), is above `min_improvement` -- at the lower end of its
    # confidence interval when `use_lower_bound` (the default: only confident improvements ship).
    estimator: str = "dr"
    min_improvement: float = 0.0
    use_lower_bound: bool = True
    confidence: float = 0.95
    num_bootstrap: int = 500
    # PPO: episodes of each policy in the environment.
    env_id: str | None = None
    num_episodes: int = 20
    seed: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"evaluator.kind: unknown kind '{self.kind}'; choose one of {', '.join(KINDS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"evaluator.estimator: unknown estimator '{self.estimator}'; "
                             f"choose one of {', '.join(ESTIMATORS)}")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"evaluator.confidence must be in [0.5, 1), got {self.confidence}")
        if self.kind == "ppo" and not self.env_id:
            raise ValueError("evaluator.env_id: PPO evaluation runs episodes and needs a Gymnasium environment id")
