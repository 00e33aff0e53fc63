"""The bandit Trainer's data: passes over the train split, sharded by file across workers, and a
count of the records that trained.

A pass reads every record once: no repeat beyond `epochs`, no dropped last batch (it may be
partial). LinUCB / LinTS statistics are then the closed-form sums over the whole split, and a
neural agent sees every record `epochs` times. Under MultiWorkerMirroredStrategy each worker
reads its own files (file i goes to worker i mod W); with fewer files than workers every worker
reads them all and keeps every W-th record. Either way each record trains on exactly one worker;
the Learner's `run_available` lets a worker whose shard ended step on empty batches until all
have ended.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import tensorflow as tf

from rlops.components.common import records
from rlops.components.trainer import split_cache

READ_BUFFER_BYTES = 8 << 20  # per file: big sequential reads of the gzipped shards
SHUFFLE_BATCHES = 10  # the shuffle buffer, in batches (neural agents only)


class TrainProgress(tf.Module):
    """Train steps and records consumed in this model directory's run, across all replicas and
    workers. Checkpointed with the agent, so a resumed job skips the batches it already trained
    on and its record count stays the total."""

    def __init__(self):
        super().__init__(name="train_progress")
        # ONLY_FIRST_REPLICA: every replica adds the same all-reduced count, one copy is kept.
        agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.records = tf.Variable(0, dtype=tf.int64, trainable=False, name="records", aggregation=agg)
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps", aggregation=agg)

    def count(self, sample_and_info: tuple[Any, Any], _loss_info: Any) -> None:
        """The Learner's after_train_strategy_step_fn (per replica): adds this step's global batch."""
        rows = tf.shape(tf.nest.flatten(sample_and_info[0])[0])[0]
        # float32 all-reduce (every collective implementation takes it); exact for per-step counts.
        total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(rows, tf.float32))
        self.records.assign_add(tf.cast(tf.round(total), tf.int64))
        self.steps.assign_add(1)


def shard_files(files: list[str], num_workers: int, worker: int) -> tuple[list[str], bool]:
    """This worker's files, and whether its records still need a record-level shard (fewer files
    than workers: every worker reads them all and keeps every num_workers-th record)."""
    if num_workers <= 1:
        return files, False
    if len(files) >= num_workers:
        return files[worker::num_workers], False
    return files, True


def pass_dataset(
    pattern: str,
    feature_spec: Mapping[str, Any],
    batch_size: int,
    ctx: tf.distribute.InputContext,
    epochs: int | None,
    shuffle: bool,
    seed: int,
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """Parsed batches of `batch_size` records from this input pipeline's share of the gzipped
    TFRecord files under `pattern`: `epochs` passes (None: forever), the last batch partial.
    `skip_batches` drops the batches a resumed job already trained on (same order: seeded)."""
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"examples: no train files match {pattern}")
    files, record_shard = shard_files(files, ctx.num_input_pipelines, ctx.input_pipeline_id)

    def read(path: tf.Tensor) -> tf.data.Dataset:
        ds = tf.data.TFRecordDataset(path, "GZIP", buffer_size=READ_BUFFER_BYTES)
        if record_shard:
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        # Unshuffled, records travel in batches from here on: per-record tf.data overhead (an
        # interleave or shuffle step per record) would cost more than reading them.
        return ds if shuffle else ds.batch(batch_size)

    if len(files) == 1:
        ds = read(files[0])
    else:
        ds = tf.data.Dataset.from_tensor_slices(files)
        if shuffle:
            ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = ds.interleave(
            read, cycle_length=min(len(files), 4), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
    if shuffle:
        ds = ds.shuffle(SHUFFLE_BATCHES * batch_size, seed=seed, reshuffle_each_iteration=True)
        ds = ds.repeat(epochs).batch(batch_size)  # repeat first: only the very last batch is partial
    else:  # per-file batches -> batches of batch_size across files (the last one partial)
        ds = ds.repeat(epochs).rebatch(batch_size)
    if skip_batches:
        ds = ds.skip(skip_batches)
    return ds.map(records.batch_parser(feature_spec), num_parallel_calls=tf.data.AUTOTUNE)


# ---- splits decoded once ---------------------------------------------------------------------------


def decoded_split(
    pattern: str,
    feature_spec: Mapping[str, Any],
    to_experience: Any,
    ctx: tf.distribute.InputContext,
    limit_bytes: int,
    directory: str | None,
) -> split_cache.MemoryBlocks | split_cache.DiskBlocks | None:
    """This input pipeline's share of the split at `pattern` as experience, read, parsed and encoded
    once (split_cache): held in memory up to `limit_bytes`, past it cached in `directory` (None:
    streamed instead). A complete cache already in `directory` (a preempted run's) is read again
    when its tensors match the split's first batch. None: the passes stream from the files."""
    ds = pass_dataset(pattern, feature_spec, split_cache.BLOCK_ROWS, ctx, epochs=1, shuffle=False, seed=0)
    ds = ds.map(to_experience, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
    if directory is not None and os.path.exists(os.path.join(directory, split_cache.META)):
        for first in ds.take(1):
            flat = [t.numpy() for t in tf.nest.flatten(first)]
            cached = split_cache.open_cache(directory, split_cache.columns_of(flat), first)
            if cached is not None:
                return cached
    return split_cache.build(ds, limit_bytes, directory)
