"""Shared helpers for tests/train: a tiny agent with the rlops agent API, deterministic data,
and subprocess plumbing. Imported by the tests and by the job scripts they start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from rlops.agents import specs, trajectories
from rlops.agents.networks import RewardNetwork
from rlops.agents.policies import EpsilonGreedyPolicy, Policy
from rlops.agents.trajectories import LossInfo, PolicyStep
from rlops.train.learner import create_train_step_counter

OBS_DIM = 3
NUM_ACTIONS = 2
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


class GreedyRewardPolicy(Policy):
    def __init__(self, time_step_spec, action_spec, network):
        super().__init__(time_step_spec, action_spec, info_spec=())
        self.network = network

    def _action(self, time_step, seed):
        action = tf.argmax(self.network(time_step.observation), -1, output_type=self.action_spec.dtype)
        return PolicyStep(action, (), ())


class RegressionAgent(tf.Module):
    """Learns the reward of each action from the observation (a one-layer bandit).

    Loss: squared error of the taken action's predicted reward, averaged over the *global*
    batch with `tf.nn.compute_average_loss`, so replicas' summed gradients equal the default
    strategy's (the Learner's strategy contract).
    """

    def __init__(
        self,
        optimizer: Any = None,
        train_step_counter: tf.Variable | None = None,
        hidden_sizes: tuple[int, ...] = (8,),
        name: str = "regression_agent",
    ):
        super().__init__(name=name)
        obs_spec = specs.TensorSpec([OBS_DIM], tf.float32, "observation")
        self.time_step_spec = trajectories.time_step_spec(obs_spec)
        self.action_spec = specs.BoundedTensorSpec((), tf.int32, 0, NUM_ACTIONS - 1, name="action")
        self.collect_data_spec = trajectories.trajectory_spec(self.time_step_spec, self.action_spec)
        self.train_sequence_length = None
        self.train_step_counter = train_step_counter if train_step_counter is not None else create_train_step_counter()
        self.network = RewardNetwork(obs_spec, NUM_ACTIONS, hidden_sizes, seed=0)
        self.optimizer = optimizer or tf_keras.optimizers.SGD(0.1)
        self.policy = GreedyRewardPolicy(self.time_step_spec, self.action_spec, self.network)
        self.collect_policy = EpsilonGreedyPolicy(self.policy, 0.1)
        self.python_train_calls = 0  # counts traces: the body runs in Python only when traced

    def train(self, experience: trajectories.Trajectory, weights: Any = None) -> LossInfo:
        self.python_train_calls += 1
        obs = tf.reshape(experience.observation, [-1, OBS_DIM])
        actions = tf.reshape(experience.action, [-1])
        rewards = tf.reshape(experience.reward, [-1])
        sample_weight = None if weights is None else tf.reshape(tf.cast(weights, tf.float32), [-1])
        variables = self.network.trainable_variables
        with tf.GradientTape() as tape:
            predicted = tf.gather(self.network(obs), actions, batch_dims=1)
            per_example = tf.square(predicted - rewards)
            loss = tf.nn.compute_average_loss(per_example, sample_weight=sample_weight)
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables))
        self.train_step_counter.assign_add(1)
        return LossInfo(loss, extra={"max_abs_error": tf.reduce_max(tf.abs(predicted - rewards))})


def make_global_batch(step: Any, batch_size: int, seed: int = 7, nan_at_step: int = -1) -> trajectories.Trajectory:
    """The global batch of train step `step` ([B, 1] single-step trajectories), a pure function
    of (seed, step) so any process or strategy rebuilds exactly the same data."""
    step = tf.cast(step, tf.int64)
    s = tf.stack([tf.constant(seed, tf.int64), step])
    obs = tf.random.stateless_normal([batch_size, OBS_DIM], s)
    actions = tf.random.stateless_uniform([batch_size], s + 1, 0, NUM_ACTIONS, dtype=tf.int32)
    true_w = tf.constant([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.3]])
    rewards = tf.gather(obs @ true_w, actions, batch_dims=1)
    rewards = tf.where(tf.equal(step, nan_at_step), tf.fill([batch_size], np.nan), rewards)
    return trajectories.single_step_trajectory(obs, actions, rewards)


def step_keyed_dataset_fn(train_step: tf.Variable, global_batch: int, seed: int = 7, nan_at_step: int = -1):
    """dataset_fn(input_context) whose k-th global batch is make_global_batch(k) for the step
    the (restored) train_step holds when the Learner builds the dataset; split over replicas in
    order, so every strategy trains on the same global batches."""

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        start = int(train_step.numpy())
        per_replica = ctx.get_per_replica_batch_size(global_batch)

        @tf.autograph.experimental.do_not_convert  # plain TF code; skip autograph's slow conversion
        def chunks(step):
            batch = make_global_batch(step, global_batch, seed, nan_at_step)
            return tf.data.Dataset.from_tensor_slices(batch).batch(per_replica, drop_remainder=True)

        ds = tf.data.Dataset.range(start, 2**62).flat_map(chunks)
        return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)

    return dataset_fn


def agent_weights(agent: tf.Module) -> list[np.ndarray]:
    return [v.numpy() for v in agent.network.trainable_variables]


# ---- subprocesses ----------------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def subprocess_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONWARNINGS="ignore",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join([HERE, REPO, env.get("PYTHONPATH", "")]),
    )
    env.update(extra)
    return env


def start_python(script: str, args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, script), *args],
        env=subprocess_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def read_scalars(logdir: str, histograms: bool = False) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard scalars under `logdir`: tag -> [(step, value)] in write order; with
    `histograms`, histogram tags too, as (step, number of values)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name in sorted(tf.io.gfile.listdir(logdir)):
        if "tfevents" not in name:
            continue
        for event in tf.compat.v1.train.summary_iterator(os.path.join(logdir, name)):
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                if value.metadata.plugin_data.plugin_name == "histograms":  # [buckets, (left, right, count)]
                    if histograms:
                        out.setdefault(value.tag, []).append((event.step, float(array[:, 2].sum())))
                    continue
                out.setdefault(value.tag, []).append((event.step, float(array)))
    return out


def cartpole_specs():
    """CartPole-v1's specs as rlops.envs.gym_env builds them (obs [4] float32, action {0, 1})."""
    high = np.array([4.8, np.finfo(np.float32).max, 0.41887903, np.finfo(np.float32).max], np.float32)
    obs = specs.BoundedTensorSpec([4], tf.float32, -high, high, name="observation")
    action = specs.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
    return trajectories.time_step_spec(obs), action


def cartpole_time_step(observation: np.ndarray) -> dict:
    """Signature inputs of the `action` function for a batch of CartPole observations."""
    b = observation.shape[0]
    return dict(
        step_type=np.zeros([b], np.int32),
        reward=np.zeros([b], np.float32),
        discount=np.ones([b], np.float32),
        observation=observation.astype(np.float32),
    )


def ppo_experience(agent: Any, num_envs: int = 4, num_steps: int = 8, seed: int = 0) -> trajectories.Trajectory:
    """A [num_envs, num_steps + 1] CartPole-shaped batch acted by `agent.collect_policy` (random
    observations, MID steps, reward 1): valid PPO input without running an environment."""
    b, t = num_envs, num_steps + 1
    obs = tf.random.stateless_normal([b * t, 4], [seed, 1], stddev=0.1)
    step_type = tf.fill([b * t], trajectories.StepType.MID)
    policy_step = agent.collect_policy.action(
        trajectories.TimeStep(step_type, tf.zeros([b * t]), tf.ones([b * t]), obs), seed=[seed, 2]
    )
    unflat = lambda x: tf.reshape(x, [b, t] + x.shape.as_list()[1:])  # noqa: E731
    return trajectories.Trajectory(
        step_type=unflat(step_type),
        observation=unflat(obs),
        action=unflat(policy_step.action),
        policy_info=tf.nest.map_structure(unflat, policy_step.info),
        next_step_type=unflat(step_type),
        reward=tf.ones([b, t]),
        discount=tf.ones([b, t]),
    )


PPO_OPTIONS = dict(
    use_gae=True,
    use_td_lambda_return=True,
    importance_ratio_clipping=0.2,
    entropy_regularization=0.01,
    initial_adaptive_kl_beta=0.5,
    kl_cutoff_factor=1.5,
    kl_cutoff_coef=100.0,
    adaptive_kl_target=0.002,
    normalize_observations=True,
    normalize_rewards=True,
    policy_l2_reg=1e-3,
    gradient_clipping=0.05,
)  # bites: replicas must clip the summed gradient


def make_ppo_agent(strategy: Any, **kwargs: Any) -> Any:
    """A CartPole-shaped PPOAgent built under `strategy.scope()` (3 epochs, Adam 3e-3)."""
    from rlops.agents.ppo import PPOAgent

    with strategy.scope():
        time_step_spec, action_spec = cartpole_specs()
        return PPOAgent(
            time_step_spec,
            action_spec,
            tf_keras.optimizers.Adam(3e-3),
            num_epochs=3,
            train_step_counter=create_train_step_counter(),
            **kwargs,
        )


def ppo_mixed_experience(agent: Any, seed: int) -> trajectories.Trajectory:
    """ppo_experience with terminations, boundaries and varied rewards, so masks and returns matter."""
    experience = ppo_experience(agent, seed=seed)
    step_type = experience.step_type.numpy().copy()
    step_type[0, 3], step_type[0, 4] = trajectories.StepType.LAST, trajectories.StepType.FIRST
    step_type[3, 6], step_type[3, 7] = trajectories.StepType.LAST, trajectories.StepType.FIRST
    next_step_type = np.concatenate([step_type[:, 1:], step_type[:, -1:]], 1)
    discount = np.where(next_step_type == trajectories.StepType.LAST, 0.0, 1.0).astype(np.float32)
    reward = np.random.default_rng(seed + 3).normal(1.0, 1.0, step_type.shape).astype(np.float32)
    return experience._replace(step_type=step_type, next_step_type=next_step_type, discount=discount, reward=reward)
