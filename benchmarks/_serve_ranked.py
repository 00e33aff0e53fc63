"""A server's view of a pushed ranking policy: TensorFlow + numpy only, never rlops.

    python benchmarks/_serve_ranked.py SERVING_DIR REQUEST.npz:RESPONSE.npz [...]

Loads the highest published version under SERVING_DIR (as benchmarks/_serve_policy.py does), calls
its `serving_ranked` on each request (raw context features by name and `num_actions`) and writes
every output (`slate`, `propensity_item_position`, `propensity_cascade`, `greedy_slate`, `scores`,
`seed`, `policy_version`, one row per page) plus `get_metadata`'s `slate_policy` and `temperature`
(or `epsilon`), so a caller can rebuild the page's exact probabilities from the scores.
Prints one JSON line: {"version": ..., "slate_policy": ..., "rlops_imported": bool}.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _serve_policy import BATCH, feeds_for, latest_version_dir  # noqa: E402  (TensorFlow + numpy only)

SIGNATURE = "serving_ranked"


def main(argv: list[str]) -> dict:
    import numpy as np
    import tensorflow as tf

    if len(argv) < 2:
        raise SystemExit(__doc__)
    version_dir = latest_version_dir(argv[0])
    loaded = tf.saved_model.load(version_dir)
    signature = loaded.signatures[SIGNATURE]
    _, input_specs = signature.structured_input_signature
    metadata = {k: v.numpy() for k, v in loaded.signatures["get_metadata"]().items()}
    kind = metadata["slate_policy"].decode()
    parameter = float(metadata.get("temperature", metadata.get("epsilon", np.nan)))
    for pair in argv[1:]:
        request_path, response_path = pair.split(":")
        with np.load(request_path, allow_pickle=True) as f:
            request = {k: f[k] for k in f.files}
        n = len(next(iter(request.values())))
        parts: dict[str, list] = {}
        for start in range(0, n, BATCH):
            chunk = {k: v[start : start + BATCH] for k, v in request.items()}
            for key, value in signature(**feeds_for(input_specs, chunk)).items():
                parts.setdefault(key, []).append(value.numpy())
        response = {k: np.concatenate(v) for k, v in parts.items()}
        np.savez(response_path, slate_policy=kind, parameter=np.float64(parameter), **response)
    return {
        "version": int(os.path.basename(version_dir)),
        "slate_policy": kind,
        "parameter": parameter,
        "rlops_imported": any(m == "rlops" or m.startswith("rlops.") for m in sys.modules),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
