"""Running a LiteRT file the way an edge server does: in a fresh Python process that imports
ai_edge_litert and numpy only (litert_runner.py, run by path). The Pusher's LiteRT checks for
every head (rlops.train.litert for single decisions, rlops.train.litert_ranked for pages) run
their files through here; VERSION_SENTINEL is the version a fresh conversion holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np

VERSION_SENTINEL = 0x5E57_1A7E_0DD5_EED5  # a value no real version takes; appears once in the file
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "litert_runner.py")


def last_line(text: str) -> str:
    """The last non-empty line of a tool's output (its error, usually)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown error"


def run_standalone(
    model_path: str, inputs: Mapping[str, np.ndarray], repeats: int = 1, timeout_s: float = 300
) -> dict[str, np.ndarray]:
    """`serving_default` of the LiteRT file on `inputs`, `repeats` times, in a fresh Python process
    that imports ai_edge_litert and numpy only (litert_runner.py, run by path). Outputs are stacked
    [repeats, B, ...]; `modules_tensorflow` / `modules_rlops` say what that process imported."""
    return run_standalone_jobs(model_path, [(inputs, repeats)], timeout_s)[0]


def run_standalone_jobs(
    model_path: str, jobs: Sequence[tuple[Mapping[str, np.ndarray], int]], timeout_s: float = 300
) -> list[dict[str, np.ndarray]]:
    """run_standalone for several (inputs, repeats), one after the other in one fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        args, outs = [], []
        for i, (inputs, repeats) in enumerate(jobs):
            src, dst = os.path.join(tmp, f"inputs{i}.npz"), os.path.join(tmp, f"outputs{i}.npz")
            np.savez(src, **{k: savable(v) for k, v in inputs.items()})
            args += [src, dst, str(int(repeats))]
            outs.append(dst)
        proc = subprocess.run(
            [sys.executable, RUNNER, model_path, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        result = (
            json.loads(lines[-1])
            if lines
            else {"ok": False, "error": f"exited {proc.returncode}: {last_line(proc.stderr)}"}
        )
        if not result.get("ok"):
            raise RuntimeError(f"the LiteRT policy did not run under ai-edge-litert: {result.get('error')}")
        answers = []
        for dst in outs:
            with np.load(dst) as out:
                answers.append({k: out[k] for k in out.files})
        return answers


def savable(value: Any) -> np.ndarray:
    value = np.asarray(value)
    return value.astype(np.bytes_) if value.dtype.kind in "OU" else value
