"""Stable record ids: a hash of the record's split unit, or of (its file's basename, its index).

The same on every machine, runner and run, whatever order files or bundles are read in: the
Evaluator's bootstrap weights, its reward-model sample and folds are hashes of these keys, so its
in-memory and Beam engines see the same numbers.

Records that carry the hash ExperienceGen drew their split from are keyed by it, so the bootstrap
resamples them as the split drew them (rlops.components.evaluator.bootstrap):
- `split_unit` (`splits.key`, e.g. a user id): the records of a unit went to one split together
  and are related draws: the unit is resampled whole.
- `split_content` (the default content hash): identical rows went to one split together, but each
  copy is its own draw: the row's content and each copy (its file and index) are resampled.
Resampled one at a time, either would pass for independent draws and the intervals would come out
too narrow (logs where many rows repeat another are common: a popular item shown to one segment).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

# splitmix64's constants (the bootstrap runs the same finalizer in place over [B, n] blocks).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
S30, S27, S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def splitmix64(x: Any) -> np.ndarray[Any, Any]:
    """Vectorised splitmix64 finalizer over uint64 (a bijection with full avalanche)."""
    with np.errstate(over="ignore"):  # wrapping multiplication is the point (scalars warn)
        z = np.asarray(x, np.uint64) + GOLDEN
        z ^= z >> S30
        z *= M1
        z ^= z >> S27
        z *= M2
        z ^= z >> S31
    return z


def string_key(text: str) -> int:
    """A stable 64-bit hash of a string (a file's basename): the same on every machine and run."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


_UNIT_SALT = np.uint64(0x5EED_0F_5B1175)  # keys of units differ from the split's own hash


def unit_record_keys(units: Any) -> np.ndarray[Any, Any]:
    """Keys of records from their int64 split hashes: equal units, equal keys."""
    return splitmix64(np.asarray(units, np.int64).view(np.uint64) ^ _UNIT_SALT)


def file_record_keys(basename: str, start: int, count: int) -> np.ndarray[Any, Any]:
    """Keys of records start..start+count-1 of the file `basename` (their index within it):
    stable across runs, machines, runners and the order files or bundles are read in."""
    index = np.arange(start, start + count, dtype=np.uint64)
    return splitmix64(index + np.uint64(string_key(basename)))
