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
