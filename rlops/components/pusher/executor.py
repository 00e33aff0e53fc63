"""Pusher's TFX executor: artifacts in, `core.run_pusher` out, `PushResult.properties()` onto the
PushedModel (TFX Pusher's names: `pushed`, `pushed_destination`, `pushed_version`). What is
TFX's own stays here: the model's id as TFX's Vertex launcher hands it over (model_reference)."""

from __future__ import annotations

import hashlib
from typing import Any

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.types.artifact import Artifact

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
from rlops.components.properties import set_custom_properties
from rlops.components.pusher import core


def _launcher_id(resource_name: str) -> int:
    """The int id TFX's v2 container launcher gives an artifact named `resource_name` on Vertex AI
    (kubeflow_v2_entrypoint_utils._get_hashed_id)."""
    return int(hashlib.sha256(resource_name.encode("utf-8")).hexdigest(), 16) % (1 << 63)


def model_reference(model: Artifact, blessing: Artifact) -> int | str:
    """What identifies the pushed model in the metadata store: its ML Metadata id locally; on
    Vertex AI its resource name. There `model.id` is only a hash of that name (which nothing can
    query); the Evaluator's blessing carries the name in `current_model_id` once the launcher has
    converted it -- used when it hashes to this very model's id."""
    named = (
        blessing.get_custom_property("current_model_id") if blessing.has_custom_property("current_model_id") else None
    )
    if isinstance(named, str) and _launcher_id(named) == model.id:
        return named
    return model.id


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        model = artifact_utils.get_single_instance(input_dict[MODEL_KEY])
        blessing = artifact_utils.get_single_instance(input_dict[MODEL_BLESSING_KEY])
        examples = input_dict.get(EXAMPLES_KEY) or []
        pushed = artifact_utils.get_single_instance(output_dict[PUSHED_MODEL_KEY])
        keep_last = exec_properties.get(KEEP_LAST_KEY)
        result = core.run_pusher(
            model.uri,
            exec_properties[PUSH_DESTINATION_KEY],
            blessing.uri,
            {k: blessing.get_custom_property(k) for k in core.BLESSING_KEYS if blessing.has_custom_property(k)},
            examples_uri=examples[0].uri if examples else None,
            verify_env_id=exec_properties.get(VERIFY_ENV_ID_KEY) or None,
            keep_last=5 if keep_last is None else keep_last,
            vertex_upload=exec_properties.get(VERTEX_UPLOAD_KEY) or None,
            litert_allow_flex=bool(exec_properties.get(LITERT_ALLOW_FLEX_KEY) or 0),
            stage_unblessed=exec_properties.get(core.STAGE_UNBLESSED_KEY) or None,
        )
        set_custom_properties(pushed, result.properties(model.uri, model_reference(model, blessing))[PUSHED_MODEL_KEY])
