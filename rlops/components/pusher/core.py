"""The Pusher's work as a plain function: blessed policy -> verified, atomically published version.

Publishing itself (layout, the invariant servers rely on, version claims, retention) lives in
`publish.py`; this module adds the Pusher's policy: blessed only, verified in a fresh process on at
least one real input, lineage in the version's marker, and a LiteRT twin (policy.tflite, checked
under ai-edge-litert alone against the SavedModel: litert_stage).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from rlops.components.pusher import publish
from rlops.components.pusher.storage import open_store

log = logging.getLogger(__name__)


@dataclass
class PushResult:
    pushed: bool
    version: int | None = None
    destination: str | None = None
    reason: str = ""
    removed_versions: tuple[int, ...] = ()


def existing_versions(destination: str, gcs_client=None) -> list[int]:
    """rlops versions (numeric directories carrying rlops' marker), oldest first."""
    store = open_store(destination, gcs_client)
    return publish.rlops_versions(store)


def check_verify_inputs(inputs: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    if not inputs:
        raise ValueError("Pusher verification needs inputs: give `examples` (bandits) or `verify_env_id` (PPO)")
    empty = [name for name, value in inputs.items() if len(value) == 0]
    if empty:
        raise ValueError(f"Pusher verification needs at least one input; {', '.join(empty)} has 0 rows")
    return inputs


def verify_in_subprocess(saved_model_dir: str, inputs: dict[str, np.ndarray], timeout_s: float = 300) -> dict:
    """Loads the (local) SavedModel in a fresh Python process and calls `action` on `inputs`."""
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "inputs.npz")
        np.savez(npz, **inputs)
        proc = subprocess.run(
            [sys.executable, "-m", "rlops.components.pusher.verify", saved_model_dir, npz],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "error": f"verifier exited {proc.returncode}: {proc.stderr[-2000:]}"}
    return json.loads(lines[-1])


def subprocess_verifier(inputs: dict[str, np.ndarray]) -> Callable[[str], None]:
    inputs = check_verify_inputs(inputs)

    def verify(local_dir: str) -> None:
        check = verify_in_subprocess(local_dir, inputs)
        if not check.get("ok"):
            raise RuntimeError(f"pushed policy failed verification in a fresh process: {check.get('error')}")
        log.info("verified the staged policy in a fresh process on %d inputs", check["num_actions"])

    return verify


UNSEEN_PREFIX = "__rlops_unseen__"
NUM_UNSEEN_ROWS = 16


def litert_inputs(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The verification inputs (keyed for the `action` signature) under serving input names, plus
    up to NUM_UNSEEN_ROWS copies of the first rows whose every string is one no vocabulary holds:
    out-of-vocabulary strings must behave the same in both artifacts."""
    out = {k[len("observation_") :] if k.startswith("observation_") else k: np.asarray(v) for k, v in inputs.items()}
    strings = [k for k, v in out.items() if v.dtype.kind in "OSU"]
    if not strings:
        return out
    n = min(NUM_UNSEEN_ROWS, min(len(v) for v in out.values()))
    extra = {k: v[:n].copy() for k, v in out.items()}
    for k in strings:
        v = extra[k].astype(object)
        flat = v.reshape(-1)
        for i, value in enumerate(flat):
            if value not in ("", b""):  # padding stays padding
                flat[i] = f"{UNSEEN_PREFIX}{k}_{i}"
        extra[k] = v
    return {k: np.concatenate([out[k].astype(object) if k in strings else out[k], extra[k]]) for k in out}


def litert_stage(inputs: dict[str, np.ndarray], allow_flex: bool = False) -> Callable[[str], None]:
    """Writes policy.tflite + policy_litert.json beside the staged SavedModel and checks them against
    it in a fresh process that runs ai-edge-litert alone (rlops.train.litert.compare). A model that
    needs Flex ops fails here with one line naming them, unless `allow_flex` (then the standalone
    runtime cannot run it, and only the conversion is checked)."""
    from rlops.train import litert

    inputs = check_verify_inputs(inputs)

    def stage(local_dir: str) -> None:
        policy = litert.convert_policy(local_dir, allow_flex=allow_flex)
        policy.save(local_dir)
        if allow_flex:
            log.warning(
                "litert_allow_flex: %s is not checked (ai-edge-litert has no Flex delegate)", litert.LITERT_FILE
            )
            return
        error = litert.compare(local_dir, os.path.join(local_dir, litert.LITERT_FILE), litert_inputs(inputs))
        if error:
            raise RuntimeError(error)
        log.info("verified %s under ai-edge-litert alone", litert.LITERT_FILE)

    return stage


def _both(first: Callable[[str], None], second: Callable[[str], None]) -> Callable[[str], None]:
    def run(local_dir: str) -> None:
        first(local_dir)
        second(local_dir)

    return run


# The Evaluator's blessing properties a version marker keeps (both Evaluator faces write them;
# `latest_published` reads current_model_id back).
BLESSING_KEYS = ("blessed", "current_model", "current_model_id", "reason", "baseline_model", "baseline_model_id")


def lineage(model_uri: str, examples_uri: str | None, blessing: Mapping[str, Any]) -> dict:
    """What the version marker records about where a policy came from: the data, the training run
    (the Model artifact's directory) and the Evaluator's verdict (BLESSING_KEYS of the blessing's
    properties). The one builder both Pusher faces (TFX, KFP) call, so their markers agree."""
    evaluation = {k: blessing[k] for k in BLESSING_KEYS if k in blessing}
    return {
        "data": examples_uri,
        "training_run": model_uri,
        "evaluation": {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in evaluation.items()},
    }


def push_policy(
    policy_dir: str,
    destination: str,
    blessed: bool,
    verify_inputs: dict[str, np.ndarray] | None,
    keep_last: int = 5,
    lineage: dict | None = None,
    verifier: Callable[[str], None] | None = None,
    gcs_client=None,
    litert: bool = True,
    litert_allow_flex: bool = False,
) -> PushResult:
    """Publishes `policy_dir` (a policy SavedModel) as a new version under `destination`.

    Not blessed: nothing is written and the current versions stay. The staged copy is verified by
    `verifier` (default: a fresh process acting on `verify_inputs`, which must hold >= 1 row); on
    failure no version appears and a RuntimeError says why. With `litert` (the default), the
    version also carries policy.tflite, converted from the staged SavedModel and checked against
    it on `verify_inputs` (litert_stage); a conversion needing Flex ops fails the push unless
    `litert_allow_flex`.
    """
    if not blessed:
        return PushResult(pushed=False, reason="model not blessed")
    publish.validate_keep_last(keep_last)
    if verifier is None:
        verifier = subprocess_verifier(verify_inputs)
    if litert:
        verifier = _both(verifier, litert_stage(verify_inputs, litert_allow_flex))
    result = publish.publish(
        policy_dir, destination, verifier, keep_last=keep_last, lineage=lineage, gcs_client=gcs_client
    )
    return PushResult(
        pushed=True, version=result.version, destination=result.url, removed_versions=result.removed_versions
    )
