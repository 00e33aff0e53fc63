"""rlops.testing.warm_python: a command run by the warm `python` behaves as a fresh interpreter's
(output, exit status, argv, path, environment, directory), is killed with its caller, and runs
cold whenever a fork could not stand in for a fresh start."""

import os
import subprocess
import sys
import time

import pytest

from rlops.testing.warm_python import WarmPythonServer, parse_command, write_client_shim

PRELOADED = "numpy"  # light, and it tells a warm run (already imported) from a cold one


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    socket_path = str(root / "python.sock")  # AF_UNIX paths are short: pytest's tmp dirs fit
    server = WarmPythonServer.start(socket_path, (PRELOADED,), env={**os.environ, "RLOPS_PROBE": "server"})
    shim = str(root / "python")
    write_client_shim(shim, socket_path)
    yield shim, socket_path, server
    server.kill()
    server.wait()


def _run(python, args, cwd, env=None, **kw):
    return subprocess.run(
        [python, *args], capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})}, **kw
    )


PROBE = "import os, sys; print(sys.argv, sys.path[0], os.getcwd(), os.environ.get('RLOPS_PROBE'), __name__)"


@pytest.mark.parametrize(
    "args",
    [
        ["-c", PROBE + "; sys.exit(3)"],
        ["-u", "-W", "ignore", "-c", PROBE],
        ["-c", "import sys; print('out'); print('err', file=sys.stderr); raise SystemExit('bye')"],
        ["-c", "raise KeyError('k')"],
        ["-m", "probe_module", "a", "--b=1"],
        ["probe_script.py", "x"],
    ],
    ids=["exit-code", "flags", "stderr-and-exit-message", "uncaught", "module", "script"],
)
def test_a_command_runs_warm_as_a_fresh_interpreter_would(warm, tmp_path, args):
    shim, _, _ = warm
    (tmp_path / "probe_module.py").write_text(PROBE + "\n")
    (tmp_path / "probe_script.py").write_text(PROBE + "\n")
    cold = _run(sys.executable, args, tmp_path, {"RLOPS_PROBE": "caller"})
    hot = _run(shim, args, tmp_path, {"RLOPS_PROBE": "caller"})
    assert (hot.returncode, hot.stdout) == (cold.returncode, cold.stdout)
    assert hot.stderr.splitlines()[-1:] == cold.stderr.splitlines()[-1:]  # tracebacks' frames differ


def test_it_is_warm_and_carries_nothing_of_rlops(warm, tmp_path):
    shim, socket_path, _ = warm
    code = f"import sys; print({PRELOADED!r} in sys.modules, any(m.split('.')[0] == 'rlops' for m in sys.modules))"
    # Once under load (a fresh-clone `.ci/run`, 2026-11-27) this ran cold: the server's log line
    # for each request ("warm" or "cold (<reason>)") says why.
    with_log = lambda: open(socket_path + ".log").read()[-2000:]  # noqa: E731
    assert _run(shim, ["-c", code], tmp_path).stdout.split() == ["True", "False"], with_log()
    assert _run(sys.executable, ["-c", code], tmp_path).stdout.split() == ["False", "False"]


def test_each_child_draws_fresh_random_numbers(warm, tmp_path):
    shim, _, _ = warm
    code = "import numpy, random; print(numpy.random.rand(), random.random())"
    draws = {_run(shim, ["-c", code], tmp_path).stdout for _ in range(3)}
    assert len(draws) == 3


@pytest.mark.parametrize(
    "args, env, why",
    [
        (["-I", "-c", "import sys; print('numpy' in sys.modules)"], {}, "option"),  # -I: no fork can apply it
        (["-c", "import sys; print('numpy' in sys.modules)"], {"TF_USE_LEGACY_KERAS": "1"}, "TF_USE_LEGACY_KERAS"),
    ],
    ids=["isolated-flag", "import-time-env"],
)
def test_what_a_fork_cannot_reproduce_runs_cold(warm, tmp_path, args, env, why):
    shim, socket_path, _ = warm
    result = _run(shim, args, tmp_path, env)
    assert (result.returncode, result.stdout.strip()) == (0, "False")
    with open(socket_path + ".log") as f:
        last = f.read().splitlines()[-1]
    assert " cold (" in last and why in last, last


def test_no_server_means_a_cold_run(tmp_path):
    shim = str(tmp_path / "python")
    write_client_shim(shim, str(tmp_path / "nobody.sock"))
    result = _run(shim, ["-c", "print('alone')"], tmp_path)
    assert (result.returncode, result.stdout) == (0, "alone\n")


def test_a_command_asked_for_while_the_server_imports_waits_for_it(tmp_path):
    """A server started in the background (wait=False): a command that comes before it listens
    runs warm once it does; one naming a server that has died runs cold at once."""
    socket_path = str(tmp_path / "s.sock")
    server = WarmPythonServer.start(socket_path, (PRELOADED, "pandas"), wait=False)
    try:
        shim = str(tmp_path / "python")
        write_client_shim(shim, socket_path, starting_pid=server.pid)
        assert not os.path.exists(socket_path)  # still importing pandas
        result = _run(shim, ["-c", f"import sys; print({PRELOADED!r} in sys.modules)"], tmp_path)
        assert result.stdout.split() == ["True"], result.stderr
    finally:
        server.kill()
        server.wait()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_client_shim(shim, str(tmp_path / "nobody.sock"), starting_pid=gone.pid)
    start = time.monotonic()
    assert _run(shim, ["-c", "print('alone')"], tmp_path).stdout == "alone\n"
    assert time.monotonic() - start < 30


def test_a_killed_caller_takes_its_step_and_the_steps_children_with_it(warm, tmp_path):
    shim, _, _ = warm
    pids = tmp_path / "pids"
    code = (
        "import os, subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}'); time.sleep(60)"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        _run(shim, ["-c", code], tmp_path, timeout=3)  # what the emulator's timeout does: SIGKILL
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(int(p)) for p in pids.read_text().split()):
        time.sleep(0.1)
    assert not any(_alive(int(p)) for p in pids.read_text().split())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-m", "pkg.mod", "-x"], ("module", "pkg.mod", ["pkg.mod", "-x"])),
        (["-mpkg.mod", "a"], ("module", "pkg.mod", ["pkg.mod", "a"])),
        (["-u", "-W", "ignore", "-c", "pass", "a"], ("code", "pass", ["-c", "a"])),
        (["-X", "utf8", "run.py", "-m"], ("script", "run.py", ["run.py", "-m"])),
        (["-I", "-c", "pass"], None),
        (["-"], None),
        ([], None),
        (["-m"], None),
    ],
)
def test_the_command_line_is_read_as_python_reads_it(args, expected):
    program = parse_command(args)
    assert (None if program is None else (program.kind, program.target, program.argv)) == expected
