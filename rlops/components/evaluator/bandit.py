"""The Evaluator's bandit path: the served candidate against the served baseline (the last
blessed model, or the logging policy on the first run or when that model cannot score the eval
split) on the eval split's logs, on the engine the split's size calls for. The split is read once
(engine.open_split): the in-memory engine's every consumer gets that one LoggedFeedback.

Certifying the exploration (evaluator.serving_epsilons): a candidate that does not clear the gate
served at its own epsilon is scored again, on the same engine, served at each larger epsilon of
the grid, and the least exploring one that clears the gate is blessed (comparisons.certify); the
blessing carries that epsilon, which the Pusher publishes the candidate serving."""

from __future__ import annotations

from typing import Any, Callable

from rlops.components.common.heap import trim_heap
from rlops.components.common.model import serving_dir
from rlops.components.evaluator import beam, memory
from rlops.components.evaluator.action_ids import policy_action_minimum
from rlops.components.evaluator.baseline import fitting_baseline, load_baseline
from rlops.components.evaluator.comparisons import LOGGING_BASELINE, Trial, against, certify, with_served
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.engine import OpenSplit, open_split
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.estimators import LOGGING_POLICY
from rlops.components.evaluator.scoring import epsilons_above, policy_probs, serving_epsilon
from rlops.train.policy_saver import SavedPolicy


def evaluate_bandit(
    config: EvaluatorConfig,
    examples_uri: str,
    model_uri: str,
    num_actions: int,
    baseline_model_uri: str | None,
    beam_pipeline_args: list[str] | None = None,
) -> tuple[dict[str, Any], Estimate]:
    """(metrics, the improvement that blesses) of the model at `model_uri`."""
    policy = SavedPolicy(serving_dir(model_uri))
    # A corrupt baseline is an error naming it, whatever the split holds; one that does not fit is a note.
    loaded = load_baseline(baseline_model_uri) if baseline_model_uri else None
    split = open_split(config, examples_uri, "eval")  # the one read of the split: every consumer gets it
    if split.empty:
        return _no_estimate(
            "the eval split has no records (see experience_gen.splits)", baseline_model_uri or LOGGING_BASELINE
        )
    if split.engine == "beam":
        return _evaluate_on_beam(
            config, examples_uri, policy, model_uri, loaded, baseline_model_uri, num_actions, split, beam_pipeline_args
        )
    data = split.feedback(policy_action_minimum(policy))
    del split  # parsed: the serialized records are not needed again (as much memory as the parsed ones)
    trim_heap()  # ... and their pages go back to the OS, not only to malloc (common/heap.py)
    baseline_policy, skipped = fitting_baseline(loaded, baseline_model_uri, policy, num_actions, examples_uri, data)
    candidate = policy_probs(policy, data, num_actions)
    baseline = LOGGING_POLICY if baseline_policy is None else policy_probs(baseline_policy, data, num_actions)
    reward_model = memory.choose_reward_model(config, data, policy)
    metrics, improvement = memory.evaluate_logged(
        config,
        data,
        candidate,
        baseline,
        baseline_model_uri if baseline_model_uri and baseline_policy is not None else LOGGING_BASELINE,
        reward_model,
    )

    def served_at(epsilons: list[float]) -> list[Trial]:
        base = baseline if isinstance(baseline, str) else baseline.served
        return memory.trials_at(config, data, base, candidate, epsilons, num_actions, reward_model)

    metrics, improvement = _certified(config, policy, candidate.epsilon, metrics, improvement, served_at)
    if skipped:
        metrics["baseline_reason"] = skipped
    return metrics, improvement


def _certified(
    config: EvaluatorConfig,
    policy: SavedPolicy | None,
    own: float,
    metrics: dict[str, Any],
    improvement: Estimate,
    served_at: Callable[[list[float]], list[Trial]],
) -> tuple[dict[str, Any], Estimate]:
    """The engine's comparison at the model's own epsilon, or, when that does not clear the gate,
    the least exploring of the grid's larger epsilons that does (`served_at` scores the candidate
    served at each): the metrics and improvement of the policy to serve. A policy exported without
    serving_default (`policy`; None: it has one) has no epsilon to serve at: judged as it is. Nor
    is one tried when the eval split holds fewer than min_eval_records (with weight > 0): more
    exploration raises the ESS, never the number of records."""
    servable = policy is None or "serving_default" in policy.loaded.signatures
    enough = metrics.get("trust", {}).get("num_records", 0) >= config.min_eval_records
    grid = epsilons_above(config.serving_epsilons, own) if servable and enough else []
    trials = [Trial.from_metrics(own, metrics, improvement, config.estimator)]
    if grid and not trials[0].clears(config):
        trials += served_at(grid)
    served = certify(config, trials)
    return with_served(config, metrics, served), served.trial.improvement


def _evaluate_on_beam(
    config: EvaluatorConfig,
    examples_uri: str,
    policy: SavedPolicy,
    model_uri: str,
    loaded: SavedPolicy | None,
    baseline_model_uri: str | None,
    num_actions: int,
    split: OpenSplit,
    beam_pipeline_args: list[str] | None,
) -> tuple[dict[str, Any], Estimate]:
    """evaluate_bandit on the Beam engine, which streams the split; the baseline's fit is checked on
    the first records (what `split` holds)."""
    head = split.feedback(policy_action_minimum(policy))
    first = split.records.first_record
    baseline_policy, skipped = fitting_baseline(loaded, baseline_model_uri, policy, num_actions, examples_uri, head)
    baseline_uri = baseline_model_uri if baseline_policy is not None else None
    metrics, improvement = beam.evaluate_bandit(
        config, examples_uri, policy, model_uri, baseline_policy, baseline_uri, num_actions, beam_pipeline_args, first
    )

    def served_at(epsilons: list[float]) -> list[Trial]:
        base = (
            beam.PolicySource("logging")
            if baseline_policy is None
            else beam.policy_source(baseline_policy, baseline_uri)
        )
        sources = [base] + [beam.PolicySource("saved_model", policy.path, model_uri, epsilon=e) for e in epsilons]
        run = beam.run_split(
            config,
            examples_uri,
            "eval",
            sources,
            num_actions,
            policy_action_minimum(policy),
            beam_pipeline_args,
            loaded=[policy] if baseline_policy is None else [policy, baseline_policy],
            first_record=first,
        )
        flags = [s.kind == "logging" for s in sources]
        others = against(config, run.sums, flags, True, run.refits, 0, range(1, len(sources)))
        return [Trial.of(config, e, c) for e, c in zip(epsilons, others)]

    metrics, improvement = _certified(config, policy, serving_epsilon(policy), metrics, improvement, served_at)
    if skipped:
        metrics["baseline_reason"] = skipped
    return metrics, improvement


def _no_estimate(reason: str, baseline_name: str) -> tuple[dict[str, Any], Estimate]:
    metrics = {
        "num_eval_records": 0,
        "baseline": baseline_name,
        "candidate": {},
        "candidate_greedy": {},
        "baseline_estimates": {},
        "improvement": {},
        "trust": {"trusted": False, "reason": reason},
    }
    return metrics, Estimate(float("nan"), float("nan"), float("nan"), reason)
