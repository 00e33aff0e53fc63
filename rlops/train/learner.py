"""Learner: trains an agent on a dataset under a tf.distribute strategy (TF-Agents' Learner).

    with strategy.scope():
        train_step = create_train_step_counter()
        agent = SomeAgent(..., train_step_counter=train_step)
    learner = Learner(root_dir, train_step, agent, experience_dataset_fn, strategy=strategy)
    while learner.train_step_numpy < num_steps:
        loss_info = learner.run(iterations=100)

`run(n)` performs n train steps inside one tf.function loop; data comes from
`strategy.distribute_datasets_from_function`, each replica calls `agent.train` on its share and
the losses are reduced across replicas; `run_available(n)` does the same over a finite dataset
and stops early where it ends (a pass over a split). On-policy loops hand each fresh batch to
`run_on_batch(experience)` instead (split across replicas, no tf.data). After each run:
triggers, then a checkpoint when `checkpoint_interval` steps have passed. Construction restores
the newest readable checkpoint, so a preempted job resumes where it stopped.

Layout under `root_dir`: `train/` TensorBoard events, `train/checkpoints/` checkpoints
(the PolicySavedModelTrigger conventionally writes `policies/`).

Strategy contract for agents (as in TF-Agents): build networks, optimizer and the train step
counter under `strategy.scope()`; scale per-replica losses like `tf.nn.compute_average_loss`
(divide by the *global* batch size) because optimizers sum gradients across replicas; the
Learner sums losses across replicas accordingly.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest as tf_nest

from rlops.agents import specs
from rlops.agents.trajectories import LossInfo
from rlops.train import strategy as strategy_lib
from rlops.train.checkpointer import Checkpointer

log = logging.getLogger(__name__)

TRAIN_DIR = "train"
CHECKPOINT_DIR = "checkpoints"
POLICY_SAVED_MODEL_DIR = "policies"

DatasetFn = Callable[..., tf.data.Dataset]
Trigger = Callable[[int], Any]

__all__ = [
    "Learner",
    "create_train_step_counter",
    "batch_dataset_fn",
    "TRAIN_DIR",
    "CHECKPOINT_DIR",
    "POLICY_SAVED_MODEL_DIR",
]


def create_train_step_counter(initial_value: int = 0) -> tf.Variable:
    """The int64 train-step variable to share between agent and Learner.

    ONLY_FIRST_REPLICA aggregation lets agents increment it inside `strategy.run` (replica
    context) under Mirrored/MultiWorker/TPU strategies. Create it under `strategy.scope()`.
    """
    return tf.Variable(
        initial_value,
        dtype=tf.int64,
        trainable=False,
        name="train_step",
        shape=(),
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


def batch_dataset_fn(experience: Any) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A dataset_fn that yields one in-memory batch forever, split over replicas along axis 0.

    E.g. `Learner(..., experience_dataset_fn=batch_dataset_fn(fixed_batch))`; for a fresh batch
    per call (on-policy) `Learner.run_on_batch` is cheaper than a new iterator each time. The
    batch size must be divisible by the number of replicas.
    """
    batch = int(tf.nest.flatten(experience)[0].shape[0])

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        if ctx.num_replicas_in_sync == 1:
            return tf.data.Dataset.from_tensors(experience).repeat()
        if batch % ctx.num_replicas_in_sync:
            raise ValueError(
                f"experience batch size {batch} is not divisible by the {ctx.num_replicas_in_sync} replicas in sync"
            )
        ds = tf.data.Dataset.from_tensor_slices(experience)
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(batch), drop_remainder=True).repeat()

    return dataset_fn


def _split_sample(sample: Any, direct_sampling: bool) -> tuple[Any, Any]:
    """(experience, sample_info) from a dataset element: TF-Agents' pair, or a bare experience."""
    if not direct_sampling and type(sample) is tuple and len(sample) == 2:
        return sample
    return sample, None


def _check_iterations(iterations: Any) -> None:
    if not isinstance(iterations, (int, np.integer)) or iterations < 1:
        raise ValueError(f"iterations must be an int >= 1, got {iterations!r}")


def _accepts_input_context(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    return bool(positional)


def _scalar_fields(loss_info: Any) -> list[tuple[str, tf.Tensor]]:
    out = []
    for path, value in tf_nest.flatten_with_joined_string_paths(loss_info, separator="/"):
        if (
            isinstance(value, tf.Tensor)
            and value.shape.rank == 0
            and (value.dtype.is_floating or value.dtype.is_integer)
        ):
            out.append((path, value))
    return out


class Learner:
    """Runs `agent.train` under a strategy with checkpoints, summaries and triggers.

    Args:
      root_dir: where summaries (`train/`) and checkpoints (`train/checkpoints/`) go.
      train_step: scalar int64 variable counting train steps; normally `agent.train_step_counter`
        (the agent increments it). Any other variable is incremented by the Learner.
      agent: object with `train(experience, weights=None) -> LossInfo` and `collect_data_spec`.
      experience_dataset_fn: `fn()` or `fn(input_context)` -> tf.data.Dataset of agent.train
        inputs, batched per replica. Called after the checkpoint is restored, so it can skip the
        data already trained on. Optional when every `run` gets an iterator.
      after_train_strategy_step_fn: `fn(sample, loss_info)` run per replica after each step.
      triggers: callables `trigger(train_step)` run after every `run`.
      checkpoint_interval: checkpoint when this many steps passed since the last one (checked
        after each `run`); -1 disables checkpointing (with a warning).
      summary_interval: write summaries at steps divisible by this; <= 0 disables them.
      max_checkpoints_to_keep: how many recent checkpoints stay on disk.
      use_kwargs_in_agent_train: dataset elements are dicts of `agent.train` keyword arguments
        (`dict(experience=..., weights=...)`).
      strategy: a tf.distribute.Strategy (default: the current one) or a name for
        `rlops.train.strategy.get_strategy`.
      run_optimizer_variable_init: trace `agent.train` once before restoring so that optimizer
        slots exist and are restored (and verified) at once rather than lazily.
      use_reverb_v2: accepted for TF-Agents parity; True raises (Reverb is not in this stack).
      direct_sampling: dataset elements are the experience itself (no sample_info), read
        without distributing the dataset (one replica only), as TF-Agents' offline sampling.
      experience_dataset_options: `tf.distribute.InputOptions` for distributing the dataset.
      strategy_run_options: `tf.distribute.RunOptions` passed to every `strategy.run`.
      summary_root_dir: overrides `root_dir/train` for TensorBoard events.
      check_numerics: fail with the step and loss field when a loss is NaN or Inf.
      checkpoint_extras: more trackables saved and restored in the same checkpoint as the agent
        (e.g. a collection-side normalizer's statistics), so a resumed job has them all from
        one step; restored before this constructor returns. A checkpoint written without one
        (the option turned on mid-run) restores the rest and warns that it starts fresh.

    Data contract (TF-Agents'): dataset elements are `(experience, sample_info)` pairs; a bare
    experience (or kwargs dict) is accepted too and gets `sample_info=None`.
    `after_train_strategy_step_fn((experience, sample_info), loss_info)` runs per replica.
    Agents with `train_in_cross_replica_context = True` (PPO) are called outside
    `strategy.run` when there are several replicas: they distribute their own update loop.
    """

    def __init__(
        self,
        root_dir: str,
        train_step: tf.Variable,
        agent: Any,
        experience_dataset_fn: DatasetFn | None = None,
        after_train_strategy_step_fn: Callable[[Any, Any], Any] | None = None,
        triggers: Sequence[Trigger] | None = None,
        checkpoint_interval: int = 100000,
        summary_interval: int = 1000,
        max_checkpoints_to_keep: int = 3,
        use_kwargs_in_agent_train: bool = False,
        strategy: tf.distribute.Strategy | str | None = None,
        run_optimizer_variable_init: bool = True,
        use_reverb_v2: bool = False,
        direct_sampling: bool = False,
        experience_dataset_options: tf.distribute.InputOptions | None = None,
        strategy_run_options: tf.distribute.RunOptions | None = None,
        summary_root_dir: str | None = None,
        check_numerics: bool = True,
        checkpoint_extras: Mapping[str, tf.Module] | None = None,
    ):
        if use_reverb_v2:
            raise ValueError(
                "use_reverb_v2=True: Reverb is not part of rlops' stack (it does not build for this "
                "TensorFlow); feed the Learner a tf.data experience_dataset_fn instead."
            )
        extras = dict(checkpoint_extras or {})
        if {"agent", "train_step"} & set(extras):
            raise ValueError(
                "checkpoint_extras may not use the names 'agent' or 'train_step' (the Learner's own); "
                f"got {sorted(extras)}"
            )
        if checkpoint_interval == 0 or checkpoint_interval < -1:
            raise ValueError(
                f"checkpoint_interval must be > 0, or -1 to disable checkpoints; got {checkpoint_interval}"
            )
        if not isinstance(train_step, tf.Variable) or train_step.dtype != tf.int64 or train_step.shape.rank != 0:
            raise TypeError(
                f"train_step must be a scalar int64 tf.Variable (see create_train_step_counter); got {train_step!r}"
            )
        if not callable(getattr(agent, "train", None)) or not hasattr(agent, "collect_data_spec"):
            raise TypeError("agent must have `train(experience, weights=None)` and `collect_data_spec`")
        self.root_dir = root_dir
        self.train_step = train_step
        self._agent = agent
        self.after_train_strategy_step_fn = after_train_strategy_step_fn
        self.triggers = list(triggers or [])
        self.checkpoint_interval = checkpoint_interval
        self.summary_interval = summary_interval if summary_interval and summary_interval > 0 else 0
        self.use_kwargs_in_agent_train = use_kwargs_in_agent_train
        self.strategy = (
            strategy_lib.get_strategy(strategy)
            if isinstance(strategy, str)
            else strategy or tf.distribute.get_strategy()
        )
        self.check_numerics = check_numerics
        self.direct_sampling = direct_sampling
        self.experience_dataset_options = experience_dataset_options
        self.strategy_run_options = strategy_run_options
        if direct_sampling and self.strategy.num_replicas_in_sync > 1:
            raise ValueError(
                "direct_sampling=True reads the dataset without distributing it, which needs a single "
                f"replica; the strategy has {self.strategy.num_replicas_in_sync}."
            )
        self.is_chief = strategy_lib.is_chief(self.strategy)
        self._increment_train_step = train_step is not getattr(agent, "train_step_counter", None)
        self._check_distributed_variables()

        self.train_dir = os.path.join(root_dir, TRAIN_DIR)
        if self.summary_interval and self.is_chief:
            self.summary_writer = tf.summary.create_file_writer(summary_root_dir or self.train_dir, flush_millis=10_000)
        else:
            self.summary_writer = tf.summary.create_noop_writer()

        # The train step when the current train step began: agents that advance the step many
        # times per train call (PPO: once per gradient step) record summaries when the call
        # crossed a multiple of summary_interval, not only when it ended exactly on one.
        with self.strategy.scope():
            self._summary_start_step = tf.Variable(
                train_step.read_value(),
                trainable=False,
                name="summary_start_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        self._train_outputs = None  # agent.train's output structure, once traced
        if callable(getattr(agent, "initialize", None)):
            with self.strategy.scope():
                agent.initialize()
        if run_optimizer_variable_init:
            self._create_train_variables()

        self._checkpointer: Checkpointer | None = None
        if checkpoint_interval < 0:
            log.warning(
                "Checkpointing is disabled (checkpoint_interval=-1): training progress will NOT be "
                "restored if this job is preempted."
            )
        else:
            _, task_id = strategy_lib.task_info(self.strategy)
            self._checkpointer = Checkpointer(
                os.path.join(self.train_dir, CHECKPOINT_DIR),
                max_checkpoints_to_keep,
                self.is_chief,
                task_id,
                agent=agent,
                train_step=train_step,
                optional=tuple(extras),
                **extras,
            )
            self._checkpointer.restore_latest()
        self._last_checkpoint_step = self.train_step_numpy
        for trigger in self.triggers:  # re-arm interval triggers at the restored step
            if hasattr(trigger, "set_start"):
                trigger.set_start(self.train_step_numpy)

        self._experience_iterator = (
            self.create_iterator(experience_dataset_fn) if experience_dataset_fn is not None else None
        )
        self._train_fn = tf.function(self._train, autograph=False)
        self._train_available_fn = tf.function(self._train_available, autograph=False)
        # reduce_retracing: on-policy batches may vary in size without a retrace per shape.
        self._train_batch_fn = tf.function(self._train_on_batch, autograph=False, reduce_retracing=True)
        # steps/sec bookkeeping: time inside run() (runs that traced excluded), between summaries.
        self._sps_steps = 0
        self._sps_time = 0.0
        self.last_steps_per_sec: float | None = None

    # ---- public -------------------------------------------------------------------------------
    @property
    def agent(self) -> Any:
        return self._agent

    @property
    def train_step_numpy(self) -> int:
        return int(self.train_step.numpy())

    def create_iterator(self, dataset_fn: DatasetFn) -> Any:
        """A distributed iterator over `dataset_fn` (called once per input pipeline/worker)."""
        wrapped = dataset_fn if _accepts_input_context(dataset_fn) else (lambda _ctx: dataset_fn())
        if self.direct_sampling:
            return iter(wrapped(tf.distribute.InputContext()))
        return iter(self.strategy.distribute_datasets_from_function(wrapped, options=self.experience_dataset_options))

    def run(self, iterations: int = 1, iterator: Any = None, parallel_iterations: int = 10) -> LossInfo:
        """Runs `iterations` train steps in one tf.function; returns the last step's LossInfo,
        reduced (summed) across replicas."""
        _check_iterations(iterations)
        iterator = iterator if iterator is not None else self._experience_iterator
        if iterator is None:
            raise ValueError(
                "Learner.run needs an iterator: pass `iterator=` or construct the Learner with `experience_dataset_fn`."
            )
        if self.strategy.num_replicas_in_sync > 1 and not isinstance(iterator, tf.distribute.DistributedIterator):
            raise ValueError(
                f"With {self.strategy.num_replicas_in_sync} replicas the iterator must come from "
                "the strategy (learner.create_iterator or strategy.distribute_datasets_from_function); "
                f"got {type(iterator).__name__}"
            )
        return self._execute(self._train_fn, iterations, iterator, parallel_iterations)

    def run_available(
        self, iterations: int = 1, iterator: Any = None, parallel_iterations: int = 10
    ) -> tuple[LossInfo, int]:
        """Like `run`, but a finite dataset may end first: up to `iterations` train steps, stopping
        where the data ends. Returns (the last step's LossInfo, reduced; zeros when no step ran,
        the number of steps run). A pass over a split ends this way instead of repeating it.

        Under MultiWorkerMirroredStrategy the workers agree on the end (tf.distribute's partial
        batch handling): while any worker has data every worker steps, those without feeding an
        empty batch, so uneven file shards need no padding and no record is dropped."""
        _check_iterations(iterations)
        iterator = iterator if iterator is not None else self._experience_iterator
        if iterator is None:
            raise ValueError(
                "Learner.run_available needs an iterator: pass `iterator=` or construct the Learner "
                "with `experience_dataset_fn`."
            )
        loss_info, steps = self._execute(self._train_available_fn, iterations, iterator, parallel_iterations)
        return loss_info, int(steps)

    def run_on_batch(self, experience: Any, iterations: int = 1) -> LossInfo:
        """On-policy helper: `iterations` train steps on one in-memory batch, no tf.data.

        `experience` is the global batch (a Trajectory, or a dict of agent.train kwargs with
        use_kwargs_in_agent_train); replica r of R trains on rows [r*B/R, (r+1)*B/R). Same loop,
        checks, summaries, triggers and checkpoints as `run`.
        """
        _check_iterations(iterations)
        batch = int(tf.nest.flatten(experience)[0].shape[0])
        replicas = self.strategy.num_replicas_in_sync
        if batch % replicas:
            raise ValueError(f"experience batch size {batch} is not divisible by the {replicas} replicas in sync")
        if replicas > 1:
            rows = batch // replicas

            def replica_slice(ctx: tf.distribute.ValueContext) -> Any:
                start = ctx.replica_id_in_sync_group * rows
                return tf.nest.map_structure(lambda x: x[start : start + rows], experience)

            experience = self.strategy.experimental_distribute_values_from_function(replica_slice)
        return self._execute(self._train_batch_fn, iterations, experience, 1)

    def _execute(self, fn: Any, iterations: int, data: Any, parallel_iterations: int) -> LossInfo:
        start_step = self.train_step_numpy
        traces = fn.experimental_get_tracing_count()
        start = time.perf_counter()
        with self.summary_writer.as_default(), tf.summary.record_if(self._record_summaries), self.strategy.scope():
            loss_info = fn(tf.constant(iterations, tf.int64), data, int(parallel_iterations))
        step = self.train_step_numpy
        if fn.experimental_get_tracing_count() == traces:  # tracing time is not training
            self._sps_steps += step - start_step
            self._sps_time += time.perf_counter() - start
        with self.summary_writer.as_default():
            self._maybe_write_steps_per_sec(start_step, step)
            for trigger in self.triggers:
                trigger(step)
        if self._checkpointer is not None and step - self._last_checkpoint_step >= self.checkpoint_interval:
            self.save_checkpoint()
        return loss_info

    def save_checkpoint(self) -> str | None:
        """Checkpoints agent and train step now (every worker must call this together)."""
        if self._checkpointer is None:
            return None
        step = self.train_step_numpy
        path = self._checkpointer.save(step)
        self._last_checkpoint_step = step
        return path

    # ---- the tf.function loop ----------------------------------------------------------------
    def _train(self, iterations: tf.Tensor, iterator: Any, parallel_iterations: int) -> LossInfo:
        return self._loop(iterations, lambda: next(iterator), parallel_iterations)

    def _train_available(
        self, iterations: tf.Tensor, iterator: Any, parallel_iterations: int
    ) -> tuple[LossInfo, tf.Tensor]:
        # A step runs only when the optional has a value; the loss lives in the loop state, so its
        # structure (reduced to scalars) comes from the traced agent.train before the loop.
        def step(sample: Any) -> Any:
            return tf.nest.map_structure(self._reduce, self._single_train_step(sample))

        def body(i, _more, loss_info):
            sample = iterator.get_next_as_optional()
            more, loss_info = tf.cond(
                sample.has_value(),
                lambda: (tf.constant(True), step(sample.get_value())),
                lambda: (tf.constant(False), loss_info),
            )
            return i + tf.cast(more, tf.int64), more, loss_info

        i, _, loss_info = tf.while_loop(
            lambda i, more, _: tf.logical_and(more, i < iterations),
            body,
            (tf.constant(0, tf.int64), tf.constant(True), self._zero_loss()),
            parallel_iterations=parallel_iterations,
        )
        return loss_info, i

    def _zero_loss(self) -> Any:
        """Zeros shaped like the reduced (scalar per field) LossInfo of agent.train."""
        if self._train_outputs is None:
            self._create_train_variables()
        if self._train_outputs is None:
            raise NotImplementedError(
                "Learner.run_available: agents that train in cross-replica context (PPO) "
                "under several replicas; use run(iterations) with a repeated dataset"
            )
        local = self.strategy.experimental_local_results
        return tf.nest.map_structure(lambda v: tf.zeros([], local(v)[0].dtype), self._train_outputs)

    def _train_on_batch(self, iterations: tf.Tensor, experience: Any, parallel_iterations: int) -> LossInfo:
        return self._loop(iterations, lambda: experience, parallel_iterations)

    def _loop(self, iterations: tf.Tensor, next_sample: Callable[[], Any], parallel_iterations: int) -> LossInfo:
        # One step outside the loop fixes the loss structure/shapes for the while_loop and lets
        # optimizers create their slots outside of it. The loop is an explicit tf.while_loop and
        # the function is not autograph-converted: converting agent and optimizer code costs
        # seconds of tracing and agents that need autograph wrap their own tf.function.
        loss_info = self._single_train_step(next_sample())

        def body(i, _):
            return i + 1, self._single_train_step(next_sample())

        _, loss_info = tf.while_loop(
            lambda i, _: i < iterations,
            body,
            (tf.constant(1, tf.int64), loss_info),
            parallel_iterations=parallel_iterations,
        )
        return tf.nest.map_structure(self._reduce, loss_info)

    def _single_train_step(self, sample: Any) -> Any:
        experience, sample_info = _split_sample(sample, self.direct_sampling)
        if self.summary_interval:
            self._summary_start_step.assign(self.train_step)
        if getattr(self._agent, "train_in_cross_replica_context", False) and self.strategy.num_replicas_in_sync > 1:
            loss_info = self._cross_replica_step(experience, sample_info)
        else:
            loss_info = self.strategy.run(
                self._replica_step, args=(experience, sample_info), options=self.strategy_run_options
            )
        if self._increment_train_step:
            self.train_step.assign_add(1)
        if self.summary_interval:
            self._write_loss_summaries(loss_info)
        return loss_info

    def _replica_step(self, sample: Any, sample_info: Any = None) -> Any:
        step_before = tf.identity(self.train_step)
        if self.use_kwargs_in_agent_train:
            self._check_kwargs(sample)
            if "experience" in sample:
                self._validate_experience(sample["experience"])
            loss_info = self._agent.train(**sample)
        else:
            self._validate_experience(sample)
            loss_info = self._agent.train(sample)
        if self.check_numerics:
            self._check_numerics(loss_info, step_before)
        if self.after_train_strategy_step_fn is not None:
            self.after_train_strategy_step_fn((sample, sample_info), loss_info)
        return loss_info

    def _cross_replica_step(self, sample: Any, sample_info: Any) -> Any:
        """For agents that run their own strategy.run loop (PPO): agent.train in cross-replica context."""
        step_before = tf.identity(self.train_step)
        local = self.strategy.experimental_local_results
        if self.use_kwargs_in_agent_train:
            self._check_kwargs(sample)
            if "experience" in sample:
                self._validate_experience(tf.nest.map_structure(lambda v: local(v)[0], sample["experience"]))
            loss_info = self._agent.train(**sample)
        else:
            self._validate_experience(tf.nest.map_structure(lambda v: local(v)[0], sample))
            loss_info = self._agent.train(sample)
        if self.check_numerics:
            self.strategy.run(lambda info: self._check_numerics(info, step_before), args=(loss_info,))
        if self.after_train_strategy_step_fn is not None:
            self.strategy.run(
                self.after_train_strategy_step_fn,
                args=((sample, sample_info), loss_info),
                options=self.strategy_run_options,
            )
        return loss_info

    @staticmethod
    def _check_kwargs(sample: Any) -> None:
        if not isinstance(sample, dict):
            raise TypeError(
                "use_kwargs_in_agent_train=True needs dataset elements that are dicts of "
                f"agent.train keyword arguments; got {type(sample).__name__}"
            )

    def _validate_experience(self, experience: Any) -> None:
        # Runs at trace time: a mismatch fails before any step with the offending field named.
        spec = getattr(self._agent, "training_data_spec", None) or self._agent.collect_data_spec
        # Compare TensorSpecs of the (symbolic) values: dtype and shape are all that is checked.
        as_specs = tf.nest.map_structure(
            lambda v: tf.TensorSpec.from_tensor(v) if isinstance(v, tf.Tensor) else v, experience
        )
        specs.check_nest_matches_spec(as_specs, spec, name="experience")

    @staticmethod
    def _check_numerics(loss_info: Any, step_before: tf.Tensor) -> None:
        for path, value in tf_nest.flatten_with_joined_string_paths(loss_info, separator="."):
            value = tf.convert_to_tensor(value)
            if value.dtype.is_floating:
                tf.debugging.Assert(
                    tf.reduce_all(tf.math.is_finite(value)),
                    [
                        f"check_numerics: LossInfo.{path} is NaN or Inf in the train step starting at train_step =",
                        step_before,
                    ],
                    name="check_numerics",
                )

    def _reduce(self, value: Any) -> tf.Tensor:
        """Sum over replicas and, for non-scalar fields, over all axes (TF-Agents' Learner)."""
        values = self.strategy.experimental_local_results(value)
        rank = tf.convert_to_tensor(values[0]).shape.rank
        axis = tuple(range(rank)) if rank else None
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=axis)

    def _write_loss_summaries(self, loss_info: Any) -> None:
        def write() -> tf.Tensor:
            reduced = tf.nest.map_structure(self._reduce, loss_info)
            with tf.name_scope("Learner/"):  # trailing "/": absolute, not under while/cond scopes
                for path, value in _scalar_fields(reduced):
                    tf.summary.scalar(path, value, step=self.train_step)
            return tf.constant(True)

        # Gate on the step, not on the writer, so every worker builds the same (collective) ops.
        tf.cond(self._record_summaries(), write, lambda: tf.constant(False))

    def _record_summaries(self) -> tf.Tensor:
        """At steps divisible by summary_interval, and after a train call that crossed one."""
        if not self.summary_interval:
            return tf.constant(False)
        step, interval = self.train_step, self.summary_interval
        crossed = tf.greater(step // interval, self._summary_start_step // interval)
        return tf.logical_or(tf.equal(step % interval, 0), crossed)

    # ---- helpers -----------------------------------------------------------------------------
    def _maybe_write_steps_per_sec(self, start_step: int, step: int) -> None:
        if not self.summary_interval or self._sps_time <= 0:
            return
        if step // self.summary_interval == start_step // self.summary_interval:
            return
        self.last_steps_per_sec = self._sps_steps / self._sps_time
        tf.summary.scalar("Learner/steps_per_sec", self.last_steps_per_sec, step=step)
        self._sps_steps, self._sps_time = 0, 0.0

    def _batched_data_spec(self) -> Any:
        spec = getattr(self._agent, "training_data_spec", None) or self._agent.collect_data_spec
        time_dim = getattr(self._agent, "train_sequence_length", None)
        batched = tf.nest.map_structure(
            lambda s: tf.TensorSpec([None, time_dim] + s.shape.as_list(), s.dtype, s.name), spec
        )
        return dict(experience=batched) if self.use_kwargs_in_agent_train else batched

    def _create_train_variables(self) -> None:
        """Traces (does not run) agent.train so optimizer slots exist before restoring."""
        if getattr(self._agent, "train_in_cross_replica_context", False) and self.strategy.num_replicas_in_sync > 1:
            # Its train distributes a concrete global batch itself; slots created later are still
            # restored (tf.train.Checkpoint restores deferred values on creation).
            return

        @tf.function(autograph=False)
        def _trace(sample):
            if self.use_kwargs_in_agent_train:
                return self.strategy.run(self._agent.train, kwargs=sample)
            return self.strategy.run(self._agent.train, args=(sample,))

        # Under the summary writer and record_if of `run`: agents that wrap train in their own
        # tf.function (PPO) reuse this trace later, and one traced without a writer never writes.
        with self.strategy.scope(), self.summary_writer.as_default(), tf.summary.record_if(self._record_summaries):
            self._train_outputs = _trace.get_concrete_function(self._batched_data_spec()).structured_outputs

    def _check_distributed_variables(self) -> None:
        # The default strategy accepts plain variables; Mirrored/TPU/MultiWorker need their own.
        extended = self.strategy.extended
        for v in list(getattr(self._agent, "variables", ())) + [self.train_step]:
            if not extended.variable_created_in_scope(v):
                raise ValueError(
                    f"Variable {v.name} was not created under this strategy's scope: build the "
                    "agent (networks, optimizer, train step counter) inside `with strategy.scope():`."
                )
        if self.strategy.num_replicas_in_sync > 1:
            counter = getattr(self._agent, "train_step_counter", None)
            if counter is not None and getattr(counter, "aggregation", None) == tf.VariableAggregation.NONE:
                raise ValueError(
                    "agent.train_step_counter has aggregation NONE, so agents cannot increment it in "
                    "replica context; create it with rlops.train.create_train_step_counter()."
                )
