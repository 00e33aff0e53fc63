"""`rlops config bandit | head`: a reader that stops early ends the CLI quietly, with the status a
shell gives any writer whose reader went away (141 = 128 + SIGPIPE, as `yes | head` reports), not
a traceback and 'looks like a bug in rlops'."""

from __future__ import annotations

import fcntl
import os
import subprocess

import pytest
from helpers import child_env, fresh_python

from rlops.pipelines import cli


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="shrinking a pipe is Linux's F_SETPIPE_SZ")
def test_a_reader_that_closes_after_one_line_ends_the_cli_quietly():
    # A pipe of one page: the config (about 15 KB) cannot all fit before the reader closes, so the
    # CLI writes into a pipe without a reader every time, not only when the scheduler says so.
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [fresh_python(), "-m", "rlops.pipelines.cli", "config", "bandit"],
        stdout=write_end,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = reader.readline()
    _, stderr = proc.communicate(timeout=120)
    text = stderr.decode(errors="replace")
    assert first.startswith(b"name: "), first
    assert "looks like a bug" not in text and "BrokenPipeError" not in text and "Traceback" not in text, text
    assert text == "", text
    assert proc.returncode == cli.EXIT_READER_GONE == 141  # what the shell reports for `yes | head`


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch, capsys):
    """Another pipe or socket breaking (a subprocess, a connection) is a failure to report, not a
    reader that has had enough."""

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_dispatch", broken)
    assert cli.main(["config", "bandit"]) == 1
    assert "rlops: error: BrokenPipeError" in capsys.readouterr().err
