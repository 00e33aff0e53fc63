"""The Evaluator's work as a plain function: candidate vs baseline -> metrics, plots, blessing.

Bandits: off-policy estimates (IPS, SNIPS, DM, DR with bootstrap intervals) of the candidate's
greedy policy on the eval split's logged feedback, paired against the baseline -- the last
blessed model, or on the first run the logging policy itself. PPO: returns of N episodes of
each policy in the environment (first run: against a uniform random policy).

Blessing output follows TFX's Evaluator: a `BLESSED` or `NOT_BLESSED` file in the blessing
artifact's directory, and custom properties `blessed`, `current_model(_id)`, `baseline_model(_id)`
(what TFX's LatestBlessedModelStrategy resolves on).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from rlops.components.evaluator import ope
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.trainer.core import serving_dir
from rlops.train.policy_saver import SavedPolicy

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
BLESSED_FILE, NOT_BLESSED_FILE = "BLESSED", "NOT_BLESSED"


@dataclass
class EvalResult:
    blessed: bool
    reason: str
    metrics: dict = field(default_factory=dict)


def load_logged_feedback(examples_uri: str, split: str = "eval", max_records: int | None = None) -> ope.LoggedFeedback:
    """The split's logged feedback as numpy (the first `max_records` only, when given)."""
    from rlops.components.experience_gen import records
    cat = records.read_logged_bandit(examples_uri, split, max_records)
    if records.PROPENSITY not in cat:
        raise ValueError("examples: the eval split has no 'propensity' feature; off-policy evaluation needs the "
                         "logging policy's probability of each logged action")
    return ope.LoggedFeedback(cat[records.CONTEXT], cat[records.ACTION].astype(int), cat[records.REWARD],
                              cat[records.PROPENSITY].astype(float), cat.get(records.FEATURES))


def evaluate_bandit(config: EvaluatorConfig, examples_uri: str, model_uri: str, num_actions: int,
                    baseline_model_uri: str | None) -> tuple[dict, ope.Estimate]:
    data = load_logged_feedback(examples_uri)
    inputs = data.contexts if data.features is None else data.features  # raw features: each model encodes its own
    candidate = ope.greedy_probs(SavedPolicy(serving_dir(model_uri)).actions(inputs), num_actions)
    baseline = (ope.greedy_probs(SavedPolicy(serving_dir(baseline_model_uri)).actions(inputs), num_actions)
                if baseline_model_uri else ope.LOGGING_POLICY)
    q = ope.fit_reward_model(data.contexts, data.actions, data.rewards, num_actions, seed=config.seed)
    cand, base, diff = ope.compare(data, candidate, baseline, q, config.num_bootstrap, config.confidence, config.seed)
    metrics = {"num_eval_records": int(len(data.actions)),
               "baseline": baseline_model_uri or "logging_policy",
               "candidate": {k: v.as_dict() for k, v in cand.items()},
               "baseline_estimates": {k: v.as_dict() for k, v in base.items()},
               "improvement": {k: v.as_dict() for k, v in diff.items()},
               "candidate_action_share": np.bincount(candidate.argmax(1), minlength=num_actions).tolist()}
    return metrics, diff[config.estimator]


def _episode_returns(env_id: str, policy, episodes: int, seed: int) -> np.ndarray:
    from rlops.envs.gym_env import evaluate_policy
    return evaluate_policy(env_id, policy, episodes, seed=seed)


def evaluate_ppo(config: EvaluatorConfig, model_uri: str, baseline_model_uri: str | None) -> tuple[dict, ope.Estimate]:
    from rlops.agents.policies import RandomPolicy
    from rlops.envs.gym_env import GymVectorEnv

    candidate = _episode_returns(config.env_id, SavedPolicy(serving_dir(model_uri)), config.num_episodes, config.seed)
    if baseline_model_uri:
        baseline_policy = SavedPolicy(serving_dir(baseline_model_uri))
    else:
        env = GymVectorEnv(config.env_id, 1)
        baseline_policy = RandomPolicy(env.time_step_spec, env.action_spec)
        env.close()
    baseline = _episode_returns(config.env_id, baseline_policy, config.num_episodes, config.seed)
    cand = ope.mean_confidence_interval(candidate, config.confidence, seed=config.seed)
    base = ope.mean_confidence_interval(baseline, config.confidence, seed=config.seed)
    diff = ope.difference_interval(candidate, baseline, config.confidence, seed=config.seed)
    metrics = {"env_id": config.env_id, "num_episodes": config.num_episodes,
               "baseline": baseline_model_uri or "random_policy",
               "candidate": {"mean_return": cand.as_dict()}, "baseline_estimates": {"mean_return": base.as_dict()},
               "improvement": {"mean_return": diff.as_dict()},
               "candidate_returns": candidate.tolist(), "baseline_returns": baseline.tolist()}
    return metrics, diff


def run_evaluator(config: EvaluatorConfig | str, model_uri: str, evaluation_uri: str, blessing_uri: str,
                  examples_uri: str | None = None, baseline_model_uri: str | None = None,
                  num_actions: int | None = None) -> EvalResult:
    if isinstance(config, str):
        config = EvaluatorConfig.from_json(config)
    if config.kind == "bandit":
        if not examples_uri or not num_actions:
            raise ValueError("evaluator: bandit evaluation needs the examples input and num_actions")
        metrics, improvement = evaluate_bandit(config, examples_uri, model_uri, num_actions, baseline_model_uri)
        measure = config.estimator
    else:
        metrics, improvement = evaluate_ppo(config, model_uri, baseline_model_uri)
        measure = "mean_return"
    score = improvement.lower if config.use_lower_bound else improvement.value
    blessed = bool(score > config.min_improvement)
    which = f"lower {config.confidence:.0%} bound" if config.use_lower_bound else "point estimate"
    reason = (f"improvement in {measure} over {metrics['baseline']}: {which} {score:.4f} "
              f"{'>' if blessed else '<='} {config.min_improvement}")
    metrics.update({"blessed": blessed, "reason": reason, "rule": {
        "measure": measure, "use_lower_bound": config.use_lower_bound, "min_improvement": config.min_improvement}})
    log.info("evaluator: %s -> %s", reason, "BLESSED" if blessed else "NOT BLESSED")
    for uri in (evaluation_uri, blessing_uri):
        tf.io.gfile.makedirs(uri)
    with tf.io.gfile.GFile(os.path.join(evaluation_uri, METRICS_FILE), "w") as f:
        json.dump(metrics, f, indent=1)
    with tf.io.gfile.GFile(os.path.join(blessing_uri, BLESSED_FILE if blessed else NOT_BLESSED_FILE), "w") as f:
        f.write(reason)
    if "://" not in evaluation_uri:
        _plot_estimates(metrics, os.path.join(evaluation_uri, "estimates.png"))
    return EvalResult(blessed=blessed, reason=reason, metrics=metrics)


def _plot_estimates(metrics: dict, path: str) -> None:
    """Candidate vs baseline per estimator, with confidence intervals."""
    from rlops.envs.plots import _pyplot
    plt = _pyplot()
    names = list(metrics["candidate"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (label, key) in zip((-0.15, 0.15), (("candidate", "candidate"),
                                                   (f"baseline ({metrics['baseline']})"[:40], "baseline_estimates"))):
        est = metrics[key]
        values = np.array([est[n]["value"] for n in names])
        err = np.array([[est[n]["value"] - est[n]["lower"] for n in names],
                        [est[n]["upper"] - est[n]["value"] for n in names]])
        ax.errorbar(np.arange(len(names)) + offset, values, yerr=err, fmt="o", capsize=4, label=label)
    ax.set_xticks(np.arange(len(names)), [n.upper() if len(n) <= 5 else n for n in names])
    ax.set_ylabel("estimated value")
    ax.set_title(("BLESSED: " if metrics["blessed"] else "not blessed: ") + metrics["rule"]["measure"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
