"""`pusher.stage_unblessed` in a pipeline YAML reaches the Pusher (rlops.components.pusher.core:
stage_unblessed_policy publishes an unblessed candidate there, for integration tests only)."""

from __future__ import annotations

import pytest

from rlops.pipelines.config import ConfigError, load_config


def _config(tmp_path, pusher: str, overrides: tuple[str, ...] = ()):
    path = tmp_path / "my.yaml"
    path.write_text(f"pusher:\n{pusher}")
    return load_config("bandit", str(path), [f"root={tmp_path}/root", *overrides])


def test_stage_unblessed_in_yaml_reaches_the_pusher_component(tmp_path):
    from rlops.components.pusher.core import STAGE_UNBLESSED_KEY
    from rlops.pipelines.factories import create_pipeline

    staging = str(tmp_path / "staging")
    config = _config(tmp_path, f"  stage_unblessed: {staging}\n")
    assert config.pusher.stage_unblessed == staging and config.pusher.keep_last == 5
    assert _config(tmp_path, "  keep_last: 3\n").pusher.stage_unblessed is None  # unset: nothing staged
    (pusher,) = [c for c in create_pipeline(config, local=True).components if c.id == "Pusher"]
    assert pusher.exec_properties[STAGE_UNBLESSED_KEY] == staging


def test_stage_unblessed_is_checked_at_load_and_at_definition(tmp_path):
    from rlops.pipelines.factories import create_pipeline

    with pytest.raises(ConfigError, match="pusher.stage_unblessed: expected a string"):
        _config(tmp_path, "  stage_unblessed: 3\n")
    with pytest.raises((ConfigError, ValueError), match="pusher.stage_unblessed: empty"):
        _config(tmp_path, "  stage_unblessed: ''\n")
    serving = str(tmp_path / "serving")
    config = _config(tmp_path, f"  stage_unblessed: {serving}\n", (f"serving_dir={serving}",))
    with pytest.raises(ValueError, match="pusher.stage_unblessed: .* is the serving directory"):
        create_pipeline(config, local=True)
