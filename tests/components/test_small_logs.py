"""Certifying the exploration (issue 36): a candidate whose served policy cannot be judged on a
modest log is scored served at more exploring epsilons, the least exploring one that clears the
gate is blessed, the blessing names it, and the Pusher publishes the policy serving exactly it.

The world: 5 actions, a logger that takes action 0 96% of the time (the others 1% each), and a
candidate whose greedy choice is action 4 (click rate 0.6 against 0.1): served at its own epsilon
0.1 nearly all its weight sits on the few records where the logger took action 4 (ESS ~ 24 of 2,000
records, under min_ess 30); served at 0.3 or 0.5 the weights spread (ESS ~ 34, ~ 51) and the
improvement (+0.2 and more) is clear.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from rlops.components.evaluator import bandit, comparisons, memory
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimators import LOGGING_POLICY, LoggedFeedback
from rlops.components.evaluator.scoring import PolicyProbs, epsilons_above

K = 5


def skewed_logs(n: int = 2000, seed: int = 0) -> LoggedFeedback:
    rng = np.random.default_rng(seed)
    logging = np.array([0.96, 0.01, 0.01, 0.01, 0.01])
    actions = rng.choice(K, n, p=logging)
    click_rate = np.where(actions == 4, 0.6, 0.1)
    rewards = (rng.random(n) < click_rate).astype(float)
    return LoggedFeedback(rng.normal(size=(n, 3)), actions, rewards, logging[actions])


def candidate(n: int, epsilon: float = 0.1, best: int = 4) -> PolicyProbs:
    greedy = np.zeros((n, K))
    greedy[:, best] = 1.0
    return PolicyProbs((1 - epsilon) * greedy + epsilon / K, greedy, epsilon)


def evaluate(config: EvaluatorConfig, data: LoggedFeedback, probs: PolicyProbs):
    """The Evaluator's in-memory bandit path on the logs (bandit.evaluate_bandit less the
    SavedModel): the comparison at the own epsilon, then the certification."""
    metrics, improvement = memory.evaluate_logged(config, data, probs, LOGGING_POLICY, "logging_policy", "auto")

    def served_at(epsilons):
        return memory.trials_at(config, data, LOGGING_POLICY, probs, epsilons, K, "auto")

    return bandit._certified(config, None, probs.epsilon, metrics, improvement, served_at)


def test_the_served_trial_reports_dms_refit_interval_as_if_every_trial_had_refitted():
    """Trials leave DM's reward-model refits (no gate but DM's reads them) to the one served: the
    metrics are those of refitting for every trial, and DM as the gate refits every trial."""
    data = skewed_logs()
    probs = candidate(len(data.actions))
    for estimator in ("dr", "dm"):
        config = EvaluatorConfig(num_bootstrap=100, dm_refits=10, min_ess=20, estimator=estimator)
        grid = [0.2, 0.3, 0.5]
        eager = memory.memory_against(config, data, LOGGING_POLICY, [probs.served_at(e) for e in grid], K, "auto")
        trials = memory.trials_at(config, data, LOGGING_POLICY, probs, grid, K, "auto")
        assert (estimator == "dm") == all(t.complete is None for t in trials)
        for trial, full in zip(trials, eager):
            assert trial.completed().comparison == full
            assert trial.improvement == full.difference[estimator]
            # Deferred: DM's interval without the refits, every other estimate as reported.
            assert {k: v for k, v in trial.comparison.difference.items() if k != "dm"} == {
                k: v for k, v in full.difference.items() if k != "dm"
            }
        served = comparisons.certify(config, [trials[0].completed(), *trials[1:]])
        assert served.trial.complete is None and served.trial.comparison in eager


FAST = {"num_bootstrap": 100, "dm_refits": 0}


def test_the_least_exploring_epsilon_that_clears_the_gate_is_certified():
    data = skewed_logs()
    config = EvaluatorConfig(serving_epsilons=(0.1, 0.2, 0.3, 0.5), **FAST)
    metrics, improvement = evaluate(config, data, candidate(len(data.actions)))
    served = metrics["served_policy"]
    tried = served["tried"]
    assert [t["epsilon"] for t in tried] == [0.1, 0.2, 0.3, 0.5]
    assert not tried[0]["clears_gate"] and tried[0]["ess"] < 30  # as trained: no trusted estimate
    first = next(t for t in tried if t["clears_gate"])
    assert served["candidate_epsilon"] == first["epsilon"] > 0.1 and served["certified"]
    assert served["trained_epsilon"] == 0.1
    # what blesses, and what metrics.json reports, is the certified policy's comparison
    assert improvement.trusted and improvement.lower > 0
    assert metrics["improvement"]["dr"]["lower"] == improvement.lower
    assert metrics["trust"]["ess"]["candidate"] == first["ess"] >= 30
    note = metrics["certification"]
    assert f"certified serving epsilon {first['epsilon']:g}" in note and "0.1: ESS" in note and "< 30" in note


def test_without_a_grid_only_the_trained_epsilon_is_judged():
    data = skewed_logs()
    metrics, improvement = evaluate(EvaluatorConfig(serving_epsilons=(), **FAST), data, candidate(len(data.actions)))
    assert not improvement.trusted and "min_ess" in (improvement.reason or "")
    assert metrics["served_policy"]["candidate_epsilon"] == 0.1 and not metrics["served_policy"]["certified"]
    assert "certification" not in metrics


def test_a_worse_candidate_is_certified_at_no_epsilon_and_the_note_says_why_at_each():
    data = skewed_logs()
    config = EvaluatorConfig(serving_epsilons=(0.3, 0.5), **FAST)
    metrics, improvement = evaluate(config, data, candidate(len(data.actions), best=1))  # click rate 0.1
    assert not comparisons.clears_gate(config, improvement)
    assert metrics["served_policy"]["candidate_epsilon"] == 0.1 and not metrics["served_policy"]["certified"]
    note = metrics["certification"]
    assert note.startswith("no serving epsilon of 0.1, 0.3, 0.5 clears the gate") and "0.5: " in note


def test_a_candidate_that_clears_the_gate_as_trained_is_judged_as_trained_only():
    data = skewed_logs(n=6000, seed=1)
    config = EvaluatorConfig(serving_epsilons=(0.3, 0.5), min_ess=10, **FAST)
    metrics, improvement = evaluate(config, data, candidate(len(data.actions)))
    assert comparisons.clears_gate(config, improvement)
    assert [t["epsilon"] for t in metrics["served_policy"]["tried"]] == [0.1]  # no second scoring
    assert "certification" not in metrics


def test_a_policy_exported_without_serving_default_is_judged_as_it_is():
    """No serving_default: no epsilon the Pusher could publish, so no other epsilon is tried."""
    from types import SimpleNamespace

    data = skewed_logs()
    config = EvaluatorConfig(**FAST)
    probs = candidate(len(data.actions))
    metrics, improvement = memory.evaluate_logged(config, data, probs, LOGGING_POLICY, "logging_policy", "auto")
    greedy_only = SimpleNamespace(loaded=SimpleNamespace(signatures={"action": None}))

    def never(_):
        raise AssertionError("scored at another epsilon")

    metrics, _ = bandit._certified(config, greedy_only, probs.epsilon, metrics, improvement, never)
    assert [t["epsilon"] for t in metrics["served_policy"]["tried"]] == [0.1]


def test_too_few_eval_records_are_not_scored_at_other_epsilons():
    """26 eval records against min_eval_records 100 (a first real log): no epsilon can make up
    for missing records, so none is tried and the reason stays the record count."""
    data = skewed_logs(n=60)
    config = EvaluatorConfig(serving_epsilons=(0.3, 0.5), **FAST)
    probs = candidate(len(data.actions))
    metrics, improvement = memory.evaluate_logged(config, data, probs, LOGGING_POLICY, "logging_policy", "auto")

    def never(_):
        raise AssertionError("scored at another epsilon")

    metrics, improvement = bandit._certified(config, None, probs.epsilon, metrics, improvement, never)
    assert [t["epsilon"] for t in metrics["served_policy"]["tried"]] == [0.1]
    assert "min_eval_records" in (improvement.reason or "") and "certification" not in metrics


def test_a_refusal_by_the_bound_says_how_many_more_records_would_clear_it():
    from rlops.components.evaluator.estimate import Estimate

    config = EvaluatorConfig(max_regression=0.0)  # the lower bound itself must clear min_improvement
    near = comparisons.Trial(0.3, Estimate(0.035, -0.016, 0.085), {"candidate": 40.0}, None)
    assert near.why_not(config) == (
        "0.3: lower 95% bound -0.0160 <= 0.0 (about 2.1x the eval records would clear it, were the estimate to hold)"
    )
    far = comparisons.Trial(0.5, Estimate(0.0006, -0.063, 0.064), {"candidate": 60.0}, None)
    assert "about 11,236x the eval records" in far.why_not(config)  # not 11236.0x
    worse = comparisons.Trial(0.5, Estimate(-0.01, -0.05, 0.03), {"candidate": 80.0}, None)
    assert worse.why_not(config) == "0.5: lower 95% bound -0.0500 <= 0.0"
    # The default, non-inferior rule: the bound must clear -5% of the baseline's 0.2 = -0.01.
    tolerant = comparisons.Trial(0.3, Estimate(0.035, -0.016, 0.085), {"candidate": 40.0}, None, baseline_value=0.2)
    assert tolerant.why_not(EvaluatorConfig()) == (
        "0.3: point estimate 0.0350 > 0.0 and lower 95% bound -0.0160 <= -0.0100 (5% of the baseline's 0.2000) "
        f"(about {((0.035 + 0.016) / (0.035 + 0.01)) ** 2:.1f}x the eval records would clear it, were the estimate to hold)"
    )
    thin = comparisons.Trial(0.1, Estimate(0.05, float("nan"), float("nan"), "few"), {"candidate": 12.3}, "few")
    assert thin.why_not(config) == "0.1: ESS 12.3 < 30"


def test_the_grid_starts_above_the_models_own_float32_epsilon():
    assert epsilons_above((0.05, 0.1, 0.2, 0.5), float(np.float32(0.1))) == [0.2, 0.5]
    probs = PolicyProbs(np.full((1, 3), 1 / 3), np.array([[0.0, 1.0, 0.0]]), 0.0, np.array([[True, True, False]]))
    np.testing.assert_allclose(probs.served_at(0.5), [[0.25, 0.75, 0.0]])  # eps spread over the allowed only


def test_the_blessing_names_the_certified_epsilon_for_the_pusher():
    from rlops.components.common.model import SERVING_EPSILON_PROPERTY
    from rlops.components.evaluator.core import EvalResult

    metrics = {"served_policy": {"candidate_epsilon": 0.3}}
    assert EvalResult(True, "ok", metrics).blessing_properties("m", 1, None, None)[SERVING_EPSILON_PROPERTY] == 0.3
    assert SERVING_EPSILON_PROPERTY not in EvalResult(False, "no", metrics).blessing_properties("m", 1, None, None)


@pytest.mark.parametrize("value", [[1.5], 0.3, ["a"]])
def test_a_bad_grid_is_one_line_naming_the_key(value):
    with pytest.raises(ValueError, match=r"^evaluator\.serving_epsilons"):
        EvaluatorConfig.from_dict({"serving_epsilons": value})


def _exported(path: str, epsilon: float | None = 0.1) -> str:
    import tensorflow as tf

    from rlops.agents import specs
    from rlops.agents.networks import ActorNetwork
    from rlops.agents.policies import ActorPolicy, GreedyPolicy
    from rlops.agents.trajectories import time_step_spec
    from rlops.train.policy_saver import PolicySaver

    obs = tf.TensorSpec((2,), tf.float32, "observation")
    actions = specs.BoundedTensorSpec((), tf.int32, 0, K - 1, name="action")
    policy = GreedyPolicy(ActorPolicy(time_step_spec(obs), actions, ActorNetwork(obs, actions, (4,))))
    PolicySaver(policy, serving_epsilon=epsilon).save(path)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> str:
    """A small policy exported serving epsilon 0.1 (the Trainer's default)."""
    return _exported(str(tmp_path_factory.mktemp("certify") / "model"))


def test_the_beam_engine_scores_the_candidate_served_at_another_epsilon(exported):
    """A PolicySource with an epsilon gives the served_at probabilities on each batch (what the
    Beam engine's second scoring sums), its plain twin the model's own."""
    from rlops.components.evaluator import beam
    from rlops.components.evaluator.scoring import policy_probs
    from rlops.train.policy_saver import SavedPolicy

    rng = np.random.default_rng(0)
    data = LoggedFeedback(
        rng.normal(size=(32, 2)).astype(np.float32), rng.integers(0, K, 32), np.zeros(32), np.full(32, 0.2)
    )
    sources = [beam.PolicySource("saved_model", exported), beam.PolicySource("saved_model", exported, epsilon=0.4)]
    (own, wider), _ = beam.batch_policies(sources, beam.load_policies(sources), data, K)
    probs = policy_probs(SavedPolicy(exported), data, K)
    np.testing.assert_allclose(own, probs.served)
    np.testing.assert_allclose(wider, probs.served_at(0.4))
    np.testing.assert_allclose(wider.max(1), 0.6 + 0.4 / K, rtol=1e-6)


def test_the_pusher_publishes_the_policy_serving_the_certified_epsilon(tmp_path, exported):
    """The published version serves the blessing's epsilon (its draws and propensities say so, in
    the SavedModel and the LiteRT file), acts as trained, and the Trainer's model is left as it was."""
    import tensorflow as tf

    from rlops.components.pusher import core, publish
    from rlops.components.pusher.storage import open_store
    from rlops.train.serving_epsilon import read_serving_epsilon

    source = exported
    # The Pusher's own checks on the rewritten copy: serving_default's draws at batch 1 and 64 in
    # two fresh processes, then the LiteRT file's, each against the propensities at 0.4.
    rows = {"observation": np.random.default_rng(1).normal(size=(64, 2)).astype(np.float32)}
    result = core.push_policy(source, str(tmp_path / "serving"), True, rows, serving_epsilon=0.4)
    assert result.pushed and read_serving_epsilon(result.destination) == pytest.approx(0.4)
    assert os.path.exists(os.path.join(result.destination, "policy.tflite"))
    assert read_serving_epsilon(source) == pytest.approx(0.1)
    published, trained = tf.saved_model.load(result.destination), tf.saved_model.load(source)
    obs = tf.constant(np.random.default_rng(0).normal(size=(64, 2)), tf.float32)
    out = published.signatures["serving_default"](observation=obs)
    greedy = out["greedy_action"].numpy()
    expected = np.where(out["action"].numpy() == greedy, 0.6 + 0.4 / K, 0.4 / K)
    np.testing.assert_allclose(out["propensity"].numpy(), expected, rtol=1e-5)
    np.testing.assert_array_equal(greedy, trained.signatures["serving_default"](observation=obs)["greedy_action"])
    # the version's marker names the Trainer's model as its source, not the rewritten scratch copy
    with open(os.path.join(result.destination, publish.MARKER)) as f:
        assert json.load(f)["source"] == open_store(source).url
    # the lineage in the version's marker keeps the certified epsilon
    assert core.lineage("m", None, {"blessed": 1, "serving_epsilon": 0.4})["evaluation"]["serving_epsilon"] == 0.4


def test_a_policy_without_serving_default_cannot_be_given_an_epsilon(tmp_path):
    from rlops.train.serving_epsilon import read_serving_epsilon, set_serving_epsilon

    path = _exported(str(tmp_path / "greedy"), epsilon=None)
    assert read_serving_epsilon(path) is None
    with pytest.raises(ValueError, match="no serving_default epsilon"):
        set_serving_epsilon(path, 0.3)
