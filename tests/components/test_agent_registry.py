"""The agent registry is the one list of agents: every registered agent builds from its default
config, its registered facts agree with the agent it builds, and the config loader's and the
CLI's answers come from it (an unknown name: exit 2, one line, the closest names)."""

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.trainer.agents import (
    AGENTS,
    BANDIT,
    PPO,
    BuildInputs,
    agent_names,
    agent_spec,
    make_bandit_agent,
    serving_policy,
)
from rlops.components.trainer.config import TrainerConfig

K, D = 3, 4  # actions, context width


def _config(name: str) -> TrainerConfig:
    return TrainerConfig(agent=name, num_actions=K if agent_spec(name).is_bandit else None)


def _time_step(observation):
    from rlops.agents.trajectories import restart

    batch = tf.nest.flatten(observation)[0].shape[0]
    return restart(observation, batch)


def _act(agent, observation) -> np.ndarray:
    return serving_policy(agent).action(_time_step(observation)).action.numpy()


@pytest.mark.parametrize("name", sorted(n for n, s in AGENTS.items() if s.is_bandit))
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


@pytest.mark.parametrize("name", sorted(n for n, s in AGENTS.items() if s.is_bandit and s.per_arm))
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
    others = [n for n, s in AGENTS.items() if s.pipeline == PPO]
    assert others, "the ppo pipeline has an agent"
    for name in others:
        agent = agent_spec(name).build(_config(name), inputs)
        actions = agent.policy.action(_time_step(tf.zeros((2, D)))).action.numpy()
        assert actions.shape == (2,) and set(actions.tolist()) <= set(range(K))


def test_every_ranking_agent_builds_from_its_default_config_and_serves_a_page():
    from rlops.agents.trajectories import restart
    from rlops.components.trainer.agents import RANKING
    from rlops.components.trainer.agents.ranking import ranking_specs

    items, slots = 5, 3
    ts_spec, action_spec = ranking_specs(D, items, slots, cascading=True)
    for name in [n for n, s in AGENTS.items() if s.pipeline == RANKING]:
        assert agent_spec(name).decision_kind == "slate"
        inputs = BuildInputs(ts_spec, action_spec, ts_spec.observation, per_arm=True)
        agent = agent_spec(name).build(_config(name), inputs)
        observation = {
            "global": tf.random.stateless_normal((4, D), seed=(1, 2)),
            "per_arm": tf.eye(items, batch_shape=[4]),
            "num_actions": tf.constant([5, 5, 4, 3], tf.int32),
        }
        pages = agent.collect_policy.action(restart(observation, 4)).action.numpy()
        assert pages.shape == (4, slots) and all(len(set(p)) == slots for p in pages.tolist())
        assert (pages < observation["num_actions"].numpy()[:, None]).all()  # only the candidates in use


def test_the_config_and_the_pipelines_take_their_names_from_the_registry():
    assert agent_names(BANDIT) == [n for n, s in AGENTS.items() if s.pipeline == BANDIT]
    for name in AGENTS:
        assert _config(name).is_bandit == agent_spec(name).is_bandit
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
    assert all(name in line for name in agent_names(BANDIT))
