"""Fault suite, config and CLI: strict types with a one-line error naming the key, no Python
traceback for user error (`--debug` shows it), and a quiet start-up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlops.pipelines import cli
from rlops.pipelines.config import ConfigError, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer=5", "trainer: expected a mapping, got 5 (int)"),
        ("enable_cache=fasle", "enable_cache: expected true or false, got 'fasle' (str)"),
        ("warm_start=1", "warm_start: expected true or false, got 1 (int)"),
        ("trainer.train_steps=2.5", "trainer.train_steps: expected an integer, got 2.5 (float)"),
        ("trainer.learning_rate=fast", "trainer.learning_rate: expected a number, got 'fast' (str)"),
        ("trainer.hidden_sizes=[64, x]", "trainer.hidden_sizes[1]: expected an integer, got 'x' (str)"),
        ("trainer.ppo={num_envs: many}", "trainer.ppo.num_envs: expected an integer, got 'many' (str)"),
        ("evaluator.num_bootstrap=true", "evaluator.num_bootstrap: expected an integer, got True (bool)"),
        ("experience_gen.source.num_records=1e4", "experience_gen.source.num_records: expected an integer"),
        ("experience_gen.splits.splits=[{name: ../eval}]", "split name '../eval' must be letters"),
        ("pusher.keep_last=five", "pusher.keep_last: expected an integer, got 'five' (str)"),
        ("beam_args=--runner=DirectRunner", "beam_args: expected a list"),
    ],
)
def test_bad_values_fail_naming_the_key(override, message):
    with pytest.raises(ConfigError) as e:
        load_config("bandit", overrides=[override])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_yaml_numbers_in_exponent_form_are_numbers(tmp_path):
    # PyYAML (YAML 1.1) reads 1e3 as the string '1e3'; the config reads it as 1000.0.
    config = load_config("bandit", overrides=["experience_gen.action_spec.maximum=1e1", "trainer.learning_rate=3e-4"])
    assert config.experience_gen.action_spec.maximum == 10.0 and config.trainer.num_actions == 11
    assert config.trainer.learning_rate == pytest.approx(3e-4)
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  learning_rate: 1e-2\n")
    assert load_config("bandit", str(path)).trainer.learning_rate == pytest.approx(0.01)


def test_bad_yaml_is_one_line_with_its_position(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  hidden_sizes: [64,\n")
    with pytest.raises(ConfigError, match=rf"--config {path}: line 3, column 1: invalid YAML"):
        load_config("bandit", str(path))


def test_cli_user_error_is_one_line_and_debug_shows_the_traceback(capsys):
    assert cli.main(["config", "bandit", "--set", "trainer.train_steps=2.5"]) == 2
    err = capsys.readouterr().err
    assert err == "rlops: config error: trainer.train_steps: expected an integer, got 2.5 (float)\n"
    with pytest.raises(ConfigError, match="trainer.train_steps"):
        cli.main(["config", "bandit", "--set", "trainer.train_steps=2.5", "--debug"])


def test_cli_unexpected_error_is_one_line_with_a_hint(capsys, monkeypatch):
    def boom(*_a, **_k):
        raise KeyError("internal")

    monkeypatch.setattr("rlops.pipelines.config.load_config", boom)
    assert cli.main(["config", "bandit"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "rlops: error: KeyError: 'internal'" and "--debug" in err[1] and len(err) == 2


@pytest.mark.slow  # starts the CLI in fresh processes
def test_cli_start_up_is_quiet():
    """A fresh process (as a user runs it): no library warnings, no absl noise, no traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlops.pipelines.cli",
            "compile",
            "bandit",
            "--output",
            os.devnull,
            "--set",
            "root=gs://bucket/rlops",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    noise = [line for line in out.stderr.splitlines() if not line.startswith("note: image")]
    assert noise == []
    assert "wrote" in out.stdout
