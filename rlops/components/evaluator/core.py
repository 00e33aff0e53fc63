"""The Evaluator's work as a plain function: candidate vs baseline -> metrics, plots, blessing.

Bandits: off-policy estimates (IPS, SNIPS, DM, DR, SNDR, Switch-DR, DR-os with bootstrap
intervals) of the policy the candidate SERVES -- serving_default's epsilon-greedy over each
record's allowed actions and candidates, from its exact action probabilities -- with the greedy
policy's value reported beside it, on the eval split's logged feedback (record weights
and action masks honoured; per-arm records whose candidate sets vary get a candidate mask from
num_actions and the shared [global, arm] reward model), paired against the baseline -- the last blessed model, or on the
first run the logging policy itself (the baseline too is scored as served). A blessed model
that cannot score the eval split (other features, actions or per-arm-ness: rlops.features.fit)
is replaced by the logging policy with a one-line note and `baseline_reason`; one that cannot be
loaded at all is a BaselineModelError naming it. Nothing is blessed
without a trustworthy interval: no eval records, too few, or too small an effective sample size
gives NOT_BLESSED with the reason, and the run goes on. PPO: returns of N episodes of
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
from typing import Any

import numpy as np
import tensorflow as tf

from rlops.components.common.feedback import load_logged_feedback, split_files
from rlops.components.common.keys import BLESSING_KEY, EVALUATION_KEY, METRICS_KEY
from rlops.components.common.model import BLESSED_FILE, NOT_BLESSED_FILE, serving_dir
from rlops.components.evaluator import estimators, ope
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.properties import finite_properties, json_safe
from rlops.train.policy_saver import SavedPolicy

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
LOGGING_BASELINE = "logging_policy"  # metrics' `baseline` when the candidate is compared with the logs' policy


@dataclass
class EvalResult:
    blessed: bool
    reason: str
    metrics: dict = field(default_factory=dict)

    @property
    def baseline_reason(self) -> str | None:
        """Why the given baseline model was not compared against (it could not score the eval
        split; the logging policy was the baseline instead), else None."""
        return self.metrics.get("baseline_reason")

    def blessing_properties(
        self, model_uri: str, model_id: Any, baseline_uri: str | None, baseline_id: Any
    ) -> dict[str, Any]:
        """TFX Evaluator's blessing properties (both faces write these): `baseline_model(_id)` only
        when that model was the baseline, `baseline_reason` when it was given but could not be."""
        out = {
            "blessed": int(self.blessed),
            "current_model": model_uri,
            "current_model_id": model_id,
            "reason": self.reason,
        }
        if self.baseline_reason:
            out["baseline_reason"] = self.baseline_reason
        elif baseline_uri:
            out.update(baseline_model=baseline_uri, baseline_model_id=baseline_id)
        return out

    def properties(
        self, model_uri: str, model_id: Any, baseline_uri: str | None = None, baseline_id: Any = None
    ) -> dict[str, dict[str, Any]]:
        """The output artifacts' properties by output key, as both faces write them (TFX custom
        properties, KFP metadata): the blessing's (blessing_properties), the evaluation's
        (evaluation_properties) and the console's scalars (scalar_metrics)."""
        return {
            BLESSING_KEY: self.blessing_properties(model_uri, model_id, baseline_uri, baseline_id),
            EVALUATION_KEY: evaluation_properties(self),
            METRICS_KEY: scalar_metrics(self),
        }


def count_records(examples_uri: str, split: str, limit: int | None = None) -> int:
    """Records in the split (counting stops after `limit`: enough to pick an engine)."""
    ds = tf.data.TFRecordDataset(split_files(examples_uri, split), compression_type="GZIP")
    if limit is not None:
        ds = ds.take(limit + 1)
    return int(ds.reduce(np.int64(0), lambda c, _: c + 1).numpy())


def choose_reward_model(config: EvaluatorConfig, data: ope.LoggedFeedback, candidate: SavedPolicy | None = None):
    """The config's reward model: a fitted kind (ope.resolve_reward_model; "auto" resolved), or
    the candidate network's predicted rewards as a callable."""
    if config.reward_model == ope.NETWORK:
        if candidate is None:
            raise ValueError("evaluator.reward_model: 'network' needs a candidate SavedModel")
        # Raw features when the records have them: the candidate encodes them its own way.
        return lambda contexts: network_predicted_rewards(
            candidate, candidate.observation(contexts if data.features is None else data.features, data.action_mask)
        )
    return ope.resolve_reward_model(config.reward_model, data.rewards)


def network_predicted_rewards(policy: SavedPolicy, inputs: np.ndarray | dict, batch_size: int = 4096) -> np.ndarray:
    """[N, K] predicted rewards from an exported policy's `action` signature output
    info/predicted_rewards_mean (present when the agent emits that policy info). `inputs`: dense
    contexts [N, D], or {feature name: raw values} for a policy exported with its features."""
    from rlops.agents.trajectories import restart

    key = next(
        (k for k in policy.loaded.signatures["action"].structured_outputs if k.endswith("predicted_rewards_mean")), None
    )
    if key is None:
        raise ValueError(
            f"evaluator.reward_model: 'network' needs predicted rewards, and {policy.path} does not "
            "emit them; train with emit_policy_info=('predicted_rewards_mean',) or use ridge/logistic"
        )
    named = isinstance(inputs, dict)
    n = len(next(iter(inputs.values()))) if named else len(inputs)
    out = []
    for i in range(0, n, batch_size):
        chunk = {k: v[i : i + batch_size] for k, v in inputs.items()} if named else inputs[i : i + batch_size]
        m = min(batch_size, n - i)
        out.append(policy.signature_outputs(restart(chunk, m))[key].numpy())
    return np.concatenate(out).astype(float)


@dataclass(frozen=True)
class PolicyProbs:
    """A policy's action probabilities on every logged record [N, K]: what it serves
    (serving_default's epsilon-greedy) and its greedy choice."""

    served: np.ndarray
    greedy: np.ndarray
    epsilon: float


def serving_epsilon(policy: SavedPolicy) -> float:
    """serving_default's exploration rate (the SavedModel's metadata); 0 for a policy exported
    without serving_default (it serves its greedy action)."""
    from rlops.train.policy_saver import SERVING_EPSILON

    if "serving_default" not in policy.loaded.signatures:
        return 0.0
    meta = policy.loaded.signatures["get_metadata"]()
    return float(meta[SERVING_EPSILON].numpy()) if SERVING_EPSILON in meta else 0.0


def served_allowed(data: ope.LoggedFeedback, num_actions: int) -> np.ndarray:
    """[N, K] the actions serving_default explores among: the record's action mask and, for
    per-arm records, its candidates (slots below num_actions) -- the serving head's rule."""
    from rlops.features import serving_head
    from rlops.features.per_arm import NUM_ACTIONS

    count = data.features.get(NUM_ACTIONS) if data.features is not None else None
    return serving_head.allowed_mask(len(data.actions), num_actions, data.action_mask, count)


def policy_probs(policy: SavedPolicy, data: ope.LoggedFeedback, num_actions: int) -> PolicyProbs:
    """The served (epsilon-greedy) and greedy action probabilities of an exported policy on the
    logged records, over action indices (its ids less its spec's minimum, as the logged actions
    are): exactly the `propensity` its serving_default reports for each action."""
    inputs = data.contexts if data.features is None else data.features  # raw features: each model encodes its own
    greedy = policy.actions(inputs, action_mask=data.action_mask) - policy_action_minimum(policy)
    epsilon, allowed = serving_epsilon(policy), served_allowed(data, num_actions)
    # greedy: the same head at epsilon 0 (a greedy action the record does not allow is served uniformly)
    return PolicyProbs(
        ope.epsilon_greedy_probs(greedy, num_actions, epsilon, allowed),
        ope.epsilon_greedy_probs(greedy, num_actions, 0.0, allowed),
        epsilon,
    )


def dm_refits(
    config: EvaluatorConfig,
    data: ope.LoggedFeedback,
    reward_model,
    policies: list,
    num_actions: int,
    population: int | None = None,
) -> tuple[np.ndarray, float] | None:
    """DM's reward-model refits (ope.refit_dm_replicates, on the dm_refit_records records with
    the smallest sample hashes) for `policies`; None where there is nothing to refit (the
    candidate network's own predictions) or refits are switched off."""
    if not isinstance(reward_model, str) or config.dm_refits == 0:
        return None
    return ope.refit_dm_replicates(
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


def _columns(refits: tuple[np.ndarray, float] | None, which: slice) -> tuple[np.ndarray, float] | None:
    return None if refits is None else (refits[0][:, which], refits[1])


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


def memory_sums(config: EvaluatorConfig, data: ope.LoggedFeedback, policies: list, q: np.ndarray | None):
    """The in-memory engine: every policy's sums over the records (the Beam engine's twin)."""
    return estimators.data_sums(data, policies, q, config.num_bootstrap, config.seed, policy_grids(config))


def comparisons(
    config: EvaluatorConfig, sums: estimators.Sums, logging: list[bool], with_model: bool, refits
) -> tuple[ope.Comparison, ope.Comparison | None]:
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
    main: ope.Comparison,
    greedy: ope.Comparison,
    num_records: int,
    baseline_name: str,
    reward_model_name: str,
    epsilons: tuple,
    action_share: list,
    engine: str,
) -> dict:
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


def evaluate_logged(
    config: EvaluatorConfig,
    data: ope.LoggedFeedback,
    candidate: PolicyProbs,
    baseline: PolicyProbs | str,
    baseline_name: str,
    reward_model,
) -> tuple[dict, ope.Estimate]:
    """Every estimator for the served candidate, the served baseline and their difference (what
    blesses), the candidate's greedy policy beside them, and the trust diagnostics."""
    num_actions = candidate.served.shape[1]
    base = baseline if isinstance(baseline, str) else baseline.served
    policies = [candidate.served, base, candidate.greedy]
    q = ope.reward_predictions(
        reward_model,
        data,
        num_actions,
        seed=config.seed,
        balance=config.reward_model_balance,
        sample_size=config.reward_model_sample,
        target=ope.evaluated_probability(policies, data.actions),
    )
    refits = dm_refits(config, data, reward_model, policies, num_actions)
    sums = memory_sums(config, data, policies, q)
    main, greedy = comparisons(config, sums, [isinstance(p, str) for p in policies], True, refits)
    assert greedy is not None and main.difference is not None
    metrics = bandit_metrics(
        config,
        main,
        greedy,
        len(data.actions),
        baseline_name,
        reward_model if isinstance(reward_model, str) else ope.NETWORK,
        (candidate.epsilon, None if isinstance(baseline, str) else baseline.epsilon),
        np.bincount(candidate.greedy.argmax(1), minlength=num_actions).tolist(),
        "memory",
    )
    return metrics, main.difference[config.estimator]


def policy_action_minimum(policy: SavedPolicy) -> int:
    return int(policy.action_spec.minimum)


def split_is_empty(examples_uri: str, split: str = "eval") -> bool:
    """No record in the split's files (or no files at all)."""
    from rlops.components.common import records

    for path in sorted(tf.io.gfile.glob(records.split_file_pattern(examples_uri, split))):
        for _ in tf.data.TFRecordDataset(path, compression_type="GZIP").take(1):
            return False
    return True


def _no_estimate(reason: str, baseline_name: str) -> tuple[dict, ope.Estimate]:
    metrics = {
        "num_eval_records": 0,
        "baseline": baseline_name,
        "candidate": {},
        "candidate_greedy": {},
        "baseline_estimates": {},
        "improvement": {},
        "trust": {"trusted": False, "reason": reason},
    }
    return metrics, ope.Estimate(float("nan"), float("nan"), float("nan"), reason)


class BaselineModelError(ValueError):
    """The baseline model cannot be loaded at all (a corrupt or incomplete Model): broken input,
    named by its URI. (A baseline that loads but does not fit the eval split is not an error.)"""


def load_baseline(baseline_model_uri: str) -> SavedPolicy:
    try:
        return SavedPolicy(serving_dir(baseline_model_uri))
    except Exception as e:  # noqa: BLE001 - any load failure is the same user-facing fact
        detail = " ".join(str(e).split())[:200] or type(e).__name__
        raise BaselineModelError(f"baseline model {baseline_model_uri} cannot be loaded: {detail}") from None


def _spec_actions(policy: SavedPolicy) -> tuple[int, int]:
    """(number of actions, first id) of an exported policy's action spec."""
    spec = policy.action_spec
    return int(spec.maximum) - int(spec.minimum) + 1, int(spec.minimum)


def _records_schema(examples_uri: str, data: ope.LoggedFeedback):
    """The eval records' feature schema (legacy records without one: their dense context)."""
    from rlops.features import FeatureSchema, load as load_schema

    return load_schema(examples_uri) or FeatureSchema.legacy(int(np.asarray(data.contexts).shape[-1]))


def baseline_misfit(
    baseline: SavedPolicy,
    baseline_model_uri: str,
    candidate: SavedPolicy,
    num_actions: int,
    examples_uri: str,
    data: ope.LoggedFeedback,
) -> str | None:
    """Why the baseline model cannot score the eval split as the candidate does (rlops.features.fit,
    the Trainer's warm-start notion): other actions, other features, per-arm or not. None: it fits."""
    from rlops.features import load as load_schema
    from rlops.features.fit import action_misfit, schema_misfit

    why = action_misfit(_spec_actions(baseline), (num_actions, policy_action_minimum(candidate)))
    if why is not None:
        return why
    model_schema = load_schema(serving_dir(baseline_model_uri))
    if model_schema is not None:
        return schema_misfit(model_schema, _records_schema(examples_uri, data))
    # Exported without a schema: its observation spec is the only record of what it scores.
    spec = baseline.time_step_spec.observation
    if hasattr(spec, "shape") and data.features is None and spec.shape[-1:] != np.asarray(data.contexts).shape[-1:]:
        return (
            f"it scores {spec.shape[-1]} context values and the eval records have {np.asarray(data.contexts).shape[-1]}"
        )
    return None


def _fitting_baseline(
    baseline: SavedPolicy | None,
    baseline_model_uri: str | None,
    candidate: SavedPolicy,
    num_actions: int,
    examples_uri: str,
    data: ope.LoggedFeedback,
) -> tuple[SavedPolicy | None, str | None]:
    """(the baseline policy, None), or (None, why) when it cannot score the eval split: the run
    then compares against the logging policy and says so in one line (a config change since the
    baseline was blessed -- other features, actions or per-arm-ness -- is not an error)."""
    if baseline is None:
        return None, None
    why = baseline_misfit(baseline, baseline_model_uri, candidate, num_actions, examples_uri, data)
    if why is None:
        return baseline, None
    reason = f"baseline {baseline_model_uri} does not fit the eval split: {why}"
    log.warning("evaluator: %s; comparing against the logging policy instead", reason)
    return None, reason


def evaluate_bandit(
    config: EvaluatorConfig,
    examples_uri: str,
    model_uri: str,
    num_actions: int,
    baseline_model_uri: str | None,
    beam_pipeline_args: list[str] | None = None,
) -> tuple[dict, ope.Estimate]:
    policy = SavedPolicy(serving_dir(model_uri))
    # A corrupt baseline is an error naming it, whatever the split holds; one that does not fit is a note.
    loaded = load_baseline(baseline_model_uri) if baseline_model_uri else None
    if split_is_empty(examples_uri, "eval"):
        return _no_estimate(
            "the eval split has no records (see experience_gen.splits)", baseline_model_uri or LOGGING_BASELINE
        )
    if choose_engine(config, examples_uri) == "beam":
        return _evaluate_bandit_beam(
            config, examples_uri, policy, model_uri, loaded, baseline_model_uri, num_actions, beam_pipeline_args
        )
    data = load_logged_feedback(examples_uri, action_minimum=policy_action_minimum(policy))
    baseline_policy, skipped = _fitting_baseline(loaded, baseline_model_uri, policy, num_actions, examples_uri, data)
    candidate = policy_probs(policy, data, num_actions)
    baseline = ope.LOGGING_POLICY if baseline_policy is None else policy_probs(baseline_policy, data, num_actions)
    metrics, improvement = evaluate_logged(
        config,
        data,
        candidate,
        baseline,
        baseline_model_uri if baseline_policy is not None else LOGGING_BASELINE,
        choose_reward_model(config, data, policy),
    )
    if skipped:
        metrics["baseline_reason"] = skipped
    return metrics, improvement


def _evaluate_bandit_beam(
    config: EvaluatorConfig,
    examples_uri: str,
    policy: SavedPolicy,
    model_uri: str,
    loaded: SavedPolicy | None,
    baseline_model_uri: str | None,
    num_actions: int,
    beam_pipeline_args: list[str] | None,
) -> tuple[dict, ope.Estimate]:
    """evaluate_bandit on the Beam engine; the baseline's fit is checked on the first records."""
    from rlops.components.evaluator import beam

    head = load_logged_feedback(examples_uri, max_records=1000, action_minimum=policy_action_minimum(policy))
    baseline_policy, skipped = _fitting_baseline(loaded, baseline_model_uri, policy, num_actions, examples_uri, head)
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


def _find_serving_dir(path: str) -> str:
    """A policy SavedModel directory, or a Model artifact directory holding one (Format-Serving)."""
    from rlops.train.policy_saver import SPECS_FILE

    for candidate in (path, serving_dir(path)):
        if tf.io.gfile.exists(os.path.join(candidate, SPECS_FILE)):
            return candidate
    raise FileNotFoundError(
        f"--policy: {path} is neither a policy SavedModel (no {SPECS_FILE}) nor a Model "
        "artifact directory holding one; or pass 'uniform' or 'logging'"
    )


def choose_engine(config: EvaluatorConfig, examples_uri: str, split: str = "eval") -> str:
    """ "memory" or "beam": the config's engine, or by the split's size ("auto")."""
    if config.engine != "auto":
        return config.engine
    big = count_records(examples_uri, split, config.beam_threshold_records) > config.beam_threshold_records
    return "beam" if big else "memory"


def evaluate_on_logs(
    config: EvaluatorConfig,
    examples_uri: str,
    policy: str,
    split: str = "eval",
    num_actions: int | None = None,
    action_minimum: int | None = None,
    beam_pipeline_args: list[str] | None = None,
) -> dict:
    """What would `policy` (a SavedModel path, 'uniform' or 'logging') have earned on a split's logs?
    Every estimator with its interval, and the improvement over the logging policy (paired). A
    SavedModel is scored as served (serving_default's epsilon-greedy), its greedy value beside.
    `action_minimum`: the first action id (default: the policy's spec minimum, else 0). Large
    splits run on the Beam engine (choose_engine) with `beam_pipeline_args`."""
    saved = None
    if policy not in ("uniform", ope.LOGGING_POLICY):
        saved = SavedPolicy(_find_serving_dir(policy))
        spec = saved.action_spec
        spec_actions = int(spec.maximum) - int(spec.minimum) + 1
        if num_actions is not None and num_actions != spec_actions:
            raise ValueError(f"--num-actions {num_actions} disagrees with the policy's action spec ({spec_actions})")
        if action_minimum is not None and action_minimum != policy_action_minimum(saved):
            raise ValueError(
                f"--action-minimum {action_minimum} disagrees with the policy's action spec (minimum "
                f"{policy_action_minimum(saved)})"
            )
        num_actions, action_minimum = spec_actions, policy_action_minimum(saved)
    action_minimum = action_minimum or 0
    if policy == ope.LOGGING_POLICY and config.reward_model == ope.NETWORK:
        raise ValueError("--reward-model network needs a SavedModel policy")
    if choose_engine(config, examples_uri, split) == "beam":
        from rlops.components.evaluator import beam

        run = beam.evaluate_policy_on_logs(
            config, examples_uri, split, policy, saved, num_actions, action_minimum, beam_pipeline_args
        )
        return logs_result(config, run, policy, examples_uri, split)
    data = load_logged_feedback(examples_uri, split, action_minimum=action_minimum)
    in_logs = logs_num_actions(data)
    if num_actions is None:
        num_actions = in_logs
    elif saved is not None:
        check_policy_fits_logs(num_actions, in_logs, data.actions, action_minimum)
    check_actions(data.actions, num_actions, action_minimum)
    greedy, epsilon = None, None
    if saved is not None:
        probs = policy_probs(saved, data, num_actions)
        target, greedy, epsilon = probs.served, probs.greedy, probs.epsilon
    elif policy == "uniform":
        target = ope.uniform_probs(len(data.actions), num_actions, data.action_mask)
    else:
        target = ope.LOGGING_POLICY
    reward_model = choose_reward_model(config, data, saved)
    policies = [target, ope.LOGGING_POLICY] + ([greedy] if greedy is not None else [])
    q = ope.reward_predictions(
        reward_model,
        data,
        num_actions,
        seed=config.seed,
        balance=config.reward_model_balance,
        sample_size=config.reward_model_sample,
        target=ope.evaluated_probability(policies, data.actions),
    )
    refits = dm_refits(config, data, reward_model, policies, num_actions)
    sums = memory_sums(config, data, policies, q)
    main, greedy_cmp = comparisons(config, sums, [isinstance(p, str) for p in policies], True, refits)
    run = LogsRun(
        main,
        greedy_cmp,
        len(data.actions),
        num_actions,
        reward_model if isinstance(reward_model, str) else ope.NETWORK,
        epsilon,
        "memory",
    )
    return logs_result(config, run, policy, examples_uri, split)


def logs_num_actions(data: ope.LoggedFeedback) -> int:
    """The logs' number of actions: their action mask's or per-arm features' width, else the
    largest logged action + 1."""
    width = data.action_mask.shape[1] if data.action_mask is not None else _per_arm_width(data)
    return int(width or int(data.actions.max()) + 1)


def check_policy_fits_logs(
    num_actions: int, in_logs: int, actions: np.ndarray | None = None, action_minimum: int = 0
) -> None:
    """A policy of `num_actions` actions (its action spec) scores logs of `in_logs` actions only
    when every logged action is one of its own: else one line naming both numbers."""
    outside = None if actions is None else np.flatnonzero(actions >= num_actions)
    if in_logs <= num_actions or (outside is not None and not len(outside)):
        return
    example = ""
    if outside is not None:
        i = int(outside[0])
        example = f" (action {int(actions[i]) + action_minimum} in record {i} is not one of the policy's)"
    raise ValueError(
        f"the policy has {num_actions} actions (its action spec) but the logs have {in_logs}"
        f"{example}; evaluate it on logs of the actions it was trained on, or train one on these logs"
    )


def check_actions(actions: np.ndarray, num_actions: int, action_minimum: int, offset: int = 0) -> None:
    if len(actions) and int(actions.max()) >= num_actions:
        i = int(np.argmax(actions >= num_actions))
        raise ValueError(
            f"examples: action {actions[i] + action_minimum} in record {i + offset} is outside the "
            f"{num_actions} actions starting at {action_minimum}"
        )


@dataclass(frozen=True)
class LogsRun:
    """What either engine hands back for `rlops evaluate`: the policy against the logging policy
    and its greedy policy alone."""

    main: ope.Comparison
    greedy: ope.Comparison | None
    num_records: int
    num_actions: int
    reward_model: str
    epsilon: float | None
    engine: str


def logs_result(config: EvaluatorConfig, run: LogsRun, policy: str, examples_uri: str, split: str) -> dict:
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


def _per_arm_width(data: ope.LoggedFeedback) -> int | None:
    """K of per-arm records (the per_arm/<name> width), None for plain records."""
    from rlops.features.per_arm import PER_ARM_PREFIX

    width = [v.shape[1] for k, v in (data.features or {}).items() if k.startswith(PER_ARM_PREFIX)]
    return width[0] if width else None


def plot_policy_estimates(result: dict, path: str) -> None:
    """Every estimator's value and interval for one policy, the logging policy's mean as a line."""
    from rlops.envs.plots import pyplot

    plt = pyplot()
    names = list(result["estimates"])
    values, err = _error_bars(result["estimates"], names)
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


def _error_bars(estimates: dict, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(values, [2, n] error bars) of written estimates: an untrusted one (null) is not drawn, one
    without an interval is a dot; a bound clipped to the reward range past the point is a 0 bar."""

    def num(x) -> float:
        return float("nan") if x is None else float(x)

    values = np.array([num(estimates[n]["value"]) for n in names])
    lower = np.array([num(estimates[n]["lower"]) for n in names])
    upper = np.array([num(estimates[n]["upper"]) for n in names])
    err = np.nan_to_num(np.stack([values - lower, upper - values]))
    return values, np.maximum(err, 0.0)


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
    metrics = {
        "env_id": config.env_id,
        "num_episodes": config.num_episodes,
        "baseline": baseline_model_uri or "random_policy",
        "candidate": {"mean_return": cand.as_dict()},
        "baseline_estimates": {"mean_return": base.as_dict()},
        "improvement": {"mean_return": diff.as_dict()},
        "candidate_returns": candidate.tolist(),
        "baseline_returns": baseline.tolist(),
    }
    return metrics, diff


def run_evaluator(
    config: EvaluatorConfig | str,
    model_uri: str,
    evaluation_uri: str,
    blessing_uri: str,
    examples_uri: str | None = None,
    baseline_model_uri: str | None = None,
    num_actions: int | None = None,
    beam_pipeline_args: list[str] | None = None,
) -> EvalResult:
    if isinstance(config, str):
        config = EvaluatorConfig.from_json(config)
    if config.kind == "bandit":
        if not examples_uri or not num_actions:
            raise ValueError("evaluator: bandit evaluation needs the examples input and num_actions")
        metrics, improvement = evaluate_bandit(
            config, examples_uri, model_uri, num_actions, baseline_model_uri, beam_pipeline_args
        )
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
        reason = (
            f"improvement in {measure} over {metrics['baseline']}: {which} {score:.4f} "
            f"{'>' if blessed else '<='} {config.min_improvement}"
        )
    if metrics.get("baseline_reason"):
        reason += f" ({metrics['baseline_reason']})"
    metrics.update(
        {
            "blessed": blessed,
            "reason": reason,
            "rule": {
                "measure": measure,
                "use_lower_bound": config.use_lower_bound,
                "min_improvement": config.min_improvement,
            },
        }
    )
    log.info("evaluator: %s -> %s", reason, "BLESSED" if blessed else "NOT BLESSED")
    for uri in (evaluation_uri, blessing_uri):
        tf.io.gfile.makedirs(uri)
    with tf.io.gfile.GFile(os.path.join(evaluation_uri, METRICS_FILE), "w") as f:
        # strict JSON: a number the data cannot support is null, never NaN
        json.dump(json_safe(metrics), f, indent=1, allow_nan=False)
    with tf.io.gfile.GFile(os.path.join(blessing_uri, BLESSED_FILE if blessed else NOT_BLESSED_FILE), "w") as f:
        f.write(reason)
    if "://" not in evaluation_uri and metrics.get("candidate"):
        _plot_estimates(metrics, os.path.join(evaluation_uri, "estimates.png"))
    return EvalResult(blessed=blessed, reason=reason, metrics=metrics)


SCALAR_GROUPS = ("candidate", "candidate_greedy", "improvement")


def evaluation_properties(result: EvalResult) -> dict[str, Any]:
    """The evaluation artifact's properties (both faces): the improvement per estimator, which
    engine ran and how many eval records it read (to check against ExperienceGen's counts)."""
    improvement = finite_properties(result.metrics).get("improvement", {})
    out: dict[str, Any] = {"improvement": json.dumps(improvement, allow_nan=False)}
    for key in ("engine", "eval_records"):
        if result.metrics.get(key) is not None:
            out[key] = result.metrics[key]
    return out


def scalar_metrics(result: EvalResult) -> dict[str, float]:
    """candidate_<estimator> (the served policy), candidate_greedy_<estimator>,
    improvement_<estimator>, each with its lower bound, and blessed (0/1) -- the same names the
    KFP spec logs on its system.Metrics output. Only finite numbers: a bound the data cannot
    support is absent (ML Metadata cannot store NaN; the blessing's `reason` says why)."""
    out = {}
    for group in SCALAR_GROUPS:
        for name, estimate in result.metrics.get(group, {}).items():
            for suffix, key in (("", "value"), ("_lower", "lower")):
                if estimate.get(key) is not None:  # untrusted: no value, no bound (null)
                    out[f"{group}_{name}{suffix}"] = float(estimate[key])
    out["blessed"] = float(result.blessed)
    return finite_properties(out)


def _plot_estimates(metrics: dict, path: str) -> None:
    """Candidate vs baseline per estimator, with confidence intervals."""
    from rlops.envs.plots import pyplot

    plt = pyplot()
    names = list(metrics["candidate"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (label, key) in zip(
        (-0.15, 0.15), (("candidate", "candidate"), (f"baseline ({metrics['baseline']})"[:40], "baseline_estimates"))
    ):
        values, err = _error_bars(metrics[key], names)
        ax.errorbar(np.arange(len(names)) + offset, values, yerr=err, fmt="o", capsize=4, label=label)
    ax.set_xticks(np.arange(len(names)), [n.upper() if len(n) <= 5 else n for n in names])
    ax.set_ylabel("estimated value")
    ax.set_title(("BLESSED: " if metrics["blessed"] else "not blessed: ") + metrics["rule"]["measure"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
