"""Project hygiene a user can see: importing rlops changes nothing in the host process, and the
CLI starts without Google's 'unsupported Python version' warnings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "PYTHONWARNINGS")}


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=_CLEAN_ENV if env is None else env,
    )


def test_import_rlops_leaves_the_environment_alone():
    proc = _python(
        "import os; e = dict(os.environ); import rlops; assert e == dict(os.environ), "
        "sorted(set(os.environ.items()) ^ set(e.items()))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_import_rlops_leaves_warning_filters_and_logging_alone():
    proc = _python(
        "import logging, warnings; f = list(warnings.filters); "
        "h = list(logging.getLogger('absl').filters); import rlops, rlops.quiet; "
        "assert warnings.filters == f and logging.getLogger('absl').filters == h"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("entry_point", ["rlops.pipelines.cli", "rlops.components.kfp.entrypoint"])
def test_entry_points_collect_cycles_less_often_and_import_rlops_does_not(entry_point):
    """The CLI and the KFP containers' dispatcher raise the cycle collector's thresholds at start-up
    (docs/benchmarks.md, "Local bandit pipeline"); `import rlops` leaves them, and a host that turned the
    collector off keeps it off."""
    code = (
        "import gc; before = gc.get_threshold(); import rlops, rlops.quiet\n"
        "assert gc.get_threshold() == before, gc.get_threshold()\n"
        f"import {entry_point}\n"
        "young, older, oldest = gc.get_threshold()\n"
        "assert young == rlops.quiet.GC_THRESHOLD > before[0] and older >= 20 and oldest >= 20, gc.get_threshold()\n"
        "gc.set_threshold(0); rlops.quiet.entry_point_setup(); assert gc.get_threshold()[0] == 0\n"
        "print('ok')"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


def test_entry_point_setup_picks_keras3_so_tfp_imports_after_tfx():
    # tensorflow_transform (imported by TFX) flips TF to legacy Keras unless the mode is already
    # chosen; TFP 0.24 then fails to import. The entry points choose first.
    code = (
        "from rlops.quiet import entry_point_setup; entry_point_setup(); "
        "import tfx.v1, tensorflow_probability as tfp; print(float(tfp.distributions.Normal(0., 1.).mean()))"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("0.0")


_VERSION_WARNINGS = """
import datetime, warnings
{setup}
import google.api_core._python_version_support as support
with warnings.catch_warnings(record=True) as seen:
    for year in (2026, 2027, 2030):  # deprecated soon, past end of life, unsupported (Python 3.10)
        support.check_python_version("google-x", today=datetime.date(year, 6, 1))
print(sum("Python version" in str(w.message) for w in seen))
"""


@pytest.mark.parametrize(
    "setup, expected", [("", "3"), ("from rlops.quiet import entry_point_setup; entry_point_setup()", "0")]
)
def test_cli_start_up_hides_google_python_version_warnings(setup, expected):
    """google-api-core warns (once per client library) that Python 3.10 is or will be unsupported;
    after the entry points' start-up none of its three wordings shows."""
    proc = _python(_VERSION_WARNINGS.format(setup=setup))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == expected, proc.stdout


@pytest.mark.parametrize("first, expected_zero", [("", False), ("import rlops.pipelines.cli; ", True)])
def test_cli_process_imports_google_clients_without_the_warning(first, expected_zero):
    """What the CLI process imports to run a pipeline (TFX, Beam[gcp], aiplatform): the warning shows
    on stderr without the CLI's start-up, and not with it."""
    code = "import warnings; warnings.simplefilter('default'); " + first + "import rlops.pipelines.local"
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("Python version" not in proc.stderr) == expected_zero, proc.stderr[-2000:]


def test_rlops_components_exports_the_four_components_and_loads_tfx_only_when_asked():
    """As tfx.v1.components: `from rlops.components import Trainer`; the shared layout
    (rlops.components.common) does not pull TFX in, nor the exported policy's file names (what the
    Pusher's publisher reads, rlops.train.policy_files) TensorFlow; rlops.train's names resolve."""
    code = (
        "import sys\n"
        "import rlops.components, rlops.components.common.model\n"
        "assert 'tfx' not in sys.modules, 'importing rlops.components loaded TFX'\n"
        "from rlops.train import policy_files\n"
        "from rlops.components.pusher import publish\n"
        "assert 'tensorflow' not in sys.modules, 'the publisher loaded TensorFlow'\n"
        "import rlops.train\n"
        "assert all(getattr(rlops.train, name) is not None for name in rlops.train.__all__)\n"
        "from rlops.components import ExperienceGen, Trainer, Evaluator, Pusher\n"
        "from tfx.dsl.components.base.base_component import BaseComponent\n"
        "assert all(issubclass(c, BaseComponent) for c in (ExperienceGen, Trainer, Evaluator, Pusher))\n"
        "assert [c.__name__ for c in (ExperienceGen, Trainer, Evaluator, Pusher)] == rlops.components.__all__\n"
        "try:\n"
        "    rlops.components.Trainr\n"
        "except AttributeError as e:\n"
        "    assert 'Trainr' in str(e)\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n"
    )
    proc = _python(code, env={**_CLEAN_ENV, "TF_USE_LEGACY_KERAS": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
