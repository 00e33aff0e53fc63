"""Checkpoints of a training job: save every N steps, restore the newest one that is readable.

A preempted job can die while a checkpoint is being written, and storage can lose a file, so
restoring walks back from the newest checkpoint to older ones (warning on each skipped one)
instead of failing or silently starting over. In a multi-worker job every worker saves (saving
may involve collectives) but only the chief writes into the real directory; the others write
into a temporary directory and delete it.
"""

from __future__ import annotations

import logging
import os
from typing import Collection

import tensorflow as tf

log = logging.getLogger(__name__)

__all__ = ["Checkpointer", "verify_checkpoint"]


def verify_checkpoint(prefix: str) -> set[str]:
    """Reads every tensor of a checkpoint (checksums included); raises if any is unreadable.
    Returns the names of the tensors it holds.

    `Checkpoint.restore` reads values lazily for objects created later (e.g. optimizer slots),
    so a damaged checkpoint could otherwise pass restore and fail in the middle of training.
    """
    reader = tf.train.load_checkpoint(prefix)
    names = set(reader.get_variable_to_shape_map())
    for name in names:
        reader.get_tensor(name)
    return names


def _checkpoint_number(prefix: str) -> int:
    try:
        return int(os.path.basename(prefix).rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


class Checkpointer:
    """`tf.train.CheckpointManager` plus fallback restore and multi-worker write directories.

    Args:
      ckpt_dir: directory of the checkpoints (`ckpt-<train step>` files).
      max_to_keep: how many recent checkpoints to keep.
      is_chief: False on non-chief workers (see module docstring).
      worker_id: task id, used to name a non-chief worker's temporary directory.
      optional: names among `trackables` that an older checkpoint may lack (state added to a job
        later, e.g. a collection-side statistic): restored when present, else left as they are
        with a warning, instead of making that checkpoint unreadable.
      **trackables: objects to save (agent, train_step, ...).
    """

    def __init__(
        self,
        ckpt_dir: str,
        max_to_keep: int = 3,
        is_chief: bool = True,
        worker_id: int | None = None,
        optional: Collection[str] = (),
        **trackables,
    ):
        self.ckpt_dir = ckpt_dir
        self.is_chief = is_chief
        self._trackables = trackables
        self._optional = set(optional)
        self.checkpoint = tf.train.Checkpoint(**trackables)
        write_dir = ckpt_dir if is_chief else os.path.join(ckpt_dir, f"workertemp_{worker_id or 0}")
        self._write_dir = write_dir
        self.manager = tf.train.CheckpointManager(self.checkpoint, write_dir, max_to_keep=max_to_keep)

    @property
    def checkpoints(self) -> list[str]:
        """Checkpoint prefixes in the (chief's) directory, oldest first.

        The `checkpoint` state file is one more file that a preemption can leave missing or
        half-written: the prefixes it lists are merged with the `ckpt-<N>.index` files actually
        there, ordered by N, so a missing or corrupt state file never means "start over".
        """
        listed: list[str] = []
        try:
            state = tf.train.get_checkpoint_state(self.ckpt_dir)
            listed = list(state.all_model_checkpoint_paths) if state else []
        except (tf.errors.OpError, ValueError, UnicodeDecodeError) as e:  # text-proto parse errors
            log.warning(
                "Checkpoint state file in %s is unreadable (%s); using the checkpoint files found there.",
                self.ckpt_dir,
                type(e).__name__,
            )
        found = [p[: -len(".index")] for p in tf.io.gfile.glob(os.path.join(self.ckpt_dir, "ckpt-*.index"))]
        by_prefix = {os.path.join(self.ckpt_dir, os.path.basename(p)): p for p in listed + found}
        return sorted(by_prefix, key=_checkpoint_number)

    def restore_latest(self) -> str | None:
        """Restores the newest readable checkpoint; returns its prefix, or None when there is none.

        Raises RuntimeError when checkpoints exist but none of them can be restored: starting
        from scratch over a directory of unreadable checkpoints would hide data loss.
        """
        candidates = self.checkpoints[::-1]
        if not candidates:
            return None
        for i, prefix in enumerate(candidates):
            try:
                held = verify_checkpoint(prefix)
                self._restorer(prefix, held).restore(prefix).assert_existing_objects_matched()
            except (tf.errors.OpError, ValueError, AssertionError) as e:
                log.warning(
                    "Checkpoint %s could not be restored (%s: %s); falling back to the previous checkpoint.",
                    prefix,
                    type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "",
                )
                continue
            if i > 0:
                log.warning("Restored the older checkpoint %s because the %d newer one(s) were unreadable.", prefix, i)
            else:
                log.info("Restored checkpoint %s", prefix)
            return prefix
        raise RuntimeError(
            f"None of the {len(candidates)} checkpoints in {self.ckpt_dir} could be "
            f"restored ({candidates}); move them away to start from scratch."
        )

    def _restorer(self, prefix: str, held: set[str]) -> tf.train.Checkpoint:
        """The checkpoint object to restore `prefix` (holding tensors `held`) into: all
        trackables, less optional ones the checkpoint does not hold."""
        absent = sorted(self._optional - {name.split("/", 1)[0] for name in held})
        if not absent:
            return self.checkpoint
        log.warning(
            "Checkpoint %s holds no %s (tracked since it was written): restoring the rest; %s from scratch.",
            prefix,
            ", ".join(absent),
            "it starts" if len(absent) == 1 else "they start",
        )
        return tf.train.Checkpoint(**{k: v for k, v in self._trackables.items() if k not in absent})

    def save(self, step: int) -> str:
        path = self.manager.save(checkpoint_number=int(step))
        if not self.is_chief:
            tf.io.gfile.rmtree(self._write_dir)
        return path
