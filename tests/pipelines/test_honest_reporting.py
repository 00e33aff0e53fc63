"""Estimates nobody misreads (issue 36): an untrusted estimate is never printed or stored as a
result, every JSON written is strict, bounded rewards keep their intervals in range, and the
smaller reporting mends (a model and logs of different action counts, ignored columns, the
trainer's rate, the full config)."""

import json
import math

import numpy as np
import pytest
import yaml

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import comparisons, core, estimators
from rlops.components.evaluator.action_ids import check_policy_fits_logs
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate
from rlops.components.properties import json_safe, number
from rlops.pipelines import cli_evaluate
from rlops.pipelines.local import _key_metrics

K = 5


def clicks(n: int, rate: float, seed: int = 0) -> LoggedFeedback:
    """Uniformly logged 0/1 rewards at a low click rate."""
    rng = np.random.default_rng(seed)
    return LoggedFeedback(
        contexts=rng.normal(size=(n, 2)),
        actions=rng.integers(0, K, n),
        rewards=(rng.random(n) < rate).astype(float),
        propensities=np.full(n, 1.0 / K),
    )


def greedy_on(action: int, n: int) -> np.ndarray:
    return estimators.greedy_probs(np.full(n, action), K)


def compare(data, **kw):
    """The greedy policy on action 0 against the logging policy, with a constant reward model."""
    q = np.full((len(data.actions), K), data.rewards.mean())
    return estimators.compare(
        data, greedy_on(0, len(data.actions)), estimators.LOGGING_POLICY, q, num_bootstrap=200, **kw
    )


# --- 1. an untrusted estimate is null, with its reason and what would make one ---------------------


def test_untrusted_estimate_is_written_as_null_with_why_and_what_would_help():
    cmp = compare(clicks(60, 0.3))  # under min_eval_records
    written = cmp.candidate["ips"].as_dict()
    assert written["value"] is None and written["lower"] is None and written["upper"] is None
    assert "min_eval_records" in written["reason"] and "more eval records" in written["reason"]
    assert written["untrusted_value"] == pytest.approx(cmp.candidate["ips"].value)
    cmp = compare(clicks(2000, 0.3), min_ess=10_000)  # too small an ESS
    reason = cmp.difference["dr"].as_dict()["reason"]
    assert "min_ess" in reason and "more exploration" in reason and "smaller candidate step" in reason


def test_metrics_are_strict_json_and_properties_hold_no_untrusted_number():
    data = clicks(60, 0.3)
    cmp = compare(data)
    metrics = comparisons.bandit_metrics(
        EvaluatorConfig(), cmp, cmp, 60, "logging_policy", "logistic", (None, None), [60, 0, 0, 0, 0], "memory"
    )
    text = json.dumps(json_safe(metrics), allow_nan=False)  # raised on NaN before
    assert "NaN" not in text and json.loads(text)["improvement"]["dr"]["value"] is None
    result = core.EvalResult(False, "not blessed", metrics)
    assert core.scalar_metrics(result) == {"blessed": 0.0}  # no candidate_dr: 0.15 standing as a result
    json.dumps(core.evaluation_properties(result), allow_nan=False)


def test_run_summary_says_why_there_is_no_estimate_instead_of_a_number():
    cmp = compare(clicks(60, 0.3))
    metrics = {
        "baseline": "logging_policy",
        "candidate": {k: v.as_dict() for k, v in cmp.candidate.items()},
        "improvement": {k: v.as_dict() for k, v in cmp.difference.items()},
        "trust": cmp.diagnostics.as_dict(),
    }
    lines = _key_metrics(metrics)
    assert not any(k.startswith(("candidate_", "improvement_")) for k in lines), lines
    assert lines["estimates"].startswith("none: only 60 eval records") and "more eval records" in lines["estimates"]


def test_the_run_summary_gives_the_reason_for_no_estimate_once():
    from rlops.pipelines.local import RunSummary

    why = "effective sample size of the importance weights too small: candidate 18.6 < 30 (min_ess)"
    summary = RunSummary(
        "p",
        1.0,
        metrics={"estimates": f"none: {why}"},
        blessed=False,
        blessing_reason=f"not blessed: no trustworthy estimate of the improvement in dr: {why} (no serving "
        "epsilon of 0.1, 0.3 clears the gate: at 0.1: ESS 18.6 < 30; 0.3: ESS 29.0 < 30)",
    )
    text = summary.render()
    assert text.count(why) == 1, text
    assert "blessed: False  (not blessed: no trustworthy estimate of the improvement in dr: see estimates (no " in text
    trusted = RunSummary("p", 1.0, metrics={"candidate_dr": "0.1"}, blessed=False, blessing_reason="lower bound < 0")
    assert "blessed: False  (lower bound < 0)" in trusted.render()


def test_no_minus_zero_anywhere_a_number_is_printed():
    assert number(-0.00001) == "0.0000" and number(-0.00001, "+") == "+0.0000"
    assert number(-0.00006) == "-0.0001" and number(0.15254) == "0.1525"
    est = {"value": -1e-7, "lower": -2e-7, "upper": 0.1}
    assert cli_evaluate._interval(est, True) == "[+0.00000, +0.10000]" and cli_evaluate._value(est) == "0.00000"


def test_rlops_evaluate_table_of_an_untrusted_run_prints_the_reason_not_numbers():
    cmp = compare(clicks(60, 0.3))
    result = {
        "confidence": 0.95,
        "trusted": False,
        "reason": cmp.diagnostics.reason,
        "num_records": 60,
        "ess": cmp.diagnostics.ess["candidate"],
        "reward_model": "logistic",
        "observed_mean_reward": cmp.baseline["ips"].value,
        "estimates": {k: v.as_dict() for k, v in cmp.candidate.items()},
        "improvement_over_logging": {k: v.as_dict() for k, v in cmp.difference.items()},
    }
    text = cli_evaluate.render_table(result)
    assert "estimator" not in text and "no estimate: only 60 eval records" in text, text


# --- 2. intervals of bounded rewards stay in the reward range --------------------------------------


def test_intervals_of_click_rates_stay_inside_0_1_and_differences_inside_minus_1_1():
    data = clicks(3000, 0.01, seed=3)
    data.rewards[data.actions == 0] = 0.0  # the candidate's action got no click on this night
    cmp = compare(data, min_ess=0)
    assert cmp.diagnostics.reason is None
    floor = cmp.diagnostics.noise_sd["candidate"]
    for name, est in cmp.candidate.items():
        assert 0.0 <= est.lower <= est.upper <= 1.0, (name, est)
    # unclipped, the reward-noise floor alone put DR's lower end below 0
    assert cmp.candidate["dr"].value - 1.96 * floor < 0 and cmp.candidate["dr"].lower == 0.0
    assert cmp.candidate["ips"].lower == 0.0 < cmp.candidate["ips"].upper
    for name, est in cmp.difference.items():
        assert -1.0 <= est.lower <= est.upper <= 1.0, (name, est)


def test_rewards_outside_0_1_widen_the_range_to_the_observed_one():
    assert estimators.value_bounds((0.0, 0.0)) == (0.0, 1.0)  # a night without a click is still [0, 1]
    assert estimators.value_bounds((-2.0, 5.0)) == (-2.0, 5.0)
    assert estimators.value_bounds(None) is None
    e = estimators.clip_interval(Estimate(0.2, -0.1, 1.3), (0.0, 1.0))
    assert (e.value, e.lower, e.upper) == (0.2, 0.0, 1.0)
    assert math.isnan(estimators.clip_interval(Estimate(0.2, math.nan, math.nan), (0, 1)).lower)


# --- 5. a model and logs of different action counts ---------------------------------------------------


def test_a_46_action_model_on_80_action_logs_names_both_counts():
    actions = np.array([3, 10, 59, 79])
    with pytest.raises(ValueError) as e:
        check_policy_fits_logs(46, 80, actions)
    assert str(e.value).startswith(
        "the policy has 46 actions (its action spec) but the logs have 80 (action 59 in record 2 is not one of "
        "the policy's)"
    )
    check_policy_fits_logs(46, 80, np.array([3, 10]))  # wider logs whose actions all fit: fine


# --- 6. ignored columns ---------------------------------------------------------------------------------


def test_ingestion_notes_the_columns_it_ignores():
    from rlops.components.experience_gen.layout import Field, Layout, SourceSchema
    from rlops.components.experience_gen.pipeline import ignored_columns_note

    layout = Layout("bandit", (Field("action", ("action",), "int"), Field("reward", ("reward",), "float")))
    names = ("action", "reward") + tuple(f"affinity_{i}" for i in range(12))
    note = ignored_columns_note(layout, SourceSchema(names), "logs.csv")
    assert note == (
        "experience_gen: 12 column(s) of logs.csv not in the config, ignored: "
        + ", ".join(f"affinity_{i}" for i in range(10))
        + " and 2 more"
    )
    assert ignored_columns_note(layout, SourceSchema(("action", "reward")), "logs.csv") is None


def test_planning_an_ingest_logs_the_note(tmp_path, caplog):
    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.experience_gen.pipeline import make_plan

    logs = tmp_path / "logs.csv"
    logs.write_text("x_0,action,reward,propensity,extra_a,extra_b\n0.1,1,0,0.5,9,9\n0.3,0,1,0.5,9,9\n")
    config = ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": str(logs), "format": "csv"},
            "bandit_columns": {"context_prefix": "x_"},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 1},
        }
    )
    with caplog.at_level("INFO", logger="rlops"):
        make_plan(config)
    assert f"experience_gen: 2 column(s) of {logs} not in the config, ignored: extra_a, extra_b" in caplog.messages


# --- 4. the full effective config -------------------------------------------------------------------------


def test_rlops_config_prints_every_field_with_its_default_and_doc(capsys):
    from rlops.pipelines.cli import main

    assert main(["config", "bandit"]) == 0
    text = capsys.readouterr().out
    config = yaml.safe_load(text)  # valid YAML: the docs are comments
    gate = config["evaluator"]
    assert gate["use_lower_bound"] is True and gate["min_ess"] == 30.0 and gate["min_eval_records"] == 100
    assert config["experience_gen"]["splits"]["splits"][1] == {"name": "eval", "hash_buckets": 1}
    doc = next(line for line in text.splitlines() if line.strip().startswith("use_lower_bound:"))
    assert "# true: the lower end of the improvement's confidence interval" in doc
    assert main(["config", "bandit", "--given"]) == 0
    assert "use_lower_bound" not in json.loads(capsys.readouterr().out).get("evaluator", {})


def test_the_standing_line_says_what_would_clear_the_gate():
    from rlops.pipelines.local import loop_standing

    metrics = {
        "baseline": "served_baseline",
        "rule": {"measure": "dr", "use_lower_bound": True, "min_improvement": 0.0, "tolerated_regression": 0.0077},
        "candidate": {"dr": {"value": 0.2031, "lower": 0.15, "upper": 0.25}},
        "baseline_estimates": {"dr": {"value": 0.1535, "lower": 0.14, "upper": 0.16}},
        "improvement": {"dr": {"value": 0.0496, "lower": -0.0127, "upper": 0.11}},
        "served_policy": {"candidate_epsilon": 0.1, "trained_epsilon": 0.05},
    }
    assert loop_standing(metrics) == (
        "dr: candidate 0.2031 vs served_baseline 0.1535, improvement +0.0496 (lower bound -0.0127); clears with "
        "point estimate > 0 and lower bound > -0.0077; serves epsilon 0.1 (certified above the trained one)"
    )
    metrics["rule"]["min_improvement"] = -1.0  # a looser min_improvement is the bound
    assert "lower bound > -1.0000" in loop_standing(metrics)
    assert loop_standing({"rule": {"measure": "dr"}}) is None  # no trusted comparison: no line
