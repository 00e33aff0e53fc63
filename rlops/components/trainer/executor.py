"""Trainer's TFX executor: artifacts in, `run_trainer` out, results onto artifact properties."""
from __future__ import annotations

from typing import Any

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from rlops.components.trainer.core import run_trainer


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        examples = input_dict.get("examples") or []
        base = input_dict.get("base_model") or []
        model = artifact_utils.get_single_instance(output_dict["model"])
        model_run = artifact_utils.get_single_instance(output_dict["model_run"])
        result = run_trainer(exec_properties["config"], model.uri, model_run.uri,
                             examples_uri=examples[0].uri if examples else None,
                             base_model_uri=base[0].uri if base else None)
        model.set_int_custom_property("train_steps", result.train_steps)
        model.set_float_custom_property("final_loss", result.final_loss)
        model.set_string_custom_property("warm_started_from", result.warm_started_from or "")
        model_run.set_float_custom_property("steps_per_sec", result.steps_per_sec)
