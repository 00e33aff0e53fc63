"""The Evaluator's work as a plain function: candidate vs baseline -> metrics, plots, blessing.

Bandits: off-policy estimates (IPS, SNIPS, DM, DR, SNDR, Switch-DR, DR-os with bootstrap
intervals) of the candidate's greedy policy on the eval split's logged feedback (record weights
and action masks honoured; per-arm records whose candidate sets vary get a candidate mask from
num_actions and the shared [global, arm] reward model), paired against the baseline -- the last blessed model, or on the
first run the logging policy itself. Nothing is blessed without a trustworthy interval: too few
eval records or too small an effective sample size gives NOT_BLESSED with the reason. PPO: returns of N episodes of
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


def load_logged_feedback(examples_uri: str, split: str = "eval", max_records: int | None = None,
                         action_minimum: int | None = 0) -> ope.LoggedFeedback:
    """The split's logged feedback as numpy (the first `max_records` only, when given), with the
    optional `weight` and `action_mask` columns when the records carry them. Actions become
    indices 0..K-1 (logged id - `action_minimum`, the action spec's first id): OPE indexes
    probabilities and masks by them. None: raw ids, for readers of the inputs only."""
    from rlops.components.experience_gen import records
    cat = records.read_logged_bandit(examples_uri, split, max_records)
    if records.PROPENSITY not in cat:
        raise ValueError(f"examples: the {split} split has no 'propensity' feature; off-policy evaluation needs the "
                         "logging policy's probability of each logged action")
    arms = _per_arm_candidates(cat.get(records.FEATURES), examples_uri)
    actions = cat[records.ACTION].astype(int) - int(action_minimum or 0)
    if action_minimum is not None and len(actions) and actions.min() < 0:
        i = int(np.argmax(actions < 0))
        raise ValueError(f"examples: action {actions[i] + action_minimum} in record {i} of the {split} split is below "
                         f"the action spec's minimum {action_minimum}")
    return ope.LoggedFeedback(cat[records.CONTEXT], actions, cat[records.REWARD].astype(float),
                              cat[records.PROPENSITY].astype(float),
                              weights=cat[records.WEIGHT].astype(float) if records.WEIGHT in cat else None,
                              action_mask=arms.get("action_mask", cat.get(records.ACTION_MASK)),
                              features=cat.get(records.FEATURES), items=arms.get("items"),
                              item_features=arms.get("item_features"))


def _per_arm_candidates(features: dict | None, examples_uri: str) -> dict:
    """Per-arm records whose candidates vary (arm k is a different item in each record): the
    candidate mask from num_actions, each slot's item identity and the items' dense arm features,
    for the shared [global, arm] reward model. Fixed candidate sets (every record the same items
    in the same order, e.g. ExperienceGen's default: every item of the table) keep the per-action
    models -- index a IS one item there -- and give {} (the numbers of before)."""
    from rlops.features.per_arm import NUM_ACTIONS, PER_ARM_PREFIX
    if not features or NUM_ACTIONS not in features:
        return {}
    arm_keys = sorted(k for k in features if k.startswith(PER_ARM_PREFIX))
    if not any(len(features[k]) and (features[k] != features[k][:1]).any() for k in arm_keys + [NUM_ACTIONS]):
        return {}
    num_actions = np.asarray(features[NUM_ACTIONS]).astype(int)
    n, k = features[arm_keys[0]].shape[:2]
    candidate = np.arange(k)[None, :] < num_actions[:, None]                     # [N, K]
    bad = (num_actions < 1) | (num_actions > k)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"examples at {examples_uri}: record {i} has num_actions {num_actions[i]}, outside "
                         f"[1, {k}] (the per-arm features' width)")
    # An item is a distinct combination of arm feature values (records carry features, not ids):
    # per feature a code, then one key per combination (mixed radix while it fits in int64).
    valid = candidate.reshape(-1)
    key = np.zeros(int(valid.sum()), np.int64)
    radix = 1
    for name in arm_keys:
        values = np.asarray(features[name]).reshape(n * k, -1)[valid]
        uniq, code = (np.unique(values[:, 0], return_inverse=True) if values.shape[1] == 1
                      else np.unique(values, axis=0, return_inverse=True))
        radix *= len(uniq)
        if radix >= 2 ** 62:
            raise ValueError(f"examples at {examples_uri}: too many distinct per-arm feature combinations to "
                             f"identify items")
        key = key * len(uniq) + code.reshape(-1)
    _, first, item = np.unique(key, return_index=True, return_inverse=True)
    items = np.full(n * k, -1, np.int64)
    items[valid] = item.reshape(-1)
    rows = np.flatnonzero(valid)[first]                                         # one slot per item
    raw = {key[len(PER_ARM_PREFIX):]: np.asarray(features[key]).reshape(n * k, *features[key].shape[2:])[rows]
           for key in arm_keys}
    return {"items": items.reshape(n, k), "item_features": _encode_arms(raw, examples_uri),
            "action_mask": candidate.astype(np.float32)}


def _encode_arms(raw: dict, examples_uri: str) -> np.ndarray:
    """[M, Da] dense arm features through the Examples' own per-arm preprocessing."""
    from rlops.features import FeatureSchema, Preprocessor
    from rlops.features import load as load_schema
    schema = load_schema(examples_uri)
    pre = Preprocessor(FeatureSchema(schema.per_arm), name="arm_preprocessor")
    return pre({f.name: raw[f.name] for f in schema.per_arm}).numpy().astype(float)


def choose_reward_model(config: EvaluatorConfig, data: ope.LoggedFeedback, candidate: SavedPolicy | None = None):
    """The config's reward model: a kind for ope.fit_reward_model, or the candidate network's
    predicted rewards as a callable."""
    if config.reward_model == "auto":
        return "logistic" if np.isin(data.rewards, (0.0, 1.0)).all() else "ridge"
    if config.reward_model == "network":
        if candidate is None:
            raise ValueError("evaluator.reward_model: 'network' needs a candidate SavedModel")
        # Raw features when the records have them: the candidate encodes them its own way.
        return lambda contexts: network_predicted_rewards(
            candidate, candidate.observation(contexts if data.features is None else data.features, data.action_mask))
    return config.reward_model


def network_predicted_rewards(policy: SavedPolicy, inputs: np.ndarray | dict, batch_size: int = 4096) -> np.ndarray:
    """[N, K] predicted rewards from an exported policy's `action` signature output
    info/predicted_rewards_mean (present when the agent emits that policy info). `inputs`: dense
    contexts [N, D], or {feature name: raw values} for a policy exported with its features."""
    from rlops.agents.trajectories import restart
    key = next((k for k in policy.loaded.signatures["action"].structured_outputs
                if k.endswith("predicted_rewards_mean")), None)
    if key is None:
        raise ValueError(f"evaluator.reward_model: 'network' needs predicted rewards, and {policy.path} does not "
                         "emit them; train with emit_policy_info=('predicted_rewards_mean',) or use ridge/logistic")
    named = isinstance(inputs, dict)
    n = len(next(iter(inputs.values()))) if named else len(inputs)
    out = []
    for i in range(0, n, batch_size):
        chunk = {k: v[i:i + batch_size] for k, v in inputs.items()} if named else inputs[i:i + batch_size]
        m = min(batch_size, n - i)
        out.append(policy.signature_outputs(restart(chunk, m))[key].numpy())
    return np.concatenate(out).astype(float)


def evaluate_logged(config: EvaluatorConfig, data: ope.LoggedFeedback, candidate_probs: np.ndarray,
                    baseline_probs: np.ndarray | str, baseline_name: str, reward_model) -> tuple[dict, ope.Estimate]:
    """Every estimator for candidate, baseline and their difference, plus the trust diagnostics."""
    num_actions = candidate_probs.shape[1]
    q = ope.reward_predictions(reward_model, data, num_actions, seed=config.seed, balance=config.reward_model_balance)
    diagnostics: list = []
    cand, base, diff = ope.compare(data, candidate_probs, baseline_probs, q, config.num_bootstrap, config.confidence,
                                   config.seed, min_records=config.min_eval_records, min_ess=config.min_ess,
                                   switch_tau=config.switch_tau, dr_os_lambda=config.dr_os_lambda,
                                   diagnostics=diagnostics)
    diag = diagnostics[0]
    metrics = {"num_eval_records": int(len(data.actions)),
               "baseline": baseline_name,
               "reward_model": reward_model if isinstance(reward_model, str) else "network",
               "candidate": {k: v.as_dict() for k, v in cand.items()},
               "baseline_estimates": {k: v.as_dict() for k, v in base.items()},
               "improvement": {k: v.as_dict() for k, v in diff.items()},
               "trust": diag.as_dict() | {"min_eval_records": config.min_eval_records, "min_ess": config.min_ess},
               "candidate_action_share": np.bincount(candidate_probs.argmax(1), minlength=num_actions).tolist()}
    return metrics, diff[config.estimator]


def policy_action_minimum(policy: SavedPolicy) -> int:
    return int(policy.action_spec.minimum)


def policy_greedy_probs(policy: SavedPolicy, data: ope.LoggedFeedback, num_actions: int) -> np.ndarray:
    """The policy's greedy choice on every logged record as one-hot [N, num_actions] over action
    indices (its action ids less its spec's minimum, as the logged actions are)."""
    inputs = data.contexts if data.features is None else data.features  # raw features: each model encodes its own
    actions = policy.actions(inputs, action_mask=data.action_mask) - policy_action_minimum(policy)
    return ope.greedy_probs(actions, num_actions)


def evaluate_bandit(config: EvaluatorConfig, examples_uri: str, model_uri: str, num_actions: int,
                    baseline_model_uri: str | None) -> tuple[dict, ope.Estimate]:
    policy = SavedPolicy(serving_dir(model_uri))
    baseline_policy = SavedPolicy(serving_dir(baseline_model_uri)) if baseline_model_uri else None
    if baseline_policy is not None and policy_action_minimum(baseline_policy) != policy_action_minimum(policy):
        raise ValueError(f"the candidate's actions start at {policy_action_minimum(policy)}, the baseline's "
                         f"({baseline_model_uri}) at {policy_action_minimum(baseline_policy)}: they answer in "
                         "different ids")
    data = load_logged_feedback(examples_uri, action_minimum=policy_action_minimum(policy))
    candidate = policy_greedy_probs(policy, data, num_actions)
    baseline = (policy_greedy_probs(baseline_policy, data, num_actions) if baseline_policy is not None
                else ope.LOGGING_POLICY)
    return evaluate_logged(config, data, candidate, baseline, baseline_model_uri or "logging_policy",
                           choose_reward_model(config, data, policy))


def _find_serving_dir(path: str) -> str:
    """A policy SavedModel directory, or a Model artifact directory holding one (Format-Serving)."""
    from rlops.train.policy_saver import SPECS_FILE
    for candidate in (path, serving_dir(path)):
        if tf.io.gfile.exists(os.path.join(candidate, SPECS_FILE)):
            return candidate
    raise FileNotFoundError(f"--policy: {path} is neither a policy SavedModel (no {SPECS_FILE}) nor a Model "
                            "artifact directory holding one; or pass 'uniform' or 'logging'")


def evaluate_on_logs(config: EvaluatorConfig, examples_uri: str, policy: str, split: str = "eval",
                     num_actions: int | None = None, action_minimum: int | None = None) -> dict:
    """What would `policy` (a SavedModel path, 'uniform' or 'logging') have earned on a split's logs?
    Every estimator with its interval, and the improvement over the logging policy (paired).
    `action_minimum`: the first action id (default: the policy's spec minimum, else 0)."""
    saved = None
    if policy not in ("uniform", ope.LOGGING_POLICY):
        saved = SavedPolicy(_find_serving_dir(policy))
        spec = saved.action_spec
        spec_actions = int(spec.maximum) - int(spec.minimum) + 1
        if num_actions is not None and num_actions != spec_actions:
            raise ValueError(f"--num-actions {num_actions} disagrees with the policy's action spec ({spec_actions})")
        if action_minimum is not None and action_minimum != policy_action_minimum(saved):
            raise ValueError(f"--action-minimum {action_minimum} disagrees with the policy's action spec (minimum "
                             f"{policy_action_minimum(saved)})")
        num_actions, action_minimum = spec_actions, policy_action_minimum(saved)
    action_minimum = action_minimum or 0
    data = load_logged_feedback(examples_uri, split, action_minimum=action_minimum)
    if num_actions is None:
        num_actions = data.action_mask.shape[1] if data.action_mask is not None else _per_arm_width(data)
        num_actions = num_actions or int(data.actions.max()) + 1
    if int(data.actions.max()) >= num_actions:
        i = int(np.argmax(data.actions >= num_actions))
        raise ValueError(f"examples: action {data.actions[i] + action_minimum} in record {i} is outside the "
                         f"{num_actions} actions starting at {action_minimum}")
    if saved is not None:
        target = policy_greedy_probs(saved, data, num_actions)
    elif policy == "uniform":
        target = ope.uniform_probs(len(data.actions), num_actions, data.action_mask)
    else:
        target = ope.LOGGING_POLICY
    if isinstance(target, str) and config.reward_model == "network":
        raise ValueError("--reward-model network needs a SavedModel policy")
    reward_model = choose_reward_model(config, data, saved)
    q = ope.reward_predictions(reward_model, data, num_actions, seed=config.seed, balance=config.reward_model_balance)
    diagnostics: list = []
    est, _, diff = ope.compare(data, target, ope.LOGGING_POLICY, q, config.num_bootstrap, config.confidence,
                               config.seed, min_records=config.min_eval_records, min_ess=config.min_ess,
                               switch_tau=config.switch_tau, dr_os_lambda=config.dr_os_lambda,
                               diagnostics=diagnostics)
    diag = diagnostics[0]
    return {"policy": policy, "examples": examples_uri, "split": split, "num_actions": num_actions,
            "num_records": int(len(data.actions)), "reward_model": reward_model if isinstance(reward_model, str)
            else "network", "confidence": config.confidence, "trusted": diag.reason is None,
            "reason": diag.reason, "ess": diag.ess["candidate"], "hyperparameters": diag.hyperparameters["candidate"],
            "observed_mean_reward": float(np.average(data.rewards, weights=data.record_weights)),
            "estimates": {k: v.as_dict() for k, v in est.items()},
            "improvement_over_logging": {k: v.as_dict() for k, v in diff.items()}}


def _per_arm_width(data: ope.LoggedFeedback) -> int | None:
    """K of per-arm records (the per_arm/<name> width), None for plain records."""
    from rlops.features.per_arm import PER_ARM_PREFIX
    width = [v.shape[1] for k, v in (data.features or {}).items() if k.startswith(PER_ARM_PREFIX)]
    return width[0] if width else None


def plot_policy_estimates(result: dict, path: str) -> None:
    """Every estimator's value and interval for one policy, the logging policy's mean as a line."""
    from rlops.envs.plots import _pyplot
    plt = _pyplot()
    names = list(result["estimates"])
    est = result["estimates"]
    values = np.array([est[n]["value"] for n in names])
    err = np.nan_to_num(np.array([[est[n]["value"] - est[n]["lower"] for n in names],
                                  [est[n]["upper"] - est[n]["value"] for n in names]]))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.errorbar(np.arange(len(names)), values, yerr=err, fmt="o", capsize=4, label=f"policy: {result['policy']}"[:50])
    ax.axhline(result["observed_mean_reward"], color="gray", ls="--", label="logging policy (observed)")
    ax.set_xticks(np.arange(len(names)), [n.upper() if len(n) <= 5 else n for n in names])
    ax.set_ylabel("estimated value")
    title = f"{result['num_records']} records, ESS {result['ess']:.0f}"
    ax.set_title(title if result["trusted"] else title + " (no trustworthy interval)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    diff = ope.difference_interval(candidate, baseline, config.confidence, seed=config.seed, min_episodes=5)
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
    which = f"lower {config.confidence:.0%} bound" if config.use_lower_bound else "point estimate"
    if not improvement.trusted:  # too little data: no rule may bless, whatever the point estimate says
        blessed = False
        reason = f"not blessed: no trustworthy estimate of the improvement in {measure}: {improvement.reason}"
    else:
        blessed = bool(score > config.min_improvement)
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
        err = np.nan_to_num(np.array([[est[n]["value"] - est[n]["lower"] for n in names],
                                      [est[n]["upper"] - est[n]["value"] for n in names]]))  # no interval: a dot
        ax.errorbar(np.arange(len(names)) + offset, values, yerr=err, fmt="o", capsize=4, label=label)
    ax.set_xticks(np.arange(len(names)), [n.upper() if len(n) <= 5 else n for n in names])
    ax.set_ylabel("estimated value")
    ax.set_title(("BLESSED: " if metrics["blessed"] else "not blessed: ") + metrics["rule"]["measure"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
