"""trainer.network and trainer.reward_loss: neural_epsilon_greedy's per-arm two-tower network and
its log loss for 0/1 rewards. Unknown values are one line with the closest names; the agent built
from the config scores with the two towers and trains on the log loss."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.components.json_config import build
from rlops.components.trainer.agents.build import make_bandit_agent
from rlops.components.trainer.agents.reward_network import sigmoid_cross_entropy
from rlops.components.trainer.config import TrainerConfig

D, K, DA = 5, 4, 3  # global dim, arms, arm dim


def test_unknown_choices_name_the_field_and_the_closest_values():
    with pytest.raises(ValueError, match=r"^trainer\.network: unknown value 'dot_prod'; closest: dot_product$"):
        build(TrainerConfig, {"num_actions": 3, "network": "dot_prod"}, "trainer")
    with pytest.raises(ValueError, match=r"^trainer\.reward_loss: unknown value 'log'; known: sigmoid_cross_entropy"):
        TrainerConfig(num_actions=3, reward_loss="log")


def test_only_the_network_agent_takes_them():
    with pytest.raises(ValueError, match=r"^trainer\.reward_loss: .* agent 'lin_ucb' has none"):
        TrainerConfig(agent="lin_ucb", num_actions=3, reward_loss="sigmoid_cross_entropy")


def test_dot_product_needs_per_arm_features():
    config = TrainerConfig(num_actions=K, network="dot_product")
    with pytest.raises(ValueError, match=r"^trainer\.network: 'dot_product' scores each item"):
        make_bandit_agent(config, D, tf.Variable(0, dtype=tf.int64))


def test_dot_product_without_item_features_is_one_line_through_the_cli(tmp_path):
    """Caught when the config loads (exit 2, one line), not at train time as a crash."""
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlops.pipelines.cli",
            "run",
            "bandit",
            "--set",
            "trainer.network=dot_product",
            "--set",
            f"root={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "trainer.network: 'dot_product'" in lines[0] and "item_features" in lines[0]
    assert "Traceback" not in proc.stderr and "looks like a bug" not in proc.stderr


def test_sigmoid_cross_entropy_is_the_elementwise_log_loss():
    labels, logits = np.array([0.0, 1.0, 1.0, 0.0]), np.array([-2.0, 0.5, 3.0, 1.5])
    p = 1.0 / (1.0 + np.exp(-logits))
    expected = -(labels * np.log(p) + (1 - labels) * np.log(1 - p)) * 2.0
    got = sigmoid_cross_entropy(tf.constant(labels), tf.constant(logits), weights=2.0)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_the_built_agent_scores_with_two_towers_and_trains_on_the_log_loss():
    config = TrainerConfig(
        num_actions=K, network="dot_product", reward_loss="sigmoid_cross_entropy", hidden_sizes=(2,), learning_rate=0.05
    )
    agent = make_bandit_agent(config, 0, tf.Variable(0, dtype=tf.int64), per_arm=(D, K, DA))
    net = agent.reward_network
    assert net.embedding_size == 2
    rng = np.random.default_rng(0)
    n = 512
    obs = {"global": rng.normal(size=(n, D)).astype(np.float32), "per_arm": rng.normal(size=(n, 1, DA))}
    obs["per_arm"] = obs["per_arm"].astype(np.float32)
    # 0/1 rewards from a planted bilinear logit: the log loss must fall well below its start.
    logit = 2.0 * obs["global"][:, 0] * obs["per_arm"][:, 0, 0]
    rewards = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    actions = tf.zeros(n, tf.int32)
    start = float(agent.reward_loss(obs, actions, rewards))
    p = 1.0 / (1.0 + np.exp(-net(obs).numpy()[:, 0]))
    np.testing.assert_allclose(start, np.mean(-(rewards * np.log(p) + (1 - rewards) * np.log(1 - p))), rtol=1e-4)
    optimizer = agent._optimizer
    for _ in range(150):
        with tf.GradientTape() as tape:
            loss = agent.reward_loss(obs, actions, rewards)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
    assert float(agent.reward_loss(obs, actions, rewards)) < start - 0.1


def test_weight_decay_is_checked_and_only_for_the_network_agent():
    with pytest.raises(ValueError, match=r"^trainer\.weight_decay must be >= 0, got -0\.1$"):
        TrainerConfig(num_actions=3, weight_decay=-0.1)
    with pytest.raises(ValueError, match=r"^trainer\.weight_decay: .* agent 'lin_ucb' has none"):
        TrainerConfig(agent="lin_ucb", num_actions=3, weight_decay=0.01)


def test_weight_decay_shrinks_each_weight_by_learning_rate_times_decay_per_step():
    """Decoupled (AdamW-style): with a zero gradient an Adam step leaves a weight as it is, and
    weight_decay takes lr x decay of it; 0 builds the optimizer TF-Agents' numbers were pinned with."""
    lr, decay = 0.05, 0.2
    weights = {}
    for wd in (0.0, decay):
        config = TrainerConfig(num_actions=K, hidden_sizes=(4,), learning_rate=lr, weight_decay=wd)
        agent = make_bandit_agent(config, D, tf.Variable(0, dtype=tf.int64))
        net, optimizer = agent.reward_network, agent._optimizer
        assert optimizer.weight_decay == (decay if wd else None)
        net(tf.zeros((1, D)))
        before = [v.numpy().copy() for v in net.trainable_variables]
        optimizer.apply_gradients([(tf.zeros_like(v), v) for v in net.trainable_variables])
        weights[wd] = (before, [v.numpy() for v in net.trainable_variables])
    for b, a in zip(*weights[0.0]):
        np.testing.assert_array_equal(a, b)
    for b, a in zip(*weights[decay]):
        np.testing.assert_allclose(a, b * (1 - lr * decay), rtol=1e-6, atol=1e-8)


def test_average_weights_is_checked_and_only_for_the_network_agents():
    with pytest.raises(ValueError, match=r"^trainer\.average_weights: .* agent 'lin_ucb' has none"):
        TrainerConfig(agent="lin_ucb", num_actions=3, average_weights=True)


def test_the_window_is_about_one_pass_and_at_most_100_steps():
    from rlops.components.trainer.averaging import MAX_WINDOW_STEPS, window_steps

    assert MAX_WINDOW_STEPS == 100
    assert window_steps(9_000, 1024) == 9  # a short split: its own pass, not weights from the start
    assert window_steps(90_180, 1024) == 89
    assert window_steps(1_000_000, 1024) == 100
    assert window_steps(None, 1024) == 100  # streamed passes: the split's size is not known
    assert window_steps(10, 1024) == 1


def test_exported_weights_are_the_moving_average_of_the_trained_ones_from_where_training_starts():
    """A numpy EMA of each step's weights, started at the weights training starts from (here a
    network moved away from its initialization, as a warm start moves it), is what finalize writes
    over the network; a resumed average (started before) is not restarted; without
    average_weights there is no average."""
    from rlops.components.trainer.averaging import weight_average

    strategy = tf.distribute.get_strategy()
    rng = np.random.default_rng(1)
    obs = tf.constant(rng.normal(size=(64, D)).astype(np.float32))
    actions = tf.constant(rng.integers(0, K, 64).astype(np.int32))
    rewards = tf.constant(rng.random(64).astype(np.float32))
    config = TrainerConfig(num_actions=K, hidden_sizes=(4,), learning_rate=0.05, average_weights=True)
    agent = make_bandit_agent(config, D, tf.Variable(0, dtype=tf.int64))
    net, optimizer = agent.reward_network, agent._optimizer
    average = weight_average(agent, config, strategy)
    for v in net.trainable_variables:  # a warm start: not the weights the average was built from
        v.assign(v + 0.5)
    average.start(records=5 * 16, batch_size=16)  # a window of 5 steps
    momentum = 1.0 - 1.0 / 5
    ema = [v.numpy().copy() for v in net.trainable_variables]

    def train(steps: int) -> None:
        nonlocal ema
        for _ in range(steps):
            with tf.GradientTape() as tape:
                loss = agent.reward_loss(obs, actions, rewards)
            grads = tape.gradient(loss, net.trainable_variables)
            optimizer.apply_gradients(zip(grads, net.trainable_variables))
            average.update()
            ema = [momentum * e + (1 - momentum) * v.numpy() for e, v in zip(ema, net.trainable_variables)]

    train(6)
    average.start(records=5 * 16, batch_size=16)  # a resumed job: the average goes on
    train(6)
    last = [v.numpy().copy() for v in net.trainable_variables]
    average.finalize()
    for got, want, trained in zip(net.trainable_variables, ema, last):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
        assert np.abs(got.numpy() - trained).max() > 1e-3  # the average is not the last step
    off = TrainerConfig(num_actions=K, hidden_sizes=(4,))
    assert weight_average(make_bandit_agent(off, D, tf.Variable(0, dtype=tf.int64)), off, strategy) is None


def test_the_average_under_mirrored_replicas_equals_the_default_strategys():
    """MirroredStrategy over two logical CPUs: the average moves in replica context after each
    synchronized step, and ends where one replica's does."""
    from rlops.components.trainer.averaging import WeightAverage

    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(8, D)).astype(np.float32))
    y = tf.constant(rng.normal(size=(8, 1)).astype(np.float32))

    def train(strategy):
        with strategy.scope():
            w = tf.Variable(rng_init, name="w")
            optimizer = tf_keras.optimizers.Adam(0.05)
            optimizer.build([w])
        average = WeightAverage([w], strategy)
        average.start(records=4 * 8, batch_size=8)
        dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors((x, y)).repeat(6))

        @tf.function
        def step(batch):
            def replica(batch):
                bx, by = batch
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.square(bx @ w - by)) / 8.0
                optimizer.apply_gradients([(tape.gradient(loss, w), w)])
                average.update()

            strategy.run(replica, args=(batch,))

        for batch in dataset:
            step(batch)
        average.finalize()
        return w.numpy()

    rng_init = rng.normal(size=(D, 1)).astype(np.float32)
    one = train(tf.distribute.get_strategy())
    two = train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-6)
    assert np.abs(one - rng_init).max() > 1e-3
