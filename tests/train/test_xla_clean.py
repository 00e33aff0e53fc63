"""TPU-compatibility without a TPU: every agent's train step compiles whole with XLA on CPU.

`tf.function(jit_compile=True)` must compile the entire function or fail, so a step that holds a
host op (py_function, print, string or summary ops, ops XLA cannot lower) fails here as it would
under TPUStrategy. The compiled step must also give the numbers of the uncompiled one. TPUs have
no float64: PPO's normalizer statistics are float64 on CPU/GPU and float32 under a TPUStrategy
(checked here by building the agent as it is built there).
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import normalizers, specs, trajectories
from rlops.agents.bandits import LinearThompsonSamplingAgent, LinUCBAgent, NeuralEpsilonGreedyAgent
from rlops.agents.networks import ActorNetwork, RewardNetwork, ValueNetwork
from rlops.agents.ppo import PPOAgent
from rlops.agents.trajectories import StepType, Trajectory

OBS = tf.TensorSpec((3,), tf.float32, "observation")
DISCRETE = specs.BoundedTensorSpec((), tf.int32, 0, 2, name="action")
CONTINUOUS = specs.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0, name="action")
K, D = 4, 3
CONTEXT = tf.TensorSpec([D], tf.float32, "context")
ARMS = specs.BoundedTensorSpec((), tf.int32, 0, K - 1, name="action")


def ppo_agent(action_spec, jit_compile):
    return PPOAgent(
        trajectories.time_step_spec(OBS),
        action_spec,
        tf_keras.optimizers.Adam(1e-2),
        ActorNetwork(OBS, action_spec, (8,), seed=1),
        ValueNetwork(OBS, (8,), seed=2),
        importance_ratio_clipping=0.2,
        use_gae=True,
        use_td_lambda_return=True,
        num_epochs=2,
        minibatch_size=6,
        entropy_regularization=0.01,
        initial_adaptive_kl_beta=0.5,
        kl_cutoff_factor=2.0,
        gradient_clipping=0.5,
        value_clipping=0.2,
        normalize_observations=True,
        normalize_rewards=True,
        jit_compile=jit_compile,
    )


def ppo_experience(agent, B=3, T=5, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(B, T, 3)).astype(np.float32)
    step_type = np.full((B, T), StepType.MID, np.int32)
    step_type[:, 0] = StepType.FIRST
    step_type[0, 2], step_type[0, 3] = StepType.LAST, StepType.FIRST
    next_step_type = np.concatenate([step_type[:, 1:], np.full((B, 1), StepType.MID, np.int32)], 1)
    flat = trajectories.TimeStep(
        step_type.reshape(-1), np.zeros(B * T, np.float32), np.ones(B * T, np.float32), obs.reshape(-1, 3)
    )
    step = agent.collect_policy.action(flat, seed=(1, 2))
    unflat = lambda x: tf.reshape(x, tf.concat([[B, T], tf.shape(x)[1:]], 0))  # noqa: E731
    return Trajectory(
        step_type=tf.constant(step_type),
        observation=tf.constant(obs),
        action=unflat(step.action),
        policy_info=tf.nest.map_structure(unflat, step.info),
        next_step_type=tf.constant(next_step_type),
        reward=tf.constant(rng.normal(size=(B, T)).astype(np.float32)),
        discount=tf.constant(np.where(next_step_type == StepType.LAST, 0.0, 1.0).astype(np.float32)),
    )


def graph_dtypes(concrete):
    graph = concrete.graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return {attr.type for n in nodes for attr in n.attr.values() if attr.type}


@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_ppo_update_compiles_with_xla_and_matches_uncompiled(action_spec):
    """The whole update (all epochs and minibatches, KL beta and normalizer updates) is one
    must-compile XLA function; its numbers equal the same graph run without XLA."""
    compiled, plain = ppo_agent(action_spec, True), ppo_agent(action_spec, False)
    exp = ppo_experience(plain)
    for _ in range(2):
        a, b = compiled.train(exp), plain.train(exp)
        np.testing.assert_allclose(a.loss.numpy(), b.loss.numpy(), rtol=1e-4, atol=1e-6)
    state = lambda agt: (
        agt.trainable_weights
        + [agt.adaptive_kl_beta, agt.train_step_counter]
        + [  # noqa: E731
            v for n in (agt.observation_normalizer, agt.reward_normalizer) for v in (n.count, n.mean, n.m2)
        ]
    )
    for x, y in zip(state(compiled), state(plain)):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=1e-5, err_msg=x.name)
    # Off TPU the normalizer statistics are float64 (precision over long runs; XLA on CPU/GPU compiles it).
    dtypes = graph_dtypes(compiled._core_fn.get_concrete_function(exp, tf.ones_like(exp.reward)))
    assert tf.float64.as_datatype_enum in dtypes


@pytest.mark.slow  # PPO's update traced under a TPU strategy stand-in, per action space (~30-60 s)
@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_ppo_update_under_tpu_strategy_has_no_float64(action_spec, monkeypatch):
    """Built as under a TPUStrategy (float32 statistics, TF-Agents' dtype): the compiled update holds
    no float64 op, and its numbers match the float64 agent's to float32 precision."""
    assert normalizers.statistics_dtype() == tf.float64  # no TPUStrategy in scope
    wide = ppo_agent(action_spec, True)
    monkeypatch.setattr(normalizers, "statistics_dtype", lambda: tf.float32)
    tpu = ppo_agent(action_spec, True)
    exp = ppo_experience(wide)
    for _ in range(2):
        np.testing.assert_allclose(tpu.train(exp).loss.numpy(), wide.train(exp).loss.numpy(), rtol=1e-3, atol=1e-5)
    for x, y in zip(tpu.trainable_weights, wide.trainable_weights):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-3, atol=1e-4, err_msg=x.name)
    assert tpu.observation_normalizer.mean.dtype == tf.float32
    dtypes = graph_dtypes(tpu._core_fn.get_concrete_function(exp, tf.ones_like(exp.reward)))
    assert tf.float64.as_datatype_enum not in dtypes


def bandit_data(seed, n=16):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    a = rng.integers(0, K, size=n).astype(np.int32)
    r = rng.normal(size=n).astype(np.float32)
    return trajectories.single_step_trajectory(x, a, r)


BANDITS = {
    "neural_epsilon_greedy": lambda: NeuralEpsilonGreedyAgent(
        trajectories.time_step_spec(CONTEXT),
        ARMS,
        RewardNetwork(CONTEXT, K, hidden_sizes=(8,), seed=1),
        tf_keras.optimizers.Adam(1e-2),
        0.1,
    ),
    "linucb": lambda: LinUCBAgent(trajectories.time_step_spec(CONTEXT), ARMS, alpha=1.0, gamma=0.9, add_bias=True),
    "lints": lambda: LinearThompsonSamplingAgent(trajectories.time_step_spec(CONTEXT), ARMS, alpha=1.0, add_bias=True),
}


@pytest.mark.parametrize("name", sorted(BANDITS))
def test_bandit_train_step_compiles_with_xla_and_matches_uncompiled(name):
    compiled_agent, plain_agent = BANDITS[name](), BANDITS[name]()
    compiled = tf.function(compiled_agent.train, jit_compile=True, autograph=False)
    plain = tf.function(plain_agent.train, autograph=False)
    for seed in range(3):
        batch = bandit_data(seed)
        np.testing.assert_allclose(compiled(batch).loss.numpy(), plain(batch).loss.numpy(), rtol=1e-4, atol=1e-6)
    for x, y in zip(compiled_agent.variables, plain_agent.variables):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=1e-5, err_msg=x.name)
    assert compiled_agent.train_step_counter.numpy() == plain_agent.train_step_counter.numpy() > 0
    dtypes = graph_dtypes(compiled.get_concrete_function(bandit_data(0)))
    assert tf.float64.as_datatype_enum not in dtypes
