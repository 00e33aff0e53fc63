"""Evaluator config: how to estimate, what to compare against, when to bless."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlops.components.common.decision_kinds import BANDIT, kind_named
from rlops.components.evaluator.estimators import DEFAULT_MIN_ESS, DEFAULT_MIN_RECORDS, ESTIMATORS
from rlops.components.evaluator.gate import DEFAULT_MAX_REGRESSION
from rlops.components.evaluator.reward_models import (
    DEFAULT_BALANCE,
    DEFAULT_DM_REFIT_RECORDS,
    DEFAULT_DM_REFITS,
    DEFAULT_REWARD_MODEL,
    DEFAULT_SAMPLE,
    REWARD_MODEL_CHOICES,
)
from rlops.components.json_config import JsonConfig, closest

# The serving epsilons the Evaluator may certify (measured in docs/benchmarks.md, "Small logs").
DEFAULT_SERVING_EPSILONS = (0.05, 0.1, 0.2, 0.3, 0.5)
ENGINES = ("auto", "memory", "beam")

DEFAULT_BEAM_THRESHOLD = 500_000
# REWARD_MODEL_CHOICES (one list, in ope): "auto" is logistic when every reward is 0 or 1, else
# ridge; "bilinear" auto's link plus a user x item term x^T B f(m) in the shared per-arm model
# (per-arm records whose candidates vary; others as auto); "network" the candidate's own reward
# predictions (policies exported with emit_policy_info=("predicted_rewards_mean",)); "low_rank"
# auto's link on a factorization shared by every item (reward_models.LowRank).


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class EvaluatorConfig(JsonConfig):
    """How to estimate, and the blessing gate: bless when the improvement over the baseline (the
    last blessed model; on a first run the logging policy), measured by `estimator` (bandits) or
    the mean return (PPO), is above `min_improvement` -- its lower confidence bound when
    `use_lower_bound`, else its point estimate. No estimate is trusted, so nothing blesses, with
    fewer than `min_eval_records` eval records or an effective sample size under `min_ess`.
    Bandits: when the candidate as trained does not clear the gate, it is scored served at each
    larger epsilon of `serving_epsilons`, and the least exploring one that clears it is blessed
    (the Pusher then publishes the candidate serving exactly that epsilon)."""

    SECTION = "evaluator"

    # The decision kind evaluated: bandit (off-policy estimates on logged feedback) or trajectory
    # (episodes in an environment); the pipelines' names `bandit` and `ppo` are read the same
    kind: str = BANDIT
    estimator: str = "dr"  # the estimator that decides: ips, snips, dm, dr, sndr, switch_dr or dr_os
    min_improvement: float = 0.0  # bless only above this improvement, in the reward's units
    # true: the lower end of the improvement's confidence interval must clear min_improvement
    # (only confident improvements ship); false: the point estimate must (riskier, for small logs)
    use_lower_bound: bool = True
    # With use_lower_bound, the regression the gate tolerates, as a share of the baseline's estimated
    # value: a candidate ships when its point estimate clears min_improvement and its lower bound
    # is above -max_regression x the baseline's value (non-inferior and estimated better; see
    # docs/ope.md, "The gate"). 0: the lower bound itself must clear min_improvement.
    max_regression: float = DEFAULT_MAX_REGRESSION
    confidence: float = 0.95  # the intervals' confidence level, in [0.5, 1)
    num_bootstrap: int = 500  # bootstrap resamples behind each interval (>= 50)
    # The reward model behind DM and the DR family: auto (logistic for 0/1 rewards, else ridge),
    # ridge, logistic, bilinear, low_rank, network. Defaults chosen by measurement (docs/benchmarks.md).
    reward_model: str = DEFAULT_REWARD_MODEL
    # weighted toward the evaluated policies (reward_models.balancing_weights)
    reward_model_balance: bool = DEFAULT_BALANCE
    # DM's interval includes the reward model's own error: the model is refitted on `dm_refits`
    # bootstrap resamples (0: the fixed-model bootstrap)
    dm_refits: int = DEFAULT_DM_REFITS
    dm_refit_records: int = DEFAULT_DM_REFIT_RECORDS  # the most rows each reward-model refit draws from
    # The reward model is fitted on the (at most) `reward_model_sample` records with the smallest
    # key hashes (a uniform sample, the same in every engine), cross-fitted by hash folds.
    reward_model_sample: int = DEFAULT_SAMPLE
    # Which engine runs the estimators: "memory" (numpy in this process), "beam" (a Beam pipeline
    # over the eval split with the component's beam_pipeline_args; memory independent of its
    # size) or "auto": beam when the eval split has more than `beam_threshold_records` records.
    engine: str = "auto"
    beam_threshold_records: int = DEFAULT_BEAM_THRESHOLD  # eval records above which "auto" picks beam
    switch_tau: float | None = None  # Switch-DR's weight cut-off (null: tuned per policy by estimated MSE)
    dr_os_lambda: float | None = None  # DR-os's shrinkage (null: tuned per policy by estimated MSE)
    # gate: fewer eval records (of weight > 0) give no interval, so no blessing
    min_eval_records: int = DEFAULT_MIN_RECORDS
    # gate: an effective sample size of the importance weights below this (the logs rarely took the
    # actions the policy takes) gives no interval, so no blessing
    min_ess: float = DEFAULT_MIN_ESS
    # gate (bandits): the exploration levels the Evaluator may certify. A candidate whose served
    # policy (its trainer.serving_epsilon) does not clear the gate is scored served at each epsilon
    # here above its own, and the least exploring one that clears it is blessed: the Pusher
    # publishes the candidate serving exactly that epsilon, and the blessing says which and why.
    # More exploration weighs the logs more evenly (a larger ESS) but serves the greedy choice less
    # often. [] : only the candidate's own epsilon.
    serving_epsilons: tuple[float, ...] = DEFAULT_SERVING_EPSILONS
    env_id: str | None = None  # PPO: the Gymnasium environment the episodes run in
    num_episodes: int = 20  # PPO: episodes of each policy (>= 5)
    seed: int = 0  # the bootstrap's and the reward model's seed

    def __post_init__(self):
        def bad(key: str, need: str) -> ValueError:
            return ValueError(f"evaluator.{key} must be {need}, got {getattr(self, key)!r}")

        kind = kind_named(self.kind, "evaluator.kind")
        self.kind = kind.name
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"evaluator.estimator: unknown estimator '{self.estimator}'; choose one of {', '.join(ESTIMATORS)}"
            )
        if self.reward_model not in REWARD_MODEL_CHOICES:
            raise ValueError(
                f"evaluator.reward_model: unknown reward model '{self.reward_model}'; "
                f"{closest(self.reward_model, REWARD_MODEL_CHOICES)}"
            )
        if not _is_number(self.confidence) or not 0.5 <= self.confidence < 1.0:
            raise bad("confidence", "a number in [0.5, 1)")
        if not _is_number(self.min_improvement):
            raise bad("min_improvement", "a finite number (the improvement in the estimator's units)")
        if not _is_number(self.max_regression) or not 0.0 <= self.max_regression < 1.0:
            raise bad("max_regression", "a share in [0, 1) of the baseline's value (0: the lower bound must clear)")
        for key in ("use_lower_bound", "reward_model_balance"):
            if not isinstance(getattr(self, key), bool):
                raise bad(key, "true or false")
        if not _is_int(self.num_bootstrap) or self.num_bootstrap < 50:
            raise bad("num_bootstrap", "an integer >= 50 (resamples behind each interval)")
        if not _is_int(self.dm_refits) or not (self.dm_refits == 0 or self.dm_refits >= 10):
            raise bad("dm_refits", "0 (no refits) or an integer >= 10 (reward-model refits behind DM's interval)")
        if not _is_int(self.dm_refit_records) or self.dm_refit_records < 100:
            raise bad("dm_refit_records", "an integer >= 100 (rows each reward-model refit draws from)")
        if not _is_int(self.reward_model_sample) or self.reward_model_sample < 100:
            raise bad("reward_model_sample", "an integer >= 100 (records the reward model is fitted on)")
        if self.engine not in ENGINES:
            raise ValueError(f"evaluator.engine: unknown engine '{self.engine}'; choose one of {', '.join(ENGINES)}")
        if not _is_int(self.beam_threshold_records) or self.beam_threshold_records < 0:
            raise bad("beam_threshold_records", "an integer >= 0 (eval records above which the Beam engine runs)")
        if not _is_int(self.num_episodes) or self.num_episodes < 5:
            raise bad("num_episodes", "an integer >= 5 (episodes of each policy)")
        if not _is_int(self.min_eval_records) or self.min_eval_records < 1:
            raise bad("min_eval_records", "an integer >= 1")
        if not _is_number(self.min_ess) or self.min_ess < 0:
            raise bad("min_ess", "a number >= 0")
        if not isinstance(self.serving_epsilons, (list, tuple)) or not all(
            _is_number(e) and 0.0 <= e <= 1.0 for e in self.serving_epsilons
        ):
            raise bad("serving_epsilons", "a list of numbers in [0, 1] (serving epsilons the Evaluator may certify)")
        self.serving_epsilons = tuple(sorted({float(e) for e in self.serving_epsilons}))
        for key in ("switch_tau", "dr_os_lambda"):
            value = getattr(self, key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0
            ):
                raise bad(key, "null (tuned) or a number >= 0")
        if not _is_int(self.seed):
            raise bad("seed", "an integer")
        if not kind.logged_probabilities and not self.env_id:  # nothing to estimate from: episodes
            raise ValueError("evaluator.env_id: PPO evaluation runs episodes and needs a Gymnasium environment id")
