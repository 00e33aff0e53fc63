"""Evaluate what you serve (issue 20): the Evaluator scores the policy serving_default serves --
epsilon-greedy over each record's candidates -- from exactly the probabilities serving_default
reports as `propensity`, blesses on it, and reports the greedy policy beside it."""

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common import feedback
from rlops.components.evaluator import core, scoring
from rlops.components.evaluator.config import EvaluatorConfig

# Slow: ingests, trains and pushes a per-arm policy; `make test` runs it.
pytestmark = pytest.mark.slow

K_MAX, EPSILON = 8, 0.3


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Per-arm logs whose candidate sets vary (4..8 items a decision) -> Examples -> a LinUCB
    policy exported with serving_epsilon 0.3."""
    from rlops.components.experience_gen.config import ExperienceGenConfig, SpecConfig
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    d = tmp_path_factory.mktemp("served")
    gen = LogGenerator(
        LogConfig(
            logging="thompson",
            ctr=0.05,
            seed=0,
            candidates=(4, K_MAX),
            num_candidate_sets=8,
            num_users=300,
            num_items=12,
        )
    )
    paths = gen.sample(3_000, seed=1).to_files(str(d), format="parquet")
    cfg = {
        "source": {"kind": "file", "pattern": paths["impressions"], "format": "parquet"},
        "item_source": {"kind": "file", "pattern": paths["items"], "format": "parquet"},
        "bandit_columns": {
            "features": list(gen.sample(1).context_columns),
            "item_id": "item_id",
            "item_features": ["item_category", "item_brand", "item_price", "item_popularity"],
            "candidates": "candidates",
        },
        "action_spec": SpecConfig.discrete(K_MAX).__dict__,
        "splits": {"splits": [{"name": "train", "hash_buckets": 1}, {"name": "eval", "hash_buckets": 1}]},
    }
    run_experience_gen(ExperienceGenConfig.from_json(cfg), str(d / "ex"), str(d / "q"))
    run_trainer(
        TrainerConfig(
            agent="lin_ucb",
            num_actions=K_MAX,
            batch_size=128,
            train_steps=100,
            steps_per_run=100,
            alpha=0.1,
            serving_epsilon=EPSILON,
        ),
        str(d / "model"),
        str(d / "run"),
        str(d / "ex"),
    )
    return d


def _serving_inputs(signature, features: dict) -> dict:
    """The records' raw features under serving_default's input names (rlops.features.serving_names)."""
    from rlops.features.serving_names import serving_inputs_from_records

    named = serving_inputs_from_records(features)
    specs = signature.structured_input_signature[1]
    return {
        name: tf.constant(np.asarray(named[name]))
        if spec.dtype == tf.string
        else tf.cast(np.asarray(named[name]), spec.dtype)
        for name, spec in specs.items()
    }


def test_served_probabilities_equal_serving_defaults_propensities(world):
    """The Evaluator's probabilities of the served policy, at the action serving_default draws,
    equal the propensity it reports (over several draws, so exploring and greedy draws both
    occur); they are 0 outside each record's candidates and put 1 - eps + eps / n on the greedy."""
    from rlops.components.common.model import serving_dir
    from rlops.train.policy_saver import SavedPolicy

    model = serving_dir(str(world / "model"))
    data = feedback.load_logged_feedback(str(world / "ex"))
    probs = scoring.policy_probs(SavedPolicy(model), data, K_MAX)
    assert probs.epsilon == pytest.approx(EPSILON)
    serving = tf.saved_model.load(model).signatures["serving_features"]  # the records' feature arrays
    inputs = _serving_inputs(serving, data.features)
    rows = np.arange(len(data.actions))
    explored = 0
    for _ in range(3):
        out = serving(**inputs)
        action, propensity = out["action"].numpy().astype(int), out["propensity"].numpy()
        np.testing.assert_allclose(probs.served[rows, action], propensity, rtol=1e-5)
        np.testing.assert_array_equal(probs.greedy.argmax(1), out["greedy_action"].numpy())
        explored += int((action != out["greedy_action"].numpy()).sum())
    assert explored > 0
    num = (data.items >= 0).sum(1)
    assert num.min() < num.max()  # candidate sets do vary
    assert (probs.served[data.items < 0] == 0).all()
    np.testing.assert_allclose(probs.served.sum(1), 1.0)
    np.testing.assert_allclose(probs.served[rows, probs.greedy.argmax(1)], 1 - EPSILON + EPSILON / num)


def test_the_evaluator_blesses_on_the_served_policy_and_reports_the_greedy_one(world, tmp_path):
    """IPS of the candidate (served) and of its greedy policy equal a numpy reference from the
    same probabilities; the served policy's ESS is larger (it is better supported)."""
    from rlops.components.common.model import serving_dir
    from rlops.train.policy_saver import SavedPolicy

    data = feedback.load_logged_feedback(str(world / "ex"))
    probs = scoring.policy_probs(SavedPolicy(serving_dir(str(world / "model"))), data, K_MAX)
    result = core.run_evaluator(
        EvaluatorConfig(num_bootstrap=100, dm_refits=10, min_ess=1.0),
        str(world / "model"),
        str(tmp_path / "evaluation"),
        str(tmp_path / "blessing"),
        examples_uri=str(world / "ex"),
        num_actions=K_MAX,
    )
    m = result.metrics
    rows = np.arange(len(data.actions))
    for key, p in (("candidate", probs.served), ("candidate_greedy", probs.greedy)):
        w = p[rows, data.actions] / data.propensities
        assert m[key]["ips"]["value"] == pytest.approx(np.mean(w * data.rewards), rel=1e-9), key
        assert m[key]["snips"]["value"] == pytest.approx(np.sum(w * data.rewards) / np.sum(w), rel=1e-9), key
    w_served = probs.served[rows, data.actions] / data.propensities
    assert m["trust"]["ess"]["candidate"] == pytest.approx(w_served.sum() ** 2 / (w_served**2).sum(), rel=1e-9)
    assert m["trust"]["ess"]["candidate"] > m["trust"]["greedy_ess"]
    assert m["served_policy"]["candidate_epsilon"] == pytest.approx(EPSILON)
    # Blessing follows the served estimate against the logging policy (observed mean).
    diff = m["improvement"]["dr"]
    assert diff["value"] == pytest.approx(m["candidate"]["dr"]["value"] - np.mean(data.rewards), rel=1e-9)
    assert result.blessed == (diff["lower"] > 0)
