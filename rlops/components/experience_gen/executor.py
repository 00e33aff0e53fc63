"""ExperienceGen's TFX executor: exec properties and artifacts in, `run_experience_gen` out.

All the work is in core.run_experience_gen; this face only maps TFX artifacts onto its
arguments and its result onto the artifacts' properties.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import tensorflow as tf
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import ExperienceGenError, IngestResult, run_experience_gen


class Executor(base_beam_executor.BaseBeamExecutor):
    """TFX executor: exec_properties['config'] (JSON) -> run_experience_gen -> artifact properties."""

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        config = ExperienceGenConfig.from_json(exec_properties["config"])
        policies = input_dict.get("policy") or []
        if policies:  # a Model artifact overrides the simulation's policy_path
            config = dataclasses.replace(config, source=dataclasses.replace(
                config.source, policy_path=_policy_dir(policies[0].uri)))
        examples = artifact_utils.get_single_instance(output_dict["examples"])
        quarantine = artifact_utils.get_single_instance(output_dict["quarantine"])
        try:
            result = run_experience_gen(config, examples.uri, quarantine.uri, self._beam_pipeline_args)
        except ExperienceGenError as e:
            record(e.result, examples, quarantine)
            raise
        record(result, examples, quarantine)


def _policy_dir(model_uri: str) -> str:
    """TFX Trainer puts the SavedModel under Format-Serving/; ours may sit at the root."""
    serving = os.path.join(model_uri, "Format-Serving")
    return serving if tf.io.gfile.exists(serving) else model_uri


def record(result: IngestResult, examples: Any, quarantine: Any) -> None:
    """Counts and formats onto the TFX artifacts: what StatisticsGen and the Trainer look at."""
    examples.split_names = artifact_utils.encode_split_names(result.split_names)
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.Value(result.payload_format))
    examples_utils.set_file_format(examples, "tfrecords_gzip")
    for artifact in (examples, quarantine):
        for key, value in result.properties().items():
            if isinstance(value, int):
                artifact.set_int_custom_property(key, value)
            elif isinstance(value, float):
                artifact.set_float_custom_property(key, value)
            else:
                artifact.set_string_custom_property(key, value)
