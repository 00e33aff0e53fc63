"""Evaluator's TFX executor. The blessing's custom properties are TFX Evaluator's own
(`blessed`, `current_model`, `current_model_id`, `baseline_model`, `baseline_model_id`), so
TFX's LatestBlessedModelStrategy resolves our blessings like its own."""
from __future__ import annotations

import json
from typing import Any

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from rlops.components.evaluator.core import run_evaluator


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        model = artifact_utils.get_single_instance(input_dict["model"])
        examples = input_dict.get("examples") or []
        baseline = (input_dict.get("baseline_model") or [None])[0]
        evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
        blessing = artifact_utils.get_single_instance(output_dict["blessing"])
        result = run_evaluator(exec_properties["config"], model.uri, evaluation.uri, blessing.uri,
                               examples_uri=examples[0].uri if examples else None,
                               baseline_model_uri=baseline.uri if baseline is not None else None,
                               num_actions=exec_properties.get("num_actions"))
        blessing.set_int_custom_property("blessed", int(result.blessed))
        blessing.set_string_custom_property("current_model", model.uri)
        blessing.set_int_custom_property("current_model_id", model.id)
        if baseline is not None:
            blessing.set_string_custom_property("baseline_model", baseline.uri)
            blessing.set_int_custom_property("baseline_model_id", baseline.id)
        blessing.set_string_custom_property("reason", result.reason)
        evaluation.set_string_custom_property("improvement", json.dumps(result.metrics["improvement"]))
