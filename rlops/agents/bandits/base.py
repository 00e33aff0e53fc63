"""What every bandit agent shares: specs, policies, the train-step counter, summary switches."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from rlops.agents import trajectories
from rlops.agents.policies import Policy
from rlops.agents.trajectories import LossInfo, TimeStep, Trajectory


class BanditAgent(tf.Module):
    """Base class with the TF-Agents agent surface (`train`, `policy`, `collect_policy`, specs).

    Bandit experience is single-step: `train` takes a [B] or [B, 1] Trajectory, so
    `train_sequence_length` is None (any length of one-step episodes works).
    """

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        policy: Policy,
        collect_policy: Policy,
        train_step_counter: tf.Variable | None = None,
        debug_summaries: bool = False,
        summarize_grads_and_vars: bool = False,
        enable_summaries: bool = True,
    ):
        self._time_step_spec = time_step_spec
        self._action_spec = action_spec
        self._policy = policy
        self._collect_policy = collect_policy
        if train_step_counter is None:
            # ONLY_FIRST_REPLICA: incremented inside strategy.run without cross-replica conflicts.
            train_step_counter = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="train_step_counter",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        self._train_step_counter = train_step_counter
        self._debug_summaries = debug_summaries
        self._summarize_grads_and_vars = summarize_grads_and_vars
        self._enable_summaries = enable_summaries

    @property
    def time_step_spec(self) -> TimeStep:
        return self._time_step_spec

    @property
    def action_spec(self) -> tf.TensorSpec:
        return self._action_spec

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def collect_policy(self) -> Policy:
        return self._collect_policy

    @property
    def collect_data_spec(self) -> Trajectory:
        return trajectories.trajectory_spec(self._time_step_spec, self._action_spec, self._collect_policy.info_spec)

    @property
    def training_data_spec(self) -> Trajectory:
        return self.collect_data_spec

    @property
    def train_sequence_length(self) -> None:
        return None

    @property
    def train_step_counter(self) -> tf.Variable:
        return self._train_step_counter

    @property
    def summaries_enabled(self) -> bool:
        return self._enable_summaries

    @property
    def debug_summaries(self) -> bool:
        return self._debug_summaries and self._enable_summaries

    @property
    def summarize_grads_and_vars(self) -> bool:
        return self._summarize_grads_and_vars and self._enable_summaries

    def initialize(self) -> None:
        """No-op: variables are created eagerly in __init__ (kept for TF-Agents parity)."""

    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        raise NotImplementedError
