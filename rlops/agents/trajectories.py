"""TimeStep, Trajectory, PolicyStep and LossInfo: the data every agent and driver agrees on.

Same field names and semantics as TF-Agents, so TF-Agents users read them at once:
a Trajectory row t holds the observation at t, the action taken there, the reward and discount
received on the transition t -> t+1, and the step types of t and t+1. A LAST step is a
*boundary*: its action never reached an environment and it is masked out of training.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from rlops.agents import specs


class StepType:
    FIRST = np.int32(0)
    MID = np.int32(1)
    LAST = np.int32(2)


class TimeStep(NamedTuple):
    step_type: Any
    reward: Any
    discount: Any
    observation: Any

    def is_first(self) -> tf.Tensor:
        return tf.equal(self.step_type, StepType.FIRST)

    def is_last(self) -> tf.Tensor:
        return tf.equal(self.step_type, StepType.LAST)


class PolicyStep(NamedTuple):
    action: Any
    state: Any = ()
    info: Any = ()


class Trajectory(NamedTuple):
    step_type: Any
    observation: Any
    action: Any
    policy_info: Any
    next_step_type: Any
    reward: Any
    discount: Any

    def is_boundary(self) -> tf.Tensor:
        return tf.equal(self.step_type, StepType.LAST)

    def is_last(self) -> tf.Tensor:
        return tf.equal(self.next_step_type, StepType.LAST)


class LossInfo(NamedTuple):
    loss: Any
    extra: Any = ()


def time_step_spec(observation_spec: Any, reward_spec: tf.TensorSpec | None = None) -> TimeStep:
    reward_spec = reward_spec if reward_spec is not None else tf.TensorSpec((), tf.float32, "reward")
    return TimeStep(
        step_type=tf.TensorSpec((), tf.int32, "step_type"),
        reward=reward_spec,
        discount=specs.BoundedTensorSpec((), tf.float32, 0.0, 1.0, name="discount"),
        observation=observation_spec,
    )


def trajectory_spec(time_step_spec_: TimeStep, action_spec: Any, policy_info_spec: Any = ()) -> Trajectory:
    return Trajectory(
        step_type=time_step_spec_.step_type,
        observation=time_step_spec_.observation,
        action=action_spec,
        policy_info=policy_info_spec,
        next_step_type=time_step_spec_.step_type,
        reward=time_step_spec_.reward,
        discount=time_step_spec_.discount,
    )


def restart(observation: Any, batch_size: int | None = None) -> TimeStep:
    """A FIRST time step (reward 0, discount 1) for a batch of observations."""
    shape = () if batch_size is None else (batch_size,)
    return TimeStep(
        tf.fill(shape, StepType.FIRST), tf.zeros(shape, tf.float32), tf.ones(shape, tf.float32), observation
    )


def single_step_trajectory(observation: Any, action: Any, reward: Any, policy_info: Any = ()) -> Trajectory:
    """A [batch, 1] trajectory of one-step episodes: the shape bandit agents train on."""
    reward = tf.convert_to_tensor(reward, tf.float32)
    batch = tf.shape(reward)[:1]
    first = tf.fill(batch, StepType.FIRST)
    last = tf.fill(batch, StepType.LAST)
    add_time = lambda t: tf.nest.map_structure(lambda x: tf.expand_dims(x, 1), t)  # noqa: E731
    return Trajectory(
        step_type=add_time(first),
        observation=add_time(observation),
        action=add_time(action),
        policy_info=add_time(policy_info),
        next_step_type=add_time(last),
        reward=add_time(reward),
        discount=add_time(tf.zeros(batch, tf.float32)),
    )
