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

from rlops.components.common.beam_executor import init_beam_executor
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
from rlops.components.evaluator.core import run_evaluator
from rlops.components.properties import set_custom_properties


class Executor(tfx_evaluator_executor.Executor):  # for the launcher's id conversion only (see above)
    def __init__(self, context: tfx_evaluator_executor.Executor.Context | None = None):
        init_beam_executor(self, context)  # no TFX sdist for an in-process runner

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        model = artifact_utils.get_single_instance(input_dict[MODEL_KEY])
        examples = input_dict.get(EXAMPLES_KEY) or []
        baseline = (input_dict.get(BASELINE_MODEL_KEY) or [None])[0]
        evaluation = artifact_utils.get_single_instance(output_dict[EVALUATION_KEY])
        blessing = artifact_utils.get_single_instance(output_dict[BLESSING_KEY])
        result = run_evaluator(
            exec_properties[CONFIG_KEY],
            model.uri,
            evaluation.uri,
            blessing.uri,
            examples_uri=examples[0].uri if examples else None,
            baseline_model_uri=baseline.uri if baseline is not None else None,
            num_actions=exec_properties.get(NUM_ACTIONS_KEY),
            # the pipeline's beam_pipeline_args (TFX's BaseBeamExecutor), as ExperienceGen's
            beam_pipeline_args=list(getattr(self, "_beam_pipeline_args", None) or []),
        )
        properties = result.properties(
            model.uri,
            model.id,
            baseline.uri if baseline is not None else None,
            baseline.id if baseline is not None else None,
        )
        set_custom_properties(blessing, properties[BLESSING_KEY])
        set_custom_properties(evaluation, properties[EVALUATION_KEY])
        for metrics in output_dict.get(METRICS_KEY) or []:  # scalars the Vertex AI console shows
            set_custom_properties(metrics, properties[METRICS_KEY])
