"""Fresh verifying processes, started together.

A published policy is checked in two fresh processes (their draws must not repeat across
processes); each spends seconds importing its runtime before it answers. Started together they
share the cores instead of queueing: on 2 cores two SavedModel checks take one's wall time plus a
little, not two.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")


def at_once(run: Callable[[], T], times: int = 2) -> list[T]:
    """`run()` `times` times concurrently (threads; each call waits on its own subprocess), in order."""
    with ThreadPoolExecutor(times) as pool:
        return list(pool.map(lambda _: run(), range(times)))
