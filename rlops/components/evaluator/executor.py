"""Evaluator's TFX executor. The blessing's custom properties are TFX Evaluator's own
(`blessed`, `current_model`, `current_model_id`, `baseline_model`, `baseline_model_id`), so
TFX's LatestBlessedModelStrategy resolves our blessings like its own.

It subclasses TFX's Evaluator executor for one reason: on Vertex AI, TFX's v2 container launcher
hands executors an artifact `id` that is a hash of the artifact's resource name, and converts the
blessing's `current_model_id` / `baseline_model_id` back to resource names only for subclasses of
TFX's Evaluator executor (kubeflow_v2_run_executor.py). The compiled "latest blessed model"
resolver then matches `name="<current_model_id>"`; with the hash it never matched, so on Vertex
warm start and the baseline comparison silently never happened (see tests/pipelines/
test_vertex_emulator.py). Locally (LocalDagRunner) ids are ML Metadata's and nothing changes.
"""

from __future__ import annotations

from typing import Any

from tfx.components.evaluator import executor as tfx_evaluator_executor
from tfx.types import artifact_utils

from rlops.components.evaluator.core import evaluation_properties, run_evaluator, scalar_metrics  # noqa: F401 (re-exported)
from rlops.components.properties import set_custom_properties


class Executor(tfx_evaluator_executor.Executor):  # for the launcher's id conversion only (see above)
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        model = artifact_utils.get_single_instance(input_dict["model"])
        examples = input_dict.get("examples") or []
        baseline = (input_dict.get("baseline_model") or [None])[0]
        evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
        blessing = artifact_utils.get_single_instance(output_dict["blessing"])
        result = run_evaluator(
            exec_properties["config"],
            model.uri,
            evaluation.uri,
            blessing.uri,
            examples_uri=examples[0].uri if examples else None,
            baseline_model_uri=baseline.uri if baseline is not None else None,
            num_actions=exec_properties.get("num_actions"),
            # the pipeline's beam_pipeline_args (TFX's BaseBeamExecutor), as ExperienceGen's
            beam_pipeline_args=list(getattr(self, "_beam_pipeline_args", None) or []),
        )
        set_custom_properties(
            blessing,
            result.blessing_properties(
                model.uri,
                model.id,
                baseline.uri if baseline is not None else None,
                baseline.id if baseline is not None else None,
            ),
        )
        set_custom_properties(evaluation, evaluation_properties(result))
        for metrics in output_dict.get("metrics") or []:  # scalars the Vertex AI console shows
            set_custom_properties(metrics, scalar_metrics(result))
