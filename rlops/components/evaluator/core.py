"""The Evaluator's work as a plain function: candidate vs baseline -> metrics, plots, blessing.

Bandits (bandit.py): off-policy estimates (IPS, SNIPS, DM, DR, SNDR, Switch-DR, DR-os with
bootstrap intervals) of the policy the candidate SERVES -- serving_default's epsilon-greedy over
each record's allowed actions and candidates, from its exact action probabilities -- with the
greedy policy's value reported beside it, on the eval split's logged feedback (record weights
and action masks honoured; per-arm records whose candidate sets vary get a candidate mask from
num_actions and the shared [global, arm] reward model), paired against the baseline -- the last blessed model, or on the
first run the logging policy itself (the baseline too is scored as served). A blessed model
that cannot score the eval split (other features, actions or per-arm-ness: rlops.features.fit)
is replaced by the logging policy with a one-line note and `baseline_reason`; one that cannot be
loaded at all is a BaselineModelError naming it (baseline.py). Nothing is blessed
without a trustworthy interval: no eval records, too few, or too small an effective sample size
gives NOT_BLESSED with the reason, and the run goes on. PPO (ppo.py): returns of N episodes of
each policy in the environment (first run: against a uniform random policy). Ranking
(slate_policy.py): slate estimators of the page the candidate serves, on the eval split's pages.

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

import tensorflow as tf

from rlops.components.common.decision_kinds import read_record_kind
from rlops.components.common.keys import BLESSING_KEY, EVALUATION_KEY, METRICS_KEY
from rlops.components.common.model import BLESSED_FILE, NOT_BLESSED_FILE, SERVING_EPSILON_PROPERTY
from rlops.components.evaluator import gate
from rlops.components.evaluator.kinds import (
    AnyEvaluatorConfig,
    EvaluationInputs,
    evaluation_path,
    evaluator_config_from_json,
)
from rlops.components.evaluator.plots import plot_comparison
from rlops.components.properties import finite_properties, json_safe

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
SCALAR_GROUPS = ("candidate", "candidate_greedy", "improvement")


@dataclass
class EvalResult:
    blessed: bool
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)

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
        epsilon = (self.metrics.get("served_policy") or {}).get("candidate_epsilon")
        if self.blessed and epsilon is not None:  # the exploration certified: what the Pusher publishes
            out[SERVING_EPSILON_PROPERTY] = float(epsilon)
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


def run_evaluator(
    config: AnyEvaluatorConfig | str,
    model_uri: str,
    evaluation_uri: str,
    blessing_uri: str,
    examples_uri: str | None = None,
    baseline_model_uri: str | None = None,
    num_actions: int | None = None,
    beam_pipeline_args: list[str] | None = None,
) -> EvalResult:
    """The candidate against its baseline, by the path of its decision kind (evaluator.kinds)."""
    if isinstance(config, str):
        config = evaluator_config_from_json(config)
    path = checked_path(config, examples_uri, num_actions)
    given = EvaluationInputs(model_uri, examples_uri, baseline_model_uri, num_actions, beam_pipeline_args)
    metrics, improvement = path.evaluate(config, given)
    measure = path.measure(config, metrics)
    verdict = gate.judge(config, improvement, gate.baseline_value_of(metrics, measure))
    constant = constant_reward(examples_uri)
    if constant is not None:  # every logged reward the same: estimates say nothing about the policies
        blessed = False
        reason = (
            f"not blessed: every reward in the Examples is {constant:g} (ExperienceGen warned): an INNER JOIN "
            "that kept only clicked decisions, or an events window too short, leaves nothing to compare policies on"
        )
    elif not improvement.trusted:  # too little data: no rule may bless, whatever the point estimate says
        blessed = False
        reason = f"not blessed: no trustworthy estimate of the improvement in {measure}: {improvement.reason}"
    else:
        blessed = verdict.clears
        reason = f"improvement in {measure} over {metrics['baseline']}: {verdict.clause}"
    if metrics.get("baseline_reason"):
        reason += f" ({metrics['baseline_reason']})"
    if metrics.get("gate_note"):  # the configured estimator could not run on these logs: which did
        reason += f" ({metrics['gate_note']})"
    if metrics.get("certification"):  # bandits: the serving epsilons tried beyond the model's own
        reason += f" ({metrics['certification']})"
    metrics.update(
        {
            "blessed": blessed,
            "reason": reason,
            "rule": {
                "measure": measure,
                "use_lower_bound": config.use_lower_bound,
                "min_improvement": config.min_improvement,
                "max_regression": getattr(config, "max_regression", 0.0),
                "tolerated_regression": gate.margin(config, gate.baseline_value_of(metrics, measure)),
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
        plot_comparison(metrics, os.path.join(evaluation_uri, "estimates.png"))
    return EvalResult(blessed=blessed, reason=reason, metrics=metrics)


def checked_path(config: AnyEvaluatorConfig, examples_uri: str | None, num_actions: int | None) -> Any:
    """The config's kind's row, once the inputs it needs are given and the Examples (when it
    reads them) hold that kind's records (their record_kind, as ExperienceGen wrote it)."""
    path = evaluation_path(config.kind)
    if not isinstance(config, path.config_class):
        raise ValueError(f"evaluator: a {config.kind} evaluation is configured by {path.config_class.__name__}")
    missing = path.missing(examples_uri is not None, num_actions)
    if missing:
        raise ValueError(f"evaluator: {config.kind} evaluation needs {missing}")
    if path.reads_examples and examples_uri:
        logged = read_record_kind(examples_uri).name
        if evaluation_path(logged) is not path:
            raise ValueError(
                f"evaluator.kind: '{config.kind}', but the Examples at {examples_uri} hold {logged} records"
            )
    return path


def constant_reward(examples_uri: str | None) -> float | None:
    """The one reward every written record has, when ExperienceGen marked the Examples so (None:
    the rewards differ)."""
    from rlops.components.common.records import CONSTANT_REWARD_FILE

    if not examples_uri:
        return None
    path = os.path.join(examples_uri, CONSTANT_REWARD_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return float(json.load(f)["reward"])


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
