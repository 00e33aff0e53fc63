"""Strategy selection (incl. the TPU cluster-resolver path without a TPU) and
MirroredStrategy over two logical CPUs == the default strategy."""

import json

import learner_testlib as lt
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.train import Learner, create_train_step_counter, strategy as strategy_lib


def test_explicit_names_and_passthrough():
    assert strategy_lib.get_strategy("default") is tf.distribute.get_strategy()
    assert strategy_lib.get_strategy(None) is tf.distribute.get_strategy()
    mirrored = strategy_lib.get_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    assert isinstance(mirrored, tf.distribute.MirroredStrategy) and mirrored.num_replicas_in_sync == 2
    assert strategy_lib.get_strategy(mirrored) is mirrored
    assert isinstance(strategy_lib.get_strategy("one_device"), tf.distribute.OneDeviceStrategy)
    with pytest.raises(ValueError, match=r"strategy='gpus' is not one of"):
        strategy_lib.get_strategy("gpus")
    with pytest.raises(ValueError, match="communication"):
        strategy_lib.get_strategy("multi_worker", communication="carrier-pigeon")


def _cluster(n_workers, chief=False, ps=False):
    cluster = {"worker": [f"127.0.0.1:{2000 + i}" for i in range(n_workers)]}
    if chief:
        cluster["chief"] = ["127.0.0.1:1999"]
    if ps:
        cluster["ps"] = ["127.0.0.1:1998"]
    return cluster


def test_auto_detection_order(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert strategy_lib._detect(None) == "default"

    gpus = [
        tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU"),
        tf.config.PhysicalDevice("/physical_device:GPU:1", "GPU"),
    ]
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind=None: gpus if kind == "GPU" else real_list(kind)
    )
    assert strategy_lib._detect(None) == "mirrored"

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": _cluster(2), "task": {"type": "worker", "index": 0}}))
    assert strategy_lib._detect(None) == "multi_worker"
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": _cluster(1), "task": {"type": "worker", "index": 0}}))
    assert strategy_lib._detect(None) == "mirrored"  # one worker is not a cluster

    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert strategy_lib._detect(None) == "tpu"  # a configured TPU wins over everything
    monkeypatch.delenv("TPU_NAME")
    assert strategy_lib._detect("grpc://10.0.0.2:8470") == "tpu"

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": _cluster(2, ps=True)}))
    with pytest.raises(ValueError, match="parameter-server"):
        strategy_lib._detect(None)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        strategy_lib.cluster_workers()


def test_tpu_cluster_resolver_path_without_tpu(monkeypatch):
    """Everything up to the TPU hardware runs for real: resolver construction and its cluster
    spec; connecting, initializing and building TPUStrategy are recorded stand-ins."""
    calls = []

    class FakeTPUStrategy:
        def __init__(self, resolver):
            calls.append(("TPUStrategy", resolver))
            self.num_replicas_in_sync = 8

    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: calls.append(("connect", r)))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: calls.append(("initialize", r)))
    monkeypatch.setattr(tf.distribute, "TPUStrategy", FakeTPUStrategy)

    strategy = strategy_lib.get_strategy("tpu", tpu="grpc://127.0.0.1:8470")
    assert isinstance(strategy, FakeTPUStrategy)
    assert [c[0] for c in calls] == ["connect", "initialize", "TPUStrategy"]
    resolver = calls[0][1]
    assert isinstance(resolver, tf.distribute.cluster_resolver.TPUClusterResolver)
    assert all(c[1] is resolver for c in calls)
    assert resolver.master() == "grpc://127.0.0.1:8470"
    assert resolver.cluster_spec().as_dict() == {"worker": ["127.0.0.1:8470"]}

    # TPU_NAME configures 'auto'; a TPU VM ('local') needs no remote connection.
    calls.clear()
    monkeypatch.setenv("TPU_NAME", "local")
    monkeypatch.setattr(
        tf.distribute.cluster_resolver,
        "TPUClusterResolver",
        lambda tpu: calls.append(("resolver", tpu)) or f"resolver({tpu})",
    )
    strategy_lib.get_strategy("auto")
    assert [c[0] for c in calls] == ["resolver", "initialize", "TPUStrategy"]
    assert calls[0][1] == "local"


def test_is_chief(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert strategy_lib.is_chief()
    for task, chief, expected in [
        ({"type": "worker", "index": 0}, False, True),
        ({"type": "worker", "index": 1}, False, False),
        ({"type": "worker", "index": 0}, True, False),
        ({"type": "chief", "index": 0}, True, True),
    ]:
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": _cluster(2, chief=chief), "task": task}))
        assert strategy_lib.is_chief() is expected, (task, chief)
        assert strategy_lib.task_info() == (task["type"], task["index"])


def _train(strategy, root, runs, global_batch=8, optimizer_fn=lambda: tf_keras.optimizers.Adam(0.05)):
    with strategy.scope():
        step = create_train_step_counter()
        agent = lt.RegressionAgent(optimizer_fn(), step)
    learner = Learner(
        str(root),
        step,
        agent,
        lt.step_keyed_dataset_fn(step, global_batch),
        strategy=strategy,
        checkpoint_interval=-1,
        summary_interval=0,
    )
    losses = [learner.run(iterations=n).loss.numpy() for n in runs]
    return losses, lt.agent_weights(agent), learner


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mirrored_two_cpus_matches_default(tmp_path, optimizer):
    opt = {"sgd": lambda: tf_keras.optimizers.SGD(0.1), "adam": lambda: tf_keras.optimizers.Adam(0.05)}[optimizer]
    runs = [1, 4, 3]
    default_losses, default_weights, _ = _train(
        tf.distribute.get_strategy(), tmp_path / "default", runs, optimizer_fn=opt
    )
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    mirrored_losses, mirrored_weights, learner = _train(mirrored, tmp_path / "mirrored", runs, optimizer_fn=opt)
    assert learner.train_step_numpy == sum(runs)
    np.testing.assert_allclose(mirrored_losses, default_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(mirrored_weights, default_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_mirrored_rejects_agents_built_outside_its_scope(tmp_path):
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    agent = lt.RegressionAgent()  # plain variables
    with pytest.raises(ValueError, match="was not created under this strategy's scope"):
        Learner(str(tmp_path), agent.train_step_counter, agent, strategy=mirrored, checkpoint_interval=-1)
    with mirrored.scope():
        agent = lt.RegressionAgent(train_step_counter=tf.Variable(0, dtype=tf.int64))
    with pytest.raises(ValueError, match="aggregation NONE"):
        Learner(str(tmp_path), agent.train_step_counter, agent, strategy=mirrored, checkpoint_interval=-1)


def test_in_memory_batches_split_over_replicas(tmp_path):
    from rlops.train import batch_dataset_fn

    batches = [lt.make_global_batch(s, 8) for s in range(3)]
    results = []
    for name, strategy in [
        ("default", tf.distribute.get_strategy()),
        ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])),
    ]:
        with strategy.scope():
            step = create_train_step_counter()
            agent = lt.RegressionAgent(tf_keras.optimizers.SGD(0.1), step)
        learner = Learner(
            str(tmp_path / name), step, agent, strategy=strategy, checkpoint_interval=-1, summary_interval=0
        )
        # A dataset_fn over one batch, then fresh batches handed over directly (on-policy style).
        losses = [learner.run(1, iterator=learner.create_iterator(batch_dataset_fn(batches[0]))).loss.numpy()]
        losses += [learner.run_on_batch(b).loss.numpy() for b in batches[1:]]
        results.append((losses, lt.agent_weights(agent)))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    odd = lt.make_global_batch(0, 7)
    with pytest.raises(ValueError, match="batch size 7 is not divisible by the 2 replicas"):
        learner.create_iterator(batch_dataset_fn(odd))
    with pytest.raises(ValueError, match="batch size 7 is not divisible by the 2 replicas"):
        learner.run_on_batch(odd)
