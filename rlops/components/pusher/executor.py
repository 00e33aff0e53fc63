"""Pusher's TFX executor: blessing check, verification inputs, push, PushedModel properties
(TFX Pusher's names: `pushed`, `pushed_destination`, `pushed_version`)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np
import tensorflow as tf
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from rlops.components.pusher import core, registry
from rlops.features.serving_names import serving_inputs_from_records

NUM_VERIFY_INPUTS = 64


def is_blessed(blessing) -> bool:
    if blessing.has_custom_property("blessed"):
        return bool(blessing.get_int_custom_property("blessed"))
    return tf.io.gfile.exists(os.path.join(blessing.uri, "BLESSED"))


def verification_inputs(examples_uri: str | None, env_id: str | None) -> dict[str, np.ndarray] | None:
    """Real observations for the pushed policy to act on: eval-split contexts or env observations."""
    if examples_uri:
        from rlops.components.evaluator.core import load_logged_feedback

        data = load_logged_feedback(
            examples_uri,
            max_records=NUM_VERIFY_INPUTS,  # not the whole split
            action_minimum=None,
        )  # inputs only: any action ids
        # A policy trained with action masks takes `observation_action_mask` too (others ignore it).
        mask = {} if data.action_mask is None else {"observation_action_mask": data.action_mask}
        if data.features is not None:  # a policy exported with its features takes them raw, by serving name
            return {**{f"observation_{k}": v for k, v in serving_inputs_from_records(data.features).items()}, **mask}
        dense = data.contexts.astype(np.float32)
        return {"observation": dense, **({"observation_context": dense, **mask} if mask else {})}
    if env_id:
        from rlops.envs.gym_env import GymVectorEnv

        env = GymVectorEnv(env_id, 8)
        obs = env.observation
        env.close()
        return {"observation": obs}
    return None


def _launcher_id(resource_name: str) -> int:
    """The int id TFX's v2 container launcher gives an artifact named `resource_name` on Vertex AI
    (kubeflow_v2_entrypoint_utils._get_hashed_id)."""
    return int(hashlib.sha256(resource_name.encode("utf-8")).hexdigest(), 16) % (1 << 63)


def model_reference(model, blessing) -> int | str:
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
        from rlops.components.trainer.core import serving_dir

        model = artifact_utils.get_single_instance(input_dict["model"])
        blessing = artifact_utils.get_single_instance(input_dict["model_blessing"])
        examples = input_dict.get("examples") or []
        pushed = artifact_utils.get_single_instance(output_dict["pushed_model"])
        blessed = is_blessed(blessing)
        inputs = (
            verification_inputs(examples[0].uri if examples else None, exec_properties.get("verify_env_id"))
            if blessed
            else None
        )
        keep_last = exec_properties.get("keep_last")
        lineage = core.lineage(
            model.uri,
            examples[0].uri if examples else None,
            {k: blessing.get_custom_property(k) for k in core.BLESSING_KEYS if blessing.has_custom_property(k)},
        )
        result = core.push_policy(
            serving_dir(model.uri),
            exec_properties["push_destination"],
            blessed,
            inputs,
            keep_last=5 if keep_last is None else keep_last,
            lineage=lineage,
            litert_allow_flex=bool(exec_properties.get("litert_allow_flex") or 0),
        )
        pushed.set_int_custom_property("pushed", int(result.pushed))
        if not result.pushed:
            pushed.set_string_custom_property("reason", result.reason)
            return
        pushed.set_string_custom_property("pushed_destination", result.destination)
        pushed.set_int_custom_property("pushed_version", result.version)
        pushed.set_string_custom_property("pushed_model", model.uri)
        reference = model_reference(model, blessing)
        if isinstance(reference, str):
            pushed.set_string_custom_property("pushed_model_id", reference)
        else:
            pushed.set_int_custom_property("pushed_model_id", reference)
        vertex = exec_properties.get("vertex_upload")
        if vertex:
            uploaded = registry.upload_version(
                result.destination, registry.RegistryConfig.from_dict(json.loads(vertex)), lineage
            )
            pushed.set_string_custom_property("vertex_model", uploaded["versioned_name"])
            if "endpoint" in uploaded:
                pushed.set_string_custom_property("vertex_endpoint", uploaded["endpoint"])
