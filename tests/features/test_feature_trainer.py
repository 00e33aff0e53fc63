"""Trainer with named features: the exported policy's preprocessing, and missing / renamed /
retyped features named at warm start and at the Evaluator's comparison."""

import numpy as np
import pytest
import tensorflow as tf
from feature_logs import FEATURES, make_logs, write_csv

from rlops.components.common import records
from rlops.components.common.model import serving_dir
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import run_experience_gen
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer
from rlops.features import FeatureSchemaError, Preprocessor, load as load_schema, numpy_features
from rlops.train.policy_saver import SavedPolicy

# Slow: trains on named features and serves the export; `make test` runs it.
pytestmark = pytest.mark.slow


def ingest(tmp_path, name, cols, features=FEATURES):
    write_csv(tmp_path / f"{name}.csv", cols)
    cfg = ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": str(tmp_path / f"{name}.csv")},
            "bandit_columns": {"features": list(features)},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 3},
        }
    )
    uri = str(tmp_path / name)
    assert run_experience_gen(cfg, uri, uri + "-q").records_quarantined == 0
    return uri


def train(examples, model, base=None):
    cfg = TrainerConfig(
        agent="neural_epsilon_greedy",
        num_actions=4,
        train_steps=100,
        steps_per_run=100,
        batch_size=64,
        learning_rate=0.01,
    )
    return run_trainer(cfg, model, model + "-run", examples, base_model_uri=base)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("feature_trainer")
    cols, _ = make_logs(1500, seed=0)
    examples = ingest(d, "day1", cols)
    model = str(d / "model1")
    train(examples, model)
    return d, examples, model


def test_exported_policy_encodes_like_the_examples_schema(trained):
    _, examples, model = trained
    data = records.read_logged_bandit(examples, "eval")
    feats = data[records.FEATURES]
    assert sorted(feats) == sorted(FEATURES) and feats["user_a"].dtype.kind == "S"
    schema = load_schema(examples)
    assert load_schema(serving_dir(model)) == schema  # the schema travels with the model
    # The dense context the Evaluator's reward model sees is the preprocessor's encoding.
    np.testing.assert_allclose(data[records.CONTEXT], Preprocessor(schema)(numpy_features(schema, feats)).numpy())
    # The `action` signature (Evaluator) and serving_default (servers) agree on greedy actions.
    policy = SavedPolicy(serving_dir(model))
    acted = policy.actions(feats)
    served = policy.loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in feats.items()})
    np.testing.assert_array_equal(acted, served["greedy_action"].numpy())
    # Matched by name: a reordered dict with an extra column gives the same actions.
    shuffled = {k: feats[k] for k in reversed(list(feats))}
    shuffled["not_a_feature"] = np.zeros(len(acted))
    np.testing.assert_array_equal(policy.actions(shuffled), acted)
    missing = {k: v for k, v in feats.items() if k != "user_b"}
    with pytest.raises(FeatureSchemaError, match="feature 'user_b' is missing"):
        policy.actions(missing)
    with pytest.raises(FeatureSchemaError, match="feature 'position' is int64 .* but arrives as strings"):
        policy.actions({**feats, "position": feats["position"].astype(str)})


def test_warm_start_keeps_the_base_vocabulary_and_names_missing_or_retyped_features(trained):
    d, _, model = trained
    cols, _ = make_logs(1500, seed=5)
    cols["brand_new"] = np.arange(1500) % 3  # a new column: ignored by the warm-started model
    day2 = ingest(d, "day2", cols, FEATURES + ["brand_new"])
    result = train(day2, str(d / "model2"), base=model)
    assert result.warm_started_from
    assert load_schema(serving_dir(str(d / "model2"))) == load_schema(serving_dir(model))
    renamed = dict(cols)
    renamed["user_D"] = renamed.pop("user_d")
    day3 = ingest(d, "day3", renamed, [f if f != "user_d" else "user_D" for f in FEATURES])
    with pytest.raises(FeatureSchemaError, match="feature 'user_d' .* is missing from the examples"):
        train(day3, str(d / "model3"), base=model)
    day4 = ingest(d, "day4", cols, [f if f != "position" else {"name": "position", "kind": "float"} for f in FEATURES])
    with pytest.raises(FeatureSchemaError, match="feature 'position' is categorical int64 in the model but float"):
        train(day4, str(d / "model4"), base=model)
