"""Shared bits of the benchmark scripts: quiet TF, peak RSS, one JSON line out."""

import json
import os
import platform
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # a benchmark is an entry point: see rlops/quiet.py


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(name: str, **fields) -> None:
    """Print the benchmark's one JSON line."""
    record = {
        "benchmark": name,
        **fields,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(record), flush=True)
    sys.stdout.flush()


def serve_fresh(script: str, serving_dir: str, requests: list, scratch: str) -> tuple[list[dict], dict]:
    """Runs a serving script (TensorFlow + numpy, never rlops) on each request in one fresh process:
    `script SERVING_DIR REQUEST.npz:RESPONSE.npz ...`; returns the responses and the script's JSON line.
    The interpreter is the Pusher's verifying one when set (the test suite's warm one)."""
    import subprocess

    import numpy as np

    from rlops.components.pusher.core import VERIFY_PYTHON_ENV

    os.makedirs(scratch, exist_ok=True)
    pairs = []
    for i, req in enumerate(requests):
        pair = (os.path.join(scratch, f"request_{i}.npz"), os.path.join(scratch, f"response_{i}.npz"))
        np.savez(pair[0], **req)
        pairs.append(pair)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    python = os.environ.get(VERIFY_PYTHON_ENV) or sys.executable
    proc = subprocess.run(
        [python, str(script), serving_dir, *(f"{a}:{b}" for a, b in pairs)],
        capture_output=True,
        text=True,
        cwd=scratch,
        env=env,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"serving process exited {proc.returncode}: {proc.stderr[-3000:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    responses = []
    for _, response_path in pairs:
        with np.load(response_path) as f:
            responses.append({k: f[k] for k in f.files})
    return responses, info
