"""Warm start of per-arm agents (NeuralEpsilonGreedy, LinUCB with accepts_per_arm_features):
tomorrow's logs with the same features continue from the base model (before any training step
the warm-started policy acts exactly as the base), and a base model whose global or per-arm
feature set differs from the data fails before training with an error naming the feature.

Found before the fix: a missing, renamed or retyped *arm* feature got past the schema check
(only global features were compared) and failed inside tf.data with "Graph execution error".
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from typing import Any

import numpy as np
import pytest

from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import run_experience_gen
from rlops.envs.logged_feedback import LogConfig, LogGenerator
from rlops.features import SCHEMA_FILE, FeatureSchemaError

# Slow: per-arm trainings and warm starts; `make test` runs it.
pytestmark = pytest.mark.slow

ITEMS = ["item_category", "item_brand", "item_price", "item_popularity"]
AGENTS = ("neural_epsilon_greedy", "lin_ucb")


def _ingest(gen, root, seed: int, edit_items=None) -> str:
    import pandas as pd

    logs = gen.sample(1500, seed=seed)
    paths = logs.to_files(str(root), format="parquet")
    if edit_items is not None:
        edit_items(pd.read_parquet(paths["items"])).to_parquet(paths["items"], index=False)
    cfg = {
        "source": {"kind": "file", "pattern": paths["impressions"], "format": "parquet"},
        "item_source": {"kind": "file", "pattern": paths["items"], "format": "parquet"},
        "bandit_columns": {"features": list(logs.context_columns), "item_id": "item_id", "item_features": ITEMS},
    }
    result = run_experience_gen(ExperienceGenConfig.from_json(cfg), str(root / "ex"), str(root / "q"))
    assert result.records_quarantined == 0
    return str(root / "ex")


def _config(agent: str, gen, steps: int):
    from rlops.components.trainer.config import TrainerConfig

    return TrainerConfig(
        agent=agent,
        num_actions=gen.num_items,
        batch_size=64,
        train_steps=steps,
        steps_per_run=50,
        hidden_sizes=(32,),
        learning_rate=3e-3,
        alpha=0.1,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from rlops.components.trainer.core import run_trainer

    root = tmp_path_factory.mktemp("per_arm_warm")
    gen = LogGenerator(LogConfig(logging="uniform", ctr=0.05, seed=0))
    out = {
        "gen": gen,
        "root": root,
        "base_ex": _ingest(gen, root / "day1", 1),
        "next_ex": _ingest(gen, root / "day2", 2),
    }  # tomorrow's logs: same features, new records
    for agent in AGENTS:
        base = str(root / f"{agent}_base")
        run_trainer(_config(agent, gen, 50), base, base + "_run", out["base_ex"])
        out[agent] = base
    return out


@functools.lru_cache(maxsize=None)
def _served(model_uri: str) -> Any:
    """The exported greedy policy (Format-Serving), loaded once per model: each load of a per-arm
    SavedModel restores its traced functions, seconds apiece."""
    from rlops.components.common.model import serving_dir
    from rlops.train.policy_saver import SavedPolicy

    return SavedPolicy(serving_dir(model_uri))


def _greedy(model_uri: str, examples: str) -> np.ndarray:
    """The `action` signature of the exported greedy policy on eval records."""
    from rlops.components.common.feedback import load_logged_feedback

    return _served(model_uri).actions(load_logged_feedback(examples, "eval").features)


def _variables(model_uri: str) -> list[np.ndarray]:
    return [v.numpy() for v in _served(model_uri).loaded.model_variables]


def _train_step(model_uri: str) -> int:
    return int(_served(model_uri).loaded.signatures["get_train_step"]()["train_step"])


@pytest.mark.slow  # two per-arm trainings and a warm start (~50 s)
@pytest.mark.parametrize("agent", AGENTS)
def test_same_features_warm_start_acts_like_the_base_then_trains_on(world, agent, tmp_path):
    from rlops.components.trainer.core import run_trainer

    gen, base = world["gen"], world[agent]
    warm = str(tmp_path / "warm0")
    result = run_trainer(_config(agent, gen, 0), warm, warm + "_run", world["next_ex"], base_model_uri=base)
    assert result.warm_started_from and result.train_steps == 0
    # Before any step the warm-started model IS the base: every exported variable, hence every action.
    for b, w in zip(_variables(base), _variables(warm), strict=True):
        np.testing.assert_array_equal(w, b)
    base_actions = _greedy(base, world["next_ex"])
    np.testing.assert_array_equal(_greedy(warm, world["next_ex"]), base_actions)
    if agent == "neural_epsilon_greedy":
        # (LinUCB's per-arm greedy score theta . concat(global, arm) adds the same global term to
        # every arm, so its greedy pick is one arm whatever the context.)
        assert len(np.unique(base_actions)) > 1  # a policy that depends on the context, not a constant
    assert _train_step(warm) == _train_step(base) > 0
    # Training on continues from the base's counter (LinUCB counts examples, the network steps).
    warm10 = str(tmp_path / "warm10")
    run_trainer(_config(agent, gen, 10), warm10, warm10 + "_run", world["next_ex"], base_model_uri=base)
    per_step = 64 if agent == "lin_ucb" else 1
    assert _train_step(warm10) == _train_step(base) + 10 * per_step


def _edited_examples(world, tmp_path, edit) -> str:
    """A copy of tomorrow's Examples whose feature schema is edited the way a changed export would be."""
    ex = str(tmp_path / "ex")
    shutil.copytree(world["next_ex"], ex)
    path = os.path.join(ex, SCHEMA_FILE)
    with open(path) as f:
        schema = json.load(f)
    edit(schema)
    with open(path, "w") as f:
        json.dump(schema, f)
    return ex


def _drop(section: str, name: str):
    return lambda s: s.update({section: [f for f in s[section] if f["name"] != name]})


def _rename(section: str, name: str, new: str):
    return lambda s: [f.update(name=new) for f in s[section] if f["name"] == name]


def _to_categorical(section: str, name: str):
    return lambda s: [
        f.update(kind="categorical", dtype="string", dim=1, vocabulary=["a", "b"], mean=None, std=None)
        for f in s[section]
        if f["name"] == name
    ]


CHANGES = {
    "missing arm feature": (_drop("per_arm", "item_popularity"), r"per-arm feature 'item_popularity' .*is missing"),
    "renamed arm feature": (_rename("per_arm", "item_price", "price"), r"per-arm feature 'item_price' .*is missing"),
    "retyped arm feature": (
        _to_categorical("per_arm", "item_price"),
        r"per-arm feature 'item_price' is float in the base model but categorical string",
    ),
    "no arm features": (lambda s: s.update(per_arm=[]), r"per-arm features \['item_category'.*the base model has them"),
    "missing global feature": (_drop("features", "user_float_0"), r"feature 'user_float_0' \(float\) is missing"),
    "retyped global feature": (
        _to_categorical("features", "user_float_0"),
        r"feature 'user_float_0' is float in the model but categorical string",
    ),
}


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_feature_set_fails_naming_the_feature(world, agent, change, tmp_path):
    from rlops.components.trainer.core import run_trainer

    edit, message = CHANGES[change]
    ex = _edited_examples(world, tmp_path, edit)
    with pytest.raises(FeatureSchemaError, match=message):
        run_trainer(
            _config(agent, world["gen"], 10), str(tmp_path / "m"), str(tmp_path / "r"), ex, base_model_uri=world[agent]
        )


def test_a_retyped_item_column_through_experience_gen_fails_naming_the_feature(world, tmp_path):
    """End to end: the item table's price arrives as strings; ExperienceGen makes it categorical."""
    from rlops.components.trainer.core import run_trainer

    ex = _ingest(world["gen"], tmp_path, 3, lambda t: t.assign(item_price=[f"p{int(v)}" for v in t["item_price"]]))
    with pytest.raises(
        FeatureSchemaError, match="per-arm feature 'item_price' is float in the base model but categorical string"
    ):
        run_trainer(
            _config("lin_ucb", world["gen"], 10),
            str(tmp_path / "m"),
            str(tmp_path / "r"),
            ex,
            base_model_uri=world["lin_ucb"],
        )


def test_a_changed_vocabulary_keeps_the_base_models_and_says_so(world, tmp_path, caplog):
    """A vocabulary that grew (new item categories) is not an error -- the nightly loop must survive
    a new category: the base's vocabulary is kept (new values go to its OOV bucket), with a warning
    naming the feature; before training the warm-started policy still acts as the base."""
    from rlops.components.trainer.core import run_trainer

    grow = lambda s: [
        f.update(vocabulary=list(f["vocabulary"]) + ["new_a", "new_b", "new_c"])  # noqa: E731
        for f in s["per_arm"]
        if f["name"] == "item_category"
    ]
    ex = _edited_examples(world, tmp_path, grow)
    warm = str(tmp_path / "warm")
    with caplog.at_level(logging.WARNING, logger="rlops.components.trainer.core"):
        run_trainer(
            _config("neural_epsilon_greedy", world["gen"], 0),
            warm,
            warm + "_run",
            ex,
            base_model_uri=world["neural_epsilon_greedy"],
        )
    assert "feature 'per_arm/item_category' has a vocabulary of" in caplog.text and "3 value(s) new" in caplog.text
    np.testing.assert_array_equal(_greedy(warm, ex), _greedy(world["neural_epsilon_greedy"], ex))


def test_an_averaging_warm_start_starts_its_average_at_the_base(world, tmp_path):
    """trainer.average_weights: the average starts at the base's weights, whether the base averaged
    or not, so a warm start that trains no step exports exactly what the base exported, and one that
    trains a few stays near it. A base that averaged checkpoints the weights it exported."""
    import dataclasses

    from rlops.components.trainer.core import run_trainer

    def config(steps: int, average: bool):
        return dataclasses.replace(_config("neural_epsilon_greedy", world["gen"], steps), average_weights=average)

    averaged_base = str(tmp_path / "averaged_base")
    run_trainer(config(50, True), averaged_base, averaged_base + "_run", world["base_ex"])
    for base in (world["neural_epsilon_greedy"], averaged_base):
        for steps, average in ((0, True), (0, False), (3, True)):
            warm = str(tmp_path / f"warm_{os.path.basename(base)}_{steps}_{average}")
            run_trainer(config(steps, average), warm, warm + "_run", world["next_ex"], base_model_uri=base)
            for b, w in zip(_variables(base), _variables(warm), strict=True):
                if steps == 0:
                    np.testing.assert_array_equal(w, b)
                else:  # 3 Adam steps of lr 3e-3 move a weight by at most ~1e-2
                    assert np.abs(w - b).max() < 0.05
        warm0 = str(tmp_path / f"warm_{os.path.basename(base)}_0_True")
        np.testing.assert_array_equal(_greedy(warm0, world["next_ex"]), _greedy(base, world["next_ex"]))
