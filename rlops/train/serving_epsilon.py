"""An exported policy's serving exploration, read and rewritten in place.

serving_default reads its epsilon from the variable `metadata/serving_epsilon` on every call
(rlops.train.policy_saver), so a SavedModel serves another epsilon once that one value in its
variables checkpoint is changed: every other tensor, the object graph and the graph itself stay
byte for byte what the Trainer exported. The Pusher publishes a candidate at the epsilon the
Evaluator certified this way (rlops.components.pusher.epsilon).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from rlops.train.policy_saver import SERVING_EPSILON

CHECKPOINT_KEY = f"metadata/{SERVING_EPSILON}/.ATTRIBUTES/VARIABLE_VALUE"
FINGERPRINT_FILE = "fingerprint.pb"


def _prefix(saved_model_dir: str) -> str:
    return os.path.join(saved_model_dir, "variables", "variables")


def read_serving_epsilon(saved_model_dir: str) -> float | None:
    """The epsilon the SavedModel serves, or None for a policy exported without serving_default."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(_prefix(saved_model_dir))
    if CHECKPOINT_KEY not in reader.get_variable_to_dtype_map():
        return None
    return float(reader.get_tensor(CHECKPOINT_KEY))


def set_serving_epsilon(saved_model_dir: str, epsilon: float) -> None:
    """Rewrites the local SavedModel at `saved_model_dir` to serve `epsilon`: its variables
    checkpoint with that one value changed (and its fingerprint recomputed). A policy exported
    without serving_default has no epsilon to change: ValueError."""
    import tensorflow as tf

    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"serving_epsilon must be in [0, 1], got {epsilon}")
    prefix = _prefix(saved_model_dir)
    reader = tf.train.load_checkpoint(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    if CHECKPOINT_KEY not in dtypes:
        raise ValueError(f"{saved_model_dir} has no serving_default epsilon to set (exported without serving_epsilon)")
    names = sorted(dtypes)
    tensors = [tf.constant(epsilon if n == CHECKPOINT_KEY else reader.get_tensor(n), dtypes[n]) for n in names]
    variables = os.path.dirname(prefix)
    with tempfile.TemporaryDirectory(dir=variables) as tmp:
        tf.raw_ops.SaveV2(
            prefix=os.path.join(tmp, "variables"),
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=tensors,
        )
        for name in os.listdir(variables):  # the old shards go: the new checkpoint is one shard
            if name.startswith("variables.") and os.path.isfile(os.path.join(variables, name)):
                os.remove(os.path.join(variables, name))
        for name in os.listdir(tmp):
            shutil.move(os.path.join(tmp, name), os.path.join(variables, name))
    _refresh_fingerprint(saved_model_dir)


def _refresh_fingerprint(saved_model_dir: str) -> None:
    """fingerprint.pb hashes the variables too: recomputed, so the rewritten model does not claim
    the trained one's identity (left out where this TensorFlow cannot compute one)."""
    path = os.path.join(saved_model_dir, FINGERPRINT_FILE)
    if not os.path.exists(path):
        return
    try:
        from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting

        data = fingerprinting.CreateFingerprintDef(saved_model_dir)
    except Exception:  # noqa: BLE001 - an optional file: a stale one is worse than none
        os.remove(path)
        return
    with open(path, "wb") as f:
        f.write(data)
