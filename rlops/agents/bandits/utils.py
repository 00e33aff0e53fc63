"""Helpers shared by the bandit agents: spec checks, experience flattening, masked argmax."""
from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import Trajectory

Splitter = Callable[[Any], tuple[Any, tf.Tensor]]

# Names of the optional policy-info fields, as TF-Agents spells them.
PREDICTED_REWARDS_MEAN = "predicted_rewards_mean"
PREDICTED_REWARDS_OPTIMISTIC = "predicted_rewards_optimistic"
PREDICTED_REWARDS_SAMPLED = "predicted_rewards_sampled"


def check_action_spec(action_spec: Any) -> int:
    """Number of actions of a bandit action spec; ValueError unless it is one bounded scalar
    int32 spec with minimum 0 (the only kind the bandit agents and policies handle)."""
    if tf.nest.is_nested(action_spec):
        raise ValueError(f"Bandit agents need a single action spec, got a nest: {action_spec}")
    if not specs.is_bounded(action_spec):
        raise ValueError(f"Bandit action spec must be a BoundedTensorSpec, got {action_spec}")
    if action_spec.dtype != tf.int32:
        raise ValueError(f"Bandit action spec must have dtype int32, got {action_spec.dtype.name}")
    if action_spec.shape.rank != 0:
        raise ValueError(f"Bandit action spec must be a scalar, got shape {action_spec.shape}")
    if int(action_spec.minimum) != 0:
        raise ValueError(f"Bandit action spec minimum must be 0, got {action_spec.minimum}")
    return specs.num_actions(action_spec)


def check_emit_policy_info(emit_policy_info: tuple[str, ...], allowed: tuple[str, ...]) -> tuple[str, ...]:
    emit_policy_info = tuple(emit_policy_info)
    unknown = [k for k in emit_policy_info if k not in allowed]
    if unknown:
        raise ValueError(f"Unsupported emit_policy_info {unknown}; allowed: {list(allowed)}")
    return emit_policy_info


def flatten_outer(nest: Any, num_outer_dims: int) -> Any:
    """Merge the first `num_outer_dims` dimensions of every tensor in `nest` into one."""
    if num_outer_dims == 1:
        return nest

    def _flatten(t):
        t = tf.convert_to_tensor(t)
        inner = t.shape[num_outer_dims:]
        if inner.is_fully_defined():
            return tf.reshape(t, [-1] + inner.as_list())
        return tf.reshape(t, tf.concat([[-1], tf.shape(t)[num_outer_dims:]], 0))

    return tf.nest.map_structure(_flatten, nest)


def process_experience(experience: Trajectory) -> tuple[Any, tf.Tensor, tf.Tensor, int]:
    """(observations, actions, rewards) with one batch dimension, from a [B] or [B, 1]
    single-step Trajectory (the reward, a scalar per step, tells how many outer dims there are)."""
    reward = tf.convert_to_tensor(experience.reward)
    outer = reward.shape.rank
    if outer is None or outer not in (1, 2):
        raise ValueError(f"experience.reward must be [B] or [B, T], got shape {reward.shape}")
    observations = flatten_outer(experience.observation, outer)
    actions = tf.cast(flatten_outer(experience.action, outer), tf.int32)
    rewards = tf.cast(flatten_outer(reward, outer), tf.float32)
    return observations, actions, rewards, outer


def flatten_weights(weights: Any, num_outer_dims: int) -> tf.Tensor | None:
    """Per-example weights as [B] (scalars stay scalars)."""
    if weights is None:
        return None
    weights = tf.cast(weights, tf.float32)
    if weights.shape.rank is None or weights.shape.rank == 0:
        return weights
    return tf.reshape(weights, [-1])


def masked_argmax(values: tf.Tensor, mask: tf.Tensor | None, dtype: tf.DType = tf.int32) -> tf.Tensor:
    """argmax over the last axis among entries where mask is 1 (all entries when mask is None)."""
    if mask is not None:
        values = tf.where(tf.cast(mask, tf.bool), values, tf.constant(-float("inf"), values.dtype))
    return tf.argmax(values, axis=-1, output_type=dtype)


def index_with_actions(values: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """values[b, actions[b]] for [B, K] values (a gather, so only taken actions get gradients)."""
    return tf.gather(values, tf.cast(actions, tf.int32), axis=1, batch_dims=1)
