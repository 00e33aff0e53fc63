"""Evaluator as a TFX component.

evaluator = Evaluator(config=EvaluatorConfig(kind="bandit"), model=trainer.outputs["model"],
                      examples=gen.outputs["examples"], baseline_model=resolver.outputs["model"],
                      num_actions=10)
evaluator.outputs["evaluation"]  # standard ModelEvaluation: metrics.json, estimates.png
evaluator.outputs["blessing"]    # standard ModelBlessing (TFX's BLESSED/NOT_BLESSED convention)
evaluator.outputs["metrics"]     # VertexMetrics: the scalar estimates as float properties
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.artifact import Artifact
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from rlops.components.common.keys import (
    BASELINE_MODEL_KEY,
    BLESSING_KEY,
    CONFIG_KEY,
    EVALUATION_KEY,
    EXAMPLES_KEY,
    METRICS_KEY,
    MODEL_KEY,
    NUM_ACTIONS_KEY,
)
from rlops.components.evaluator.executor import Executor
from rlops.components.evaluator.kinds import AnyEvaluatorConfig, evaluation_path, evaluator_config_from_json


class VertexMetrics(Artifact):
    """Scalar metrics as float custom properties. Its type name is KFP's `system.Metrics`, the
    schema title whose metadata the Vertex AI console shows as a run's metrics; TFX's launcher
    finds this class for that title through rlops.components.kfp.tfx_launcher."""

    TYPE_NAME = "system.Metrics"


class EvaluatorSpec(types.ComponentSpec):
    PARAMETERS = {
        CONFIG_KEY: ExecutionParameter(type=str),
        NUM_ACTIONS_KEY: ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
        BASELINE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        EVALUATION_KEY: ChannelParameter(type=standard_artifacts.ModelEvaluation),
        BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing),
        METRICS_KEY: ChannelParameter(type=VertexMetrics),
    }


class Evaluator(base_component.BaseComponent):
    """Off-policy (bandits) or in-environment (PPO) evaluation against a baseline -> blessing."""

    SPEC_CLASS = EvaluatorSpec
    # A Beam executor spec because the executor subclasses TFX's Evaluator executor (a Beam
    # executor; see executor.py for why); it runs no Beam pipeline itself.
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        config: AnyEvaluatorConfig | str,
        model: types.BaseChannel,
        examples: types.BaseChannel | None = None,
        baseline_model: types.BaseChannel | None = None,
        num_actions: int | None = None,
    ):
        if isinstance(config, str):
            config = evaluator_config_from_json(config)
        missing = evaluation_path(config.kind).missing(examples is not None, num_actions)
        if missing:  # found when the pipeline is built, not when the step runs
            raise ValueError(f"Evaluator: {config.kind} evaluation needs {missing}")
        spec = EvaluatorSpec(
            config=config.to_json(),
            num_actions=num_actions,
            model=model,
            examples=examples,
            baseline_model=baseline_model,
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing),
            metrics=types.Channel(type=VertexMetrics),
        )
        super().__init__(spec=spec)
