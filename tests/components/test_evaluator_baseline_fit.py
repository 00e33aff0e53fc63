"""The Evaluator checks that the baseline (the last blessed model) can score the eval split before
comparing with it (issue 20, finding 8: after the default digits run, a file-source run with other
features died in the baseline's MatMul, exit 1 labelled a bug). A baseline trained on other
features or actions is one note and a comparison with the logging policy; a compatible baseline is
still the baseline; a baseline that cannot be loaded is an error naming it."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pandas as pd
import pytest

from rlops.components.common.model import BLESSED_FILE, NOT_BLESSED_FILE
from rlops.components.evaluator.baseline import BaselineModelError
from rlops.components.evaluator.comparisons import LOGGING_BASELINE
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.core import run_evaluator
from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SpecConfig,
    run_experience_gen,
)
from rlops.components.experience_gen.config import FeatureColumn
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer
from rlops.features import FLOAT, FeatureSchema, FeatureSpec
from rlops.features.fit import action_misfit, schema_misfit

# Slow: trains candidates and baselines, then evaluates; `make test` runs it.
pytestmark = pytest.mark.slow

K = 4
CONFIG = EvaluatorConfig(num_bootstrap=50, dm_refits=0, min_ess=1.0, min_eval_records=10)


def _examples(root, names: list[str], seed: int) -> str:
    """600 uniformly logged records with float features `names`; reward 1 when the action is 1 for
    a positive first feature, 0 for a negative one: a trained policy beats the logging one."""
    rng = np.random.default_rng(seed)
    n = 600
    x = rng.normal(size=(n, len(names)))
    action = rng.integers(0, K, size=n)
    reward = (action == (x[:, 0] > 0).astype(int)).astype(float)
    frame = pd.DataFrame(
        {**{name: x[:, i] for i, name in enumerate(names)}, "action": action, "reward": reward, "propensity": 1.0 / K}
    )
    os.makedirs(root, exist_ok=True)
    frame.to_csv(os.path.join(root, "logs.csv"), index=False)
    columns = BanditColumns(features=tuple(FeatureColumn(n, kind="float") for n in names))
    config = ExperienceGenConfig(
        source=FileSource(pattern=os.path.join(root, "logs.csv"), format="csv"),
        bandit_columns=columns,
        action_spec=SpecConfig.discrete(K),
    )
    run_experience_gen(
        config, os.path.join(root, "examples"), os.path.join(root, "quarantine"), ["--runner=DirectRunner"]
    )
    return os.path.join(root, "examples")


def _model(examples: str, root: str, num_actions: int = K) -> str:
    config = TrainerConfig(agent="lin_ucb", num_actions=num_actions, train_steps=3, steps_per_run=3, batch_size=64)
    run_trainer(config, os.path.join(root, "model"), os.path.join(root, "run"), examples)
    return os.path.join(root, "model")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Yesterday's data and model (user_feature_*), today's data (other names) and candidate."""
    tmp = tmp_path_factory.mktemp("fit")
    old = _examples(str(tmp / "old"), ["user_feature_0", "user_feature_1", "user_feature_2"], seed=0)
    new = _examples(str(tmp / "new"), ["f_a", "f_b"], seed=1)
    return {
        "old_model": _model(old, str(tmp / "old")),
        "new_examples": new,
        "candidate": _model(new, str(tmp / "new")),
        "same_features": _model(new, str(tmp / "same")),
        "tmp": tmp,
    }


def _evaluate(runs, baseline: str | None, name: str):
    out = runs["tmp"] / name
    return run_evaluator(
        CONFIG,
        runs["candidate"],
        str(out / "evaluation"),
        str(out / "blessing"),
        examples_uri=runs["new_examples"],
        baseline_model_uri=baseline,
        num_actions=K,
    ), out


def test_a_baseline_on_other_features_is_a_note_and_a_logging_policy_comparison(runs, caplog):
    with caplog.at_level(logging.INFO):
        result, out = _evaluate(runs, runs["old_model"], "other")
    notes = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "does not fit" in r.getMessage()
    ]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert runs["old_model"] in notes[0] and "missing: user_feature_0, user_feature_1, user_feature_2" in notes[0]
    assert "comparing against the logging policy" in notes[0]
    assert result.metrics["baseline"] == LOGGING_BASELINE
    assert "user_feature_0" in result.baseline_reason and result.baseline_reason in result.reason
    # The same comparison as a run given no baseline at all: the logging policy's numbers.
    alone, _ = _evaluate(runs, None, "alone")
    assert result.metrics["improvement"] == alone.metrics["improvement"] and result.blessed == alone.blessed
    assert json.load(open(out / "evaluation" / "metrics.json"))["baseline_reason"] == result.baseline_reason
    assert os.path.exists(out / "blessing" / (BLESSED_FILE if result.blessed else NOT_BLESSED_FILE))
    props = result.blessing_properties("cand", 7, runs["old_model"], 3)
    assert props["baseline_reason"] == result.baseline_reason and "baseline_model" not in props


def test_a_baseline_of_other_actions_is_a_note(runs):
    wide = _model(runs["new_examples"], str(runs["tmp"] / "wide"), num_actions=K + 2)
    result, _ = _evaluate(runs, wide, "wide")
    assert result.metrics["baseline"] == LOGGING_BASELINE
    assert f"its actions are {K + 2} ids from 0, this run's {K} ids from 0" in result.baseline_reason


def test_a_compatible_baseline_is_still_the_baseline(runs):
    result, _ = _evaluate(runs, runs["same_features"], "same")
    assert result.metrics["baseline"] == runs["same_features"] and result.baseline_reason is None
    assert result.metrics["served_policy"]["baseline_epsilon"] is not None  # scored as a model, not the logs
    props = result.blessing_properties("cand", 7, runs["same_features"], 3)
    assert props["baseline_model"] == runs["same_features"] and "baseline_reason" not in props


def test_a_baseline_that_cannot_be_loaded_is_an_error_naming_it(runs, tmp_path):
    from rlops.pipelines import cli

    broken = tmp_path / "broken"
    (broken / "Format-Serving").mkdir(parents=True)
    (broken / "Format-Serving" / "saved_model.pb").write_bytes(b"not a model")
    with pytest.raises(BaselineModelError, match=f"baseline model {broken} cannot be loaded") as e:
        _evaluate(runs, str(broken), "broken")
    assert isinstance(e.value, cli._user_errors())  # `rlops run`: exit 2, one line


def test_schema_misfit_names_what_differs():
    def schema(*names, per_arm=()):
        return FeatureSchema(tuple(FeatureSpec(n, FLOAT) for n in names), tuple(FeatureSpec(n, FLOAT) for n in per_arm))

    assert schema_misfit(schema("a", "b"), schema("a", "b", "c")) is None  # extra features are ignored
    assert schema_misfit(schema("a", "b"), schema("a")) == "it was trained on other features (missing: b)"
    assert "missing: per_arm/price" in schema_misfit(schema("a", per_arm=("price",)), schema("a", per_arm=("x",)))
    assert schema_misfit(schema("a", per_arm=("p",)), schema("a")) == (
        "it is a per-arm model and these records have no per-arm features"
    )
    legacy = schema_misfit(FeatureSchema.legacy(64), FeatureSchema.legacy(4))
    assert "typed differently: context" in legacy and "64" in legacy and "4" in legacy
    assert action_misfit((10, 0), (10, 0)) is None
    assert action_misfit((10, 0), (50, 0)) == "its actions are 10 ids from 0, this run's 50 ids from 0"
