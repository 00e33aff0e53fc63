"""Gradient steps that behave the same on R replicas as on one replica with the global batch.

Keras optimizers sum the replicas' gradients inside `apply_gradients`, after anything the agent
did to them. Clipping therefore sees each replica's share (TF-Agents' behaviour), and whenever
clipping bites, R replicas train differently from one: measured on PPO with gradient_clipping
0.05, two MirroredStrategy replicas ended 0.026 away in weights from one replica on the same
global batch (1.6e-7 without clipping). Here the gradients are summed first, then clipped, and
the optimizer is told not to sum again.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import tensorflow as tf

GradientTransform = Callable[[list[Any]], list[Any]]


def _skip_aggregation_kwargs(optimizer: Any) -> dict[str, Any]:
    """tf_keras' optimizers take `skip_gradients_aggregation`; the legacy OptimizerV2 takes
    `experimental_aggregate_gradients`."""
    params = inspect.signature(optimizer.apply_gradients).parameters
    if "skip_gradients_aggregation" in params:
        return {"skip_gradients_aggregation": True}
    return {"experimental_aggregate_gradients": False}


def apply_global_gradients(
    optimizer: Any,
    grads: Sequence[tf.Tensor | None],
    variables: Sequence[tf.Variable],
    transform: GradientTransform | None = None,
) -> list[Any]:
    """Sum `grads` over the replicas in sync (each replica's loss already carries its 1/R share),
    apply `transform` (e.g. clipping) to that global gradient, then apply it. Returns the applied
    gradients, the same on every replica. One replica: transform and apply, nothing else."""
    ctx = tf.distribute.get_replica_context()
    several = ctx is not None and ctx.num_replicas_in_sync > 1
    grads = list(grads)
    if several:
        present = [i for i, g in enumerate(grads) if g is not None]
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
        for i, g in zip(present, summed):
            grads[i] = g
    if transform is not None:
        grads = transform(grads)
    pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
    optimizer.apply_gradients(pairs, **(_skip_aggregation_kwargs(optimizer) if several else {}))
    return grads
