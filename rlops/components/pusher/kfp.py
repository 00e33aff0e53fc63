"""The Pusher's KFP face: `pusher` (KFP artifacts in, `run_pusher` run, `PushResult.properties()`
onto the PushedModel's metadata, the serving container for Vertex AI) and `latest_published`
(KFP's "latest blessed model" resolver: the newest version the Pusher published)."""

from __future__ import annotations

from typing import Any

from rlops.components.common.keys import PUSHED_MODEL_KEY
from rlops.components.common.kfp_io import RESOLVED, record

# Vertex AI's prebuilt TensorFlow prediction container: the newest the pinned aiplatform SDK lists
# (2.15; pusher.registry.DEFAULT_TF_RUNTIME). TF 2.15.1 loads and serves a pushed rlops policy
# written with TF 2.16 (checked by hand: `serving_default` answers).
# ({region}-docker.pkg.dev/vertex-ai/prediction/tf2-{cpu|gpu}.{major}-{minor}:latest).
SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"


def latest_published(push_destination: str, base_model: Any, baseline_model: Any, warm_start: bool = True) -> None:
    """The newest rlops version under push_destination -> its training run (the Trainer's Model
    artifact directory, recorded in the version marker's lineage) as both outputs' uri; the
    marker's lineage (version, data, the model's resource name) goes onto their metadata."""
    from rlops.components.pusher import publish
    from rlops.components.pusher.storage import open_store

    for artifact in (base_model, baseline_model):
        artifact.metadata[RESOLVED] = 0
    versions = [v for v in publish.scan(open_store(push_destination)) if v.is_rlops]
    if not versions:
        return
    latest = versions[-1]
    lineage: dict[str, Any] = (latest.marker or {}).get("lineage") or {}
    training_run = lineage.get("training_run")
    if not training_run:
        raise ValueError(
            f"push_destination: version {latest.number} under {push_destination} has no "
            f"lineage.training_run in its {publish.MARKER}, so there is no model to warm-start from"
        )
    evaluation = lineage.get("evaluation") or {}
    info = {
        RESOLVED: 1,
        "pushed_version": latest.number,
        "training_run": training_run,
        "data": lineage.get("data") or "",
        "model_id": evaluation.get("current_model_id", ""),
    }
    for artifact in (base_model, baseline_model) if warm_start else (baseline_model,):
        artifact.uri = training_run
        artifact.metadata.update(info)


def pusher(
    model: Any,
    blessing: Any,
    push_destination: str,
    pushed_model: Any,
    examples: Any = None,
    keep_last: int = 5,
    verify_env_id: str = "",
    vertex_upload: str = "",
    serving_model: Any = None,
    litert_allow_flex: bool = False,
    stage_unblessed: str = "",
) -> bool:
    """serving_model (google.UnmanagedContainerModel): the pushed version with its serving
    container, for Google Cloud Pipeline Components' ModelUploadOp; only meaningful when pushed.
    litert_allow_flex: publish a LiteRT policy that needs Flex ops (unchecked) instead of failing.
    stage_unblessed: a directory an unblessed candidate is published to (integration tests only;
    the step still returns False: nothing was pushed to serve)."""
    from rlops.components.pusher import core

    result = core.run_pusher(
        model.uri,
        push_destination,
        blessing.uri,
        dict(blessing.metadata or {}),
        examples_uri=examples.uri if examples else None,
        verify_env_id=verify_env_id or None,
        keep_last=keep_last,
        vertex_upload=vertex_upload or None,
        litert_allow_flex=bool(litert_allow_flex),
        stage_unblessed=stage_unblessed or None,
    )
    record(pushed_model, result.properties(model.uri, model.name)[PUSHED_MODEL_KEY])
    if not result.pushed:
        return False
    # google.UnmanagedContainerModel's shape: what Vertex AI serves it with
    pushed_model.metadata["containerSpec"] = {"imageUri": SERVING_IMAGE}
    pushed_model.uri = result.destination  # the served SavedModel itself, for downstream steps
    if serving_model is not None:
        serving_model.uri = result.destination
        serving_model.metadata["containerSpec"] = {"imageUri": SERVING_IMAGE}
    return True
