"""The in-memory engine (the Beam engine's twin, rlops.components.evaluator.beam): the split's
records loaded with numpy, every policy's sums over them (estimators.data_sums), the same
comparisons. Small splits and tests; both engines give the same numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import estimators, reward_models
from rlops.components.evaluator.action_ids import check_actions, check_policy_fits_logs, logs_num_actions
from rlops.components.evaluator.comparisons import (
    LogsRun,
    Refits,
    Trial,
    against,
    bandit_metrics,
    comparisons,
    dm_refits,
    policy_grids,
)
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.estimators import LOGGING_POLICY, Comparison
from rlops.components.evaluator.reward_models import NETWORK, RewardModelFn
from rlops.components.evaluator.scoring import PolicyProbs, network_predicted_rewards, policy_probs

if TYPE_CHECKING:
    from rlops.train.policy_saver import SavedPolicy


def choose_reward_model(
    config: EvaluatorConfig, data: LoggedFeedback, candidate: SavedPolicy | None = None
) -> str | RewardModelFn:
    """The config's reward model: a fitted kind (reward_models.resolve_reward_model; "auto"
    resolved), or the candidate network's predicted rewards as a callable."""
    if config.reward_model == NETWORK:
        if candidate is None:
            raise ValueError("evaluator.reward_model: 'network' needs a candidate SavedModel")
        network = candidate
        # Raw features when the records have them: the candidate encodes them its own way.
        return lambda contexts: network_predicted_rewards(
            network, network.observation(contexts if data.features is None else data.features, data.action_mask)
        )
    return reward_models.resolve_reward_model(config.reward_model, data.rewards)


def memory_sums(
    config: EvaluatorConfig, data: LoggedFeedback, policies: list[np.ndarray | str], q: np.ndarray | None
) -> estimators.Sums:
    """Every policy's sums over the records (the Beam engine's twin)."""
    return estimators.data_sums(data, policies, q, config.num_bootstrap, config.seed, policy_grids(config))


def memory_comparisons(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    policies: list[np.ndarray | str],
    num_actions: int,
    reward_model: str | RewardModelFn,
) -> tuple[Comparison, Comparison | None]:
    """comparisons.comparisons of `policies` (probabilities [N, K] or LOGGING_POLICY) on the
    records, with the reward model fitted toward the evaluated policies and DM's refits."""
    sums, refits = _sums_and_refits(config, data, policies, num_actions, reward_model)
    return comparisons(config, sums, [isinstance(p, str) for p in policies], True, refits)


def memory_against(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    baseline: np.ndarray | str,
    candidates: list[np.ndarray],
    num_actions: int,
    reward_model: str | RewardModelFn,
) -> list[Comparison]:
    """Each of `candidates` against `baseline` on the records: one reward model (fitted toward all
    of them), one set of sums (the candidate served at other epsilons: comparisons.certify)."""
    comparisons_now, with_refits = deferred_against(config, data, baseline, candidates, num_actions, reward_model)
    return comparisons_now if with_refits is None else with_refits()


def trials_at(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    baseline: np.ndarray | str,
    candidate: PolicyProbs,
    epsilons: list[float],
    num_actions: int,
    reward_model: str | RewardModelFn,
) -> list[Trial]:
    """comparisons.certify's trials: the candidate served at each of `epsilons` against `baseline`,
    DM's refits deferred to the trial that is served (deferred_against)."""
    served = [candidate.served_at(e) for e in epsilons]
    others, with_refits = deferred_against(config, data, baseline, served, num_actions, reward_model)
    return [Trial.of(config, e, c, _nth(with_refits, i)) for i, (e, c) in enumerate(zip(epsilons, others))]


def _nth(every: Callable[[], list[Comparison]] | None, i: int) -> Callable[[], Comparison] | None:
    return None if every is None else (lambda: every()[i])


def deferred_against(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    baseline: np.ndarray | str,
    candidates: list[np.ndarray],
    num_actions: int,
    reward_model: str | RewardModelFn,
) -> tuple[list[Comparison], Callable[[], list[Comparison]] | None]:
    """memory_against with DM's reward-model refits left for later where no gate reads them (the
    config's estimator is not DM): the comparisons without DM's refit interval, and a call that
    gives them as memory_against does (None: they already are). The refits are most of what a
    trial costs, and only the trial that is served reports DM's interval."""
    policies: list[np.ndarray | str] = [baseline, *candidates]
    flags = [isinstance(p, str) for p in policies]
    sums = memory_sums(config, data, policies, _predictions(config, data, policies, num_actions, reward_model))

    def with_refits() -> list[Comparison]:
        refits = dm_refits(config, data, reward_model, policies, num_actions)
        return against(config, sums, flags, True, refits, 0, range(1, len(policies)))

    if config.estimator == "dm":
        return with_refits(), None
    return against(config, sums, flags, True, None, 0, range(1, len(policies))), with_refits


def _predictions(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    policies: list[np.ndarray | str],
    num_actions: int,
    reward_model: str | RewardModelFn,
) -> np.ndarray:
    return reward_models.reward_predictions(
        reward_model,
        data,
        num_actions,
        seed=config.seed,
        balance=config.reward_model_balance,
        sample_size=config.reward_model_sample,
        target=reward_models.evaluated_probability(policies, data.actions),
    )


def _sums_and_refits(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    policies: list[np.ndarray | str],
    num_actions: int,
    reward_model: str | RewardModelFn,
) -> tuple[estimators.Sums, Refits | None]:
    q = _predictions(config, data, policies, num_actions, reward_model)
    refits = dm_refits(config, data, reward_model, policies, num_actions)
    return memory_sums(config, data, policies, q), refits


def evaluate_logged(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    candidate: PolicyProbs,
    baseline: PolicyProbs | str,
    baseline_name: str,
    reward_model: str | RewardModelFn,
) -> tuple[dict[str, Any], Estimate]:
    """Every estimator for the served candidate, the served baseline and their difference (what
    blesses), the candidate's greedy policy beside them, and the trust diagnostics."""
    num_actions = candidate.served.shape[1]
    base = baseline if isinstance(baseline, str) else baseline.served
    main, greedy = memory_comparisons(
        config, data, [candidate.served, base, candidate.greedy], num_actions, reward_model
    )
    assert greedy is not None and main.difference is not None
    metrics = bandit_metrics(
        config,
        main,
        greedy,
        len(data.actions),
        baseline_name,
        reward_model if isinstance(reward_model, str) else NETWORK,
        (candidate.epsilon, None if isinstance(baseline, str) else baseline.epsilon),
        np.bincount(candidate.greedy.argmax(1), minlength=num_actions).tolist(),
        "memory",
    )
    return metrics, main.difference[config.estimator]


def evaluate_policy_on_logs(
    config: EvaluatorConfig,
    data: LoggedFeedback,
    policy: str,
    saved: SavedPolicy | None,
    num_actions: int | None,
    action_minimum: int,
) -> LogsRun:
    """`rlops evaluate` on the in-memory engine (beam.evaluate_policy_on_logs's twin) on the split's
    records `data`: `saved` (served, its greedy policy beside it), else the uniform or the logging
    policy, against the logging policy. `num_actions` None: the logs' own."""
    in_logs = logs_num_actions(data)
    if num_actions is None:
        num_actions = in_logs
    elif saved is not None:
        check_policy_fits_logs(num_actions, in_logs, data.actions, action_minimum)
    check_actions(data.actions, num_actions, action_minimum)
    target: np.ndarray | str
    greedy, epsilon = None, None
    if saved is not None:
        probs = policy_probs(saved, data, num_actions)
        target, greedy, epsilon = probs.served, probs.greedy, probs.epsilon
    elif policy == "uniform":
        target = estimators.uniform_probs(len(data.actions), num_actions, data.action_mask)
    else:
        target = LOGGING_POLICY
    reward_model = choose_reward_model(config, data, saved)
    policies = [target, LOGGING_POLICY] + ([greedy] if greedy is not None else [])
    main, greedy_cmp = memory_comparisons(config, data, policies, num_actions, reward_model)
    return LogsRun(
        main,
        greedy_cmp,
        len(data.actions),
        num_actions,
        reward_model if isinstance(reward_model, str) else NETWORK,
        epsilon,
        "memory",
    )
