"""Slate logs from the generator (exact propensities and exact truth) -> ExperienceGen -> the slate
estimators, as `rlops evaluate` runs them: the logging policy's estimates are its observed mean,
the uniform policy's match a numpy reference and hold the exact value in their intervals."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rlops.components.common.slates import read_slate_logs
from rlops.components.evaluator.slate_evaluation import (
    SlateOptions,
    evaluate_slates,
    evaluate_slates_on_logs,
    reward_to_go_table,
    slate_log,
    uniform_target,
)
from rlops.components.experience_gen import (
    ExperienceGenConfig,
    FileSource,
    SlateColumns,
    SpecConfig,
    Split,
    SplitConfig,
    run_experience_gen,
)
from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator
from rlops.heads.slate.probabilities import UniformWithoutReplacement

K, L, N = 6, 3, 3000


def write_item_rows(logs, path) -> None:
    """One CSV row per shown item, items by index, positions 1-based."""
    lines = ["slate_id,position,item,click,p,p_cascade"]
    for i in range(len(logs)):
        for slot in range(L):
            lines.append(
                f"s{logs.slate_id[i]},{slot + 1},{logs.slates[i, slot]},{logs.rewards[i, slot]},"
                f"{logs.propensity[i, slot]!r},{logs.propensity_cascade[i, slot]!r}"
            )
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Plackett-Luce-logged pages with cascade clicks, ingested (everything in the eval split)."""
    gen = SlateLogGenerator(SlateConfig(num_items=K, num_slots=L, click_model="cascade", seed=3))
    logs = gen.sample(N, seed=4)
    root = tmp_path_factory.mktemp("slates")
    write_item_rows(logs, root / "pages.csv")
    config = ExperienceGenConfig(
        record_kind="slate",
        source=FileSource(pattern=str(root / "pages.csv"), format="csv"),
        slate_columns=SlateColumns(item_id="item", reward="click", propensity="p", propensity_cascade="p_cascade"),
        slate_length=L,
        action_spec=SpecConfig.discrete(K),
        splits=SplitConfig(splits=(Split("eval", 1),)),
    )
    result = run_experience_gen(config, str(root / "examples"), str(root / "quarantine"))
    assert result.records_written == N * L and result.outputs_per_split == {"eval": N}
    truth = gen.true_value(UniformWithoutReplacement(), np.zeros_like(gen.relevance))
    return gen, logs, str(root / "examples"), truth


def test_the_logging_policy_is_its_own_observed_mean(world):
    _, logs, examples, _ = world
    result = evaluate_slates_on_logs(examples, "logging", options=SlateOptions(num_bootstrap=50))
    observed = logs.rewards.sum(1).mean()
    assert result["observed_mean_slate_reward"] == pytest.approx(observed, abs=1e-12)
    for name in ("sips", "iips", "rips", "snsips", "sniips", "snrips"):
        assert result["estimates"][name]["value"] == pytest.approx(observed, abs=1e-9), name
        assert result["estimates"][name]["ess"] == pytest.approx(N, rel=1e-6)  # propensities are stored as float32
    assert "cascade_dr" in result["estimates"] and result["estimates"]["cascade_dr"]["value"] is None
    json.dumps(result, allow_nan=False)  # strict JSON


def test_uniform_matches_numpy_and_its_intervals_hold_the_exact_value(world):
    _, logs, examples, truth = world
    read = read_slate_logs(examples)
    comparison, _ = evaluate_slates(read, "uniform", SlateOptions(num_bootstrap=200))
    order = np.argsort(read.slate_ids)
    ids = np.array([f"s{i}" for i in logs.slate_id])
    mine = np.argsort(ids)
    rewards = logs.rewards[mine].astype(float)
    assert np.array_equal(read.rewards[order], rewards)
    marginal_w = (1.0 / K) / logs.propensity[mine]
    prefix_w = np.cumprod(1.0 / (K - np.arange(L))) / logs.propensity_cascade[mine]
    assert comparison.candidate["iips"].value == pytest.approx(
        (marginal_w * rewards).sum(1).mean(), rel=1e-6
    )  # propensities are stored as float32
    assert comparison.candidate["rips"].value == pytest.approx(
        (prefix_w * rewards).sum(1).mean(), rel=1e-6
    )  # propensities are stored as float32
    assert comparison.candidate["sips"].value == pytest.approx((prefix_w[:, -1] * rewards.sum(1)).mean(), rel=1e-6)
    # cascade clicks: RIPS and Cascade-DR are unbiased, and their intervals hold the exact value
    for name in ("rips", "cascade_dr"):
        est = comparison.candidate[name]
        assert est.trusted and est.lower <= truth.value <= est.upper, (name, est, truth)
    assert truth.method == "enumeration"


def test_reward_to_go_table_is_fitted_backwards():
    slates = np.array([[0, 1], [1, 0], [0, 2]])
    log = slate_log_of(slates, rewards=np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    dist = np.full((3, 2, 3), 0.0)
    dist[:, 0] = 1 / 3
    dist[np.arange(3), 1] = [[0, 0.5, 0.5], [0.5, 0, 0.5], [0, 0.5, 0.5]]
    q = reward_to_go_table(log, dist, 3)
    # last slot: item 1 got 0 once, item 0 got 1 once, item 2 got 1 once; shrunk toward the mean 2/3
    np.testing.assert_allclose(q[1], [(1 + 2 / 3) / 2, (0 + 2 / 3) / 2, (1 + 2 / 3) / 2])
    following = (dist[:, 1] * q[1]).sum(1)
    target0 = np.array([1.0, 0.0, 0.0]) + following
    mean0 = target0.mean()
    expected_item0 = (target0[0] + target0[2] + mean0) / 3
    assert q[0, 0] == pytest.approx(expected_item0)


def slate_log_of(slates, rewards):
    from rlops.components.evaluator.slate_estimators import SlateLog

    return SlateLog(np.arange(len(slates), dtype=np.uint64), slates, rewards, np.full(slates.shape, 0.5))


def test_uniform_needs_more_items_than_slots(world):
    _, _, examples, _ = world
    read = read_slate_logs(examples)
    small = dataclasses.replace(read, num_items=2)
    with pytest.raises(ValueError, match="slate_length 3 is larger than the 2 items"):
        uniform_target(small, slate_log(small))


@pytest.mark.parametrize("engine", ["memory", "beam"])
def test_rlops_evaluate_on_slate_examples(world, tmp_path, capsys, engine):
    from rlops.pipelines.cli import main

    _, _, examples, truth = world
    out_json = tmp_path / "slates.json"
    argv = ["evaluate", "--examples", examples, "--policy", "uniform", "--num-bootstrap", "100"]
    assert main([*argv, "--engine", engine, "--json", str(out_json)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out_json.read_text())
    assert json.loads(lines[-1]) == result
    assert set(result["estimates"]) == {"sips", "iips", "rips", "snsips", "sniips", "snrips", "cascade_dr", "pi"}
    assert lines[0].split()[:3] == ["estimator", "value", "95%"]
    for name, est in result["estimates"].items():
        assert any(line.startswith(name + " ") for line in lines)
        if name != "pi":  # PI needs uniform logging; these logs are Plackett-Luce
            assert est["value"] is not None and est["lower"] <= est["value"] <= est["upper"], name
    assert result["estimates"]["pi"]["value"] is None and "skipped" in result["estimates"]["pi"]["reason"]
    assert result["estimates"]["rips"]["lower"] <= truth.value <= result["estimates"]["rips"]["upper"]
    # a name it does not evaluate is one line, exit 2
    assert main(["evaluate", "--examples", examples, "--policy", "greedy"]) == 2
    assert "--policy: slate logs are evaluated for uniform or logging" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [1, 2])
def test_the_beam_engine_reads_the_files_and_agrees_with_memory(world, workers):
    """Workers read and parse the records themselves; the numbers equal the in-memory engine's."""
    from rlops.components.evaluator.slate_evaluation import evaluate_slates_beam

    _, _, examples, _ = world
    options = SlateOptions(num_bootstrap=50)
    memory, _ = evaluate_slates(read_slate_logs(examples), "uniform", options)
    args = ("--direct_num_workers=2", "--direct_running_mode=multi_threading") if workers == 2 else ()
    beam, _ = evaluate_slates_beam(examples, "eval", "uniform", dataclasses.replace(options, beam_pipeline_args=args))
    assert beam.num_records == memory.num_records == N
    for name, est in memory.candidate.items():
        other = beam.candidate[name]
        for field in ("value", "lower", "upper"):
            a, b = getattr(est, field), getattr(other, field)
            assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, abs=1e-9), (name, field, a, b)


def test_marginal_only_logs_gate_on_sniips_and_say_so(world):
    """Public per-position logs carry no prefix propensities: the default gate (snrips) cannot run
    on them, so the Evaluator decides on sniips (per-position weights) and says why in one line,
    instead of skipping every estimate and never blessing."""
    from rlops.components.common.decision_kinds import SLATE
    from rlops.components.evaluator.kinds import EVALUATION_PATHS
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig
    from rlops.components.evaluator.slate_policy import gate_estimator

    _, _, examples, _ = world
    read = read_slate_logs(examples)
    marginal_only = dataclasses.replace(read, propensity_cascade=None)
    config = SlateEvaluatorConfig()  # estimator: snrips
    assert gate_estimator(config, read) == ("snrips", None)
    estimator, note = gate_estimator(config, marginal_only)
    assert estimator == "sniips" and "\n" not in note
    assert note.startswith("evaluator.estimator: snrips needs the logging policy's prefix propensities")
    assert gate_estimator(dataclasses.replace(config, estimator="rips"), marginal_only)[0] == "iips"
    assert gate_estimator(dataclasses.replace(config, estimator="iips"), marginal_only) == ("iips", None)
    comparison, _ = evaluate_slates(marginal_only, "uniform", SlateOptions(num_bootstrap=200))
    assert comparison.candidate["snrips"].reason.startswith("skipped: snrips needs log.propensity_cascade")
    assert comparison.candidate["sniips"].trusted  # what the gate now decides on
    assert EVALUATION_PATHS[SLATE].measure(config, {"gate_estimator": estimator}) == "sniips"


def test_the_evaluator_blesses_marginal_only_logs_on_sniips_and_its_reason_says_so(world, tmp_path, monkeypatch):
    """The whole gate on marginal-only pages: the metrics' decisive estimate is sniips' (trusted),
    and run_evaluator's blessing reason measures the improvement in sniips and carries the note."""
    from types import SimpleNamespace

    from rlops.components.evaluator import core, slate_policy
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig
    from rlops.components.evaluator.slate_estimators import compare_slates
    from rlops.components.evaluator.slate_evaluation import logging_target

    _, _, examples, _ = world
    logs = dataclasses.replace(read_slate_logs(examples), propensity_cascade=None)
    logged = slate_log(logs)
    config = SlateEvaluatorConfig(num_bootstrap=100)

    def compare(candidate, baseline):
        return compare_slates(logged, candidate, baseline, num_bootstrap=100, confidence=0.95, seed=0)

    run = slate_policy.CandidateRun(
        compare(uniform_target(logs, logged), logging_target(logs)),
        compare(uniform_target(logs, logged), None),
        "logging_policy",
        None,
        len(logs),
    )
    metrics = slate_policy.slate_metrics(config, run, SimpleNamespace(description={"kind": "uniform"}), logs)
    assert metrics["gate_estimator"] == "sniips" and metrics["trust"]["trusted"], metrics["trust"]
    assert metrics["improvement"]["snrips"]["value"] is None  # skipped: no prefix propensities

    def evaluate(config, examples_uri, model_uri, baseline_model_uri):
        return metrics, run.main.difference["sniips"]

    monkeypatch.setattr(slate_policy, "evaluate_slate_candidate", evaluate)  # the slate row's path
    result = core.run_evaluator(
        config, str(tmp_path / "model"), str(tmp_path / "evaluation"), str(tmp_path / "blessing"), examples
    )
    assert "improvement in sniips over logging_policy" in result.reason
    assert "snrips needs the logging policy's prefix propensities" in result.reason
