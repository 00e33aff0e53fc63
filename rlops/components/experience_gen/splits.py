"""Deterministic split assignment, vectorized.

A record's split depends only on its own content (the decision it logs, not its reward: see
kinds.bandit.split_hash), or its key, or its time, never on where it sits in the input, so re-runs
and shuffled inputs give identical splits. Hashes are fixed functions (FNV-style mixing of the
values' bits; pandas' fixed-key SipHash for string keys), stable across processes, machines and
Python's hash randomization.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from rlops.components.experience_gen.config import Split

_FNV_PRIME = np.uint64(0x100000001B3)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)


def _finalize(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: spreads every input bit over the low bits used for buckets."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def content_hash(columns: Mapping[str, np.ndarray], order: Sequence[str]) -> np.ndarray:
    """uint64 per row from the bits of the row's values in `order` (those present)."""
    n = len(next(iter(columns.values())))
    h = np.full(n, _FNV_OFFSET, np.uint64)
    with np.errstate(over="ignore"):
        for name in order:
            if name not in columns:
                continue
            v = np.ascontiguousarray(columns[name])
            if v.dtype == object:  # strings (categorical features): pandas' fixed-key hash per value
                import pandas as pd

                v = pd.util.hash_array(v.reshape(-1), categorize=False).reshape(n, -1)
            words = v.reshape(n, -1).view(np.uint32) if v.dtype.itemsize >= 4 else v.reshape(n, -1).astype(np.uint32)
            for j in range(words.shape[1]):
                h = (h ^ words[:, j].astype(np.uint64)) * _FNV_PRIME
        return _finalize(h)


def key_hash(keys: np.ndarray) -> np.ndarray:
    """uint64 per row from string keys (e.g. user or episode ids)."""
    import pandas as pd

    keys = np.asarray(keys, dtype=object)
    if len(keys) == 0:
        return np.zeros(0, np.uint64)
    with np.errstate(over="ignore"):
        return _finalize(pd.util.hash_array(keys, categorize=False).astype(np.uint64))


def by_hash(h: np.ndarray, splits: Sequence[Split]) -> np.ndarray:
    """Split index per row: bucket = hash mod total buckets, split i owns its hash_buckets."""
    total = sum(s.hash_buckets for s in splits)
    bounds = np.cumsum([s.hash_buckets for s in splits])
    return np.searchsorted(bounds, h % np.uint64(total), side="right")


def by_time(t: np.ndarray, boundaries: Sequence[float]) -> np.ndarray:
    """Split index per row: split i holds boundaries[i-1] <= t < boundaries[i]."""
    return np.searchsorted(np.asarray(boundaries, np.float64), np.asarray(t, np.float64), side="right")
