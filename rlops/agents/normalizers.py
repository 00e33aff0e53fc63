"""Streaming normalizers for observations and rewards (TF-Agents' StreamingTensorNormalizer).

Running mean and variance merged batch by batch (Chan et al.'s parallel update), so the
statistics are exact over everything seen, not an exponential average. Same numbers as
TF-Agents (tests/golden): the count starts at 1e-8, the variance is m2 / count, and
`normalize` computes (x - mean) / sqrt(variance + 1e-3) clipped to +-clip_value. Before any data
the variance is 0, so values are scaled by 1/sqrt(1e-3) (then clipped), as in TF-Agents.
Statistics are float64 here (TF-Agents: float32), which only adds precision, except under a
TPUStrategy: TPUs have no float64, so there they are float32, as in TF-Agents.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

_INITIAL_COUNT = 1e-8  # TF-Agents' _EPS: avoids 0/0 before the first update


def statistics_dtype() -> tf.DType:
    """float64 for the running statistics, float32 when built under a TPUStrategy (no float64 on TPU)."""
    strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
    is_tpu = isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))
    return tf.float32 if is_tpu else tf.float64


class StreamingNormalizer(tf.Module):
    def __init__(
        self,
        shape: tuple[int, ...] | tf.TensorShape,
        center_mean: bool = True,
        clip_value: float | None = 5.0,
        epsilon: float = 1e-3,
        name: str = "normalizer",
        dtype: tf.DType | None = None,
    ):
        super().__init__(name=name)
        self.dtype = dtype or statistics_dtype()
        shape = tf.TensorShape(shape)
        self.center_mean = center_mean
        self.clip_value = clip_value if clip_value and clip_value > 0 else None  # 0: no clipping (TF-Agents)
        self.epsilon = epsilon
        # Under a multi-replica strategy every replica computes the same all-reduced statistics
        # (update(all_reduce=...)); ONLY_FIRST_REPLICA lets replicas assign inside strategy.run.
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.count = tf.Variable(
            tf.fill([], tf.constant(_INITIAL_COUNT, self.dtype)), trainable=False, name="count", aggregation=first
        )
        self.mean = tf.Variable(tf.zeros(shape, self.dtype), trainable=False, name="mean", aggregation=first)
        self.m2 = tf.Variable(tf.zeros(shape, self.dtype), trainable=False, name="m2", aggregation=first)

    @property
    def variance(self) -> tf.Tensor:
        return self.m2 / self.count

    def update(
        self,
        values: tf.Tensor,
        mask: tf.Tensor | None = None,
        all_reduce: Callable[[tf.Tensor], tf.Tensor] | None = None,
    ) -> None:
        """Merge `values` [..., *shape] into the statistics; rows with mask 0 are ignored.

        `all_reduce` sums a tensor over replicas (inside strategy.run), so that every replica
        merges the statistics of the global batch.
        """
        reduce = all_reduce or (lambda x: x)
        x = tf.cast(values, self.dtype)
        inner = self.mean.shape.rank
        x = tf.reshape(x, tf.concat([[-1], tf.shape(x)[tf.rank(x) - inner :]], 0))
        w = tf.ones(tf.shape(x)[:1], self.dtype) if mask is None else tf.reshape(tf.cast(mask, self.dtype), [-1])
        w_b = tf.reshape(w, [-1] + [1] * inner)
        n_b = reduce(tf.reduce_sum(w))
        safe_n = tf.maximum(n_b, np.finfo(self.dtype.as_numpy_dtype).tiny)
        mean_b = reduce(tf.reduce_sum(w_b * x, 0)) / safe_n
        m2_b = reduce(tf.reduce_sum(w_b * tf.square(x - mean_b), 0))
        n = self.count + n_b
        delta = mean_b - self.mean
        self.mean.assign(self.mean + delta * n_b / n)
        self.m2.assign(self.m2 + m2_b + tf.square(delta) * self.count * n_b / n)
        self.count.assign(n)

    def normalize(self, values: tf.Tensor) -> tf.Tensor:
        values = tf.convert_to_tensor(values)
        dtype = values.dtype if values.dtype.is_floating else tf.float32
        x = tf.cast(values, dtype)
        if self.center_mean:
            x = x - tf.cast(self.mean, dtype)
        x = x * tf.math.rsqrt(tf.cast(self.variance, dtype) + self.epsilon)
        if self.clip_value is not None:
            x = tf.clip_by_value(x, -self.clip_value, self.clip_value)
        return x

    def numpy_normalize(self) -> Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]:
        """Snapshot of `normalize` as a numpy function (see MLP.numpy_forward)."""
        mean = self.mean.numpy() if self.center_mean else 0.0
        std = np.sqrt(self.variance.numpy() + self.epsilon)
        clip = self.clip_value

        def normalize(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
            x = (x - mean) / std
            return np.clip(x, -clip, clip) if clip is not None else x

        return normalize
