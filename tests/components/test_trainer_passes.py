"""The bandit Trainer consumes its train split by passes (issue 18): LinUCB / LinTS statistics are
the closed-form sums over every record, `train_records` is the split's count (also with two
workers), NeuralEpsilonGreedy's `num_epochs` passes see every record that many times, and a warm
start adds the new day's statistics to the base model's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import types

import numpy as np
import pytest
import tensorflow as tf
from helpers import child_env, fresh_python

from rlops.components.trainer import passes, split_cache
from rlops.components.trainer.agents.linear import BATCH_SIZE as LINEAR_BATCH_SIZE
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer
from rlops.components.trainer.layout import METRICS_FILE

# Slow: trains the linear and neural agents through whole passes, two workers included; `make test` runs it.
pytestmark = pytest.mark.slow

D, K = 5, 4
FILE_SIZES = (700, 301, 1000)  # uneven shards: with 2 workers one reads 1,700 records, the other 301
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write_split(uri: str, sizes: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    """Gzipped TFRecord shards in TFX's layout (<uri>/Split-train/), dense `context` records with
    weights and a record_id; returns the columns written (concatenated in file order)."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    cols = {
        "context": rng.normal(size=(n, D)).astype(np.float32),
        "action": rng.integers(0, K, n),
        "reward": rng.random(n).astype(np.float32),
        "propensity": np.full(n, 1.0 / K, np.float32),
        "weight": rng.uniform(0.5, 2.0, n).astype(np.float32),
        "record_id": np.arange(n) + 1_000_000 * seed,
    }
    os.makedirs(os.path.join(uri, "Split-train"))
    start = 0
    for i, size in enumerate(sizes):
        path = os.path.join(uri, "Split-train", f"data_tfrecord-{i:05d}-of-{len(sizes):05d}.gz")
        with tf.io.TFRecordWriter(path, options="GZIP") as w:
            for j in range(start, start + size):
                ex = tf.train.Example()
                f = ex.features.feature
                f["context"].float_list.value.extend(cols["context"][j])
                f["action"].int64_list.value.append(int(cols["action"][j]))
                f["record_id"].int64_list.value.append(int(cols["record_id"][j]))
                for key in ("reward", "propensity", "weight"):
                    f[key].float_list.value.append(float(cols[key][j]))
                w.write(ex.SerializeToString())
        start += size
    return cols


def closed_form(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per arm: A = sum w x x^T, b = sum w r x, n = count, with the agent's bias column x = [context, 1]."""
    x = np.concatenate([cols["context"], np.ones((len(cols["action"]), 1), np.float32)], 1).astype(np.float64)
    w, r, a = cols["weight"].astype(np.float64), cols["reward"].astype(np.float64), cols["action"]
    cov = np.stack([(x[a == k] * w[a == k, None]).T @ x[a == k] for k in range(K)])
    data = np.stack([(w[a == k] * r[a == k]) @ x[a == k] for k in range(K)])
    return {"cov_matrix": cov, "data_vector": data, "num_samples": np.bincount(a, minlength=K).astype(np.float64)}


def statistics(model_uri: str) -> dict[str, np.ndarray]:
    """The agent's statistics in the model's latest Learner checkpoint."""
    reader = tf.train.load_checkpoint(os.path.join(model_uri, "train", "checkpoints"))
    names = reader.get_variable_to_shape_map()
    out = {}
    for key in ("cov_matrix", "data_vector", "num_samples"):
        (name,) = [n for n in names if f"/{key}/" in n and "OPTIMIZER" not in n]
        out[key] = reader.get_tensor(name)
    return out


def assert_statistics(got: dict, want: dict, scale: float = 1.0) -> None:
    for key, value in want.items():  # float32 sums over ~2,000 rows: relative tolerance
        np.testing.assert_allclose(got[key], value, rtol=2e-5, atol=2e-3 * scale, err_msg=key)


@pytest.fixture(scope="module")
def day1(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("day1") / "examples")
    return uri, _write_split(uri, FILE_SIZES, seed=1)


@pytest.fixture(scope="module")
def day2(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("day2") / "examples")
    return uri, _write_split(uri, (400, 250), seed=2)


@pytest.fixture(scope="module")
def lin_ucb_day1(day1, tmp_path_factory):
    """LinUCB with the default config (one pass, batch LINEAR_BATCH_SIZE) on day 1."""
    root = tmp_path_factory.mktemp("lin_ucb_day1")
    result = run_trainer(TrainerConfig(agent="lin_ucb", num_actions=K), str(root / "model"), str(root / "run"), day1[0])
    return str(root / "model"), str(root / "run"), result


def test_lin_ucb_statistics_are_the_closed_form_sums_over_every_record(day1, lin_ucb_day1):
    model, run, result = lin_ucb_day1
    n = sum(FILE_SIZES)
    assert_statistics(statistics(model), closed_form(day1[1]))
    metrics = json.load(open(os.path.join(run, METRICS_FILE)))
    assert metrics["train_records"] == result.extra["train_records"] == n
    # 2,001 records < one default batch: one (partial) step, nothing repeated, nothing dropped
    assert metrics["batch_size"] == LINEAR_BATCH_SIZE and result.train_steps == 1
    # so the rate that means something is records per second, not steps (once 0.5 steps/s)
    assert metrics["records_per_sec"] == pytest.approx(n / result.wall_s, rel=1e-3, abs=0.1)
    run_properties = [p for p in result.properties().values() if "steps_per_sec" in p]
    assert run_properties[0]["records_per_sec"] == metrics["records_per_sec"]


def test_lin_ts_small_batches_end_in_a_partial_one(day1, tmp_path):
    config = TrainerConfig(agent="lin_ts", num_actions=K, batch_size=256, steps_per_run=3)
    result = run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), day1[0])
    n = sum(FILE_SIZES)
    assert result.extra["train_records"] == n and result.train_steps == -(-n // 256)  # 7 full + 209
    assert_statistics(statistics(str(tmp_path / "model")), closed_form(day1[1]))


def test_train_steps_caps_a_linear_pass(day1, tmp_path):
    config = TrainerConfig(agent="lin_ucb", num_actions=K, batch_size=100, train_steps=3)
    result = run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), day1[0])
    assert result.train_steps == 3 and result.extra["train_records"] == 300
    assert statistics(str(tmp_path / "model"))["num_samples"].sum() == 300


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_warm_start_adds_the_new_days_statistics(day1, day2, lin_ucb_day1, tmp_path, factor):
    """Night 2 = forgetting_factor x night 1's A and b + day 2's sums; counts add up."""
    config = TrainerConfig(agent="lin_ucb", num_actions=K, forgetting_factor=factor)
    result = run_trainer(
        config, str(tmp_path / "model"), str(tmp_path / "run"), day2[0], base_model_uri=lin_ucb_day1[0]
    )
    assert result.warm_started_from and result.extra["train_records"] == 650
    base, new = closed_form(day1[1]), closed_form(day2[1])
    want = {key: factor * base[key] + new[key] for key in ("cov_matrix", "data_vector")}
    want["num_samples"] = base["num_samples"] + new["num_samples"]
    assert_statistics(statistics(str(tmp_path / "model")), want)


def test_forgetting_factor_is_for_linear_agents_only():
    with pytest.raises(ValueError, match="trainer.forgetting_factor"):
        TrainerConfig(agent="neural_epsilon_greedy", num_actions=K, forgetting_factor=0.9)
    with pytest.raises(ValueError, match="trainer.forgetting_factor"):
        TrainerConfig(agent="lin_ucb", num_actions=K, forgetting_factor=0.0)


def test_neural_num_epochs_two_sees_every_record_twice(day1, tmp_path):
    n = sum(FILE_SIZES)
    config = TrainerConfig(
        agent="neural_epsilon_greedy", num_actions=K, num_epochs=2, batch_size=128, hidden_sizes=(8,), steps_per_run=50
    )
    result = run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), day1[0])
    assert result.extra["train_records"] == 2 * n and result.train_steps == -(-2 * n // 128)
    # The same data path, record by record: each id exactly twice, shuffled across files.
    spec = {"record_id": tf.io.FixedLenFeature([1], tf.int64)}
    ds = passes.pass_dataset(
        os.path.join(day1[0], "Split-train", "*"),
        spec,
        128,
        tf.distribute.InputContext(),
        epochs=2,
        shuffle=True,
        seed=0,
    )
    ids = np.concatenate([b["record_id"].numpy()[:, 0] for b in ds]) - day1[1]["record_id"][0]
    np.testing.assert_array_equal(np.bincount(ids), np.full(n, 2))
    assert not np.array_equal(ids[:n], np.sort(ids[:n]))


@pytest.mark.parametrize("in_memory_bytes", [0, 1 << 30])
def test_neural_passes_held_in_memory_or_streamed_train_on_every_record(day1, tmp_path, monkeypatch, in_memory_bytes):
    n = sum(FILE_SIZES)
    held = []
    decode = passes.decoded_split
    monkeypatch.setattr(passes, "decoded_split", lambda *a: held.append(decode(*a)) or held[-1])
    config = TrainerConfig(
        agent="neural_epsilon_greedy",
        num_actions=K,
        num_epochs=3,
        batch_size=256,
        hidden_sizes=(8,),
        steps_per_run=50,
        in_memory_bytes=in_memory_bytes,
    )
    result = run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), day1[0])
    assert result.extra["train_records"] == 3 * n and result.train_steps == -(-3 * n // 256)
    if in_memory_bytes:
        (experience,) = held  # the weighted experience of every record, parsed once
        assert isinstance(experience, split_cache.MemoryBlocks) and experience.rows == n
    else:
        assert held == []


def test_in_memory_bytes_is_not_negative():
    with pytest.raises(ValueError, match="trainer.in_memory_bytes"):
        TrainerConfig(agent="neural_epsilon_greedy", num_actions=K, in_memory_bytes=-1)


def test_configs_that_set_train_steps_keep_their_budget():
    """Configs written before passes: neural_epsilon_greedy's train_steps still sets its budget
    (the split repeats); unset, it is 2,000 steps, as before. Linear agents make one pass."""
    neural = TrainerConfig.from_dict({"agent": "neural_epsilon_greedy", "num_actions": K, "train_steps": 700})
    assert neural.epochs is None and neural.max_train_steps == 700 and neural.train_batch_size == 32
    assert TrainerConfig(agent="neural_epsilon_greedy", num_actions=K).max_train_steps == 2000
    linear = TrainerConfig.from_dict({"agent": "lin_ts", "num_actions": K})
    assert linear.epochs == 1 and linear.max_train_steps is None and linear.train_batch_size == LINEAR_BATCH_SIZE
    with pytest.raises(ValueError, match="trainer.num_epochs"):
        TrainerConfig(agent="lin_ucb", num_actions=K, num_epochs=0)


def test_workers_read_disjoint_files_or_disjoint_records():
    files = [f"f{i}" for i in range(5)]
    shards = [passes.shard_files(files, 2, w) for w in range(2)]
    assert shards == [(["f0", "f2", "f4"], False), (["f1", "f3"], False)]
    assert passes.shard_files(files[:1], 2, 1) == (["f0"], True)  # fewer files than workers: by record
    assert passes.shard_files(files, 1, 0) == (files, False)


# One worker: its TF_CONFIG comes as argv[1], set before run_trainer builds its strategy (not in
# the environment, whose TF_* variables must match the warm interpreter's for it to run forked).
_WORKER = """
import json, os, sys
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["TF_CONFIG"] = sys.argv.pop(1)
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer
examples, model, run = sys.argv[1:4]
result = run_trainer(TrainerConfig(agent="lin_ucb", num_actions={k}, batch_size=128, steps_per_run=4), model, run,
                     examples)
print(json.dumps({{"train_records": result.extra["train_records"], "train_steps": result.train_steps}}))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_workers_count_each_record_once(day1, tmp_path):
    """MultiWorkerMirroredStrategy, 2 processes: worker 0 reads files 0 and 2 (1,700 records),
    worker 1 file 1 (301); worker 1 steps on empty batches once its shard ends. The statistics are
    the sums over every record once, and both workers report the split's count."""
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    cluster = {"worker": [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]}
    for s in socks:
        s.close()
    model, run = str(tmp_path / "model"), str(tmp_path / "run")
    # The workers run forked from the suite's warm interpreter when there is one (conftest: it has
    # imported TensorFlow, nothing of rlops, and run no op), else in a fresh one.
    env, python = child_env(), fresh_python()
    procs = []
    for i in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        procs.append(
            subprocess.Popen(
                [python, "-c", _WORKER.format(k=K), tf_config, day1[0], model, run],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
        )
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"worker failed:\n{out}\n{err[-3000:]}"
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            p.kill()
    n = sum(FILE_SIZES)
    # 1,700 records on worker 0 = 14 batches of 128 (the last one partial): every worker steps 14 times
    assert outs == [{"train_records": n, "train_steps": 14}] * 2
    assert json.load(open(os.path.join(run, METRICS_FILE)))["train_records"] == n
    assert_statistics(statistics(model), closed_form(day1[1]))


def test_learner_run_available_stops_where_the_data_ends(tmp_path):
    """Learner.run_available over 10 batches, 4 steps per call: 4, 4, 2, then 0 (and zeros)."""
    from rlops.agents import specs, trajectories
    from rlops.agents.bandits import LinUCBAgent
    from rlops.train.learner import Learner, create_train_step_counter

    rng = np.random.default_rng(0)
    x, a, r = rng.normal(size=(95, D)).astype(np.float32), rng.integers(0, K, 95).astype(np.int32), rng.random(95)
    data = trajectories.single_step_trajectory(x, a, r.astype(np.float32), {"propensity": np.ones(95, np.float32)})
    step = create_train_step_counter()
    agent = LinUCBAgent(
        trajectories.time_step_spec(tf.TensorSpec([D], tf.float32)),
        specs.BoundedTensorSpec((), tf.int32, 0, K - 1),
        train_step_counter=step,
    )
    learner = Learner(
        str(tmp_path),
        step,
        agent,
        lambda: tf.data.Dataset.from_tensor_slices(data).batch(10),
        checkpoint_interval=-1,
        summary_interval=0,
    )
    ran = [learner.run_available(4) for _ in range(4)]
    assert [n for _, n in ran] == [4, 4, 2, 0] and float(ran[-1][0].loss) == 0.0
    assert int(step.numpy()) == 95 and agent.num_samples.numpy().sum() == 95


class _ScriptedLearner:
    """The Learner calls train_loop makes: `available` train steps of data (None: it repeats),
    each step's loss its ordinal, every call recorded."""

    def __init__(self, available: int | None):
        self.available, self.step, self.calls, self.checkpoints = available, 0, [], 0

    def _steps(self, kind: str, n: int) -> tuple[object, int]:
        ran = n if self.available is None else min(n, self.available - self.step)
        self.step += ran
        self.calls.append((kind, n))
        return types.SimpleNamespace(loss=float(self.step) if ran else 0.0), ran

    def run_available(self, iterations: int) -> tuple[object, int]:
        return self._steps("run_available", iterations)

    def run(self, iterations: int) -> object:
        return self._steps("run", iterations)[0]

    def save_checkpoint(self) -> None:
        self.checkpoints += 1


@pytest.mark.parametrize(
    "available, done, cap, passes, calls, curve",
    [
        # the passes end inside the third call: no cap, the data decides
        (250, 0, None, True, [100, 100, 100], [(100, 100.0), (200, 200.0), (250, 250.0)]),
        # they end exactly at a call's end: one more call finds no data and adds no point
        (200, 0, None, True, [100, 100, 100], [(100, 100.0), (200, 200.0)]),
        # train_steps caps a pass; the last call asks only for what is left
        (1000, 0, 130, True, [100, 30], [(100, 100.0), (130, 130.0)]),
        # a resumed job (60 steps in its checkpoint) does only the rest
        (1000, 60, 130, True, [70], [(130, 70.0)]),
        # PPO offline: the windows repeat, the cap is the budget
        (None, 0, 250, False, [100, 100, 50], [(100, 100.0), (200, 200.0), (250, 250.0)]),
    ],
)
def test_one_training_loop_stops_at_the_cap_or_where_the_passes_end(available, done, cap, passes, calls, curve):
    from rlops.components.trainer.loop import train_loop

    learner = _ScriptedLearner(available)
    trained = train_loop(learner, done, cap, 100, passes=passes)
    assert [n for _, n in learner.calls] == calls
    assert {kind for kind, _ in learner.calls} == {"run_available" if passes else "run"}
    assert trained.curve == curve and trained.steps == curve[-1][0] and trained.resumed == done
    assert learner.checkpoints == 1  # once, after the loop
    result = trained.result("base", {"k": 1})
    assert (result.train_steps, result.final_loss, result.warm_started_from) == (curve[-1][0], curve[-1][1], "base")
    assert result.steps_per_sec == pytest.approx((trained.steps - done) / max(trained.wall_s, 1e-9))


def test_a_repeating_dataset_needs_a_cap():
    from rlops.components.trainer.loop import train_loop

    with pytest.raises(ValueError, match="needs a cap"):
        train_loop(_ScriptedLearner(None), 0, None, 100, passes=False)
    empty = train_loop(_ScriptedLearner(0), 0, None, 100, passes=True).result(None, {})
    assert empty.train_steps == 0 and np.isnan(empty.final_loss)
