"""Runs a LiteRT policy on given inputs with ai-edge-litert alone: the Pusher's LiteRT check.

Run as a script by path (`python .../litert_runner.py MODEL.tflite INPUTS.npz OUT.npz [REPEATS
[INPUTS2.npz OUT2.npz REPEATS2 ...]]`), never as `-m rlops...`: the process imports numpy and
ai_edge_litert only -- no TensorFlow, no rlops -- so it proves what an edge or in-process server
sees. For each input file, one after the other on the same interpreter, writes the `serving_default`
outputs (REPEATS calls stacked on a leading axis) to its OUT.npz, plus `modules_tensorflow` /
`modules_rlops` (whether either got imported), and prints one JSON line {"ok": bool, "error": ...}.
"""

import json
import sys
from typing import Any


def run(model_path: str, *jobs: str) -> dict[str, Any]:
    """jobs: INPUTS.npz, OUT.npz, REPEATS, repeated (the last REPEATS may be left out: 1)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=model_path).get_signature_runner("serving_default")
    wanted = runner.get_input_details()
    args = list(jobs) + (["1"] if len(jobs) % 3 else [])
    for inputs_npz, out_npz, repeats in zip(args[0::3], args[1::3], args[2::3]):
        data = dict(np.load(inputs_npz, allow_pickle=False))
        missing = sorted(set(wanted) - set(data))
        if missing:
            return {"ok": False, "error": f"no input data for LiteRT input '{missing[0]}'"}
        feeds = {k: _typed(data[k], wanted[k]["dtype"]) for k in wanted}
        outs = [runner(**feeds) for _ in range(int(repeats))]
        stacked = {k: np.stack([o[k] for o in outs]) for k in outs[0]}
        stacked["modules_tensorflow"] = np.asarray("tensorflow" in sys.modules)
        stacked["modules_rlops"] = np.asarray(any(m == "rlops" or m.startswith("rlops.") for m in sys.modules))
        np.savez(out_npz, **stacked)
    return {"ok": True}


def _typed(value: Any, dtype: Any) -> Any:  # dtype: a numpy type from the interpreter's input details
    import numpy as np

    if dtype in (np.bytes_, np.object_, np.str_):  # string inputs: bytes objects
        return np.asarray(value).astype(np.bytes_).astype(object)
    return np.asarray(value).astype(dtype)


if __name__ == "__main__":
    try:
        result = run(*sys.argv[1:])
    except Exception as e:  # report, don't traceback: the parent turns this into its error
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
