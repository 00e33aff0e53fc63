"""A warm Python for emulated containers: `python -m ...` forked from an interpreter that has
already imported TensorFlow, TFX, Beam and KFP, instead of importing them again.

An emulated pipeline step is a fresh `python -m <executor> ...` whose first ~7 s (on 2 cores) go
to importing the same libraries every time. The VertexEmulator's `python` / `python3` on PATH can
be a small client of this server instead: the client hands its argv, environment, working
directory and its stdin/stdout/stderr to the server over a Unix socket, the server forks a child
that takes them on (chdir, os.environ, dup2) and runs the command as `python` would (`-m module`,
`-c code` or a script, with sys.argv as Python sets it), and the client exits with the child's
status. The child is a new process with the step's own files, environment and exit code; what it
shares with the server is modules already imported (nothing of rlops: the server imports only
third-party libraries, and never runs a TensorFlow op, so no thread pool exists before the fork).

A command the server cannot run as `python` would falls back to a real interpreter (the client
execs it), so the fallback is always the cold path:
- an interpreter option other than -m, -c, -u, -B, -s, -E, -W or -X (parsed as CPython does);
- an environment that differs from the server's in a variable read at import time
  (IMPORT_TIME_ENV prefixes: TF_*, KERAS_*, PYTHON*, ...), since the preloaded modules saw the
  server's values;
- no server (not started, or gone).

If the client is killed (the emulator's timeout), the server kills the child's process group.

    server = WarmPythonServer.start(socket_path, preload=("tensorflow", "tfx.v1"), env=env)
    write_client_shim("/tmp/bin/python", socket_path)   # then `python -m x` on PATH is warm
"""

from __future__ import annotations

import array
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

# Variables that libraries read when they are imported (TF's Keras choice and log level, Python's
# own start-up options, thread-pool sizes): a request whose values differ runs cold.
IMPORT_TIME_ENV = ("TF_", "KERAS_", "PYTHON", "CUDA", "XLA_", "OMP_", "MKL_", "GRPC_", "JAX_", "LD_")
DEFAULT_PRELOAD = ("tensorflow", "tfx.v1", "apache_beam", "kfp", "kfp.dsl.executor_main", "pandas", "pyarrow")
_NO_ARG_FLAGS = "uBsEdOqIPR"  # interpreter flags a forked child can honour (or that change nothing here)
_MAX_MESSAGE = 8 << 20


@dataclass
class Request:
    """What `python ARGV` needs: its arguments (after the interpreter), environment and directory."""

    args: list[str]
    env: dict[str, str]
    cwd: str


@dataclass
class _Program:
    """A parsed command line: run `kind` ('module', 'code' or 'script') `target` with sys.argv `argv`."""

    kind: str
    target: str
    argv: list[str]
    warnings: list[str]
    unbuffered: bool


def parse_command(args: Sequence[str]) -> _Program | None:
    """Python's own command line (`python [options] -m mod | -c code | script [args]`), or None for
    one a forked child cannot reproduce (no program, stdin scripts, options it cannot apply)."""
    warnings: list[str] = []
    unbuffered = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or not arg.startswith("-"):
            break
        if arg in ("-m", "-c"):
            if i + 1 >= len(args):
                return None
            target = args[i + 1]
            argv0 = "-c" if arg == "-c" else target  # runpy sets sys.argv[0] to the module's file
            return _Program("module" if arg == "-m" else "code", target, [argv0, *args[i + 2 :]], warnings, unbuffered)
        if arg.startswith("-m") or arg.startswith("-c"):  # -mmodule / -ccode
            rest = [arg[:2], arg[2:], *args[i + 1 :]]
            parsed = parse_command(rest)
            if parsed is not None:
                parsed.warnings[:0] = warnings
                parsed.unbuffered = parsed.unbuffered or unbuffered
            return parsed
        if arg in ("-W", "-X"):
            if i + 1 >= len(args):
                return None
            if arg == "-W":
                warnings.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("-W"):
            warnings.append(arg[2:])
            i += 1
            continue
        if arg.startswith("-X"):
            i += 1
            continue
        flags = arg[1:]
        if not flags or any(f not in _NO_ARG_FLAGS for f in flags) or any(f in "IPRdO" for f in flags):
            return None  # -I, -P, -O and friends change how the interpreter itself starts: run cold
        unbuffered = unbuffered or "u" in flags
        i += 1
    if i >= len(args) or args[i] == "-":
        return None  # an interactive interpreter or a script on stdin
    return _Program("script", args[i], list(args[i:]), warnings, unbuffered)


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


# ---- the server ----------------------------------------------------------------------------------


def _recv_message(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One length-prefixed message and the file descriptors sent with its first byte."""
    fds = array.array("i")
    head, ancdata, _, _ = conn.recvmsg(8, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if len(head) < 8:
        raise ConnectionError("short header")
    size = int.from_bytes(head, "big")
    if size > _MAX_MESSAGE:
        raise ConnectionError(f"message of {size} bytes")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("closed mid-message")
        body += chunk
    return body, list(fds)


class WarmPythonServer:
    """The server's side; run as `python .../warm_python.py serve SOCKET MODULE...` (a script, so
    that the server imports nothing of rlops): `start` does that."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.base_env = import_time_env(os.environ)
        self._watchers: list[threading.Thread] = []

    @staticmethod
    def start(
        socket_path: str,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> subprocess.Popen:
        """Starts a server process; returns once it listens (its imports done), or raises. With
        wait=False it returns at once: until the server listens, its clients run cold."""
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        with open(socket_path + ".err", "w") as err:  # the server's own output: its imports' warnings
            proc = subprocess.Popen(
                # A script, not `-m rlops.testing.warm_python`: the server imports nothing of rlops.
                [sys.executable, os.path.abspath(__file__), "serve", socket_path, *preload],
                env=dict(env if env is not None else os.environ),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,  # Ctrl-C in a terminal reaches the caller, not the server
            )
        deadline = time.time() + 300
        while wait and not os.path.exists(socket_path):
            if proc.poll() is not None:
                with open(socket_path + ".err") as f:
                    raise RuntimeError(f"warm python server exited {proc.returncode}: {f.read()[-2000:]}")
            if time.time() > deadline:
                proc.kill()
                raise RuntimeError("warm python server did not start in 300 s")
            time.sleep(0.05)
        return proc

    def serve(self, preload: Sequence[str]) -> _Program | None:
        """Imports `preload`, then answers requests until killed. Returns in a forked child only:
        the program that child must run (so that it runs at the top of the stack, as a fresh
        interpreter's would, and exits the normal way: atexit handlers, flushed files)."""
        for name in preload:
            __import__(name)
        # The imported heap is never garbage: children do not walk it in cycle collections (nor
        # copy its pages by touching them), as CPython's docs advise before forking workers.
        gc.freeze()
        # Threads the imports started (OpenBLAS' pool, jemalloc's background thread): idle, and
        # those libraries re-initialise after a fork. Any thread beyond these is not forked over.
        self._threads_at_rest = _thread_count()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = self.socket_path + ".tmp"
        if os.path.exists(tmp):
            os.unlink(tmp)
        listener.bind(tmp)
        listener.listen(64)
        os.rename(tmp, self.socket_path)  # the path appears once the server can answer
        listener.settimeout(5.0)
        parent = os.getppid()
        while True:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                if os.getppid() != parent:  # whoever started us is gone: so are we
                    os.unlink(self.socket_path)
                    return None
                continue
            conn.settimeout(None)
            try:
                body, fds = _recv_message(conn)
                request = Request(**json.loads(body))
            except (ConnectionError, OSError, ValueError, TypeError):
                conn.close()
                continue
            program = parse_command(request.args)
            cold = self._why_cold(program, request, fds)
            command = " ".join(request.args)[:300].replace("\n", "\\n")
            self._log(f"{cold or 'warm'}: {command}")
            if cold:
                conn.sendall(b"COLD\n")
                conn.close()
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                self._become(conn, request, fds)
                return program
            for fd in fds:
                os.close(fd)
            conn.sendall(f"PID {pid}\n".encode())
            self._watchers = [t for t in self._watchers if t.is_alive()] + self._watch(conn, pid)

    def _why_cold(self, program: _Program | None, request: Request, fds: list[int]) -> str:
        if program is None:
            return "cold (an interpreter option a fork cannot apply)"
        if len(fds) != 3:
            return "cold (no stdin/stdout/stderr passed)"
        env = import_time_env(request.env)
        changed = sorted(k for k in set(env) | set(self.base_env) if env.get(k) != self.base_env.get(k))
        if changed:
            return f"cold (import-time environment differs: {', '.join(changed)})"
        if _thread_count() > self._threads_at_rest + sum(t.is_alive() for t in self._watchers):
            return "cold (a thread is running in the server)"
        return ""

    def _log(self, line: str) -> None:
        """One line per request in SOCKET.log: which commands ran warm, and why others did not."""
        with open(self.socket_path + ".log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    @staticmethod
    def _become(conn: socket.socket, request: Request, fds: list[int]) -> None:
        """In the child: the caller's files, directory and environment; a process group of its own
        (so that the server can kill whatever it starts)."""
        conn.close()
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    @staticmethod
    def _watch(conn: socket.socket, pid: int) -> list[threading.Thread]:
        """Reports the child's exit status to its client; kills the child if the client goes away."""

        def wait_child() -> None:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(f"EXIT {code}\n".encode())
            except OSError:
                pass
            conn.close()

        def watch_client() -> None:
            try:
                while conn.recv(1):
                    pass
            except OSError:
                pass
            try:  # the client is gone (killed by a timeout): so is its step
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        threads = [threading.Thread(target=wait_child, daemon=True), threading.Thread(target=watch_client, daemon=True)]
        for t in threads:
            t.start()
        return threads


def _thread_count() -> int:
    """This process's threads, native ones included (as /proc counts them)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def run_program(program: _Program) -> None:
    """Runs `program` as `python` would in this (forked) interpreter; raises SystemExit as it would."""
    import random
    import runpy
    import tempfile
    import types
    import warnings

    tempfile.tempdir = None  # found again from this environment's TMPDIR
    random.seed()  # a fresh interpreter's RNGs are seeded from the OS, not inherited
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    for spec in program.warnings:
        warnings._setoption(spec)  # type: ignore[attr-defined]  # what -W does
    if program.unbuffered:
        sys.stdout.reconfigure(write_through=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(write_through=True)  # type: ignore[union-attr]
    sys.argv = list(program.argv)
    if program.kind == "module":
        sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
        runpy.run_module(program.target, run_name="__main__", alter_sys=True)
    elif program.kind == "code":
        sys.path[0] = ""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(program.target, "<string>", "exec"), main.__dict__)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(program.target))
        runpy.run_path(program.target, run_name="__main__")


# ---- the client ----------------------------------------------------------------------------------

_CLIENT = """#!{python} -S
# `python` for emulated containers: runs warm in {socket} (rlops.testing.warm_python), else cold.
import array, json, os, signal, socket, sys
REAL, SOCKET, STARTING = {python!r}, {socket!r}, {starting!r}
def cold():
    os.execv(REAL, [REAL, *sys.argv[1:]])
def starting():  # alive (not a zombie) and not yet listening
    try:
        with open(f"/proc/{{STARTING}}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z" and not os.path.exists(SOCKET)
    except OSError:
        return False
try:
    if STARTING:  # a server still importing: wait for it rather than import everything again
        import time
        deadline = time.monotonic() + 120
        while starting() and time.monotonic() < deadline:
            time.sleep(0.1)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(SOCKET)
    body = json.dumps({{"args": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
    conn.sendmsg([len(body).to_bytes(8, "big")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    conn.sendall(body)
    reply = conn.makefile("rb")
    first = reply.readline().split()
except OSError:
    cold()
if not first or first[0] != b"PID":
    cold()
child = int(first[1])
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # passed on to the step
    signal.signal(sig, lambda s, f: os.killpg(child, s))
line = reply.readline().split()
sys.exit(int(line[1]) if len(line) == 2 and line[0] == b"EXIT" else 1)
"""


def write_client_shim(path: str, socket_path: str, starting_pid: int | None = None) -> None:
    """An executable `python` at `path` that runs its command warm in the server at socket_path.
    With `starting_pid` (a server started with wait=False), a command that comes while that server
    is alive but not yet listening waits for it (up to 120 s) instead of running cold."""
    with open(path, "w") as f:
        f.write(_CLIENT.format(python=sys.executable, socket=socket_path, starting=starting_pid))
    os.chmod(path, 0o755)


def main(argv: Sequence[str]) -> None:
    if len(argv) < 2 or argv[0] != "serve":
        raise SystemExit("usage: python -m rlops.testing.warm_python serve SOCKET [MODULE ...]")
    program = WarmPythonServer(argv[1]).serve(argv[2:])
    if program is not None:  # a forked child: become the program
        server_main = sys.modules.get("__main__")
        try:
            run_program(program)
            code = 0
        except SystemExit as e:
            code = _exit_status(e)
        _exit_without_teardown(code, server_main)  # an uncaught exception ends it the normal way: traceback, status 1


def _exit_status(e: SystemExit) -> int:
    """The status `python` exits with on SystemExit (a non-integer code is printed, status 1)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _exit_without_teardown(code: int, server_main: object) -> None:
    """Ends a forked child as the interpreter's exit does -- non-daemon threads joined, atexit
    handlers run, the program's own garbage freed (its writers' __del__ flush), stdout and stderr
    flushed -- less the teardown of every preloaded module, which writes to each page of the
    server's heap that the child shares: ~0.4 s of CPU per step with TensorFlow, TFX and Beam."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
    atexit._run_exitfuncs()
    main = sys.modules.get("__main__")
    if main is not None and main is not server_main:  # `-c` code's namespace (runpy drops a module's)
        main.__dict__.clear()
    gc.collect()  # the frozen heap is not walked: only what the program left behind
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            code = code or 120  # as Python exits when it cannot flush stdout
    os._exit(code & 0xFF)


if __name__ == "__main__":
    main(sys.argv[1:])
