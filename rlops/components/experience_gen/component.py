"""ExperienceGen as a TFX component (laid out like TFX's own: spec, component, executor).

    gen = ExperienceGen(config=ExperienceGenConfig(...))
    gen.outputs["examples"]    # standard Examples: Split-train/, Split-eval/ gzipped TFRecords
    gen.outputs["quarantine"]  # ExperienceQuarantine: bad records, one JSON line each

Beam options come from the pipeline (`beam_pipeline_args`) or `with_beam_pipeline_args`.
`data_pattern`, `data_date` and `num_records` are optional per-run values (e.g. Vertex runtime
parameters) merged into the config when the executor runs: see core.apply_runtime_params.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.orchestration import data_types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from rlops.components.common.keys import (
    CONFIG_KEY,
    DATA_DATE_KEY,
    DATA_PATTERN_KEY,
    EXAMPLES_KEY,
    INPUT_FINGERPRINT_KEY,
    NUM_RECORDS_KEY,
    POLICY_KEY,
    QUARANTINE_KEY,
)
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.executor import Executor


class ExperienceQuarantine(types.Artifact):
    """Records ExperienceGen refused: reason, message, source file, line/offset, original payload
    (gzipped JSON Lines). Its custom properties carry the run's counts."""

    TYPE_NAME = "rlops.ExperienceQuarantine"


class ExperienceGenSpec(types.ComponentSpec):
    PARAMETERS = {
        CONFIG_KEY: ExecutionParameter(type=str),
        DATA_PATTERN_KEY: ExecutionParameter(type=str, optional=True),
        DATA_DATE_KEY: ExecutionParameter(type=str, optional=True),
        NUM_RECORDS_KEY: ExecutionParameter(type=int, optional=True),
        # Local runs: the input files' fingerprints (fingerprint.py), so that a file
        # replaced in place is ingested again instead of served from cache.
        INPUT_FINGERPRINT_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {POLICY_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True)}
    OUTPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        QUARANTINE_KEY: ChannelParameter(type=ExperienceQuarantine),
    }


class ExperienceGen(base_beam_component.BaseBeamComponent):
    """Logged (or simulated) experience -> validated, deterministically split Examples."""

    SPEC_CLASS = ExperienceGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        config: ExperienceGenConfig | str,
        policy: types.BaseChannel | None = None,
        data_pattern: str | data_types.RuntimeParameter | None = None,
        data_date: str | data_types.RuntimeParameter | None = None,
        num_records: int | data_types.RuntimeParameter | None = None,
        input_fingerprint: str | None = None,
    ):
        """config: the ExperienceGenConfig (or its JSON). policy: optional Model channel whose
        SavedModel an epsilon-greedy simulation logs with (overrides policy_path). data_pattern,
        data_date, num_records: optional per-run overrides (see core.apply_runtime_params).
        input_fingerprint: part of the cache key (fingerprint.input_fingerprint), not read."""
        if isinstance(config, ExperienceGenConfig):
            config = config.to_json()
        else:
            ExperienceGenConfig.from_json(config)  # fail at pipeline definition, not at run time
        spec = ExperienceGenSpec(
            config=config,
            policy=policy,
            data_pattern=data_pattern,
            data_date=data_date,
            num_records=num_records,
            input_fingerprint=input_fingerprint,
            examples=types.Channel(type=standard_artifacts.Examples),
            quarantine=types.Channel(type=ExperienceQuarantine),
        )
        super().__init__(spec=spec)
