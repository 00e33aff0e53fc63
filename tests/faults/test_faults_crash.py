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
