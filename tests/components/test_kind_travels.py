"""The decision kind travels (DESIGN.md, "Decision kinds"): ExperienceGen writes it beside the
splits, the Trainer into the export, and each component reads it from there to pick its table's
row. Every component's table has a row for every kind a pipeline trains, so a new kind cannot be
half added."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from rlops.components.common.decision_kinds import (
    KINDS,
    PIPELINES,
    RECORD_KIND_FILE,
    kind_named,
    read_record_kind,
    write_record_kind,
)


def test_the_kind_is_read_back_from_beside_the_splits(tmp_path):
    uri = str(tmp_path / "examples")
    assert read_record_kind(uri).name == "bandit"  # written without it: read as bandit records
    write_record_kind(uri, "slate")
    assert json.loads((tmp_path / "examples" / RECORD_KIND_FILE).read_text()) == {"record_kind": "slate"}
    assert read_record_kind(uri).name == "slate"
    (tmp_path / "examples" / RECORD_KIND_FILE).write_text(json.dumps({"record_kind": "slates"}))
    with pytest.raises(ValueError, match=r"record_kind.json: record_kind must be one of .*did you mean 'slate'"):
        read_record_kind(uri)
    with pytest.raises(ValueError, match="record_kind must be one of"):
        write_record_kind(uri, "pages")


def test_both_vocabularies_name_one_kind():
    assert {p: kind_named(p, "x").name for p in PIPELINES} == {
        "bandit": "bandit",
        "ppo": "trajectory",
        "ranking": "slate",
    }
    assert all(kind_named(k, "x").name == k for k in KINDS)
    with pytest.raises(ValueError, match=r"evaluator.kind: unknown kind 'rankng'.*did you mean 'ranking'"):
        kind_named("rankng", "evaluator.kind")


def test_every_component_table_has_a_row_for_every_kind():
    from rlops.components.evaluator.kinds import EVALUATION_PATHS
    from rlops.components.experience_gen import kinds as experience_gen_kinds
    from rlops.components.experience_gen.config import KIND_CONFIGS
    from rlops.components.pusher.core import PUSH_KINDS
    from rlops.components.trainer.core import TRAINING_PATHS
    from rlops.components.trainer.kinds import KIND_FACTS
    from rlops.pipelines.config import PIPELINE_KINDS
    from rlops.train.litert import CONVERSIONS

    for name, table in {
        "ExperienceGen kinds.KINDS": experience_gen_kinds.KINDS,
        "ExperienceGen config KIND_CONFIGS": KIND_CONFIGS,
        "Trainer TRAINING_PATHS": TRAINING_PATHS,
        "Trainer KIND_FACTS": KIND_FACTS,
        "Evaluator EVALUATION_PATHS": EVALUATION_PATHS,
        "Pusher PUSH_KINDS": PUSH_KINDS,
        "LiteRT CONVERSIONS": CONVERSIONS,
    }.items():
        assert sorted(table) == sorted(KINDS), f"{name} lacks a row for {sorted(set(KINDS) - set(table))}"
    assert sorted(PIPELINE_KINDS) == sorted(PIPELINES)
    assert {row.kind.name for row in PIPELINE_KINDS.values()} == set(KINDS)


def test_the_evaluator_config_is_its_kinds_class_in_either_vocabulary():
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.evaluator.kinds import evaluator_config_from_dict, evaluator_config_from_json
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig

    for given, cls, kind in [
        ({}, EvaluatorConfig, "bandit"),
        ({"kind": "ranking"}, SlateEvaluatorConfig, "slate"),
        ({"kind": "slate"}, SlateEvaluatorConfig, "slate"),
        ({"kind": "ppo", "env_id": "CartPole-v1"}, EvaluatorConfig, "trajectory"),
    ]:
        config = evaluator_config_from_dict(given)
        assert type(config) is cls and config.kind == kind
        assert evaluator_config_from_json(config.to_json()).to_json() == config.to_json()  # round trip
    with pytest.raises(ValueError, match="evaluator.env_id: PPO evaluation runs episodes"):
        evaluator_config_from_dict({"kind": "trajectory"})


def test_the_evaluator_refuses_examples_of_another_kind(tmp_path):
    """Slate Examples given to a bandit evaluation: one error naming both kinds, before any scoring."""
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.evaluator.core import run_evaluator

    uri = str(tmp_path / "examples")
    write_record_kind(uri, "slate")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"evaluator.kind: 'bandit', but the Examples at .* hold slate records"):
        run_evaluator(EvaluatorConfig(), str(tmp_path / "model"), str(out / "e"), str(out / "b"), uri, None, 4)
    with pytest.raises(ValueError, match="evaluator: bandit evaluation needs num_actions"):
        run_evaluator(EvaluatorConfig(), str(tmp_path / "model"), str(out / "e"), str(out / "b"), uri, None, None)


def test_rlops_evaluate_reads_the_kind_and_refuses_trajectories(tmp_path, capsys):
    from rlops.pipelines.cli import main

    uri = str(tmp_path / "examples")
    write_record_kind(uri, "trajectory")
    assert main(["evaluate", "--examples", uri, "--policy", "uniform", "--num-actions", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds trajectory records: they carry no logging probabilities" in err[0], err


def test_an_export_names_its_kind_in_specs_and_metadata(tmp_path):
    """PolicySaver(decision_kind=...) writes it into policy_specs.json and get_metadata (a constant:
    no checkpoint carries it); model_decision_kind reads it back."""
    from rlops.agents import specs
    from rlops.agents.policies import RandomPolicy
    from rlops.agents.trajectories import time_step_spec
    from rlops.train.policy_saver import PolicySaver, load_specs, model_decision_kind

    observation = specs.TensorSpec([3], tf.float32, "observation")
    action = specs.BoundedTensorSpec([], tf.int32, 0, 2, "action")
    policy = RandomPolicy(time_step_spec(observation), action)
    named, legacy = str(tmp_path / "named"), str(tmp_path / "legacy")
    PolicySaver(policy, decision_kind="bandit").save(named)
    PolicySaver(policy).save(legacy)
    assert load_specs(named)["decision_kind"] == "bandit" and model_decision_kind(named) == "bandit"
    assert "decision_kind" not in load_specs(legacy) and model_decision_kind(legacy) == "bandit"
    loaded = tf.saved_model.load(named)
    assert loaded.signatures["get_metadata"]()["decision_kind"].numpy() == b"bandit"
    assert load_specs(named)["metadata"] == []  # a constant of the graph, not a checkpointed variable
