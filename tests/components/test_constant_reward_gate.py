"""ExperienceGen marks Examples whose every reward is the same (the INNER JOIN trap); the Evaluator
then refuses to bless whatever its estimates say, naming why, and blesses as before without it."""

from __future__ import annotations

import json
import os

from rlops.components.common.records import CONSTANT_REWARD_FILE
from rlops.components.evaluator import bandit, core
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate


def _evaluate(tmp_path, monkeypatch, marked: bool):
    examples = tmp_path / "examples"
    os.makedirs(examples, exist_ok=True)
    if marked:
        (examples / CONSTANT_REWARD_FILE).write_text(json.dumps({"reward": 1.0, "records": 47}))
    clear_win = Estimate(0.5, 0.4, 0.6)  # an improvement that clears any gate

    def evaluate_bandit(*args, **kwargs):
        return {"baseline": "logging_policy"}, clear_win

    monkeypatch.setattr(bandit, "evaluate_bandit", evaluate_bandit)  # the bandit row of EVALUATION_PATHS
    return core.run_evaluator(
        EvaluatorConfig(),
        str(tmp_path / "model"),
        str(tmp_path / f"evaluation-{marked}"),
        str(tmp_path / f"blessing-{marked}"),
        examples_uri=str(examples),
        num_actions=3,
    )


def test_constant_rewards_are_never_blessed(tmp_path, monkeypatch):
    refused = _evaluate(tmp_path, monkeypatch, marked=True)
    assert not refused.blessed
    assert "every reward in the Examples is 1" in refused.reason and "INNER JOIN" in refused.reason


def test_without_the_mark_the_same_estimates_bless(tmp_path, monkeypatch):
    assert _evaluate(tmp_path, monkeypatch, marked=False).blessed
