"""Triggers: callables `trigger(train_step)` the Learner runs after every `run` (TF-Agents').

- `IntervalTrigger(interval, fn)`: calls `fn()` once `interval` steps passed since it last fired.
- `PolicySavedModelTrigger`: exports full SavedModels of the policy, collect policy and greedy
  policy once, then writes checkpoint-only updates (variables, train step, metadata such as
  metric values) every `interval` steps. Serving loads a SavedModel plus the newest checkpoint
  (`policy_saver.load(dir, policy_saver.latest_checkpoint(...))`).
- `StepPerSecondLogTrigger`: logs train steps per second every `interval` steps.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf

from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.train import policy_saver as policy_saver_lib

log = logging.getLogger(__name__)

POLICY_DIR = "policy"
COLLECT_POLICY_DIR = "collect_policy"
GREEDY_POLICY_DIR = "greedy_policy"
POLICY_CHECKPOINT_DIR = "checkpoints"

__all__ = [
    "IntervalTrigger",
    "PolicySavedModelTrigger",
    "StepPerSecondLogTrigger",
    "POLICY_DIR",
    "COLLECT_POLICY_DIR",
    "GREEDY_POLICY_DIR",
    "POLICY_CHECKPOINT_DIR",
]


class IntervalTrigger:
    """Calls `fn()` when `value >= last_trigger_value + interval` (interval <= 0: never)."""

    def __init__(self, interval: int, fn: Callable[[], Any], start: int = 0):
        self._interval = interval
        self._start = start
        self._last_trigger_value = start
        self._fn = fn

    def __call__(self, value: int, force_trigger: bool = False) -> None:
        if self._interval <= 0:
            return
        if force_trigger or value >= self._last_trigger_value + self._interval:
            self._fn()
            self._last_trigger_value = value

    def reset(self) -> None:
        self._last_trigger_value = self._start

    def set_start(self, start: int) -> None:
        """Re-arms the trigger at `start` (the Learner calls this after restoring a checkpoint)."""
        self._start = start
        self._last_trigger_value = start


def _metric_value(metric: Any) -> Any:
    if hasattr(metric, "result"):
        return metric.result()
    return metric() if callable(metric) else metric


class PolicySavedModelTrigger(IntervalTrigger):
    """Exports the agent's policies once, then checkpoint-only updates every `interval` steps.

    Layout under `saved_model_dir` (conventionally `root_dir/policies`):
    `policy/`, `collect_policy/`, `greedy_policy/` (SavedModels sharing one variable list, so any
    checkpoint loads into any of them) and `checkpoints/policy_checkpoint_<step>/`.

    Args:
      metadata_metrics: name -> metric (object with `result()`, a callable or a value), or a
        sequence of metrics with `.name`; their values at each save go into `get_metadata`.
      save_greedy_policy: also export a greedy version of `agent.policy` (the policy itself
        when it is already deterministic).
    Call it on the chief only in multi-worker jobs (`rlops.train.strategy.is_chief`).
    """

    def __init__(
        self,
        saved_model_dir: str,
        agent: Any,
        train_step: tf.Variable,
        interval: int,
        metadata_metrics: Mapping[str, Any] | Sequence[Any] | None = None,
        start: int = 0,
        batch_size: int | None = None,
        save_greedy_policy: bool = True,
    ):
        if metadata_metrics is None:
            metadata_metrics = {}
        elif not isinstance(metadata_metrics, Mapping):
            metadata_metrics = {m.name: m for m in metadata_metrics}
        self._metrics = dict(metadata_metrics)
        self._train_step = train_step
        self.saved_model_dir = saved_model_dir
        self.checkpoint_dir = os.path.join(saved_model_dir, POLICY_CHECKPOINT_DIR)
        # float64 holds step/episode counts exactly (float32 loses integers above 2**24).
        self._metadata = {
            name: tf.Variable(0.0, dtype=tf.float64, trainable=False, name=name) for name in self._metrics
        }

        policies = [(POLICY_DIR, agent.policy), (COLLECT_POLICY_DIR, agent.collect_policy)]
        if save_greedy_policy:
            greedy = GreedyPolicy(agent.policy) if isinstance(agent.policy, ActorPolicy) else agent.policy
            policies.append((GREEDY_POLICY_DIR, greedy))
        shared_variables = [v for _, p in policies for v in p.variables]
        self._savers = {
            name: policy_saver_lib.PolicySaver(
                p, batch_size=batch_size, train_step=train_step, metadata=self._metadata, variables=shared_variables
            )
            for name, p in policies
        }
        self._update_metadata()
        for name, saver in self._savers.items():
            saver.save(os.path.join(saved_model_dir, name))
        super().__init__(interval, self._save_checkpoint, start=start)

    def _update_metadata(self) -> None:
        for name, metric in self._metrics.items():
            self._metadata[name].assign(tf.cast(_metric_value(metric), tf.float64))

    def _save_checkpoint(self) -> None:
        self._update_metadata()
        step = int(self._train_step.numpy())
        path = os.path.join(self.checkpoint_dir, f"{policy_saver_lib.CHECKPOINT_PREFIX}{step:010d}")
        self._savers[POLICY_DIR].save_checkpoint(path)
        log.info("Saved policy checkpoint %s", path)


class StepPerSecondLogTrigger(IntervalTrigger):
    """Logs 'step N: X steps/sec' every `interval` steps (wall time between firings)."""

    def __init__(self, train_step: tf.Variable, interval: int, log_to_terminal: bool = True):
        self._train_step = train_step
        self._log = log_to_terminal
        self._last_time = time.perf_counter()
        self._last_step = int(train_step.numpy())
        self.steps_per_sec: float | None = None
        super().__init__(interval, self._log_steps_per_sec, start=self._last_step)

    def _log_steps_per_sec(self) -> None:
        now, step = time.perf_counter(), int(self._train_step.numpy())
        if step > self._last_step:
            self.steps_per_sec = (step - self._last_step) / max(now - self._last_time, 1e-9)
            if self._log:
                log.info("step %d: %.3f steps/sec", step, self.steps_per_sec)
        self._last_time, self._last_step = now, step
