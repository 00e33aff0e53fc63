"""What both engines make of their sums: the config's trust rule and grids, DM's reward-model
refits, the comparisons (candidate vs baseline, the greedy policy alone), the Evaluator's bandit
metrics and the `rlops evaluate` run. The engines differ only in how they get the sums."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import estimators
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimators import Comparison
from rlops.components.evaluator.reward_models import RewardModelFn, refit_dm_replicates

LOGGING_BASELINE = "logging_policy"  # metrics' `baseline` when the candidate is compared with the logs' policy

Refits = tuple[np.ndarray, float]  # refit_dm_replicates' (DM values [R, policies], population scale)


def trust_rule(config: EvaluatorConfig) -> estimators.TrustRule:
    return estimators.TrustRule(
        config.num_bootstrap,
        config.confidence,
        config.min_eval_records,
        config.min_ess,
        config.switch_tau,
        config.dr_os_lambda,
    )


def policy_grids(config: EvaluatorConfig) -> estimators.Grids:
    return estimators.make_grids(estimators.DEFAULT_GRID, config.switch_tau, config.dr_os_lambda)


def dm_refits(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    reward_model: str | RewardModelFn,
    policies: list[np.ndarray | str],
    num_actions: int,
    population: int | None = None,
) -> Refits | None:
    """DM's reward-model refits (refit_dm_replicates, on the dm_refit_records records with the
    smallest sample hashes) for `policies`; None where there is nothing to refit (the candidate
    network's own predictions) or refits are switched off."""
    if not isinstance(reward_model, str) or config.dm_refits == 0:
        return None
    return refit_dm_replicates(
        data,
        policies,
        reward_model,
        num_actions,
        replicates=config.dm_refits,
        max_records=config.dm_refit_records,
        seed=config.seed,
        balance=config.reward_model_balance,
        population=population,
    )


def _columns(refits: Refits | None, which: slice) -> Refits | None:
    return None if refits is None else (refits[0][:, which], refits[1])


def comparisons(
    config: EvaluatorConfig, sums: estimators.Sums, logging: Sequence[bool], with_model: bool, refits: Refits | None
) -> tuple[Comparison, Comparison | None]:
    """Policy 0 against policy 1 (the blessing comparison) and policy 2 alone (the greedy
    policy beside the served one), when there is one; refits' columns are in the same order."""
    rule = trust_rule(config)
    main = estimators.comparison_from_sums(sums, 0, 1, logging, with_model, rule, _columns(refits, slice(0, 2)))
    if sums.layout.num_policies < 3:
        return main, None
    return main, estimators.comparison_from_sums(
        sums, 2, None, logging, with_model, rule, _columns(refits, slice(2, 3))
    )


def bandit_metrics(
    config: EvaluatorConfig,
    main: Comparison,
    greedy: Comparison,
    num_records: int,
    baseline_name: str,
    reward_model_name: str,
    epsilons: tuple[float, float | None],
    action_share: Sequence[float],
    engine: str,
) -> dict[str, Any]:
    """The Evaluator's metrics from the two comparisons (both engines)."""
    assert main.baseline is not None and main.difference is not None
    diag = main.diagnostics
    return {
        "num_eval_records": int(num_records),
        "eval_records": int(num_records),
        "engine": engine,
        "baseline": baseline_name,
        "reward_model": reward_model_name,
        "served_policy": {"candidate_epsilon": epsilons[0], "baseline_epsilon": epsilons[1]},
        "candidate": {k: v.as_dict() for k, v in main.candidate.items()},
        "candidate_greedy": {k: v.as_dict() for k, v in greedy.candidate.items()},
        "baseline_estimates": {k: v.as_dict() for k, v in main.baseline.items()},
        "improvement": {k: v.as_dict() for k, v in main.difference.items()},
        "trust": diag.as_dict()
        | {
            "min_eval_records": config.min_eval_records,
            "min_ess": config.min_ess,
            "greedy_ess": greedy.diagnostics.ess["candidate"],
            "greedy_reason": greedy.diagnostics.reason,
        },
        "candidate_action_share": [int(round(v)) for v in action_share],
    }


@dataclass(frozen=True)
class LogsRun:
    """What either engine hands back for `rlops evaluate`: the policy against the logging policy
    and its greedy policy alone."""

    main: Comparison
    greedy: Comparison | None
    num_records: int
    num_actions: int
    reward_model: str
    epsilon: float | None
    engine: str
