"""Contextual bandit environments in pure TensorFlow, so a whole interaction loop (sample
contexts, act, reward, train) runs inside one `tf.function`.

Every environment shares one interface:

    batch = env.sample(batch_size)          # BanditBatch(contexts [B, ...], expected_rewards [B, K])
    time_step = env.time_step(batch)        # FIRST TimeSteps whose observation is the contexts
    rewards = env.rewards(batch, actions)   # [B] float32 sampled rewards (noisy where the env is)

Randomness comes from a `tf.random.Generator` seeded at construction: the same seed gives the
same stream eagerly and inside tf.function. Under XLA (jit_compile=True) uniform draws (e.g.
which digits) are the same too, but normal draws are transformed differently: reproducible from
the seed, yet a different stream than without XLA.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import tensorflow as tf

from rlops.agents import specs, trajectories
from rlops.agents.trajectories import TimeStep
from rlops.envs.regret import regret


class BanditBatch(NamedTuple):
    contexts: tf.Tensor  # [B, ...] float32
    expected_rewards: tf.Tensor  # [B, K] float32


class BanditEnvironment:
    """Base class: subclasses set the specs in __init__ and implement `sample` and `rewards`."""

    def __init__(self, observation_spec: tf.TensorSpec, num_actions: int, seed: int):
        self.observation_spec = observation_spec
        self.num_actions = int(num_actions)
        self.action_spec = specs.BoundedTensorSpec((), tf.int32, 0, self.num_actions - 1, name="action")
        self.time_step_spec = trajectories.time_step_spec(observation_spec)
        self.seed = seed
        self._rng = tf.random.Generator.from_seed(seed)

    def sample(self, batch_size: int | tf.Tensor) -> BanditBatch:
        raise NotImplementedError

    def rewards(self, batch: BanditBatch, actions: tf.Tensor) -> tf.Tensor:
        """Expected reward of each action; subclasses with noise add it."""
        return expected_reward_of(batch, actions)

    def time_step(self, batch: BanditBatch) -> TimeStep:
        contexts = batch.contexts
        batch_size = tf.shape(tf.nest.flatten(contexts)[0])[0]
        return TimeStep(
            tf.fill([batch_size], trajectories.StepType.FIRST),
            tf.zeros([batch_size], tf.float32),
            tf.ones([batch_size], tf.float32),
            contexts,
        )


def expected_reward_of(batch: BanditBatch, actions: tf.Tensor) -> tf.Tensor:
    return tf.gather(batch.expected_rewards, tf.cast(actions, tf.int32), axis=1, batch_dims=1)


class ClassificationBandit(BanditEnvironment):
    """Labelled data as a bandit: a context is a row, arm k pays 1 if k is its label, else 0."""

    def __init__(self, features: np.ndarray, labels: np.ndarray, num_actions: int | None = None, seed: int = 0):
        features = np.asarray(features, np.float32)
        labels = np.asarray(labels, np.int32)
        num_actions = int(labels.max()) + 1 if num_actions is None else num_actions
        super().__init__(tf.TensorSpec(features.shape[1:], tf.float32, "context"), num_actions, seed)
        self.features = tf.constant(features)
        self.labels = tf.constant(labels)
        self.num_examples = int(features.shape[0])

    def sample(self, batch_size: int | tf.Tensor) -> BanditBatch:
        # Uniform rows with replacement: an i.i.d. context stream, as a deployed bandit sees.
        idx = self._rng.uniform([batch_size], 0, self.num_examples, dtype=tf.int32)
        return BanditBatch(
            tf.gather(self.features, idx), tf.one_hot(tf.gather(self.labels, idx), self.num_actions, dtype=tf.float32)
        )

    def all_contexts(self) -> BanditBatch:
        """Every row once (for greedy accuracy over the whole data set)."""
        return BanditBatch(self.features, tf.one_hot(self.labels, self.num_actions, dtype=tf.float32))


class DigitsBandit(ClassificationBandit):
    """scikit-learn's bundled 8x8 digits (1797 rows, 64 features) as a 10-armed bandit.

    Pixel intensities (0..16) are divided by 16 so features lie in [0, 1].
    """

    def __init__(self, seed: int = 0):
        from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

        data = load_digits()
        super().__init__(data.data / 16.0, data.target, num_actions=10, seed=seed)


class StationaryLinearBandit(BanditEnvironment):
    """reward_k(x) = theta_k . x + noise_std * N(0, 1), contexts x ~ N(0, I).

    theta_k ~ N(0, I / context_dim) (drawn from `seed`), so expected rewards have unit scale.
    """

    def __init__(self, context_dim: int, num_actions: int, noise_std: float = 0.1, seed: int = 0):
        super().__init__(tf.TensorSpec([context_dim], tf.float32, "context"), num_actions, seed)
        theta = np.random.default_rng(seed).normal(size=(num_actions, context_dim)) / np.sqrt(context_dim)
        self.theta = tf.constant(theta, tf.float32)  # [K, d]
        self.noise_std = float(noise_std)

    def sample(self, batch_size: int | tf.Tensor) -> BanditBatch:
        x = self._rng.normal([batch_size, self.observation_spec.shape[0]], dtype=tf.float32)
        return BanditBatch(x, tf.matmul(x, self.theta, transpose_b=True))

    def rewards(self, batch: BanditBatch, actions: tf.Tensor) -> tf.Tensor:
        mean = expected_reward_of(batch, actions)
        if self.noise_std == 0.0:
            return mean
        return mean + self.noise_std * self._rng.normal(tf.shape(mean), dtype=tf.float32)


class PerArmBandit(BanditEnvironment):
    """Stationary per-arm bandit (TF-Agents' per-arm layout): each decision shows a global
    context g ~ N(0, I) and K fresh candidate arms with features a_k ~ N(0, I), of which the
    first `num_actions` (uniform in [min_num_actions, K] when variable) are available.

        reward_k = theta_a . a_k + interaction * g^T W a_k + noise_std * N(0, 1)

    The best arm depends on its own features (and, through W, on the global context), so an
    agent that sees only the global context cannot do much better than random.

    Observations: {'global': [Dg], 'per_arm': [K, Da], 'num_actions': () int32 (variable only)}.
    With `observe_arms=False` the same decisions are offered without arm features
    ({'context': [Dg], 'mask': [K]} or just [Dg]): the baseline of the per-arm regret benchmark.
    Unavailable arms have expected reward UNAVAILABLE, so regret is measured against the best
    available arm.
    """

    UNAVAILABLE = -1e6

    def __init__(
        self,
        global_dim: int = 4,
        arm_dim: int = 4,
        num_actions: int = 8,
        noise_std: float = 0.1,
        interaction: float = 0.5,
        variable_num_actions: bool = True,
        min_num_actions: int = 2,
        observe_arms: bool = True,
        seed: int = 0,
    ):
        if variable_num_actions and not 1 <= min_num_actions <= num_actions:
            raise ValueError(f"min_num_actions must be in [1, {num_actions}], got {min_num_actions}")
        self.global_dim, self.arm_dim = int(global_dim), int(arm_dim)
        self.variable_num_actions, self.min_num_actions = variable_num_actions, int(min_num_actions)
        self.observe_arms = observe_arms
        g_spec = tf.TensorSpec([global_dim], tf.float32, "global")
        if observe_arms:
            obs_spec: Any = {"global": g_spec, "per_arm": tf.TensorSpec([num_actions, arm_dim], tf.float32, "per_arm")}
            if variable_num_actions:
                obs_spec["num_actions"] = specs.BoundedTensorSpec((), tf.int32, 1, num_actions, name="num_actions")
        elif variable_num_actions:
            obs_spec = {"context": g_spec, "mask": tf.TensorSpec([num_actions], tf.int32, "mask")}
        else:
            obs_spec = g_spec
        super().__init__(obs_spec, num_actions, seed)
        rng = np.random.default_rng(seed)
        self.theta_arm = tf.constant(rng.normal(size=arm_dim) / np.sqrt(arm_dim), tf.float32)
        self.w = tf.constant(
            interaction * rng.normal(size=(global_dim, arm_dim)) / np.sqrt(global_dim * arm_dim), tf.float32
        )
        self.noise_std = float(noise_std)

    def sample(self, batch_size: int | tf.Tensor) -> BanditBatch:
        k = self.num_actions
        g = self._rng.normal([batch_size, self.global_dim], dtype=tf.float32)
        arms = self._rng.normal([batch_size, k, self.arm_dim], dtype=tf.float32)
        expected = tf.einsum("bkd,d->bk", arms, self.theta_arm) + tf.einsum("bg,gd,bkd->bk", g, self.w, arms)
        if self.variable_num_actions:
            n = self._rng.uniform([batch_size], self.min_num_actions, k + 1, dtype=tf.int32)
        else:
            n = tf.fill([batch_size], k)
        available = tf.range(k)[None, :] < n[:, None]
        expected = tf.where(available, expected, self.UNAVAILABLE)
        if self.observe_arms:
            contexts: Any = {"global": g, "per_arm": arms}
            if self.variable_num_actions:
                contexts["num_actions"] = n
        elif self.variable_num_actions:
            contexts = {"context": g, "mask": tf.cast(available, tf.int32)}
        else:
            contexts = g
        return BanditBatch(contexts, expected)

    def rewards(self, batch: BanditBatch, actions: tf.Tensor) -> tf.Tensor:
        mean = expected_reward_of(batch, actions)
        return mean + self.noise_std * self._rng.normal(tf.shape(mean), dtype=tf.float32)

    @staticmethod
    def uniform_regret(batch: BanditBatch) -> tf.Tensor:
        """[B] expected regret of a uniform choice among the available arms (the random baseline)."""
        expected = batch.expected_rewards
        available = expected > PerArmBandit.UNAVAILABLE / 2
        mean = tf.reduce_sum(tf.where(available, expected, 0.0), 1) / tf.reduce_sum(tf.cast(available, tf.float32), 1)
        return tf.reduce_max(expected, 1) - mean


def make_interaction_loop(
    env: BanditEnvironment, agent: Any, batch_size: int, jit_compile: bool = False
) -> Callable[[int], tf.Tensor]:
    """A tf.function `loop(num_steps) -> [num_steps] regret per step (summed over the batch)`.

    Each step: sample contexts, act with `agent.collect_policy`, draw rewards, train on the
    [B, 1] single-step trajectory. The whole loop is one graph (a tf.range while-loop), so
    Python runs once per call, not once per step.

    jit_compile=True (XLA) needs a loop XLA can compile: no default summary writer while it
    runs, and ops XLA does well on CPU (small MLPs: much faster; LinUCB: slower, its Cholesky
    is slow under XLA). Under XLA each distinct `num_steps` value compiles once; pass the same
    value (e.g. a tf.constant) to reuse the compiled loop.
    """

    def step() -> tf.Tensor:
        batch = env.sample(batch_size)
        policy_step = agent.collect_policy.action(env.time_step(batch))
        reward = env.rewards(batch, policy_step.action)
        experience = trajectories.single_step_trajectory(batch.contexts, policy_step.action, reward, policy_step.info)
        agent.train(experience)
        return tf.reduce_sum(regret(batch.expected_rewards, policy_step.action))

    @tf.function(jit_compile=jit_compile)
    def loop(num_steps: int | tf.Tensor) -> tf.Tensor:
        num_steps = tf.convert_to_tensor(num_steps, tf.int32)
        out = tf.TensorArray(tf.float32, size=num_steps)
        for i in tf.range(num_steps):
            out = out.write(i, step())
        return out.stack()

    return loop
