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


def run_fresh_python(
    script: str, *args: str, cwd: str | os.PathLike | None = None, timeout: float = 180, **env: str
) -> Any:
    """Runs `script` with `args` in a new interpreter without PYTHONPATH (so rlops is importable
    only if installed, which the scripts assert against where it matters) and returns the JSON on
    its last stdout line. A failure shows the process's own stderr."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ.update({"TF_CPP_MIN_LOG_LEVEL": "3", **env})
    # The suite's warm interpreter when there is one (conftest.warm_fresh_python): a new process
    # forked from one that has imported TensorFlow and nothing of rlops.
    python = os.environ.get(VERIFY_PYTHON_ENV) or sys.executable
    proc = subprocess.run(
        [python, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=None if cwd is None else str(cwd),
        env=environ,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
