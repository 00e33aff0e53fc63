"""The Pusher's work as a plain function: blessed policy -> versioned, verified serving dir.

Layout of a destination (local path or bucket, through tf.io.gfile):

    <destination>/<version>/           one complete policy SavedModel per version (integers,
                                       strictly increasing: what TF Serving watches)
    <destination>/.incoming-<...>/     staging; never a number, so servers ignore it

Publishing copies into staging, verifies the staged copy in a separate process, then renames
it to its version: on a local disk a reader sees either no version or a complete one. (On GCS
a rename is a copy+delete per object; there, TF Serving's own version polling only loads a
version once its SavedModel file exists, which we write last.)
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

log = logging.getLogger(__name__)


@dataclass
class PushResult:
    pushed: bool
    version: int | None = None
    destination: str | None = None
    reason: str = ""
    removed_versions: tuple[int, ...] = ()


def existing_versions(destination: str) -> list[int]:
    if not tf.io.gfile.exists(destination):
        return []
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(destination)]
    return sorted(int(n) for n in names if n.isdigit())


def next_version(destination: str) -> int:
    """Seconds since the epoch (TFX Pusher's convention), bumped past the newest version so
    versions stay strictly increasing even for two pushes within one second."""
    versions = existing_versions(destination)
    return max(int(time.time()), (versions[-1] + 1) if versions else 0)


def _copy_tree(src: str, dst: str, last: tuple[str, ...] = ("saved_model.pb",)) -> None:
    """Recursive copy through tf.io.gfile; files named in `last` are copied at the very end."""
    deferred = []
    for root, _, files in tf.io.gfile.walk(src):
        rel = os.path.relpath(root, src)
        target_root = dst if rel == "." else os.path.join(dst, rel)
        tf.io.gfile.makedirs(target_root)
        for name in files:
            pair = (os.path.join(root, name), os.path.join(target_root, name))
            if name in last:
                deferred.append(pair)
            else:
                tf.io.gfile.copy(*pair, overwrite=True)
    for src_file, dst_file in deferred:
        tf.io.gfile.copy(src_file, dst_file, overwrite=True)


def verify_in_subprocess(saved_model_dir: str, inputs: dict[str, np.ndarray], timeout_s: float = 300) -> dict:
    """Loads the SavedModel in a fresh Python process and calls `action` on `inputs`."""
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "inputs.npz")
        np.savez(npz, **inputs)
        local_dir = saved_model_dir
        if "://" in saved_model_dir:  # the verifier reads local files: pull a bucket copy down
            local_dir = os.path.join(tmp, "model")
            _copy_tree(saved_model_dir, local_dir)
        proc = subprocess.run([sys.executable, "-m", "rlops.components.pusher.verify", local_dir, npz],
                              capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "error": f"verifier exited {proc.returncode}: {proc.stderr[-2000:]}"}
    return json.loads(lines[-1])


def push_policy(policy_dir: str, destination: str, blessed: bool, verify_inputs: dict[str, np.ndarray] | None,
                keep_last: int = 5) -> PushResult:
    """Publishes `policy_dir` (a policy SavedModel) as a new version under `destination`.

    Not blessed: nothing is written and the current versions stay. Verification failure: the
    staging copy is removed and a RuntimeError says why; no version appears.
    """
    if not blessed:
        return PushResult(pushed=False, reason="model not blessed")
    if not tf.io.gfile.exists(os.path.join(policy_dir, "saved_model.pb")):
        raise FileNotFoundError(f"no SavedModel at {policy_dir} (saved_model.pb missing)")
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    tf.io.gfile.makedirs(destination)
    version = next_version(destination)
    staging = os.path.join(destination, f".incoming-{version}-{uuid.uuid4().hex[:8]}")
    try:
        _copy_tree(policy_dir, staging)
        if verify_inputs is not None:
            check = verify_in_subprocess(staging, verify_inputs)
            if not check.get("ok"):
                raise RuntimeError(f"pushed policy failed verification in a fresh process: {check.get('error')}")
            log.info("verified version %d in a fresh process on %d inputs", version, check["num_actions"])
        final = os.path.join(destination, str(version))
        tf.io.gfile.rename(staging, final, overwrite=False)
    finally:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.rmtree(staging)
    removed = tuple(v for v in existing_versions(destination)[:-keep_last])
    for v in removed:
        tf.io.gfile.rmtree(os.path.join(destination, str(v)))
    return PushResult(pushed=True, version=version, destination=final, removed_versions=removed)


def vertex_model_upload_request(display_name: str, artifact_uri: str, serving_container_image_uri: str,
                                project: str, region: str, labels: dict[str, str] | None = None,
                                parent_model: str | None = None) -> dict:
    """Keyword arguments for `google.cloud.aiplatform.Model.upload` (Vertex AI Model Registry).

    Built separately so it can be checked without a cloud; `upload_to_vertex` sends it.
    """
    missing = [k for k, v in {"display_name": display_name, "artifact_uri": artifact_uri, "project": project,
                              "region": region, "serving_container_image_uri": serving_container_image_uri}.items()
               if not v]
    if missing:
        raise ValueError(f"Vertex AI model upload needs {', '.join(missing)}")
    if not artifact_uri.startswith("gs://"):
        raise ValueError(f"Vertex AI serves models from Cloud Storage; artifact_uri must be gs://..., got {artifact_uri}")
    request = {"display_name": display_name, "artifact_uri": artifact_uri,
               "serving_container_image_uri": serving_container_image_uri, "project": project,
               "location": region, "labels": dict(labels or {}), "sync": True}
    if parent_model:
        request["parent_model"] = parent_model  # a new version of an existing registry model
    return request


def upload_to_vertex(request: dict, aiplatform=None) -> str:
    """Sends the upload; returns the registry resource name. `aiplatform` is injectable for tests."""
    if aiplatform is None:
        from google.cloud import aiplatform
    model = aiplatform.Model.upload(**request)
    return model.resource_name
