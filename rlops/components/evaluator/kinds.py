"""The Evaluator's table: one row per decision kind (rlops.components.common.decision_kinds).

A row says which config class the `evaluator` section builds for the kind, what its evaluation
cannot run without, what the improvement is measured in, and the path that scores a candidate
against its baseline. `run_evaluator` and the TFX component look the row up by the kind's name;
nothing else in the Evaluator branches on a kind. A new kind adds its path module and one row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Union

from rlops.components.common.decision_kinds import BANDIT, SLATE, TRAJECTORY, kind_named
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.slate_config import SlateEvaluatorConfig

AnyEvaluatorConfig = Union[EvaluatorConfig, SlateEvaluatorConfig]


@dataclass(frozen=True)
class EvaluationInputs:
    """What one run hands its kind's path."""

    model_uri: str
    examples_uri: str | None
    baseline_model_uri: str | None
    num_actions: int | None
    beam_pipeline_args: list[str] | None


@dataclass(frozen=True)
class EvaluationPath:
    config_class: type[EvaluatorConfig] | type[SlateEvaluatorConfig]  # what the `evaluator` section builds
    reads_examples: bool  # estimates from the Examples' eval split (else: episodes in an environment)
    needs_num_actions: bool  # the action space's size, which the policies' outputs do not carry
    measure: Callable[[Any, dict[str, Any]], str]  # (config, metrics) -> what the improvement is measured in
    evaluate: Callable[[Any, EvaluationInputs], tuple[dict[str, Any], Estimate]]

    def missing(self, examples_given: bool, num_actions: int | None) -> str | None:
        """What this kind's evaluation lacks among the inputs given (None: nothing)."""
        if self.reads_examples and not examples_given:
            return "the examples input (with an eval split)"
        if self.needs_num_actions and not num_actions:
            return "num_actions"
        return None


def _bandit(config: EvaluatorConfig, given: EvaluationInputs) -> tuple[dict[str, Any], Estimate]:
    from rlops.components.evaluator.bandit import evaluate_bandit

    assert given.examples_uri and given.num_actions
    return evaluate_bandit(
        config,
        given.examples_uri,
        given.model_uri,
        given.num_actions,
        given.baseline_model_uri,
        given.beam_pipeline_args,
    )


def _episodes(config: EvaluatorConfig, given: EvaluationInputs) -> tuple[dict[str, Any], Estimate]:
    from rlops.components.evaluator.ppo import evaluate_ppo

    return evaluate_ppo(config, given.model_uri, given.baseline_model_uri)


def _pages(config: SlateEvaluatorConfig, given: EvaluationInputs) -> tuple[dict[str, Any], Estimate]:
    from rlops.components.evaluator.slate_policy import evaluate_slate_candidate

    assert given.examples_uri
    return evaluate_slate_candidate(config, given.examples_uri, given.model_uri, given.baseline_model_uri)


def _estimator(config: Any, metrics: dict[str, Any]) -> str:
    """The estimator that decided: the configured one, or the one the path fell back to (slate
    logs without prefix propensities: slate_policy.gate_estimator)."""
    return str(metrics.get("gate_estimator") or config.estimator)


EVALUATION_PATHS: dict[str, EvaluationPath] = {
    BANDIT: EvaluationPath(EvaluatorConfig, True, True, _estimator, _bandit),
    TRAJECTORY: EvaluationPath(EvaluatorConfig, False, False, lambda config, metrics: "mean_return", _episodes),
    SLATE: EvaluationPath(SlateEvaluatorConfig, True, False, _estimator, _pages),
}


def evaluation_path(kind: str) -> EvaluationPath:
    """The row for `kind` (a decision kind's name, or its pipeline's: `ppo`, `ranking`)."""
    name = kind_named(kind, "evaluator.kind").name
    path = EVALUATION_PATHS.get(name)
    if path is None:
        raise ValueError(f"evaluator.kind: the Evaluator cannot evaluate {name} policies yet")
    return path


def evaluator_config_from_dict(raw: dict[str, Any]) -> AnyEvaluatorConfig:
    """The `evaluator` section as its kind's config class (the kind defaults to bandit)."""
    kind = kind_named(str(raw.get("kind", BANDIT)), "evaluator.kind").name
    config: AnyEvaluatorConfig = evaluation_path(kind).config_class.from_dict({**raw, "kind": kind})
    return config


def evaluator_config_from_json(text: str) -> AnyEvaluatorConfig:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError(f"evaluator: expected a mapping, got {type(raw).__name__}")
    return evaluator_config_from_dict(raw)
