"""Giving freed memory back to the operating system after a pass that allocated many small objects.

glibc's malloc keeps what Python frees in its heap for reuse, so a process that has just read
millions of records (bytes objects of a few hundred bytes each, freed as it goes) keeps their pages
resident: reused by later small allocations, but not by the large arrays numpy maps afresh. On
the Evaluator's driver, after a sample pass over 2M records, that is a quarter of a GB.
`trim_heap` returns the free pages (`malloc_trim(0)`); on a C library without it (macOS, musl) it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from typing import Any


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Collects garbage and returns the heap's free pages to the OS; whether the C library could."""
    gc.collect()
    trim = _malloc_trim()
    return bool(trim is not None and trim(0) >= 0)
