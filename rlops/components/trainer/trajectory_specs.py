"""The specs PPO trains on from logged trajectories: from trainer.ppo.env_id when given (checked
against the logs), else from the logs themselves."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlops.agents import specs
from rlops.components.trainer import episodes
from rlops.components.trainer.config import TrainerConfig


def derives_uniform(logged: episodes.LoggedFeatures, action_spec: tf.TensorSpec) -> bool:
    """Only log-probabilities for more than two actions: the logs must show a uniform logger."""
    return bool(
        specs.is_discrete(action_spec)
        and episodes.LOGITS not in logged.policy_info
        and specs.num_actions(action_spec) > 2
    )


def offline_specs(logged: episodes.LoggedFeatures, config: TrainerConfig) -> tuple[tf.TensorSpec, tf.TensorSpec]:
    """Observation and action specs: from trainer.ppo.env_id when given (checked against the
    logs), else from the logs, with trainer.num_actions where the logs don't say how many."""
    logits = logged.policy_info.get(episodes.LOGITS)
    env_id = str(config.ppo.get("env_id") or "")  # the config loader checked it is a str
    if env_id:
        observation_spec, action_spec = env_specs(env_id)
        dim = int(np.prod(observation_spec.shape.as_list()))
        if dim != logged.observation_dim:
            raise ValueError(
                f"trainer.ppo.env_id: {env_id} observations have {dim} values, the logged ones {logged.observation_dim}"
            )
        if specs.is_discrete(action_spec) != logged.discrete:
            raise ValueError(
                f"trainer.ppo.env_id: {env_id} has {_kind(not logged.discrete)} actions, the logs "
                f"{_kind(logged.discrete)} ones"
            )
        if config.num_actions is not None and logged.discrete and config.num_actions != specs.num_actions(action_spec):
            raise ValueError(
                f"trainer.num_actions: {config.num_actions}, but {env_id} has {specs.num_actions(action_spec)} actions"
            )
        return observation_spec, action_spec
    observation_spec = tf.TensorSpec((logged.observation_dim,), tf.float32, "observation")
    if not logged.discrete:
        return observation_spec, tf.TensorSpec((logged.action_dim,), tf.float32, "action")
    if logits is not None and config.num_actions is not None and logits != config.num_actions:
        raise ValueError(
            f"trainer.num_actions: {config.num_actions}, but the logged {episodes.LOGITS} have {logits} values per step"
        )
    k = logits or config.num_actions
    if k is None:
        raise ValueError(
            f"trainer.num_actions: the logged actions are discrete and the logs have no "
            f"{episodes.LOGITS} to tell how many there are; set trainer.num_actions (or "
            f"trainer.ppo.env_id)"
        )
    return observation_spec, specs.BoundedTensorSpec((), tf.int32, 0, k - 1, name="action")


def _kind(discrete: bool) -> str:
    return "discrete" if discrete else "continuous"


def env_specs(env_id: str) -> tuple[tf.TensorSpec, tf.TensorSpec]:
    """The observation and action specs of the Gymnasium environment `env_id`."""
    import gymnasium as gym

    from rlops.envs.gym_env import space_to_spec

    env = gym.make(env_id)
    try:
        return space_to_spec(env.observation_space, "observation"), space_to_spec(env.action_space, "action")
    finally:
        env.close()
