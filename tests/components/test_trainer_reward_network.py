"""trainer.network and trainer.reward_loss: neural_epsilon_greedy's per-arm two-tower network and
its log loss for 0/1 rewards. Unknown values are one line with the closest names; the agent built
from the config scores with the two towers and trains on the log loss."""

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.json_config import build
from rlops.components.trainer.agents import make_bandit_agent
from rlops.components.trainer.agents.neural_epsilon_greedy import sigmoid_cross_entropy
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
