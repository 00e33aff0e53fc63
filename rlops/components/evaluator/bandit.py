"""The Evaluator's bandit path: the served candidate against the served baseline (the last
blessed model, or the logging policy on the first run or when that model cannot score the eval
split) on the eval split's logs, on the engine the split's size calls for."""

from __future__ import annotations

from typing import Any

from rlops.components.common import records
from rlops.components.common.feedback import load_logged_feedback
from rlops.components.common.model import serving_dir
from rlops.components.evaluator import beam, memory
from rlops.components.evaluator.action_ids import policy_action_minimum
from rlops.components.evaluator.baseline import fitting_baseline, load_baseline
from rlops.components.evaluator.comparisons import LOGGING_BASELINE
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.engine import choose_engine
from rlops.components.evaluator.estimators import LOGGING_POLICY, Estimate
from rlops.components.evaluator.scoring import policy_probs
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
    if split_is_empty(examples_uri, "eval"):
        return _no_estimate(
            "the eval split has no records (see experience_gen.splits)", baseline_model_uri or LOGGING_BASELINE
        )
    if choose_engine(config, examples_uri) == "beam":
        return _evaluate_on_beam(
            config, examples_uri, policy, model_uri, loaded, baseline_model_uri, num_actions, beam_pipeline_args
        )
    data = load_logged_feedback(examples_uri, action_minimum=policy_action_minimum(policy))
    baseline_policy, skipped = fitting_baseline(loaded, baseline_model_uri, policy, num_actions, examples_uri, data)
    candidate = policy_probs(policy, data, num_actions)
    baseline = LOGGING_POLICY if baseline_policy is None else policy_probs(baseline_policy, data, num_actions)
    metrics, improvement = memory.evaluate_logged(
        config,
        data,
        candidate,
        baseline,
        baseline_model_uri if baseline_model_uri and baseline_policy is not None else LOGGING_BASELINE,
        memory.choose_reward_model(config, data, policy),
    )
    if skipped:
        metrics["baseline_reason"] = skipped
    return metrics, improvement


def _evaluate_on_beam(
    config: EvaluatorConfig,
    examples_uri: str,
    policy: SavedPolicy,
    model_uri: str,
    loaded: SavedPolicy | None,
    baseline_model_uri: str | None,
    num_actions: int,
    beam_pipeline_args: list[str] | None,
) -> tuple[dict[str, Any], Estimate]:
    """evaluate_bandit on the Beam engine; the baseline's fit is checked on the first records."""
    head = load_logged_feedback(examples_uri, max_records=1000, action_minimum=policy_action_minimum(policy))
    baseline_policy, skipped = fitting_baseline(loaded, baseline_model_uri, policy, num_actions, examples_uri, head)
    metrics, improvement = beam.evaluate_bandit(
        config,
        examples_uri,
        policy,
        model_uri,
        baseline_policy,
        baseline_model_uri if baseline_policy is not None else None,
        num_actions,
        beam_pipeline_args,
    )
    if skipped:
        metrics["baseline_reason"] = skipped
    return metrics, improvement


def split_is_empty(examples_uri: str, split: str = "eval") -> bool:
    """No record in the split's files (or no files at all)."""
    import tensorflow as tf

    for path in sorted(tf.io.gfile.glob(records.split_file_pattern(examples_uri, split))):
        for _ in tf.data.TFRecordDataset(path, compression_type="GZIP").take(1):
            return False
    return True


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
