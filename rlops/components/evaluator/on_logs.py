"""`rlops evaluate`'s work: what would a policy (a SavedModel, 'uniform' or 'logging') have
earned on a split's logs? Every estimator with its interval, and the improvement over the
logging policy (paired), on the engine the split's size calls for."""

from __future__ import annotations

import os
from typing import Any

from rlops.components.common.heap import trim_heap
from rlops.components.common.model import serving_dir
from rlops.components.evaluator import beam, memory
from rlops.components.evaluator.action_ids import policy_action_minimum, spec_actions
from rlops.components.evaluator.comparisons import LogsRun
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.engine import open_split
from rlops.components.evaluator.estimators import LOGGING_POLICY
from rlops.components.evaluator.reward_models import NETWORK
from rlops.train.policy_saver import SavedPolicy


def evaluate_on_logs(
    config: EvaluatorConfig,
    examples_uri: str,
    policy: str,
    split: str = "eval",
    num_actions: int | None = None,
    action_minimum: int | None = None,
    beam_pipeline_args: list[str] | None = None,
) -> dict[str, Any]:
    """What would `policy` (a SavedModel path, 'uniform' or 'logging') have earned on a split's logs?
    Every estimator with its interval, and the improvement over the logging policy (paired). A
    SavedModel is scored as served (serving_default's epsilon-greedy), its greedy value beside.
    `action_minimum`: the first action id (default: the policy's spec minimum, else 0). Large
    splits run on the Beam engine (engine.open_split) with `beam_pipeline_args`."""
    saved = None
    if policy not in ("uniform", LOGGING_POLICY):
        saved = SavedPolicy(find_serving_dir(policy))
        in_spec, minimum = spec_actions(saved)
        if num_actions is not None and num_actions != in_spec:
            raise ValueError(f"--num-actions {num_actions} disagrees with the policy's action spec ({in_spec})")
        if action_minimum is not None and action_minimum != policy_action_minimum(saved):
            raise ValueError(
                f"--action-minimum {action_minimum} disagrees with the policy's action spec (minimum "
                f"{policy_action_minimum(saved)})"
            )
        num_actions, action_minimum = in_spec, minimum
    action_minimum = action_minimum or 0
    if policy == LOGGING_POLICY and config.reward_model == NETWORK:
        raise ValueError("--reward-model network needs a SavedModel policy")
    run: LogsRun
    opened = open_split(config, examples_uri, split)  # the one read of the split (beam: its head)
    if opened.engine == "beam":
        first = opened.records.first_record
        run = beam.evaluate_policy_on_logs(
            config, examples_uri, split, policy, saved, num_actions, action_minimum, beam_pipeline_args, first
        )
    else:
        data = opened.feedback(action_minimum)
        del opened  # parsed: the serialized records are not needed again
        trim_heap()
        run = memory.evaluate_policy_on_logs(config, data, policy, saved, num_actions, action_minimum)
    return logs_result(config, run, policy, examples_uri, split)


def find_serving_dir(path: str) -> str:
    """A policy SavedModel directory, or a Model artifact directory holding one (Format-Serving)."""
    import tensorflow as tf

    from rlops.train.policy_saver import SPECS_FILE

    for candidate in (path, serving_dir(path)):
        if tf.io.gfile.exists(os.path.join(candidate, SPECS_FILE)):
            return candidate
    raise FileNotFoundError(
        f"--policy: {path} is neither a policy SavedModel (no {SPECS_FILE}) nor a Model "
        "artifact directory holding one; or pass 'uniform' or 'logging'"
    )


def logs_result(config: EvaluatorConfig, run: LogsRun, policy: str, examples_uri: str, split: str) -> dict[str, Any]:
    """`rlops evaluate`'s JSON: the policy's estimates, its improvement over the logging policy,
    the trust decision and what it ran on."""
    assert run.main.baseline is not None and run.main.difference is not None
    diag = run.main.diagnostics
    result = {
        "policy": policy,
        "examples": examples_uri,
        "split": split,
        "num_actions": run.num_actions,
        "num_records": int(run.num_records),
        "eval_records": int(run.num_records),
        "engine": run.engine,
        "reward_model": run.reward_model,
        "reward_model_balance": config.reward_model_balance,
        "dm_refits": config.dm_refits,
        "reward_model_sample": config.reward_model_sample,
        "confidence": config.confidence,
        "trusted": diag.reason is None,
        "reason": diag.reason,
        "ess": diag.ess["candidate"],
        "hyperparameters": diag.hyperparameters["candidate"],
        # the logging policy's every estimator is its observed (weighted) mean reward
        "observed_mean_reward": run.main.baseline["ips"].value,
        "serving_epsilon": run.epsilon,
        "estimates": {k: v.as_dict() for k, v in run.main.candidate.items()},
        "improvement_over_logging": {k: v.as_dict() for k, v in run.main.difference.items()},
    }
    if run.greedy is not None:  # the greedy policy beside the served one
        result["greedy_estimates"] = {k: v.as_dict() for k, v in run.greedy.candidate.items()}
        result["greedy_ess"] = run.greedy.diagnostics.ess["candidate"]
    return result
