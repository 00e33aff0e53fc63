"""Test setup shared by the whole suite.

Splits the host CPU into two logical devices before TensorFlow initializes, so strategy tests
can build a two-replica MirroredStrategy on a CPU-only machine. Everything else runs on CPU:0
as usual.
"""

import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # as the entry points do: see rlops/quiet.py

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from rlops.components.pusher.core import VERIFY_PYTHON_ENV  # noqa: E402
from rlops.quiet import collect_cycles_less_often  # noqa: E402
from rlops.testing.warm_python import WarmPythonServer, write_client_shim  # noqa: E402

# The test processes collect cycles as rlops' entry points do (rlops/quiet.py), and never walk
# what the imports above loaded (TensorFlow: most of the heap, and none of it garbage).
collect_cycles_less_often()
gc.freeze()

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # already initialized by an earlier import
    pass


# The longest files first (measured: each test's CPU seconds with the pinned suite run serially,
# 2026-11-28, less what later changes took off): with pytest-xdist's --dist loadfile each worker takes
# a whole file at a time, in collection order, so a long file collected last would leave the other
# workers idle at the end.
LONGEST_FIRST = (
    "tests/faults/test_faults_crash.py",
    "tests/pipelines/test_vertex_emulator.py",
    "tests/test_docs.py",
    "tests/components/test_evaluator_beam.py",
    "tests/components/test_litert.py",
    "tests/pipelines/test_closed_loop.py",
    "tests/components/test_first_contact_ingest.py",
    "tests/train/test_learner.py",
    "tests/pipelines/test_pipelines.py",
    "tests/features/test_feature_pipeline.py",
    "tests/train/test_jobs.py",
    "tests/pipelines/test_ranking_pipeline.py",
    "tests/components/test_trainer_per_arm_warm_start.py",
    "tests/components/test_kfp.py",
    "tests/pipelines/test_kfp_nightly.py",
    "tests/features/test_feature_generator_logs.py",
    "tests/components/test_ope_varying_candidates.py",
    "tests/features/test_per_arm_pipeline.py",
    "tests/test_hygiene.py",
    "tests/train/test_on_policy.py",
    "tests/features/test_serving_names.py",
    "tests/faults/test_ope_faults.py",
    "tests/pipelines/test_cli_init.py",
    "tests/pipelines/test_closed_loop_ranking.py",
    "tests/components/test_warm_start_changed_agent.py",
    "tests/pipelines/test_vertex.py",
    "tests/faults/test_pusher_faults.py",
    "tests/components/test_trainer_passes.py",
    "tests/agents/test_bandits.py",
    "tests/features/test_multivalent.py",
    "tests/features/test_action_ids.py",
    "tests/agents/test_ppo_learning.py",
    "tests/golden/test_golden_ppo.py",
    "tests/features/test_feature_trainer.py",
    "tests/components/test_ope_coverage.py",
)


# Which stack runs which test (`make test`: `--stack pinned` in .venv beside `--stack core` in
# .venv-core; plain pytest runs everything). The core's fast tests run once, on current TensorFlow;
# its learning tests (marked slow) and heaviest trials (HEAVY_CORE: PPO under Mirrored/TPU
# strategies, the resume jobs, ...) run on the pinned stack only, and the golden tests against
# TF-Agents' numbers on both: parity holds on the stack the pipelines ship with too.
CORE_PATHS = ("tests/agents/", "tests/golden/", "tests/envs/", "tests/train/", "tests/features/test_feature_schema.py")
BOTH_STACKS = ("tests/golden/",)
HEAVY_CORE = (("ppo", "mirrored"), ("tpu_strategy",), ("resume",), ("direct_and_learner_paths",), ("reward_scale",))


def pytest_addoption(parser):
    parser.addoption(
        "--stack",
        choices=("all", "core", "pinned"),
        default="all",
        help="core: the core's tests for current TensorFlow; pinned: everything else, and the golden tests",
    )


def runs_on_core(item: pytest.Item) -> bool:
    """The core's fast tests (what `--stack core` selects)."""
    nodeid = item.nodeid.lower()
    heavy = any(all(word in nodeid for word in words) for words in HEAVY_CORE)
    return item.nodeid.startswith(CORE_PATHS) and item.get_closest_marker("slow") is None and not heavy


def pytest_collection_modifyitems(config, items):
    stack = config.getoption("--stack")
    if stack != "all":
        keep = [
            item
            for item in items
            if runs_on_core(item) == (stack == "core") or (stack == "pinned" and item.nodeid.startswith(BOTH_STACKS))
        ]
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: file order kept


# Grappler, TensorFlow's graph optimizer, is off in the test processes (from here, so module and
# session fixtures see it off too) and on in every process a test starts (pipeline steps, servers,
# verifiers) and for the golden tests (graph_optimizer): rewriting each small test graph the first
# time it runs costs more than running it (measured on one core: the core's 188 tests 188 s ->
# 136 s, the pinned PPO/XLA files 67 s -> 53 s), and it changes no result the tests check.
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


@pytest.fixture(autouse=True)
def graph_optimizer(request):
    """On for the golden tests, which compare with TF-Agents' numbers on the graphs production runs."""
    if not request.node.nodeid.startswith(BOTH_STACKS):
        yield
        return
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    yield
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


@pytest.fixture(scope="session", autouse=True)
def warm_fresh_python(tmp_path_factory):
    """Every push verifies the policy in a fresh process that imports TensorFlow (pusher.core), and
    the serving tests act in one (helpers.run_fresh_python); here those processes are forked from
    an interpreter that has imported TensorFlow and nothing else (rlops.testing.warm_python), which
    saves the import's seconds of CPU each and checks the same thing. Started in the background:
    a process asked for before it listens waits for it."""
    if os.environ.get(VERIFY_PYTHON_ENV):
        yield
        return
    root = tmp_path_factory.mktemp("warm-verify")
    socket_path, shim = str(root / "python.sock"), str(root / "python")
    server = WarmPythonServer.start(socket_path, ("tensorflow", "numpy"), env=dict(os.environ), wait=False)
    write_client_shim(shim, socket_path, starting_pid=server.pid)
    os.environ[VERIFY_PYTHON_ENV] = shim
    yield
    os.environ.pop(VERIFY_PYTHON_ENV, None)
    server.kill()
    server.wait()


# RLOPS_TEST_TIMES=FILE: each test phase's duration appended to FILE as it ends ("seconds phase
# nodeid"), so a run cut short still says where its time went (--durations prints only at the end).
_TIMES = os.environ.get("RLOPS_TEST_TIMES")


def pytest_runtest_logreport(report):
    # Under pytest-xdist the controller hears each worker's reports again: only the process that
    # ran the test writes it (a worker, or the only process).
    ran_here = os.environ.get("PYTEST_XDIST_WORKER") or not hasattr(report, "node")
    if _TIMES and report.duration >= 1.0 and ran_here:
        with open(_TIMES, "a") as f:
            f.write(f"{report.duration:.1f} {report.when} {report.nodeid}\n")
