"""Training jobs in subprocesses: SIGKILL preemption + resume, and MultiWorkerMirroredStrategy
with two worker processes on 127.0.0.1. Each test bounds its own time."""

import json
import os
import signal
import subprocess
import time

import learner_testlib as lt
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from helpers import child_env, fresh_python

from rlops.train import Learner, create_train_step_counter

JOB = "learner_job.py"
TIMEOUT_S = 150

# Runs a job script as `python SCRIPT ARGS` would, after printing its pid and setting the worker's
# TF_CONFIG: set here rather than in the environment, whose TF_* variables must match the warm
# interpreter's for the job to run forked from it (rlops.testing.warm_python).
_RUN_JOB = """
import os, runpy, sys
print("pid", os.getpid(), flush=True)
os.environ["CUDA_VISIBLE_DEVICES"] = ""
if sys.argv[1]:
    os.environ["TF_CONFIG"] = sys.argv[1]
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(sys.argv[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def start_job(script: str, args: list[str], tf_config: str = "") -> tuple[subprocess.Popen, int]:
    """`python tests/train/SCRIPT ARGS` in the suite's warm interpreter when there is one (conftest:
    it has imported TensorFlow and nothing of rlops; the job's own process, forked from it, sets
    its strategy up before any op runs), else a fresh one. Returns the process and the job's pid
    (the forked child's, which a SIGKILL must reach; the process's own when cold)."""
    env, python = child_env(), fresh_python()
    proc = subprocess.Popen(
        [python, "-c", _RUN_JOB, tf_config, os.path.join(lt.HERE, script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=lt.REPO,
    )
    first = proc.stdout.readline().split()
    assert first[:1] == ["pid"], f"job did not start: {first}\n{proc.stderr.read()[-3000:]}"
    return proc, int(first[1])


def reference_weights(tmp_path, steps, global_batch):
    """The same job, uninterrupted, in this process on the default strategy."""
    step = create_train_step_counter()
    agent = lt.RegressionAgent(tf_keras.optimizers.Adam(0.05), step)
    learner = Learner(
        str(tmp_path / "reference"),
        step,
        agent,
        lt.step_keyed_dataset_fn(step, global_batch),
        checkpoint_interval=-1,
        summary_interval=0,
    )
    learner.run(iterations=steps)
    return lt.agent_weights(agent)


def load_weights(path):
    data = np.load(path)
    return [data[f"arr_{i}"] for i in range(len(data.files) - 1)], int(data["step"])


def finish(proc, timeout):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"job timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err[-3000:]}")
    assert proc.returncode == 0, f"job failed ({proc.returncode})\nstdout:\n{out}\nstderr:\n{err[-3000:]}"
    return out


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)  # a hung child must not hang the suite
def test_sigkill_mid_training_resumes_from_last_checkpoint(tmp_path):
    deadline = time.monotonic() + TIMEOUT_S
    root, out_file = str(tmp_path / "job"), str(tmp_path / "final.npz")
    args = ["--root", root, "--steps", "40", "--run-size", "5", "--checkpoint-interval", "10", "--out", out_file]
    proc, job = start_job(JOB, args + ["--sleep", "0.2"])
    lines = []
    try:
        for line in proc.stdout:  # wait until past the step-20 checkpoint, then kill -9
            lines.append(line.strip())
            if line.startswith("step 25") or time.monotonic() > deadline:
                break
        assert "step 25" in lines, f"job never reached step 25: {lines}\n{proc.stderr.read()[-3000:]}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        try:
            os.kill(job, signal.SIGKILL)  # the job itself, when forked from the warm interpreter
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    while os.path.exists(f"/proc/{job}"):  # gone (reaped by its parent): it writes no more checkpoints
        time.sleep(0.01)
    assert not os.path.exists(out_file)
    ckpts = tf.train.get_checkpoint_state(os.path.join(root, "train", "checkpoints")).all_model_checkpoint_paths
    last = max(int(p.rsplit("-", 1)[1]) for p in ckpts)
    assert 20 <= last < 40

    out = finish(start_job(JOB, args)[0], max(1, deadline - time.monotonic()))
    first = json.loads(out.splitlines()[0])
    assert first["restored_step"] == last, out
    steps = [int(line.split()[1]) for line in out.splitlines() if line.startswith("step ")]
    assert steps[0] == min(last + 5, 40) and steps[-1] == 40
    weights, final_step = load_weights(out_file)
    assert final_step == 40
    for a, b in zip(weights, reference_weights(tmp_path, 40, 8)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)
def test_multi_worker_mirrored_two_processes(tmp_path):
    ports = lt.free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    root = str(tmp_path / "job")
    procs = []
    for i in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        args = [
            "--root",
            root,
            "--steps",
            "12",
            "--run-size",
            "4",
            "--checkpoint-interval",
            "8",
            "--global-batch",
            "8",
            "--out",
            str(tmp_path / f"worker{i}.npz"),
        ]
        procs.append(start_job(JOB, args, tf_config)[0])
    deadline = time.monotonic() + TIMEOUT_S
    try:
        outs = [finish(p, max(1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for out in outs:
        info = json.loads(out.splitlines()[0])
        assert info["multi_worker"] and info["replicas"] == 2, out

    (w0, s0), (w1, s1) = [load_weights(tmp_path / f"worker{i}.npz") for i in range(2)]
    assert s0 == s1 == 12
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)  # replicas stay bit-identical
    # Two workers with half batches each == one process with the global batch.
    for a, b in zip(w0, reference_weights(tmp_path, 12, 8)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # Only the chief (worker 0) keeps checkpoints; worker 1's temporary copies are gone.
    ckpt_dir = os.path.join(root, "train", "checkpoints")
    assert tf.train.latest_checkpoint(ckpt_dir).endswith("ckpt-12")
    assert not [d for d in os.listdir(ckpt_dir) if d.startswith("workertemp")]


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)
def test_ppo_multi_worker_two_processes_equals_one_replica(tmp_path):
    """PPO's host-side strategy.run loop under MultiWorkerMirroredStrategy (2 processes, one CPU
    replica each): gradients, advantage moments, KL and normalizer statistics are all-reduced, so
    both workers end bit-identical and equal to one process on the same global batches."""
    ports = lt.free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = [
        start_job(
            "ppo_job.py",
            ["--root", str(tmp_path / "job"), "--out", str(tmp_path / f"w{i}.npz")],
            json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
        )[0]
        for i in range(2)
    ]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        outs = [finish(p, max(1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for out in outs:
        info = json.loads(out.splitlines()[0])
        assert info["multi_worker"] and info["replicas"] == 2, out
    workers = [np.load(tmp_path / f"w{i}.npz") for i in range(2)]
    agent = lt.make_ppo_agent(tf.distribute.get_strategy(), **lt.PPO_OPTIONS)
    losses = [float(agent.train(lt.ppo_mixed_experience(agent, seed)).loss) for seed in range(2)]
    for w in workers:
        assert int(w["step"]) == int(agent.train_step_counter.numpy()) == 6
        np.testing.assert_allclose(w["losses"], losses, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(w["beta"], agent.adaptive_kl_beta.numpy(), rtol=1e-6)
        for i, v in enumerate(agent.trainable_weights):
            np.testing.assert_allclose(w[f"arr_{i}"], v.numpy(), rtol=1e-4, atol=1e-6)
    for i in range(len(agent.trainable_weights)):
        np.testing.assert_array_equal(workers[0][f"arr_{i}"], workers[1][f"arr_{i}"])
