"""Warm start never crashes on a changed config: a blessed base model of another agent, action spec
or network shape gives one note naming warm_start and a cold start; the same agent still warm-starts."""

import json
import logging

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common.model import serving_dir
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer
from rlops.components.trainer.layout import CONFIG_FILE
from rlops.components.trainer.warm_start import base_mismatch

# Slow: trains agents of two kinds through both faces; `make test` runs it.
pytestmark = pytest.mark.slow

NEURAL = dict(agent="neural_epsilon_greedy", num_actions=10, train_steps=60, steps_per_run=30)


@pytest.fixture(scope="module")
def examples_uri(digits_examples):
    return digits_examples


@pytest.fixture(scope="module")
def base(examples_uri, tmp_path_factory):
    """A neural model trained 60 steps: what the last blessed model is after the default run."""
    d = tmp_path_factory.mktemp("base")
    run_trainer(TrainerConfig(**NEURAL), str(d / "model"), str(d / "run"), examples_uri)
    return str(d / "model")


def _variables(model: str) -> list[np.ndarray]:
    return [v.numpy() for v in tf.saved_model.load(serving_dir(model)).model_variables]


def _train_step(model: str) -> int:
    return int(tf.saved_model.load(serving_dir(model)).signatures["get_train_step"]()["train_step"])


def _notes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "warm_start" in r.getMessage()]


@pytest.mark.parametrize(
    "change,why",
    [
        (dict(agent="lin_ucb", train_steps=3), "it is a 'neural_epsilon_greedy' model and this run trains 'lin_ucb'"),
        (dict(hidden_sizes=(32,)), "its checkpoint does not fit NeuralEpsilonGreedyAgent"),
    ],
)
def test_a_base_model_that_does_not_fit_is_one_note_and_a_cold_start(examples_uri, base, tmp_path, caplog, change, why):
    config = TrainerConfig(**{**NEURAL, **change})
    with caplog.at_level(logging.INFO):
        warm = run_trainer(config, str(tmp_path / "warm"), str(tmp_path / "r1"), examples_uri, base_model_uri=base)
    notes = _notes(caplog)
    assert warm.warm_started_from is None and why in warm.extra["cold_start_reason"]
    assert len(notes) == 1 and why in notes[0] and base in notes[0]
    assert "\n" not in notes[0] and "numpy=" not in notes[0] and len(notes[0]) < 400  # one line, no values
    assert json.load(open(tmp_path / "r1" / "metrics.json"))["cold_start_reason"] == warm.extra["cold_start_reason"]
    # Nothing of the base model leaked in: the same as a run given no base model at all.
    run_trainer(config, str(tmp_path / "cold"), str(tmp_path / "r2"), examples_uri)
    for a, b in zip(_variables(str(tmp_path / "warm")), _variables(str(tmp_path / "cold")), strict=True):
        np.testing.assert_array_equal(a, b)
    assert _train_step(str(tmp_path / "warm")) == _train_step(str(tmp_path / "cold"))


def test_the_same_agent_still_warm_starts(examples_uri, base, tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        result = run_trainer(
            TrainerConfig(**NEURAL), str(tmp_path / "m"), str(tmp_path / "r"), examples_uri, base_model_uri=base
        )
    assert result.warm_started_from and "cold_start_reason" not in result.extra and not _notes(caplog)
    assert _train_step(str(tmp_path / "m")) == 120  # 60 + 60: continued from the base model's counter


def test_zero_train_steps_needs_a_base_model_that_fits(examples_uri, base, tmp_path):
    config = TrainerConfig(**{**NEURAL, "agent": "lin_ucb", "train_steps": 0})
    with pytest.raises(
        ValueError,
        match=r"trainer.train_steps: 0 re-exports the base model, but it cannot seed "
        r"this run: it is a 'neural_epsilon_greedy' model",
    ):
        run_trainer(config, str(tmp_path / "m"), str(tmp_path / "r"), examples_uri, base_model_uri=base)


def test_another_action_spec_is_named(tmp_path):
    (tmp_path / CONFIG_FILE).write_text(TrainerConfig(**{**NEURAL, "num_actions": 5}).to_json())
    assert base_mismatch(TrainerConfig(**NEURAL), str(tmp_path)) == (
        "its actions are 5 ids from 0, this run's 10 ids from 0 (trainer.num_actions / action_minimum)"
    )
    shifted = TrainerConfig(**{**NEURAL, "action_minimum": 1})
    (tmp_path / CONFIG_FILE).write_text(TrainerConfig(**NEURAL).to_json())
    assert base_mismatch(TrainerConfig(**NEURAL), str(tmp_path)) is None
    assert "10 ids from 0, this run's 10 ids from 1" in base_mismatch(shifted, str(tmp_path))


def test_both_faces_record_the_cold_start_reason_on_the_model(examples_uri, base, tmp_path):
    """The TFX executor's custom property and the KFP component's metadata carry the same note;
    a warm start records none."""
    from kfp import dsl
    from tfx.types import standard_artifacts

    from rlops.components.kfp import entrypoint
    from rlops.components.trainer.executor import Executor

    def tfx(cls, uri: str):
        artifact = cls()
        artifact.uri = uri
        return artifact

    def faces(config: TrainerConfig, name: str) -> tuple[str | None, str | None]:
        kfp_model = dsl.Model(uri=str(tmp_path / name / "kfp"))
        entrypoint.trainer(
            config.to_json(),
            kfp_model,
            dsl.Artifact(uri=str(tmp_path / name / "kfp_run")),
            examples=dsl.Dataset(uri=examples_uri),
            base_model=dsl.Model(uri=base),
        )
        tfx_model = tfx(standard_artifacts.Model, str(tmp_path / name / "tfx"))
        tfx_run = tfx(standard_artifacts.ModelRun, str(tmp_path / name / "tfx_run"))
        Executor().Do(
            {
                "examples": [tfx(standard_artifacts.Examples, examples_uri)],
                "base_model": [tfx(standard_artifacts.Model, base)],
            },
            {"model": [tfx_model], "model_run": [tfx_run]},
            {"config": config.to_json()},
        )
        tfx_reason = (
            tfx_model.get_string_custom_property("cold_start_reason")
            if tfx_model.has_custom_property("cold_start_reason")
            else None
        )
        return kfp_model.metadata.get("cold_start_reason"), tfx_reason

    kfp_reason, tfx_reason = faces(TrainerConfig(**{**NEURAL, "agent": "lin_ucb", "train_steps": 3}), "cold")
    assert kfp_reason == tfx_reason == "it is a 'neural_epsilon_greedy' model and this run trains 'lin_ucb'"
    assert faces(TrainerConfig(**{**NEURAL, "train_steps": 2, "steps_per_run": 2}), "warm") == (None, None)
