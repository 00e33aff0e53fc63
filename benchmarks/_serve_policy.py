"""A server's view of a pushed policy: TensorFlow + numpy only, never rlops.

    python benchmarks/_serve_policy.py SERVING_DIR REQUEST.npz:RESPONSE.npz [REQUEST2.npz:RESPONSE2.npz ...]

Loads the highest published version under SERVING_DIR (what TF Serving and Vertex's TensorFlow
containers serve: the highest numeric directory; rlops marks a finished push with
rlops_version.json), calls its `serving_default` (`serving_features` where serving_default takes
candidate ids) on each request and writes the response:
`action`, `propensity`, `greedy_action`, `policy_version` (one per decision) and `epsilon` (the
exploration `get_metadata` reports, so a caller can rebuild the exact action probabilities).

A request is an npz of raw named features, one array per signature input. Input names are looked
up in the signature's own structured_input_signature, so a request may spell per-arm inputs
`per_arm/<name>` or `per_arm_<name>` (a SavedModel signature sanitizes '/' to '_'). The version
is the signature's `policy_version` output when the policy returns one, else the directory name.
Prints one JSON line: {"version": ..., "version_source": "signature" | "directory", "rlops_imported": bool}.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MARKER = "rlops_version.json"
BATCH = 4096


def latest_version_dir(serving_dir: str) -> str:
    """The highest numeric version directory holding a complete push (saved_model.pb + marker)."""
    versions = [
        int(name)
        for name in os.listdir(serving_dir)
        if name.isdigit()
        and os.path.exists(os.path.join(serving_dir, name, "saved_model.pb"))
        and os.path.exists(os.path.join(serving_dir, name, MARKER))
    ]
    if not versions:
        raise FileNotFoundError(f"no published version under {serving_dir}")
    return os.path.join(serving_dir, str(max(versions)))


def _sanitized(name: str) -> str:
    return name.replace("/", "_")


def feeds_for(input_specs: dict, request: dict) -> dict:
    """Maps the request's arrays onto the signature's input names (exact, else '/' -> '_')."""
    import tensorflow as tf

    by_sanitized = {_sanitized(k): k for k in request}
    feeds = {}
    for name, spec in input_specs.items():
        key = name if name in request else by_sanitized.get(_sanitized(name))
        if key is None:
            raise KeyError(f"request has no array for signature input '{name}' (request: {sorted(request)})")
        value = request[key]
        feeds[name] = tf.constant(value.astype(object) if spec.dtype == tf.string else value, spec.dtype)
    return feeds


def serve(signature, request: dict, directory_version: int) -> tuple[dict, str]:
    """Calls the signature in batches; returns the response arrays and where the version came from."""
    import numpy as np

    _, input_specs = signature.structured_input_signature
    n = len(next(iter(request.values())))
    parts: dict[str, list] = {}
    for start in range(0, n, BATCH):
        chunk = {k: v[start : start + BATCH] for k, v in request.items()}
        out = signature(**feeds_for(input_specs, chunk))
        for key, value in out.items():
            parts.setdefault(key, []).append(value.numpy())
    response = {k: np.concatenate(v) for k, v in parts.items()}
    source = "signature"
    if "policy_version" not in response:
        response["policy_version"] = np.full(n, directory_version, np.int64)
        source = "directory"
    else:  # a scalar or one per decision, bytes or a number
        version = np.broadcast_to(response["policy_version"], (n,))
        if version.dtype.kind in "SO":
            version = np.array([v.decode() if isinstance(v, bytes) else v for v in version])
        response["policy_version"] = version.astype(np.int64)
    return response, source


def main(argv: list[str]) -> dict:
    import numpy as np
    import tensorflow as tf

    if len(argv) < 2:
        raise SystemExit(__doc__)
    version_dir = latest_version_dir(argv[0])
    loaded = tf.saved_model.load(version_dir)
    # feature arrays: serving_features where serving_default takes candidate ids (an item table inside)
    signature = loaded.signatures["serving_features" if "serving_features" in loaded.signatures else "serving_default"]
    metadata = loaded.signatures["get_metadata"]() if "get_metadata" in loaded.signatures else {}
    epsilon = float(metadata["serving_epsilon"].numpy()) if "serving_epsilon" in metadata else float("nan")
    summary = {"version": int(os.path.basename(version_dir)), "epsilon": epsilon}
    for pair in argv[1:]:
        request_path, response_path = pair.split(":")
        with np.load(request_path, allow_pickle=True) as f:
            request = {k: f[k] for k in f.files}
        response, source = serve(signature, request, summary["version"])
        np.savez(response_path, epsilon=np.float64(epsilon), **response)
        summary["version_source"] = source
    summary["rlops_imported"] = any(m == "rlops" or m.startswith("rlops.") for m in sys.modules)
    return summary


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
