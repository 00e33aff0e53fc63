"""Gymnasium vector environments -> batched Trajectories (backends: VECTOR_ENVS below).

gymnasium 1.x vector envs autoreset in NEXT_STEP mode: after a step that ends an episode
(terminated or truncated), the *next* `step` call resets that sub-env, ignores its action and
returns the first observation with reward 0. That maps one-to-one onto TF-Agents' trajectory
convention: the step that observes the final observation is a LAST (boundary) row, its
action never acts, and the following row is FIRST. Terminated episodes get discount 0
(no bootstrap); truncated ones keep discount 1, so learners bootstrap from V(final obs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import StepType, TimeStep, Trajectory, time_step_spec as make_time_step_spec


def space_to_spec(space: gym.Space, name: str) -> tf.TensorSpec:
    if isinstance(space, gym.spaces.Discrete):
        return specs.BoundedTensorSpec((), tf.int32, int(space.start), int(space.start + space.n - 1), name=name)
    if isinstance(space, gym.spaces.Box):
        dtype = tf.float32 if np.issubdtype(space.dtype, np.floating) else tf.as_dtype(space.dtype)
        low = np.broadcast_to(space.low, space.shape).astype(dtype.as_numpy_dtype)
        high = np.broadcast_to(space.high, space.shape).astype(dtype.as_numpy_dtype)
        if np.all(np.isinf(low)) and np.all(np.isinf(high)):
            return tf.TensorSpec(space.shape, dtype, name=name)
        return specs.BoundedTensorSpec(space.shape, dtype, low, high, name=name)
    raise ValueError(f"unsupported Gymnasium space for {name}: {space}")


VECTOR_ENVS = ("auto", "sync", "async", "envpool")
"""Collection backends. auto: the env's own vectorized implementation when it has one
(CartPole: numpy over all sub-envs at once), else sync. sync: SyncVectorEnv, sub-envs stepped
in turn in this process. async: AsyncVectorEnv, one subprocess per sub-env (heavier envs such
as MuJoCo, on machines with cores to spare). envpool: EnvPool's C++ thread pool, when installed.
sync and async seed sub-env i with seed + i and give identical trajectories."""


def make_vector_env(
    env_id: str, num_envs: int, seed: int = 0, vector_env: str = "auto", **kwargs: Any
) -> gym.vector.VectorEnv:
    """A NEXT_STEP-autoreset vector env from the `vector_env` backend (see VECTOR_ENVS)."""
    if vector_env not in VECTOR_ENVS:
        raise ValueError(f"vector_env={vector_env!r}: expected one of {', '.join(VECTOR_ENVS)}")
    next_step = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
    if vector_env == "envpool":
        from rlops.envs.envpool_env import EnvPoolVectorEnv

        env = EnvPoolVectorEnv(env_id, num_envs, seed, **kwargs)
    elif vector_env == "auto":
        try:
            env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
        except (gym.error.Error, ValueError, TypeError):
            env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", vector_kwargs=next_step, **kwargs)
    else:
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=vector_env, vector_kwargs=next_step, **kwargs)
    mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
        env.close()
        raise ValueError(f"{env_id}: vector env autoresets in {mode}; rlops needs NEXT_STEP")
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def backend_name(env: Any) -> str:
    """Which backend a vector env from make_vector_env is (benchmarks report it)."""
    from rlops.envs.envpool_env import EnvPoolVectorEnv

    for cls, name in (
        (gym.vector.AsyncVectorEnv, "async"),
        (gym.vector.SyncVectorEnv, "sync"),
        (EnvPoolVectorEnv, "envpool"),
    ):
        if isinstance(env, cls):
            return name
    return "vector_entry_point"


class GymVectorEnv:
    """Specs plus batched stepping with TF-Agents step types for a Gymnasium vector env."""

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, vector_env: str = "auto", **kwargs: Any):
        self.env_id = env_id
        self.num_envs = num_envs
        self.env = make_vector_env(env_id, num_envs, seed, vector_env, **kwargs)
        self.backend = backend_name(self.env)
        self.observation_spec = space_to_spec(self.env.single_observation_space, "observation")
        self.action_spec = space_to_spec(self.env.single_action_space, "action")
        self.time_step_spec = make_time_step_spec(self.observation_spec)
        self._seed = seed
        self.reset()

    def reset(self) -> None:
        obs, _ = self.env.reset(seed=self._seed)
        self.observation = obs.astype(self.observation_spec.dtype.as_numpy_dtype)
        self.step_type = np.full(self.num_envs, StepType.FIRST, np.int32)

    def current_time_step(self) -> TimeStep:
        n = self.num_envs
        return TimeStep(self.step_type, np.zeros(n, np.float32), np.ones(n, np.float32), self.observation)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps all sub-envs; returns (reward, discount, next_step_type) of the transition."""
        if not specs.is_discrete(self.action_spec) and specs.is_bounded(self.action_spec):
            action = np.clip(action, self.action_spec.minimum, self.action_spec.maximum)
        obs, reward, terminated, truncated, _ = self.env.step(action)
        was_last = self.step_type == StepType.LAST  # this call reset those sub-envs
        done = (terminated | truncated) & ~was_last
        next_step_type = np.where(was_last, StepType.FIRST, np.where(done, StepType.LAST, StepType.MID))
        discount = np.where(terminated & ~was_last, 0.0, 1.0).astype(np.float32)
        reward = np.where(was_last, 0.0, reward).astype(np.float32)
        self.observation = obs.astype(self.observation_spec.dtype.as_numpy_dtype)
        self.step_type = next_step_type.astype(np.int32)
        return reward, discount, self.step_type

    def close(self) -> None:
        self.env.close()


@dataclass
class EpisodeStats:
    """Returns and lengths of episodes finished during collection, with the env step count
    at which each finished (for learning curves)."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)


def _leaves(x: Any) -> list:
    """Leaves of a nest of dicts / tuples / lists, in tf.nest's order (sorted dict keys)."""
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _leaves(x[k])]
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def _policy_step_fn(policy) -> Callable:
    @tf.function
    def act(step_type, reward, discount, observation):
        step = policy.action(TimeStep(step_type, reward, discount, observation))
        return step.action, step.info

    return act


class ReturnScaler:
    """Rewards divided by the running standard deviation of each env's discounted return, then
    clipped (CleanRL's and Gymnasium's NormalizeReward, SB3's VecNormalize): value targets stay
    O(1) whatever the reward scale. TF-Agents' reward normalizer (PPOAgent(normalize_rewards=True))
    divides by the std of single rewards instead, so on MuJoCo its value targets are O(100).
    The statistics are Gymnasium's RunningMeanStd (count starts at 1e-4); `statistics` /
    `load_statistics` carry them across a restart (the per-env running returns restart at 0 with
    the environments)."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.returns = np.zeros(num_envs, np.float64)
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0

    def __call__(self, reward: np.ndarray, acting: np.ndarray, done: np.ndarray) -> np.ndarray:
        """`reward` of one vector step; `acting`: sub-envs whose step was a real transition (not
        the reset after an episode end); `done`: sub-envs whose episode ended with this step."""
        self.returns = np.where(acting, self.returns * self.gamma + reward, self.returns)
        if acting.any():
            self._update(self.returns[acting])
        scaled = reward / np.sqrt(self.var + self.epsilon)
        self.returns[done] = 0.0
        return np.clip(scaled, -self.clip, self.clip).astype(reward.dtype)

    def statistics(self) -> tuple[float, float, float]:
        """(count, mean, var) of the discounted returns seen so far."""
        return self.count, self.mean, self.var

    def load_statistics(self, count: float, mean: float, var: float) -> None:
        self.count, self.mean, self.var = float(count), float(mean), float(var)

    def _update(self, x: np.ndarray) -> None:
        # Chan et al.'s parallel merge of the batch's mean and (population) variance.
        n, mean, var = len(x), float(np.mean(x)), float(np.var(x))
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.var = (self.var * self.count + var * n + delta**2 * self.count * n / total) / total
        self.count = total


class VectorDriver:
    """Collects `num_steps` steps from every sub-env with `policy` into a [B, num_steps+1]
    Trajectory (numpy). Row num_steps holds only the current observation and step type: it is
    the bootstrap row PPO needs, and the next call continues from exactly that state."""

    def __init__(
        self,
        env: GymVectorEnv,
        policy,
        num_steps: int,
        seed: int = 0,
        use_numpy_policy: bool = True,
        reward_scaler: ReturnScaler | None = None,
    ):
        self.env = env
        self.reward_scaler = reward_scaler  # stored rewards scaled; episode returns stay raw
        self.policy = policy
        self.num_steps = num_steps
        self._act = _policy_step_fn(policy)
        self._seed = seed
        self.use_numpy_policy = use_numpy_policy
        self.stats = EpisodeStats()
        self.total_env_steps = 0
        self._episode_return = np.zeros(env.num_envs, np.float64)
        self._episode_length = np.zeros(env.num_envs, np.int64)

    def run(self) -> Trajectory:
        env, T, B = self.env, self.num_steps, self.env.num_envs
        act = self._numpy_or_tf_actor()
        # Preallocated [B, T+1] columns, filled one time step at a time (no per-step lists).
        obs_dtype = env.observation_spec.dtype.as_numpy_dtype
        step_type = np.empty((B, T + 1), np.int32)
        observation = np.empty((B, T + 1) + tuple(env.observation_spec.shape), obs_dtype)
        next_step_type = np.full((B, T + 1), StepType.MID, np.int32)
        reward = np.zeros((B, T + 1), np.float32)
        discount = np.ones((B, T + 1), np.float32)
        action: Any = None  # [B, T + 1, ...] and the info buffers, shaped by the policy's first output
        info: Any = None
        for t in range(T):
            step_type[:, t], observation[:, t] = env.step_type, env.observation
            a, i = act(env.current_time_step())
            if action is None:  # shapes and dtypes come from the policy's first output
                action = np.zeros((B, T + 1) + a.shape[1:], a.dtype)
                info = tf.nest.map_structure(lambda x: np.zeros((B, T + 1) + x.shape[1:], x.dtype), i)
                info_leaves = _leaves(info)
            action[:, t] = a
            for buf, x in zip(info_leaves, _leaves(i)):  # tf.nest here cost ~100 us a step
                buf[:, t] = x
            reward[:, t], discount[:, t], next_step_type[:, t] = env.step(a)
            self._track_episodes(step_type[:, t], reward[:, t], next_step_type[:, t])
            if self.reward_scaler is not None:
                reward[:, t] = self.reward_scaler(
                    reward[:, t], step_type[:, t] != StepType.LAST, next_step_type[:, t] == StepType.LAST
                )
        step_type[:, T], observation[:, T] = env.step_type, env.observation
        # The bootstrap row never acts, but learners evaluate log-probabilities on every row before
        # masking: zeros there are a Normal with scale 0 (NaN log-prob, and NaN * weight 0 is NaN).
        # Repeat the last acting row's action and info so every row is a valid distribution.
        action[:, T] = action[:, T - 1]
        for buf in info_leaves:
            buf[:, T] = buf[:, T - 1]
        self.total_env_steps += T * B
        return Trajectory(
            step_type=step_type,
            observation=observation,
            action=action,
            policy_info=info,
            next_step_type=next_step_type,
            reward=reward,
            discount=discount,
        )

    def _numpy_or_tf_actor(self) -> Callable[[TimeStep], tuple[np.ndarray, Any]]:
        """The policy's numpy snapshot when it has one (one weight copy per run instead of a
        TF call per step: most of collection time otherwise), else its TF `action`."""
        sampler = None
        if self.use_numpy_policy and hasattr(self.policy, "numpy_sampler"):
            try:
                self._seed += 1
                sampler = self.policy.numpy_sampler(seed=self._seed)
            except ValueError:
                sampler = None
        if sampler is not None:
            return lambda ts: sampler(ts.observation)

        def tf_act(ts: TimeStep):
            action, info = self._act(ts.step_type, ts.reward, ts.discount, ts.observation)
            return action.numpy(), tf.nest.map_structure(lambda t: t.numpy(), info)

        return tf_act

    def _track_episodes(self, step_type: np.ndarray, reward: np.ndarray, next_step_type: np.ndarray) -> None:
        acting = step_type != StepType.LAST
        self._episode_return += np.where(acting, reward, 0.0)
        self._episode_length += acting
        done = next_step_type == StepType.LAST
        for i in np.flatnonzero(done):
            self.stats.returns.append(float(self._episode_return[i]))
            self.stats.lengths.append(int(self._episode_length[i]))
            self.stats.env_steps.append(self.total_env_steps)
            self._episode_return[i] = 0.0
            self._episode_length[i] = 0


def evaluate_policy(
    env_id: str, policy, num_episodes: int, seed: int = 10_000, num_envs: int | None = None, **kwargs: Any
) -> np.ndarray:
    """Returns of `num_episodes` complete episodes under `policy` (e.g. the greedy policy),
    each sub-env seeded differently; episodes beyond num_episodes are discarded."""
    num_envs = num_envs or min(num_episodes, 20)
    env = GymVectorEnv(env_id, num_envs, seed=seed, **kwargs)
    act = _policy_step_fn(policy)
    returns: list[float] = []
    running = np.zeros(num_envs)
    started = np.ones(num_envs, bool)  # sub-env episodes counted (avoid bias to short episodes)
    launched = num_envs
    while len(returns) < num_episodes:
        ts = env.current_time_step()
        action, _ = act(ts.step_type, ts.reward, ts.discount, ts.observation)
        step_type = env.step_type
        reward, _, next_step_type = env.step(action.numpy())
        running += np.where(step_type != StepType.LAST, reward, 0.0)
        for i in np.flatnonzero(next_step_type == StepType.LAST):
            if started[i]:
                returns.append(float(running[i]))
            running[i] = 0.0
            started[i] = launched < num_episodes
            launched += int(started[i])
    env.close()
    return np.asarray(returns[:num_episodes])
