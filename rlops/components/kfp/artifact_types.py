"""Artifact types that other KFP component libraries consume, declared by schema title.

Google Cloud Pipeline Components (GCPC 2.x, google_cloud_pipeline_components.types.artifact_types)
takes a model to upload to Vertex AI Model Registry (ModelUploadOp's `unmanaged_container_model`)
as `google.UnmanagedContainerModel` 0.0.1: uri = the model directory, metadata
{"containerSpec": {"imageUri": <serving image>}, "predictSchemata": {...} (optional)}. rlops does
not depend on GCPC; KFP matches artifact types by schema title, so this class is enough.
"""

from kfp import dsl


class UnmanagedContainerModel(dsl.Artifact):
    schema_title = "google.UnmanagedContainerModel"
    schema_version = "0.0.1"
