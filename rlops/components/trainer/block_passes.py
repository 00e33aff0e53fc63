"""Passes over a decoded split (split_cache.Blocks, in memory or on disk) in one seeded order.

Each pass p permutes the blocks (seeded by (seed, p)), takes them WINDOW_BLOCKS at a time and
permutes the rows of each window (seeded by (seed, p, window)); the rows go out in batches of
`batch_size` cut across windows and passes (only the very last batch partial, as when streaming).
The order depends on the seed and the split alone, never on where the blocks live, so a split held
in memory and the same split read from the on-disk cache train on the same batches; the memory a
pass needs is one window (WINDOW_BLOCKS x BLOCK_ROWS rows) however large the split. A split of up
to one window (64k records) is a full permutation each pass.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import tensorflow as tf

from rlops.components.trainer.split_cache import Blocks, block_rows, num_blocks

WINDOW_BLOCKS = 16  # blocks whose rows mix in one window: 16 x 4,096 rows


def pass_windows(blocks: Blocks, epochs: int | None, seed: int, skip_rows: int = 0) -> Iterator[list[np.ndarray]]:
    """The passes' rows, a permuted window at a time (flat columns); `skip_rows` drops the rows a
    resumed job already trained on without reading the windows they were in."""
    n, nb = blocks.rows, num_blocks(blocks.rows)
    if n == 0:
        return
    p, skip = divmod(skip_rows, n)
    while epochs is None or p < epochs:
        order = np.random.default_rng([seed, p]).permutation(nb)
        for w, start in enumerate(range(0, nb, WINDOW_BLOCKS)):
            ids = order[start : start + WINDOW_BLOCKS]
            rows = sum(block_rows(n, int(b)) for b in ids)
            if skip >= rows:
                skip -= rows
                continue
            window = blocks.read_window([int(b) for b in ids])
            perm = np.random.default_rng([seed, p, w]).permutation(rows)[skip:]
            skip = 0
            yield [column[perm] for column in window]
        p += 1


def block_passes(
    blocks: Blocks, batch_size: int, epochs: int | None, seed: int, skip_batches: int = 0
) -> tf.data.Dataset:
    """`epochs` passes (None: forever) over `blocks` as batches of experience; `skip_batches` drops
    the batches a resumed job already trained on."""
    signature = tuple(tf.TensorSpec((None, *c.shape), tf.as_dtype(np.dtype(c.dtype))) for c in blocks.columns)

    def windows() -> Iterator[tuple[np.ndarray, ...]]:
        for flat in pass_windows(blocks, epochs, seed, skip_batches * batch_size):
            yield tuple(flat)

    structure = blocks.structure
    ds = tf.data.Dataset.from_generator(windows, output_signature=signature)
    return ds.rebatch(batch_size).map(
        lambda *flat: tf.nest.pack_sequence_as(structure, list(flat)), num_parallel_calls=tf.data.AUTOTUNE
    )
