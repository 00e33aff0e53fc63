"""Pusher as a TFX component.

pusher = Pusher(model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
                push_destination="serving/", examples=gen.outputs["examples"])
pusher.outputs["pushed_model"]   # standard PushedModel; properties pushed, pushed_version, ...
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from rlops.components.common.keys import (
    EXAMPLES_KEY,
    KEEP_LAST_KEY,
    LITERT_ALLOW_FLEX_KEY,
    MODEL_BLESSING_KEY,
    MODEL_KEY,
    PUSH_DESTINATION_KEY,
    PUSHED_MODEL_KEY,
    VERIFY_ENV_ID_KEY,
    VERTEX_UPLOAD_KEY,
)
from rlops.components.pusher.core import STAGE_UNBLESSED_KEY, check_staging_dir
from rlops.components.pusher.executor import Executor
from rlops.components.pusher.publish import validate_keep_last
from rlops.components.pusher.registry import RegistryConfig


class PusherSpec(types.ComponentSpec):
    PARAMETERS = {
        PUSH_DESTINATION_KEY: ExecutionParameter(type=str),
        KEEP_LAST_KEY: ExecutionParameter(type=int, optional=True),
        VERIFY_ENV_ID_KEY: ExecutionParameter(type=str, optional=True),
        VERTEX_UPLOAD_KEY: ExecutionParameter(type=str, optional=True),
        LITERT_ALLOW_FLEX_KEY: ExecutionParameter(type=int, optional=True),
        STAGE_UNBLESSED_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        MODEL_BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {PUSHED_MODEL_KEY: ChannelParameter(type=standard_artifacts.PushedModel)}


class Pusher(base_component.BaseComponent):
    """Pushes blessed policies to a versioned serving directory, verified in a fresh process.

    Verification inputs come from the eval split of `examples` (bandits) or from observations of
    the Gymnasium env `verify_env_id` (PPO). `vertex_upload`: JSON of registry.RegistryConfig's fields,
    to also register the version in Vertex AI Model Registry (alias `champion`) and optionally deploy it.
    Every version carries policy.tflite beside the SavedModel (TFLite builtin ops only, checked
    under ai-edge-litert); `litert_allow_flex` publishes one that needs Flex ops instead of failing.
    `stage_unblessed`: a directory a candidate that did NOT bless is published to instead (verified
    the same way, marked UNBLESSED), never the serving directory: for integration tests only.
    """

    SPEC_CLASS = PusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        push_destination: str,
        examples: types.BaseChannel | None = None,
        keep_last: int = 5,
        verify_env_id: str | None = None,
        vertex_upload: str | None = None,
        litert_allow_flex: bool = False,
        stage_unblessed: str | None = None,
    ):
        if not push_destination:
            raise ValueError("Pusher: push_destination is empty")
        validate_keep_last(keep_last)  # at pipeline definition, not after a night of training
        if vertex_upload:
            RegistryConfig.from_json(vertex_upload)  # unknown keys, wrong types: one line naming the key
        if stage_unblessed is not None:
            check_staging_dir(stage_unblessed, push_destination)  # never the serving directory
        spec = PusherSpec(
            model=model,
            model_blessing=model_blessing,
            examples=examples,
            push_destination=push_destination,
            keep_last=keep_last,
            verify_env_id=verify_env_id,
            vertex_upload=vertex_upload,
            litert_allow_flex=int(bool(litert_allow_flex)),
            stage_unblessed=stage_unblessed or None,
            pushed_model=types.Channel(type=standard_artifacts.PushedModel),
        )
        super().__init__(spec=spec)
