"""ExperienceGen's TFX executor: exec properties and artifacts in, `run_experience_gen` out.

All the work is in core.run_experience_gen; this face only maps TFX artifacts onto its
arguments and its result onto the artifacts' properties. `core.apply_runtime_params` merges the
per-run values (Vertex runtime parameters here, KFP inputs in kfp.py) into the config at
execution time, so one compiled pipeline can ingest a different day every night.
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

from rlops.components.common.beam_executor import init_beam_executor
from rlops.components.common.keys import (
    CONFIG_KEY,
    DATA_DATE_KEY,
    DATA_PATTERN_KEY,
    EXAMPLES_KEY,
    NUM_RECORDS_KEY,
    POLICY_KEY,
    QUARANTINE_KEY,
)
from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource
from rlops.components.experience_gen.core import (
    ExperienceGenError,
    IngestResult,
    apply_runtime_params,
    run_experience_gen,
)


class Executor(base_beam_executor.BaseBeamExecutor):
    """TFX executor: exec_properties['config'] (JSON) -> run_experience_gen -> artifact properties."""

    def __init__(self, context: base_beam_executor.BaseBeamExecutor.Context | None = None):
        init_beam_executor(self, context)  # no TFX sdist for an in-process runner

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        config = apply_runtime_params(
            ExperienceGenConfig.from_json(exec_properties[CONFIG_KEY]),
            data_pattern=exec_properties.get(DATA_PATTERN_KEY),
            data_date=exec_properties.get(DATA_DATE_KEY),
            num_records=exec_properties.get(NUM_RECORDS_KEY),
        )
        policies = input_dict.get(POLICY_KEY) or []
        if policies:  # a Model artifact overrides the simulation's policy_path
            if not isinstance(config.source, SimulationSource):
                raise ValueError(
                    f"policy: a Model input is the logging policy of a simulation, not of a {config.source.kind} source"
                )
            config = dataclasses.replace(
                config, source=dataclasses.replace(config.source, policy_path=_policy_dir(policies[0].uri))
            )
        examples = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        quarantine = artifact_utils.get_single_instance(output_dict[QUARANTINE_KEY])
        try:
            result = run_experience_gen(config, examples.uri, quarantine.uri, self._beam_pipeline_args)
        except ExperienceGenError as e:
            record(e.result, examples, quarantine)
            kept = keep_quarantine(quarantine.uri)
            if not kept:
                raise
            raise ExperienceGenError(str(e).replace(quarantine.uri, kept), e.result) from None
        record(result, examples, quarantine)


def keep_quarantine(uri: str) -> str | None:
    """A copy of a failed run's quarantine beside it (`<uri>-failed`): TFX's launcher deletes a
    failed execution's output directories, and the error message points the user at the bad
    records. None when there was nothing to keep."""
    if not tf.io.gfile.isdir(uri) or not tf.io.gfile.listdir(uri):
        return None
    kept = uri.rstrip("/") + "-failed"
    if tf.io.gfile.isdir(kept):  # a retried attempt's copy
        tf.io.gfile.rmtree(kept)
    tf.io.gfile.makedirs(kept)
    for name in tf.io.gfile.listdir(uri):
        src = os.path.join(uri, name.rstrip("/"))
        if not tf.io.gfile.isdir(src):
            tf.io.gfile.copy(src, os.path.join(kept, name), overwrite=True)
    return kept


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
