"""Streaming normalizers for observations and rewards (TF-Agents' StreamingTensorNormalizer).

Running mean and variance merged batch by batch (Chan et al.'s parallel update), so the
statistics are exact over everything seen, not an exponential average.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf


class StreamingNormalizer(tf.Module):
    def __init__(self, shape: tuple[int, ...] | tf.TensorShape, center_mean: bool = True,
                 clip_value: float | None = 5.0, epsilon: float = 1e-8, name: str = "normalizer"):
        super().__init__(name=name)
        shape = tf.TensorShape(shape)
        self.center_mean = center_mean
        self.clip_value = clip_value
        self.epsilon = epsilon
        # Under a multi-replica strategy the first replica's statistics win (its share of the
        # batch); NONE aggregation would make updates inside strategy.run an error.
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.count = tf.Variable(tf.zeros([], tf.float64), trainable=False, name="count", aggregation=first)
        self.mean = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="mean", aggregation=first)
        self.m2 = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="m2", aggregation=first)

    @property
    def variance(self) -> tf.Tensor:
        # Before any data the normalizer is the identity (variance 1, mean 0).
        return tf.where(self.count > 0, self.m2 / tf.maximum(self.count, 1.0), tf.ones_like(self.m2))

    def update(self, values: tf.Tensor, mask: tf.Tensor | None = None) -> None:
        """Merge `values` [..., *shape] into the statistics; rows with mask 0 are ignored."""
        x = tf.cast(values, tf.float64)
        inner = self.mean.shape.rank
        x = tf.reshape(x, tf.concat([[-1], tf.shape(x)[tf.rank(x) - inner:]], 0))
        w = tf.ones(tf.shape(x)[:1], tf.float64) if mask is None else tf.reshape(tf.cast(mask, tf.float64), [-1])
        w_b = tf.reshape(w, [-1] + [1] * inner)
        n_b = tf.reduce_sum(w)
        safe_n = tf.maximum(n_b, 1.0)
        mean_b = tf.reduce_sum(w_b * x, 0) / safe_n
        m2_b = tf.reduce_sum(w_b * tf.square(x - mean_b), 0)
        n = self.count + n_b
        delta = mean_b - self.mean
        new_mean = self.mean + delta * n_b / tf.maximum(n, 1.0)
        new_m2 = self.m2 + m2_b + tf.square(delta) * self.count * n_b / tf.maximum(n, 1.0)
        self.mean.assign(new_mean)
        self.m2.assign(new_m2)
        self.count.assign(n)

    def normalize(self, values: tf.Tensor) -> tf.Tensor:
        values = tf.convert_to_tensor(values)
        dtype = values.dtype if values.dtype.is_floating else tf.float32
        x = tf.cast(values, dtype)
        std = tf.cast(tf.sqrt(self.variance + self.epsilon), dtype)
        if self.center_mean:
            x = x - tf.cast(self.mean, dtype)
        x = x / std
        if self.clip_value is not None:
            x = tf.clip_by_value(x, -self.clip_value, self.clip_value)
        return x

    def numpy_normalize(self):
        """Snapshot of `normalize` as a numpy function (see MLP.numpy_forward)."""
        mean = self.mean.numpy() if self.center_mean else 0.0
        std = np.sqrt(self.variance.numpy() + self.epsilon)
        clip = self.clip_value

        def normalize(x: np.ndarray) -> np.ndarray:
            x = (x - mean) / std
            return np.clip(x, -clip, clip) if clip is not None else x
        return normalize
