"""Evaluator config: how to estimate, what to compare against, when to bless."""
from __future__ import annotations

import math
from dataclasses import dataclass

from rlops.components.evaluator.ope import DEFAULT_MIN_ESS, DEFAULT_MIN_RECORDS, ESTIMATORS, REWARD_MODELS
from rlops.components.json_config import JsonConfig

KINDS = ("bandit", "ppo")
# "auto": logistic when every reward is 0 or 1, else ridge; "network": the candidate's own reward
# predictions (policies exported with emit_policy_info=("predicted_rewards_mean",)).
REWARD_MODEL_CHOICES = ("auto",) + REWARD_MODELS + ("network",)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
    # Bandits: the reward model behind DM and the DR family; Switch-DR's tau and DR-os's lambda
    # (None: picked per policy by estimated MSE); minimum data to bless at all.
    reward_model: str = "auto"
    reward_model_balance: bool = True   # fit on 1/propensity-balanced rows (see ope.balancing_weights)
    switch_tau: float | None = None
    dr_os_lambda: float | None = None
    min_eval_records: int = DEFAULT_MIN_RECORDS
    min_ess: float = DEFAULT_MIN_ESS
    # PPO: episodes of each policy in the environment.
    env_id: str | None = None
    num_episodes: int = 20
    seed: int = 0

    def __post_init__(self):
        def bad(key: str, need: str) -> ValueError:
            return ValueError(f"evaluator.{key} must be {need}, got {getattr(self, key)!r}")

        if self.kind not in KINDS:
            raise ValueError(f"evaluator.kind: unknown kind '{self.kind}'; choose one of {', '.join(KINDS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"evaluator.estimator: unknown estimator '{self.estimator}'; "
                             f"choose one of {', '.join(ESTIMATORS)}")
        if self.reward_model not in REWARD_MODEL_CHOICES:
            raise ValueError(f"evaluator.reward_model: unknown reward model '{self.reward_model}'; "
                             f"choose one of {', '.join(REWARD_MODEL_CHOICES)}")
        if not _is_number(self.confidence) or not 0.5 <= self.confidence < 1.0:
            raise bad("confidence", "a number in [0.5, 1)")
        if not _is_number(self.min_improvement):
            raise bad("min_improvement", "a finite number (the improvement in the estimator's units)")
        for key in ("use_lower_bound", "reward_model_balance"):
            if not isinstance(getattr(self, key), bool):
                raise bad(key, "true or false")
        if not _is_int(self.num_bootstrap) or self.num_bootstrap < 50:
            raise bad("num_bootstrap", "an integer >= 50 (resamples behind each interval)")
        if not _is_int(self.num_episodes) or self.num_episodes < 5:
            raise bad("num_episodes", "an integer >= 5 (episodes of each policy)")
        if not _is_int(self.min_eval_records) or self.min_eval_records < 1:
            raise bad("min_eval_records", "an integer >= 1")
        if not _is_number(self.min_ess) or self.min_ess < 0:
            raise bad("min_ess", "a number >= 0")
        for key in ("switch_tau", "dr_os_lambda"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or math.isnan(value) or value < 0):
                raise bad(key, "null (tuned) or a number >= 0")
        if not _is_int(self.seed):
            raise bad("seed", "an integer")
        if self.kind == "ppo" and not self.env_id:
            raise ValueError("evaluator.env_id: PPO evaluation runs episodes and needs a Gymnasium environment id")
