"""Vertex AI Model Registry: a pushed version becomes a registry model version, `champion` moves to it,
and optionally it is deployed to an endpoint with a share of the traffic.

    config = RegistryConfig(project="p", region="us-central1", display_name="digits-policy",
                            parent_model="projects/p/locations/us-central1/models/123",  # versions of one model
                            endpoint="4567", traffic_percentage=10)                       # a 10% canary
    upload_version("gs://bucket/serving/1795555601", config, lineage={...})

Served by Vertex's prebuilt TensorFlow prediction container (the policy's `serving_default`), so no
custom image is needed. Vertex keeps an alias on one version at a time: uploading a version with
`champion` takes it from the previous champion.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rlops.components.json_config import ConfigValueError, JsonConfig

# Newest TF2 prediction runtime google-cloud-aiplatform 1.165 lists (constants/prediction.py). rlops
# exports with TF 2.16 using only ops 2.15 has; override with `tf_version` once a newer one is listed.
DEFAULT_TF_RUNTIME = "2.15"
_ALIAS = re.compile(r"^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9-]$")  # Vertex's alias rule


@dataclass
class RegistryConfig(JsonConfig):
    """Registers each pushed version in Vertex AI Model Registry (the alias moves to it) and, with
    an `endpoint`, deploys it there with `traffic_percentage` of the traffic."""

    SECTION = "vertex_upload"  # the key path errors name: the Pusher's JSON parameter, pusher.vertex_upload in YAML

    project: str  # Google Cloud project of the Model Registry (and the endpoint)
    region: str  # Vertex region, e.g. us-central1; also picks the prebuilt serving container
    display_name: str  # the registry model's display name (and the deployed model's)
    parent_model: str | None = None  # model resource name or id: upload as a new version of it
    # Version alias moved to each pushed version (Vertex keeps an alias on one version at a time)
    alias: str = "champion"
    serving_container_image_uri: str | None = None  # default: prebuilt TF CPU container of `region`
    # TF version of Vertex's prebuilt prediction container (used without serving_container_image_uri);
    # the default is the newest TF2 runtime Vertex lists (the export uses only ops it has; see DEFAULT_TF_RUNTIME)
    tf_version: str = DEFAULT_TF_RUNTIME
    labels: dict[str, str] = field(default_factory=dict)  # Vertex labels: strings to strings
    endpoint: str | None = None  # endpoint resource name or id: deploy there
    traffic_percentage: int = 100  # the new version's share; the rest stays with what is deployed
    machine_type: str = "n1-standard-2"  # Compute Engine machine type of the endpoint's serving nodes (with `endpoint`)
    min_replica_count: int = 1  # fewest serving nodes the endpoint keeps for this version (with `endpoint`; >= 1)
    max_replica_count: int = 1  # most serving nodes autoscaling may grow to (with `endpoint`; >= min_replica_count)

    def __post_init__(self) -> None:
        missing = [k for k in ("project", "region", "display_name") if not getattr(self, k)]
        if missing:
            raise ConfigValueError(f"vertex_upload needs {', '.join(missing)}")
        if not _ALIAS.match(self.alias) or self.alias.isdigit():
            raise ConfigValueError(
                f"vertex_upload.alias {self.alias!r}: Vertex aliases match [a-z][a-zA-Z0-9-]*[a-z0-9-]"
            )
        if (
            isinstance(self.traffic_percentage, bool)
            or not isinstance(self.traffic_percentage, int)
            or not 0 <= self.traffic_percentage <= 100
        ):
            raise ConfigValueError(
                f"vertex_upload.traffic_percentage must be an integer 0..100, got {self.traffic_percentage!r}"
            )
        if not 1 <= self.min_replica_count <= self.max_replica_count:
            raise ConfigValueError("vertex_upload: need 1 <= min_replica_count <= max_replica_count")


def prebuilt_container_uri(region: str, tf_version: str = DEFAULT_TF_RUNTIME) -> str:
    """Vertex's prebuilt TensorFlow CPU prediction image for `region` (us/europe/asia registry)."""
    from google.cloud.aiplatform import helpers

    return helpers.get_prebuilt_prediction_container_uri(
        framework="tensorflow", framework_version=tf_version, region=region, accelerator="cpu"
    )


def upload_kwargs(artifact_uri: str, config: RegistryConfig, lineage: dict | None = None) -> dict[str, Any]:
    """Arguments of `aiplatform.Model.upload` (built apart so they can be checked without a cloud)."""
    if not artifact_uri.startswith("gs://"):
        raise ValueError(
            f"Vertex AI serves models from Cloud Storage; artifact_uri must be gs://..., got {artifact_uri}"
        )
    kwargs: dict[str, Any] = {
        "display_name": config.display_name,
        "artifact_uri": artifact_uri,
        "serving_container_image_uri": config.serving_container_image_uri
        or prebuilt_container_uri(config.region, config.tf_version),
        "version_aliases": [config.alias],
        "is_default_version": True,
        "labels": dict(config.labels),
        "project": config.project,
        "location": config.region,
        "sync": True,
    }
    if lineage:
        kwargs["version_description"] = json.dumps(lineage, default=str)[:2000]
    if config.parent_model:
        kwargs["parent_model"] = config.parent_model
    return kwargs


def upload_version(
    artifact_uri: str,
    config: RegistryConfig,
    lineage: dict | None = None,
    credentials: Any = None,
    aiplatform: Any = None,
) -> dict[str, Any]:
    """Uploads, moves the alias, optionally deploys. Returns resource names and the traffic split.
    `credentials`: google.auth credentials (default: ADC); `aiplatform`: the SDK module (tests)."""
    if aiplatform is None:
        from google.cloud import aiplatform as sdk

        aiplatform = sdk
    kwargs = upload_kwargs(artifact_uri, config, lineage)
    if credentials is not None:
        kwargs["credentials"] = credentials
    model = aiplatform.Model.upload(**kwargs)
    out: dict[str, Any] = {
        "model": model.resource_name,
        "version_id": model.version_id,
        "versioned_name": f"{model.resource_name}@{model.version_id}",
        "alias": config.alias,
    }
    if config.endpoint:
        endpoint = aiplatform.Endpoint(
            config.endpoint, project=config.project, location=config.region, credentials=credentials
        )
        model.deploy(
            endpoint=endpoint,
            traffic_percentage=config.traffic_percentage,
            machine_type=config.machine_type,
            min_replica_count=config.min_replica_count,
            max_replica_count=config.max_replica_count,
            deployed_model_display_name=config.display_name,
            sync=True,
        )
        out.update(endpoint=endpoint.resource_name, traffic_split=dict(endpoint.traffic_split))
    return out
