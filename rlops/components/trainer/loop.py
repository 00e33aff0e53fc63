"""The Trainer's training loop, shared by every path that trains through the strategy-aware
Learner: Learner calls of a few train steps each, progress lines, a checkpoint at the end; and
`train_passes`, the offline paths' passes over a split's records (bandit and ranking)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from rlops.components.trainer.result import TrainResult

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """What the training loop did: train steps done in this model directory (a resumed job's
    earlier ones included), how many of them were done before this run (`resumed`), the loss after
    each Learner call, and the wall time."""

    steps: int
    resumed: int
    curve: list[tuple[int, float]]
    wall_s: float

    def result(self, warm_started_from: str | None, extra: dict[str, Any]) -> TrainResult:
        return TrainResult(
            train_steps=self.steps,
            final_loss=self.curve[-1][1] if self.curve else float("nan"),
            steps_per_sec=(self.steps - self.resumed) / max(self.wall_s, 1e-9),
            wall_s=self.wall_s,
            warm_started_from=warm_started_from,
            curve=self.curve,
            extra=extra,
        )


def train_loop(
    learner: Any,
    done: int,
    cap: int | None,
    steps_per_run: int,
    passes: bool,
    note: Callable[[], str] = lambda: "",
) -> Trained:
    """Learner calls of `steps_per_run` train steps (one tf.function each) from `done` (> 0 when a
    preempted job resumes) up to `cap`, then a checkpoint.

    `passes`: the dataset is finite (passes over a split): `Learner.run_available`, and a call
    that runs fewer steps than asked means the passes are over; `cap` None trains until then.
    Otherwise the dataset repeats (`Learner.run`) and `cap` is needed. `note()` adds to each
    progress line."""
    if cap is None and not passes:
        raise ValueError("train_loop: a repeating dataset needs a cap on train steps")
    resumed, start = done, time.perf_counter()
    curve: list[tuple[int, float]] = []
    while cap is None or done < cap:
        n = steps_per_run if cap is None else min(steps_per_run, cap - done)
        if passes:
            loss, ran = learner.run_available(iterations=n)
        else:
            loss, ran = learner.run(iterations=n), n
        if ran:
            done += ran
            curve.append((done, float(loss.loss)))
            log.info("trainer: %d steps%s, loss %.4f", done, note(), curve[-1][1])
        if ran < n:  # the passes are over
            break
    wall = time.perf_counter() - start
    learner.save_checkpoint()
    return Trained(done, resumed, curve, wall)


@dataclass
class PassesRun:
    """What `train_passes` did: the loop's account, the records trained on in this model directory
    (a resumed job's earlier ones included), and this run's records per second."""

    trained: Trained
    records: int
    records_per_sec: float


def train_passes(
    agent: Any,
    train_step: Any,
    strategy: Any,
    config: Any,
    model_uri: str,
    model_run_uri: str,
    pattern: str,
    feature_spec: dict[str, Any],
    to_experience: Callable[[dict[str, Any]], Any],
    shuffle: bool,
    weighted: bool = False,
    unit: str = "records",
) -> PassesRun:
    """`config.epochs` passes of `config.train_batch_size` over the records at `pattern` (parsed by
    `feature_spec`, turned into the agent's experience by `to_experience`) through the Learner, up
    to `config.max_train_steps`. The records done live in the checkpoint (passes.TrainProgress), so
    a preempted job resumes where it stopped; `weighted`: the experience carries per-row weights."""
    import tensorflow as tf

    from rlops.components.common.heap import trim_heap
    from rlops.components.trainer import averaging, passes, split_cache
    from rlops.components.trainer.block_passes import block_passes
    from rlops.train.learner import Learner

    with strategy.scope():
        progress = passes.TrainProgress()
    average = averaging.weight_average(agent, config, strategy)
    decoded: list[Any] = []  # this input pipeline's split, decoded once (split_cache), when it was

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        # Called after the Learner restored its checkpoint: a resumed job skips what it trained on.
        skip = int(progress.steps.numpy())
        # Not autograph-converted: its branches are on Python values (the log's layout), and
        # converting the experience builders (and the Keras preprocessing they call) costs seconds.
        to_batch = tf.autograph.experimental.do_not_convert(to_experience)
        if shuffle and config.in_memory_bytes:
            directory = None
            if config.disk_cache:
                files = sorted(tf.io.gfile.glob(pattern))
                where = (ctx.input_pipeline_id, ctx.num_input_pipelines)
                directory = split_cache.cache_directory(config.cache_dir, model_uri, files, where)
            blocks = passes.decoded_split(pattern, feature_spec, to_batch, ctx, config.in_memory_bytes, directory)
            if blocks is not None:
                decoded.append(blocks)
                ordered = block_passes(blocks, config.train_batch_size, config.epochs, config.seed, skip)
                return ordered.prefetch(2)
        ds = passes.pass_dataset(
            pattern,
            feature_spec,
            config.train_batch_size,
            ctx,
            epochs=config.epochs,
            shuffle=shuffle,
            seed=config.seed,
            skip_batches=skip,
        )
        return ds.map(to_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)

    learner = Learner(
        model_uri,
        train_step,
        agent,
        dataset_fn,
        checkpoint_interval=config.checkpoint_interval,
        summary_interval=config.summary_interval,
        max_checkpoints_to_keep=config.max_checkpoints_to_keep,
        strategy=strategy,
        summary_root_dir=model_run_uri,
        use_kwargs_in_agent_train=weighted,
        after_train_strategy_step_fn=progress.count if average is None else _and_update(progress.count, average),
        checkpoint_extras={"progress": progress} if average is None else {"progress": progress, "average": average},
    )
    before = int(progress.records.numpy())
    if average is not None:
        average.start(decoded[0].rows if decoded else None, config.train_batch_size)
    trained = train_loop(
        learner,
        int(progress.steps.numpy()),
        config.max_train_steps,
        config.steps_per_run,
        passes=True,
        note=lambda: f", {int(progress.records.numpy())} {unit}",
    )
    if average is not None:
        # The checkpoint then holds the weights that are exported: a warm start from this model
        # starts from what it served (train_steps 0 re-exports it as is).
        average.finalize()
        learner.save_checkpoint()
    for blocks in decoded:  # trained: the cache has done its work (a preempted run keeps it)
        blocks.remove()
    trim_heap()  # the decode's freed records: back to the OS before the next component runs
    done = int(progress.records.numpy())
    return PassesRun(trained, done, round((done - before) / max(trained.wall_s, 1e-9), 1))


def _and_update(count: Callable[[Any, Any], None], average: Any) -> Callable[[Any, Any], None]:
    """The Learner's after-step function: count the step's records, then move the weight average."""

    def after_step(sample_and_info: Any, loss_info: Any) -> None:
        count(sample_and_info, loss_info)
        average.update()

    return after_step
