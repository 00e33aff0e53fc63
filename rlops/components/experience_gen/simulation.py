"""Simulated logs: run a logging policy in an environment and record what production would log.

Bandit environments (rlops.envs.bandit_envs) give one decision per record: context, action,
reward and the logging policy's propensity. Gymnasium environments give trajectories: one
record per step with the action's log-probability under the logging policy. The records come
out as column batches with the default column names, so they pass through the same
validation, split and write path as real logs.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, SpecConfig

GYM_PREFIX = "gym:"


def source_of(config: ExperienceGenConfig) -> SimulationSource:
    """The config's simulation source (the simulation source is what asks)."""
    assert isinstance(config.source, SimulationSource)
    return config.source


def is_gym(source: SimulationSource) -> bool:
    return source.env.startswith(GYM_PREFIX)


def make_bandit_env(source: SimulationSource, shard: int) -> Any:
    from rlops.envs import bandit_envs

    seed = source.seed * 1_000_003 + shard
    kwargs = dict(source.env_kwargs)
    if source.env == "digits":
        return bandit_envs.DigitsBandit(seed=seed, **kwargs)
    if source.env == "linear":
        kwargs.setdefault("context_dim", 8)
        kwargs.setdefault("num_actions", 4)
        return bandit_envs.StationaryLinearBandit(seed=seed, **kwargs)
    raise ValueError(f"SimulationSource.env: unknown environment {source.env!r}; use 'digits', 'linear' or 'gym:<id>'")


def bandit_shape(source: SimulationSource) -> tuple[int, SpecConfig]:
    """(context width, action spec) of the simulated bandit."""
    env = make_bandit_env(source, 0)
    return int(np.prod(env.observation_spec.shape)), SpecConfig.from_tensor_spec(env.action_spec)


def shard_sizes(total: int, num_shards: int) -> list[int]:
    base, extra = divmod(total, num_shards)
    return [base + (1 if k < extra else 0) for k in range(num_shards)]


# --- logging policies -------------------------------------------------------------------------


def make_logging_policy(source: SimulationSource, time_step_spec: Any, action_spec: Any) -> Any:
    from rlops.agents.policies import EpsilonGreedyPolicy, RandomPolicy
    from rlops.train.policy_saver import SavedPolicy

    if source.policy == "random":
        return RandomPolicy(time_step_spec, action_spec)
    if source.policy == "epsilon_greedy":
        if not source.policy_path:
            raise ValueError("SimulationSource.policy 'epsilon_greedy' needs policy_path (a SavedModel policy)")
        return EpsilonGreedyPolicy(SavedPolicy(source.policy_path), source.epsilon)
    raise ValueError(f"SimulationSource.policy must be 'random' or 'epsilon_greedy', got {source.policy!r}")


# --- bandits ----------------------------------------------------------------------------------


def simulate_bandit(source: SimulationSource, shard: int) -> Iterator[dict[str, np.ndarray]]:
    """Column batches (context [B, D], action, reward, propensity) for one shard."""
    env = make_bandit_env(source, shard)
    policy = make_logging_policy(source, env.time_step_spec, env.action_spec)
    left = shard_sizes(source.num_records, source.num_shards)[shard]
    i = 0
    while left > 0:
        b = min(source.batch_size, left)
        batch = env.sample(b)
        # A stateless seed makes the uniform policy's choices reproducible run to run.
        step = policy.action(env.time_step(batch), seed=(source.seed, shard * 1_000_003 + i))
        reward = env.rewards(batch, step.action)
        yield {
            "context": batch.contexts.numpy().reshape(b, -1).astype(np.float32),
            "action": step.action.numpy().astype(np.int64),
            "reward": reward.numpy().astype(np.float32),
            "propensity": np.asarray(step.info["propensity"], np.float32).reshape(b),
        }
        left -= b
        i += 1


# --- Gymnasium trajectories -------------------------------------------------------------------


def gym_spaces(source: SimulationSource) -> tuple[int, SpecConfig]:
    """(observation width, action spec) of the Gymnasium environment."""
    env = _make_gym(source)
    try:
        return int(np.prod(env.observation_space.shape)), _action_spec(env.action_space)
    finally:
        env.close()


def _make_gym(source: SimulationSource) -> Any:
    import gymnasium as gym

    return gym.make(source.env[len(GYM_PREFIX) :], **source.env_kwargs)


def _action_spec(space: Any) -> SpecConfig:
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return SpecConfig((), "int32", int(space.start), int(space.start + space.n - 1))
    if isinstance(space, gym.spaces.Box):
        return SpecConfig(tuple(space.shape), "float32", float(np.min(space.low)), float(np.max(space.high)))
    raise ValueError(f"gym action space {space} is not supported (Discrete or Box)")


class _GymPolicy:
    """Uniform random, or epsilon-greedy around a SavedModel policy; returns (action, log-prob)."""

    def __init__(self, source: SimulationSource, env: Any, rng: np.random.Generator):
        import gymnasium as gym

        self.space, self.rng, self.eps = env.action_space, rng, source.epsilon
        self.discrete = isinstance(self.space, gym.spaces.Discrete)
        self.greedy = None
        if source.policy == "epsilon_greedy":
            if not self.discrete:
                raise ValueError("epsilon_greedy logging needs a Discrete action space")
            if not source.policy_path:  # as make_logging_policy (bandits) checks it
                raise ValueError("SimulationSource.policy 'epsilon_greedy' needs policy_path (a SavedModel policy)")
            import tensorflow as tf

            from rlops.agents import trajectories
            from rlops.train.policy_saver import SavedPolicy

            self.greedy = SavedPolicy(source.policy_path)
            self._ts = lambda o: trajectories.restart(tf.constant(o[None], tf.float32), batch_size=1)
        elif source.policy != "random":
            raise ValueError(f"SimulationSource.policy must be 'random' or 'epsilon_greedy', got {source.policy!r}")

    def __call__(self, obs: np.ndarray) -> tuple[Any, float]:
        if not self.discrete:
            low, high = self.space.low, self.space.high
            a = self.rng.uniform(low, high).astype(np.float32)
            return a, -float(np.sum(np.log(high - low)))
        n, start = int(self.space.n), int(self.space.start)
        if self.greedy is None:
            return start + int(self.rng.integers(n)), -math.log(n)
        from rlops.heads.epsilon_greedy import epsilon_greedy_probs

        g = int(self.greedy.action(self._ts(obs)).action.numpy()[0])
        a = start + int(self.rng.integers(n)) if self.rng.random() < self.eps else g
        probs = epsilon_greedy_probs(np.array([g - start]), self.eps, num_actions=n)  # the bandit head's rule
        return a, math.log(float(probs[0, a - start]))


def simulate_gym(source: SimulationSource, shard: int, rows_per_batch: int = 4096) -> Iterator[dict[str, np.ndarray]]:
    """Step-record column batches for the episodes of one shard (episode e goes to shard e % num_shards)."""
    env = _make_gym(source)
    rng = np.random.default_rng([source.seed, shard])
    policy = _GymPolicy(source, env, rng)
    rows: dict[str, list] = {
        k: [] for k in ("episode_id", "step", "observation", "action", "reward", "terminated", "log_probability")
    }
    try:
        for e in range(shard, source.num_episodes, source.num_shards):
            obs, _ = env.reset(seed=source.seed * 1_000_003 + e)
            t, done = 0, False
            while not done:
                action, log_p = policy(obs)
                next_obs, reward, terminated, truncated, _ = env.step(action)
                for k, v in (
                    ("episode_id", f"{source.env[len(GYM_PREFIX) :]}-{source.seed}-{e}"),
                    ("step", t),
                    ("observation", np.asarray(obs, np.float32).reshape(-1)),
                    ("action", action),
                    ("reward", float(reward)),
                    ("terminated", bool(terminated)),
                    ("log_probability", log_p),
                ):
                    rows[k].append(v)
                obs, t, done = next_obs, t + 1, terminated or truncated
            if len(rows["step"]) >= rows_per_batch:
                yield _stack(rows)
                rows = {k: [] for k in rows}
        if rows["step"]:
            yield _stack(rows)
    finally:
        env.close()


def _stack(rows: dict[str, list]) -> dict[str, np.ndarray]:
    out = {k: np.asarray(v) for k, v in rows.items()}
    out["episode_id"] = np.asarray(rows["episode_id"], object)
    out["observation"] = np.stack(rows["observation"]).astype(np.float32)
    out["reward"] = out["reward"].astype(np.float32)
    out["log_probability"] = out["log_probability"].astype(np.float32)
    return out
