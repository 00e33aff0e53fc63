"""Regret: how much expected reward the chosen actions left on the table.

regret_b = max_k expected_rewards[b, k] - expected_rewards[b, action_b]
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def regret(expected_rewards: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """[B] per-example regret from [B, K] expected rewards and [B] actions (TF, graph-safe)."""
    expected_rewards = tf.convert_to_tensor(expected_rewards, tf.float32)
    chosen = tf.gather(expected_rewards, tf.cast(actions, tf.int32), axis=1, batch_dims=1)
    return tf.reduce_max(expected_rewards, axis=1) - chosen


def regret_numpy(expected_rewards: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """NumPy twin of `regret`."""
    expected_rewards = np.asarray(expected_rewards, np.float64)
    actions = np.asarray(actions, np.int64)
    return expected_rewards.max(axis=1) - expected_rewards[np.arange(len(actions)), actions]


class RegretMetric(tf.Module):
    """Running regret over every example seen: `cumulative()` (sum) and `mean()` (per step,
    i.e. per interaction). Variables, so `update` works inside tf.function loops."""

    def __init__(self, name: str = "regret"):
        super().__init__(name=name)
        self.total = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="total")
        self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name="count")

    def update(self, expected_rewards: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """Add a batch; returns its [B] per-example regret."""
        r = regret(expected_rewards, actions)
        # float64 accumulator: float32 sums of ~1e5 terms drift in the last digits.
        self.total.assign_add(tf.reduce_sum(tf.cast(r, tf.float64)))
        self.count.assign_add(tf.cast(tf.size(r), tf.int64))
        return r

    def cumulative(self) -> tf.Tensor:
        return self.total.read_value()

    def mean(self) -> tf.Tensor:
        return self.total / tf.cast(tf.maximum(self.count, 1), tf.float64)

    def reset(self) -> None:
        self.total.assign(0.0)
        self.count.assign(0)
