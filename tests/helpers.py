"""Helpers the suite shares (import as `from helpers import ...`: tests/ is on sys.path through
tests/conftest.py).

The one that matters most: a pushed policy is checked the way a server uses it, in a fresh Python
process that cannot import rlops (PYTHONPATH dropped, run outside the checkout), printing its
answer as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from rlops.components.pusher.core import VERIFY_PYTHON_ENV


def fresh_python() -> str:
    """The interpreter for a test's own processes: the suite's warm one when there is one
    (conftest.warm_fresh_python: a new process forked from one that has imported TensorFlow and
    nothing of rlops), else this one."""
    return os.environ.get(VERIFY_PYTHON_ENV) or sys.executable


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child that imports the installed rlops: no PYTHONPATH, no TF_CONFIG
    (a worker sets its own, since the warm interpreter serves only environments whose TF_* match
    its own), TensorFlow's C++ logs off; `extra` on top."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG")}
    return {**env, "TF_CPP_MIN_LOG_LEVEL": "3", **extra}


def run_fresh_python(
    script: str, *args: str, cwd: str | os.PathLike | None = None, timeout: float = 180, **env: str
) -> Any:
    """Runs `script` with `args` in a new interpreter without PYTHONPATH (so rlops is importable
    only if installed, which the scripts assert against where it matters) and returns the JSON on
    its last stdout line. A failure shows the process's own stderr."""
    proc = subprocess.run(
        [fresh_python(), "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=None if cwd is None else str(cwd),
        env=child_env(**env),
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
