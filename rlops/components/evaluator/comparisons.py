"""What both engines make of their sums: the config's trust rule and grids, DM's reward-model
refits, the comparisons (candidate vs baseline, the greedy policy alone), the Evaluator's bandit
metrics and the `rlops evaluate` run. The engines differ only in how they get the sums."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import estimators, gate
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate
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


def against(
    config: EvaluatorConfig,
    sums: estimators.Sums,
    logging: Sequence[bool],
    with_model: bool,
    refits: Refits | None,
    baseline: int,
    candidates: Sequence[int],
) -> list[Comparison]:
    """Each of policies `candidates` against policy `baseline` (refits' columns in policy order)."""
    rule = trust_rule(config)
    return [
        estimators.comparison_from_sums(
            sums,
            c,
            baseline,
            logging,
            with_model,
            rule,
            None if refits is None else (refits[0][:, [c, baseline]], refits[1]),
        )
        for c in candidates
    ]


def clears_gate(config: EvaluatorConfig, improvement: Estimate, baseline_value: float | None = None) -> bool:
    """The blessing rule (gate.judge) on a trusted improvement: what core.run_evaluator blesses on."""
    return improvement.trusted and gate.judge(config, improvement, baseline_value).clears


@dataclass(frozen=True)
class Trial:
    """The candidate served at one epsilon against the baseline: what the gate looks at."""

    epsilon: float
    improvement: Estimate  # in the config's estimator
    ess: dict[str, float]  # per policy ("candidate", "baseline")
    reason: str | None  # why there is no trusted estimate, None when trusted
    comparison: Comparison | None = None  # None: the engine's metrics already hold it (the own epsilon)
    baseline_value: float | None = None  # the baseline's estimate (the non-inferior rule's scale)
    # The comparison as reported when served, where `comparison` left out what no gate reads (DM's
    # reward-model refits: memory.deferred_against); None: `comparison` is complete.
    complete: Callable[[], Comparison] | None = None

    @staticmethod
    def of(
        config: EvaluatorConfig,
        epsilon: float,
        comparison: Comparison,
        complete: Callable[[], Comparison] | None = None,
    ) -> "Trial":
        assert comparison.difference is not None
        diag = comparison.diagnostics
        baseline = comparison.baseline[config.estimator].value if comparison.baseline else None
        return Trial(
            epsilon,
            comparison.difference[config.estimator],
            diag.ess,
            diag.reason,
            comparison,
            complete=complete,
            baseline_value=baseline,
        )

    def completed(self) -> "Trial":
        """This trial with its comparison as reported (see `complete`)."""
        return self if self.complete is None else replace(self, comparison=self.complete(), complete=None)

    @staticmethod
    def from_metrics(epsilon: float, metrics: dict[str, Any], improvement: Estimate, estimator: str) -> "Trial":
        """The engine's own comparison (bandit_metrics' output and the improvement it returned)."""
        trust = metrics.get("trust", {})
        reason = improvement.reason or trust.get("reason")
        ess = dict(trust.get("ess") or {})
        return Trial(epsilon, improvement, ess, reason, baseline_value=gate.baseline_value_of(metrics, estimator))

    def clears(self, config: EvaluatorConfig) -> bool:
        return clears_gate(config, self.improvement, self.baseline_value)

    def why_not(self, config: EvaluatorConfig) -> str:
        """One clause: why this served policy does not clear the gate."""
        if not self.improvement.trusted:
            low = [ess for ess in self.ess.values() if ess < config.min_ess]
            return (
                f"{self.epsilon:g}: ESS {min(low):.1f} < {config.min_ess:g}"
                if low
                else f"{self.epsilon:g}: no trusted estimate"
            )
        verdict = gate.judge(config, self.improvement, self.baseline_value)
        clause = f"{self.epsilon:g}: {verdict.clause}"
        value, lower = self.improvement.value, self.improvement.lower
        tolerated = gate.margin(config, self.baseline_value)
        # what the lower bound must clear (gate.judge)
        bound = config.min_improvement if tolerated is None else min(config.min_improvement, -tolerated)
        if config.use_lower_bound and lower <= bound < value:  # ~ 1 / sqrt(records) wide: how many would clear it
            factor = ((value - lower) / (value - bound)) ** 2
            times = f"{factor:.1f}" if factor < 10 else f"{factor:,.0f}"
            clause += f" (about {times}x the eval records would clear it, were the estimate to hold)"
        return clause

    def as_dict(self, config: EvaluatorConfig) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "ess": self.ess.get("candidate"),
            "clears_gate": self.clears(config),
            "improvement": self.improvement.as_dict(),
        }


@dataclass(frozen=True)
class Served:
    """The exploration the candidate is judged at: the first trial that clears the gate (the
    certified epsilon), else the model's own; `note` says what was tried when there was more than
    the model's own epsilon to try."""

    trial: Trial
    certified: bool
    note: str | None
    tried: list[dict[str, Any]]


def certify(config: EvaluatorConfig, trials: Sequence[Trial]) -> Served:
    """The least exploring served policy that clears the gate: `trials` ascending by epsilon, the
    model's own first; none clears: the model's own, with a note on every epsilon tried. The
    served trial comes completed (Trial.complete)."""
    tried = [t.as_dict(config) for t in trials]
    grid = ", ".join(f"{t.epsilon:g}" for t in trials)
    for i, trial in enumerate(trials):
        if trial.clears(config):
            if i == 0:
                return Served(trial.completed(), True, None, tried)
            refused = "; ".join(t.why_not(config) for t in trials[:i])
            certified = (
                f"certified serving epsilon {trial.epsilon:g}, the least exploring of {grid} that clears the "
                f"gate (trained {trials[0].epsilon:g}); not at {refused}"
            )
            return Served(trial.completed(), True, certified, tried)
    refusals = "; ".join(t.why_not(config) for t in trials)
    none = f"no serving epsilon of {grid} clears the gate: at {refusals}" if len(trials) > 1 else None
    return Served(trials[0].completed(), False, none, tried)


def with_served(config: EvaluatorConfig, metrics: dict[str, Any], served: Served) -> dict[str, Any]:
    """bandit_metrics' output for the served policy: a certified epsilon's comparison (candidate,
    baseline, improvement, trust) in place of the model's own, and `served_policy` saying which
    epsilon is served, which was trained and each one tried; `certification`: the note."""
    out = dict(metrics)
    main = served.trial.comparison
    if main is not None:
        assert main.baseline is not None and main.difference is not None
        out["candidate"] = {k: v.as_dict() for k, v in main.candidate.items()}
        out["baseline_estimates"] = {k: v.as_dict() for k, v in main.baseline.items()}
        out["improvement"] = {k: v.as_dict() for k, v in main.difference.items()}
        kept = {k: metrics["trust"][k] for k in ("min_eval_records", "min_ess", "greedy_ess", "greedy_reason")}
        out["trust"] = main.diagnostics.as_dict() | kept
    served_policy = dict(metrics.get("served_policy") or {})
    out["served_policy"] = served_policy | {
        "candidate_epsilon": served.trial.epsilon,
        "trained_epsilon": served_policy.get("candidate_epsilon"),
        "certified": served.certified,
        "tried": served.tried,
    }
    if served.note:
        out["certification"] = served.note
    return out


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
