"""A train split decoded once into the model's input form (the experience tensors), kept as blocks
of BLOCK_ROWS rows: in memory while the split fits in `trainer.in_memory_bytes`, spilled to a local
on-disk cache past it (one flat binary file per tensor, fixed-width rows; `meta.json`, written last,
marks a complete cache). A pass then reads blocks (a slice in memory, one sequential read per
tensor on disk) instead of decompressing, parsing and encoding every record again, and the memory
it needs is a window of blocks, not the split (trainer/block_passes.py orders the records, the same
way from either store).

The on-disk cache lives under `trainer.cache_dir` (default: the system's temp dir) in a folder named
by the model directory, the split's files and this input pipeline: a preempted Trainer that resumes
in the same model directory finds it intact and reads it again; a partial one (no meta.json) or one
whose tensors do not match this run's is rebuilt. A finished run removes it (`Blocks.remove`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

import numpy as np

BLOCK_ROWS = 4096  # rows per block: the unit read from the cache, and the decode batch
FORMAT = 1  # bump when the on-disk layout changes: older caches are then rebuilt
META = "meta.json"


@dataclass(frozen=True)
class Column:
    """One flat tensor of the experience: its dtype and per-row shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * np.prod(self.shape, dtype=np.int64))


class Blocks(Protocol):
    """A decoded split: `rows` records in blocks of BLOCK_ROWS (the last one partial)."""

    rows: int
    columns: tuple[Column, ...]
    structure: Any  # the experience's nest, for tf.nest.pack_sequence_as

    def read(self, block: int) -> list[np.ndarray]: ...

    def read_window(self, blocks: list[int]) -> list[np.ndarray]:
        """The rows of `blocks`, in that order, one array per column."""
        ...

    def remove(self) -> None: ...


def num_blocks(rows: int) -> int:
    return -(-rows // BLOCK_ROWS)


def block_rows(rows: int, block: int) -> int:
    return min(BLOCK_ROWS, rows - block * BLOCK_ROWS)


class MemoryBlocks:
    """Blocks held as numpy arrays (the decode batches themselves: nothing is concatenated)."""

    def __init__(self, blocks: list[list[np.ndarray]], columns: tuple[Column, ...], structure: Any):
        self.blocks, self.columns, self.structure = blocks, columns, structure
        self.rows = sum(len(b[0]) for b in blocks)

    def read(self, block: int) -> list[np.ndarray]:
        return self.blocks[block]

    def read_window(self, blocks: list[int]) -> list[np.ndarray]:
        return [np.concatenate(column) for column in zip(*(self.blocks[b] for b in blocks))]

    def remove(self) -> None:
        self.blocks = []

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for b in self.blocks for a in b)


class DiskBlocks:
    """Blocks in a cache directory: `c<i>.bin` holds column i's rows back to back."""

    def __init__(self, directory: str, rows: int, columns: tuple[Column, ...], structure: Any):
        self.directory, self.rows, self.columns, self.structure = directory, rows, columns, structure
        # Unbuffered: reads land straight in the window's arrays.
        self._files = [open(os.path.join(directory, f"c{i}.bin"), "rb", buffering=0) for i in range(len(columns))]

    def read(self, block: int) -> list[np.ndarray]:
        return self.read_window([block])

    def read_window(self, blocks: list[int]) -> list[np.ndarray]:
        # Plain reads (not mmap): the page cache keeps the files warm without counting in this
        # process's resident memory; one read per block and column, into the window's arrays.
        sizes = [block_rows(self.rows, b) for b in blocks]
        out = []
        for f, c in zip(self._files, self.columns):
            window = np.empty((sum(sizes), *c.shape), c.dtype)
            view, at = window.reshape(-1).view(np.uint8).data, 0
            for b, n in zip(blocks, sizes):
                f.seek(b * BLOCK_ROWS * c.row_bytes)
                _read_into(f, view[at : at + n * c.row_bytes])
                at += n * c.row_bytes
            out.append(window)
        return out

    def remove(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
        shutil.rmtree(self.directory, ignore_errors=True)


def _read_into(f: Any, view: memoryview) -> None:
    while len(view):
        got = f.readinto(view)
        if not got:
            raise OSError(f"trainer cache: {f.name} is shorter than its meta.json says")
        view = view[got:]


def cache_directory(cache_dir: str, model_uri: str, files: list[str], pipeline: tuple[int, int]) -> str:
    """This run's cache folder: named by the model directory (a resumed run reuses it), the split's
    files with their sizes (other data: another folder) and the input pipeline (id, count)."""
    h = hashlib.sha256(json.dumps([FORMAT, model_uri, list(pipeline)]).encode())
    for path in files:
        h.update(f"{path}:{_size(path)}".encode())
    return os.path.join(cache_dir or tempfile.gettempdir(), "rlops-train-cache", h.hexdigest()[:20])


def _size(path: str) -> int:
    import tensorflow as tf

    return int(tf.io.gfile.stat(path).length)


def columns_of(flat: list[np.ndarray]) -> tuple[Column, ...]:
    return tuple(Column(a.dtype.str, tuple(int(d) for d in a.shape[1:])) for a in flat)


def open_cache(directory: str, columns: tuple[Column, ...], structure: Any) -> DiskBlocks | None:
    """The complete cache in `directory` when its tensors are `columns`, else None (rebuild)."""
    try:
        with open(os.path.join(directory, META)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT or [tuple(c) for c in meta["columns"]] != [
        (c.dtype, list(c.shape)) for c in columns
    ]:
        return None
    return DiskBlocks(directory, int(meta["rows"]), columns, structure)


def build(batches: Iterable[Any], limit_bytes: int, directory: str | None) -> MemoryBlocks | DiskBlocks | None:
    """The split from its decoded batches (experience nests of BLOCK_ROWS rows, the last partial):
    held while it takes up to `limit_bytes`, then spilled to `directory` (None: no disk cache, the
    split is streamed). None too when a batch holds anything but fixed-shape dense tensors (ragged or
    sparse parts, scalars, a width that varies by batch): the passes then stream from the files."""
    import tensorflow as tf

    held: list[list[np.ndarray]] = []
    columns: tuple[Column, ...] | None = None
    structure, total, rows = None, 0, 0
    writers: list[Any] = []
    try:
        for batch in batches:
            parts = tf.nest.flatten(batch)
            if not all(isinstance(t, tf.Tensor) and t.shape.rank for t in parts):
                return None
            flat = [t.numpy() for t in parts]
            if columns is None:
                columns, structure = columns_of(flat), batch
            elif columns_of(flat) != columns:
                return None
            rows += len(flat[0])
            if writers:
                _write(writers, flat)
                continue
            held.append(flat)
            total += sum(a.nbytes for a in flat)
            if total > limit_bytes:  # spill what is held, write the rest as it comes
                if directory is None:
                    return None
                shutil.rmtree(directory, ignore_errors=True)
                os.makedirs(directory)
                writers = [open(os.path.join(directory, f"c{i}.bin"), "wb") for i in range(len(flat))]
                for b in held:
                    _write(writers, b)
                held = []
        if columns is None:
            return None
        if not writers:
            return MemoryBlocks(held, columns, structure)
        for w in writers:
            w.close()
        assert directory is not None
        _write_meta(directory, rows, columns)
        return open_cache(directory, columns, structure)
    finally:
        for w in writers:
            w.close()


def _write(writers: list[Any], flat: list[np.ndarray]) -> None:
    for w, a in zip(writers, flat):
        np.ascontiguousarray(a).tofile(w)


def _write_meta(directory: str, rows: int, columns: tuple[Column, ...]) -> None:
    meta = {"format": FORMAT, "rows": rows, "columns": [[c.dtype, list(c.shape)] for c in columns]}
    tmp = os.path.join(directory, META + ".tmp")
    with open(tmp, "w") as f:
        json.dump(meta, f)
    os.replace(tmp, os.path.join(directory, META))  # last: a cache without it is partial
