"""Weight averaging: the exported reward network is an exponential moving average of its weights.

With a constant learning rate the last step's weights carry the noise of the last few batches: on
the generator's per-arm worlds, three training seeds of the same logs gave greedy policies from
0.755 to 0.851 of the way to the optimum. Averaging the weights over about the last pass keeps what
the passes learned and drops that noise (benchmarks/defaults_vs_vw.py; figures in
docs/benchmarks.md).

The window is about one pass of the train split, at most MAX_WINDOW_STEPS steps: a short split's
few steps per pass must not average in weights from the start of training. The average is its own
object in the Learner's checkpoint, not optimizer state: a preempted job resumes its average, and a
base model trained with or without averaging warm-starts either way (the average then starts at
the base's weights). Once training ends the average is written over the weights and checkpointed,
so the checkpoint holds what is exported, and a warm start continues from what the base served.
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

MAX_WINDOW_STEPS = 100  # the longest window: enough batches to average out their noise


def window_steps(records: int | None, batch_size: int) -> int:
    """About one pass of `records` in batches of `batch_size`, at most MAX_WINDOW_STEPS (records
    unknown, as when passes stream from the files: MAX_WINDOW_STEPS)."""
    if records is None:
        return MAX_WINDOW_STEPS
    return max(1, min(MAX_WINDOW_STEPS, math.ceil(records / batch_size)))


class WeightAverage(tf.Module):
    """average <- m * average + (1 - m) * weights after every train step, per replica (the
    replicas' weights are equal after a synchronized step, so the first replica's value is kept)."""

    def __init__(self, variables: list[tf.Variable], strategy: tf.distribute.Strategy):
        super().__init__(name="weight_average")
        self._weights = list(variables)
        with strategy.scope():
            self.averages = [
                tf.Variable(v, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                for v in self._weights
            ]
            self.momentum = tf.Variable(
                1.0 - 1.0 / MAX_WINDOW_STEPS, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
            )
            # True once the average has started: a checkpoint that holds it True holds a running average.
            self.started = tf.Variable(False, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._strategy = strategy

    def start(self, records: int | None, batch_size: int) -> None:
        """After the Learner restored its checkpoint: the window for this split and, unless the
        checkpoint held a running average (a preempted job resuming), an average that starts at the
        weights training starts from (a fresh network's, or a warm start's base)."""
        with self._strategy.scope():
            self.momentum.assign(1.0 - 1.0 / window_steps(records, batch_size))
            if not bool(self.started.numpy()):
                for average, weight in zip(self.averages, self._weights):
                    average.assign(weight)
                self.started.assign(True)

    def update(self) -> None:
        m = self.momentum
        for average, weight in zip(self.averages, self._weights):
            average.assign(m * average + (1.0 - m) * weight)

    def finalize(self) -> None:
        """Writes the average over the network's weights once training is done (the caller then
        checkpoints them: the exported weights are the ones a warm start continues from)."""
        with self._strategy.scope():
            for average, weight in zip(self.averages, self._weights):
                weight.assign(average)


def weight_average(agent: Any, config: Any, strategy: tf.distribute.Strategy) -> WeightAverage | None:
    """The average of `agent`'s reward network when `config.average_weights`, else None."""
    if not config.average_weights:
        return None
    return WeightAverage(agent._variables_to_train(), strategy)
