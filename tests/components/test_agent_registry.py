"""The agent registry is the one list of agents: every registered agent builds from its default
config, its registered facts agree with the agent it builds, and the config loader's and the
CLI's answers come from it (an unknown name: exit 2, one line, the closest names)."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common.decision_kinds import BANDIT, KINDS, SLATE, TRAJECTORY
from rlops.components.trainer.agents.base import BuildInputs
from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
from rlops.components.trainer.agents.registry import AGENTS, agent_names, agent_spec
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.kinds import KIND_FACTS

K, D = 3, 4  # actions, context width


def _is_bandit(name: str) -> bool:
    return agent_spec(name).kind == BANDIT


def _config(name: str) -> TrainerConfig:
    return TrainerConfig(agent=name, num_actions=K if _is_bandit(name) else None)


def _build(name: str, inputs: BuildInputs):
    spec = agent_spec(name)
    return spec.build(spec.options_from(_config(name)), inputs)


def _time_step(observation):
    from rlops.agents.trajectories import restart

    batch = tf.nest.flatten(observation)[0].shape[0]
    return restart(observation, batch)


def _act(agent, observation) -> np.ndarray:
    return serving_policy(agent).action(_time_step(observation)).action.numpy()


@pytest.mark.parametrize("name", sorted(n for n in AGENTS if _is_bandit(n)))
def test_every_bandit_agent_builds_from_its_default_config_and_acts(name):
    spec = agent_spec(name)
    step = tf.Variable(0, dtype=tf.int64)
    agent = make_bandit_agent(_config(name), D, step)
    context = tf.random.stateless_normal((5, D), seed=(1, 2))
    actions = _act(agent, context)
    assert actions.shape == (5,) and set(actions.tolist()) <= set(range(K))
    # The registry's facts are the agent's: a linear agent's step counts examples (closed-form sums).
    assert spec.linear == bool(getattr(agent, "train_step_counts_examples", False))
    assert TrainerConfig(agent=name, num_actions=K).train_batch_size == spec.batch_size


@pytest.mark.parametrize("name", sorted(n for n, s in AGENTS.items() if _is_bandit(n) and s.per_arm))
def test_every_per_arm_agent_scores_the_candidates_it_is_given(name):
    arms, arm_dim = 4, 2
    agent = make_bandit_agent(_config(name), 0, tf.Variable(0, dtype=tf.int64), per_arm=(D, arms, arm_dim))
    observation = {
        "global": tf.random.stateless_normal((6, D), seed=(3, 4)),
        "per_arm": tf.random.stateless_normal((6, arms, arm_dim), seed=(5, 6)),
        "num_actions": tf.constant([1, 2, 3, 4, 4, 2], tf.int32),
    }
    actions = _act(agent, observation)
    assert (actions < observation["num_actions"].numpy()).all()  # only the decision's candidates
    assert actions[0] == 0


def test_every_non_bandit_agent_builds_from_its_default_config_on_a_tiny_spec():
    from rlops.agents import specs
    from rlops.agents.trajectories import time_step_spec

    observation_spec = tf.TensorSpec((D,), tf.float32, "observation")
    action_spec = specs.BoundedTensorSpec((), tf.int64, 0, K - 1, name="action")
    inputs = BuildInputs(time_step_spec(observation_spec), action_spec, observation_spec)
    others = [n for n, s in AGENTS.items() if s.kind == TRAJECTORY]
    assert others, "the ppo pipeline has an agent"
    for name in others:
        agent = _build(name, inputs)
        actions = agent.policy.action(_time_step(tf.zeros((2, D)))).action.numpy()
        assert actions.shape == (2,) and set(actions.tolist()) <= set(range(K))


def test_every_ranking_agent_builds_from_its_default_config_and_serves_a_page():
    from rlops.agents.trajectories import restart
    from rlops.components.trainer.agents.ranking import ranking_specs

    items, slots = 5, 3
    ts_spec, action_spec = ranking_specs(D, items, slots, cascading=True)
    for name in [n for n, s in AGENTS.items() if s.kind == SLATE]:
        assert agent_spec(name).pipeline == "ranking"
        inputs = BuildInputs(ts_spec, action_spec, ts_spec.observation, per_arm=True)
        agent = _build(name, inputs)
        observation = {
            "global": tf.random.stateless_normal((4, D), seed=(1, 2)),
            "per_arm": tf.eye(items, batch_shape=[4]),
            "num_actions": tf.constant([5, 5, 4, 3], tf.int32),
        }
        pages = agent.collect_policy.action(restart(observation, 4)).action.numpy()
        assert pages.shape == (4, slots) and all(len(set(p)) == slots for p in pages.tolist())
        assert (pages < observation["num_actions"].numpy()[:, None]).all()  # only the candidates in use


def test_the_config_and_the_pipelines_take_their_names_from_the_registry():
    for kind in KINDS.values():
        assert agent_names(kind.pipeline) == [n for n, s in AGENTS.items() if s.kind == kind.name]
        assert kind.default_agent in agent_names(kind.pipeline)
    for name in AGENTS:
        assert _config(name).registered is agent_spec(name)
    with pytest.raises(ValueError, match=r"^trainer\.agent: unknown agent 'lin_tss'; closest: lin_ts"):
        TrainerConfig(agent="lin_tss", num_actions=K)


def test_rlops_config_with_a_misspelt_agent_exits_2_naming_the_closest(capsys):
    from rlops.pipelines.cli import main

    code = main(["config", "bandit", "--set", "trainer.agent=lin_ucbb"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "trainer.agent" in err[0] and "'lin_ucbb'" in err[0] and "closest: lin_ucb" in err[0]


def test_the_bandit_pipeline_refuses_a_ppo_agent_listing_the_bandit_agents(capsys):
    from rlops.pipelines.cli import main

    code = main(["config", "bandit", "--set", "trainer.agent=ppo"])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "is not a bandit agent" in line
    assert all(name in line for name in agent_names(KINDS[BANDIT].pipeline))


def test_the_trainer_has_a_row_for_every_decision_kind():
    assert set(KIND_FACTS) == set(KINDS)
    assert {spec.kind for spec in AGENTS.values()} <= set(KINDS)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_each_agent_s_options_default_as_the_trainer_section_does(name):
    """The options' own defaults are the trainer section's (TrainerConfig's defaults come from them)."""
    spec = agent_spec(name)
    config = _config(name)
    options = spec.options_from(config)
    assert isinstance(options, spec.options_class)
    given = (
        {"num_actions": config.num_actions} if "num_actions" in {f.name for f in dataclasses.fields(options)} else {}
    )
    assert options == dataclasses.replace(spec.options_class(), **given)  # type: ignore[call-arg]
    options.validate()


def test_a_key_only_another_agent_reads_is_refused_naming_the_agent():
    for key, value in (("forgetting_factor", 0.5), ("ppo_offline", {"batch_size": 8}), ("ranking", {"epsilon": 0.2})):
        with pytest.raises(ValueError, match=rf"^trainer\.{key}: .*'neural_epsilon_greedy'"):
            TrainerConfig(num_actions=K, **{key: value})
    with pytest.raises(ValueError, match=r"^trainer\.network: .*agent 'ppo' has none"):
        TrainerConfig(agent="ppo", network="dot_product")
