"""Regenerates every golden fixture: runs each `make_fixtures_*.py` beside this file.

Run it with the golden virtualenv's Python (TF-Agents 0.19, TF 2.15.1, TFP 0.23, Python 3.11;
see requirements.txt), never the main one:

    python3.11 -m venv .venv-golden && .venv-golden/bin/pip install -r tests/golden/requirements.txt
    .venv-golden/bin/python tests/golden/make_fixtures.py

Each generator writes its own files under fixtures/ (one generator per file set, so
engineers adding generators never edit the same file).
"""

import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    scripts = sorted(glob.glob(os.path.join(HERE, "make_fixtures_*.py")))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    failed = []
    for script in scripts:
        print(f"== {os.path.basename(script)}", flush=True)
        if subprocess.call([sys.executable, script], cwd=HERE, env=env) != 0:
            failed.append(os.path.basename(script))
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
