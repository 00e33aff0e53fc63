"""Trainer's TFX executor: artifacts in, `run_trainer` out, results onto artifact properties."""

from __future__ import annotations

from typing import Any

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from rlops.components.common.keys import (
    BASE_MODEL_KEY,
    CONFIG_KEY,
    EXAMPLES_KEY,
    MODEL_KEY,
    MODEL_RUN_KEY,
    TOTAL_ENV_STEPS_KEY,
    TRAIN_STEPS_KEY,
)
from rlops.components.properties import set_custom_properties  # finite or absent: ML Metadata rejects NaN
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import apply_runtime_params, run_trainer  # the budget rule: core


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        examples = input_dict.get(EXAMPLES_KEY) or []
        base = input_dict.get(BASE_MODEL_KEY) or []
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        model_run = artifact_utils.get_single_instance(output_dict[MODEL_RUN_KEY])
        config = apply_runtime_params(
            TrainerConfig.from_json(exec_properties[CONFIG_KEY]),
            exec_properties.get(TRAIN_STEPS_KEY),
            exec_properties.get(TOTAL_ENV_STEPS_KEY),
        )
        result = run_trainer(
            config,
            model.uri,
            model_run.uri,
            examples_uri=examples[0].uri if examples else None,
            base_model_uri=base[0].uri if base else None,
        )
        properties = result.properties()
        set_custom_properties(model, properties[MODEL_KEY])
        set_custom_properties(model_run, properties[MODEL_RUN_KEY])
