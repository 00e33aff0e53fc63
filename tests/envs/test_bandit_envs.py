"""Bandit environments and regret: specs, determinism, graph-safety, numbers vs NumPy."""

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

from rlops.agents import specs
from rlops.agents.policies import RandomPolicy
from rlops.agents.trajectories import StepType
from rlops.envs.bandit_envs import BanditBatch, DigitsBandit, StationaryLinearBandit, make_interaction_loop
from rlops.envs.regret import RegretMetric, regret, regret_numpy


def test_digits_bandit_specs_and_rewards():
    env = DigitsBandit(seed=0)
    assert env.num_actions == 10 and env.num_examples == 1797
    assert env.observation_spec.shape == (64,)
    assert env.action_spec.dtype == tf.int32 and env.action_spec.shape == ()
    assert int(env.action_spec.minimum) == 0 and int(env.action_spec.maximum) == 9
    digits = load_digits()
    np.testing.assert_allclose(env.features.numpy(), digits.data / 16.0, atol=1e-7)
    assert env.features.numpy().min() == 0.0 and env.features.numpy().max() == 1.0

    batch = env.sample(256)
    assert isinstance(batch, BanditBatch)
    assert batch.contexts.shape == (256, 64) and batch.contexts.dtype == tf.float32
    assert batch.expected_rewards.shape == (256, 10)
    # Each context's expected rewards are the one-hot of its true label.
    x = batch.contexts.numpy()
    rows = [np.flatnonzero((env.features.numpy() == xi).all(1)) for xi in x]
    labels = np.array([digits.target[r[0]] for r in rows])
    np.testing.assert_array_equal(batch.expected_rewards.numpy().argmax(1), labels)
    np.testing.assert_array_equal(batch.expected_rewards.numpy().sum(1), np.ones(256))

    actions = tf.constant(np.arange(256) % 10, tf.int32)
    r = env.rewards(batch, actions).numpy()
    np.testing.assert_array_equal(r, (labels == np.arange(256) % 10).astype(np.float32))


def test_time_step_matches_spec():
    env = DigitsBandit(seed=0)
    batch = env.sample(5)
    ts = env.time_step(batch)
    specs.check_nest_matches_spec(ts, env.time_step_spec, num_outer_dims=1)
    np.testing.assert_array_equal(ts.step_type.numpy(), [StepType.FIRST] * 5)
    np.testing.assert_array_equal(ts.observation.numpy(), batch.contexts.numpy())


def test_seeded_streams_are_reproducible_in_and_out_of_tf_function():
    a, b, c = DigitsBandit(seed=3), DigitsBandit(seed=3), DigitsBandit(seed=4)
    np.testing.assert_array_equal(a.sample(64).contexts.numpy(), b.sample(64).contexts.numpy())
    assert not np.array_equal(a.sample(64).contexts.numpy(), c.sample(64).contexts.numpy())

    def draw_fn(env, jit):
        @tf.function(jit_compile=jit)
        def draw():
            batch = env.sample(8)
            return batch.contexts, env.rewards(batch, tf.zeros([8], tf.int32))

        return draw

    eager = StationaryLinearBandit(4, 3, 0.5, seed=1)
    batch = eager.sample(8)
    eager_out = (batch.contexts, eager.rewards(batch, tf.zeros([8], tf.int32)))
    graph_out = draw_fn(StationaryLinearBandit(4, 3, 0.5, seed=1), False)()
    for e, g in zip(eager_out, graph_out):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6, atol=1e-6)
    # XLA turns uniform bits into normals its own way: reproducible, but its own stream.
    xla_a = draw_fn(StationaryLinearBandit(4, 3, 0.5, seed=1), True)()
    xla_b = draw_fn(StationaryLinearBandit(4, 3, 0.5, seed=1), True)()
    for a, b in zip(xla_a, xla_b):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Digits draws uniform integers: the same rows eagerly and under XLA.
    digits = DigitsBandit(seed=3)
    digits_xla = tf.function(lambda: digits.sample(64).contexts, jit_compile=True)
    np.testing.assert_array_equal(digits_xla().numpy(), DigitsBandit(seed=3).sample(64).contexts.numpy())


def test_stationary_linear_bandit_rewards():
    env = StationaryLinearBandit(context_dim=5, num_actions=4, noise_std=0.3, seed=0)
    batch = env.sample(20000)
    np.testing.assert_allclose(
        batch.expected_rewards.numpy(), batch.contexts.numpy() @ env.theta.numpy().T, rtol=1e-5, atol=1e-5
    )
    actions = tf.constant(np.arange(20000) % 4, tf.int32)
    expected = batch.expected_rewards.numpy()[np.arange(20000), actions.numpy()]
    noise = env.rewards(batch, actions).numpy() - expected
    assert abs(noise.mean()) < 0.01
    assert abs(noise.std() - 0.3) < 0.01
    noiseless = StationaryLinearBandit(5, 4, noise_std=0.0, seed=0)
    b = noiseless.sample(3)
    np.testing.assert_array_equal(
        noiseless.rewards(b, tf.constant([0, 1, 2])).numpy(), b.expected_rewards.numpy()[np.arange(3), [0, 1, 2]]
    )


def test_regret_tf_numpy_and_metric():
    rng = np.random.default_rng(0)
    expected = rng.normal(size=(50, 6)).astype(np.float32)
    actions = rng.integers(0, 6, size=50)
    ref = expected.max(1) - expected[np.arange(50), actions]
    np.testing.assert_allclose(regret_numpy(expected, actions), ref, rtol=1e-6)
    np.testing.assert_allclose(regret(expected, actions).numpy(), ref, rtol=1e-6, atol=1e-6)
    assert (ref >= 0).all()

    metric = RegretMetric()

    @tf.function
    def update(e, a):
        return metric.update(e, a)

    update(expected[:20], actions[:20])
    update(expected[20:], actions[20:])
    np.testing.assert_allclose(metric.cumulative().numpy(), ref.sum(), rtol=1e-5)
    np.testing.assert_allclose(metric.mean().numpy(), ref.mean(), rtol=1e-5)
    metric.reset()
    assert metric.cumulative().numpy() == 0.0


class _RandomAgent:
    """Uniform collect policy, no learning: expected regret per digit is 0.9."""

    def __init__(self, env):
        self.collect_policy = RandomPolicy(env.time_step_spec, env.action_spec)
        self.trained = tf.Variable(0)

    def train(self, experience):
        self.trained.assign_add(tf.shape(experience.reward)[0])


def test_interaction_loop_runs_in_one_tf_function():
    env = DigitsBandit(seed=0)
    agent = _RandomAgent(env)
    loop = make_interaction_loop(env, agent, batch_size=50)
    per_step = loop(40).numpy()
    assert per_step.shape == (40,)
    assert agent.trained.numpy() == 40 * 50
    assert abs(per_step.sum() / 2000 - 0.9) < 0.03
