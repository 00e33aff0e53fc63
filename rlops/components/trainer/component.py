"""Trainer as a TFX component (spec / component / executor, like TFX's own).

    trainer = Trainer(config=TrainerConfig(agent="neural_epsilon_greedy", num_actions=10),
                      examples=gen.outputs["examples"], base_model=resolver.outputs["model"])
    trainer.outputs["model"]       # standard Model: Format-Serving/ policy SavedModel + checkpoints
    trainer.outputs["model_run"]   # standard ModelRun: TensorBoard logs, metrics.json, learning curve

`train_steps` (bandits) and `total_env_steps` (PPO) optionally override the config's budget when
the executor runs (e.g. from Vertex runtime parameters): see executor.apply_runtime_params.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from rlops.components.common.keys import (
    BASE_MODEL_KEY,
    CONFIG_KEY,
    EXAMPLES_KEY,
    MODEL_KEY,
    MODEL_RUN_KEY,
    TOTAL_ENV_STEPS_KEY,
    TRAIN_STEPS_KEY,
)
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import check_budget_kind
from rlops.components.trainer.executor import Executor


class TrainerSpec(types.ComponentSpec):
    PARAMETERS = {
        CONFIG_KEY: ExecutionParameter(type=str),
        TRAIN_STEPS_KEY: ExecutionParameter(type=int, optional=True),
        TOTAL_ENV_STEPS_KEY: ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
        BASE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        MODEL_RUN_KEY: ChannelParameter(type=standard_artifacts.ModelRun),
    }


class Trainer(base_component.BaseComponent):
    """Trains a PPO or bandit policy with the Learner; warm-starts from `base_model` if given."""

    SPEC_CLASS = TrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        config: TrainerConfig | str,
        examples: types.BaseChannel | None = None,
        base_model: types.BaseChannel | None = None,
        train_steps: int | data_types.RuntimeParameter | None = None,
        total_env_steps: int | data_types.RuntimeParameter | None = None,
    ):
        config = config if isinstance(config, TrainerConfig) else TrainerConfig.from_json(config)
        check_budget_kind(config, train_steps, total_env_steps)  # the executor applies the same rule
        config.check_inputs(has_examples=examples is not None)  # bandits need examples; PPO online an env id
        spec = TrainerSpec(
            config=config.to_json(),
            examples=examples,
            base_model=base_model,
            train_steps=train_steps,
            total_env_steps=total_env_steps,
            model=types.Channel(type=standard_artifacts.Model),
            model_run=types.Channel(type=standard_artifacts.ModelRun),
        )
        super().__init__(spec=spec)
