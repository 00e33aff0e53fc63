"""On-policy PPO through the Learner: checkpoints, resume after a restart, summaries."""

import os
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

from rlops.envs.gym_env import GymVectorEnv
from rlops.train.on_policy import PPOConfig, build_ppo_agent, train_ppo


class PickOneEnv(gym.Env):
    """One-step episodes, actions Discrete(3, start=-1) (ids -1, 0, 1): action 1 pays 1. Any other
    id is an error, so an action handed over without its offset fails the run."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=-1)
    taken: list = []

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if int(action) not in (-1, 0, 1):
            raise ValueError(f"action {action} is not an id of Discrete(3, start=-1)")
        PickOneEnv.taken.append(int(action))
        return np.zeros(2, np.float32), float(action == 1), True, False, {}


gym.register("rlops-test/PickOne-v0", entry_point=PickOneEnv)


def small(iterations: int) -> PPOConfig:
    return PPOConfig(
        num_envs=4,
        num_steps=16,
        total_env_steps=iterations * 64,
        num_epochs=2,
        eval_episodes=0,
        log_every=0,
        target_return=None,
    )


def test_learner_path_checkpoints_and_resumes(tmp_path):
    root, summaries = str(tmp_path / "root"), str(tmp_path / "tb")
    # One train step per gradient step: 2 epochs per iteration, a checkpoint every 2 iterations.
    first = train_ppo(small(4), root_dir=root, summary_dir=summaries, checkpoint_interval=4)
    assert int(first.agent.train_step_counter.numpy()) == 4 * 2 and len(first.losses) == 4
    # A restarted job (fresh agent, same root_dir) resumes at step 4 and only runs what is left.
    resumed = train_ppo(small(6), root_dir=root, summary_dir=summaries, checkpoint_interval=4)
    assert int(resumed.agent.train_step_counter.numpy()) == 6 * 2 and len(resumed.losses) == 2
    assert resumed.env_steps == 6 * 64
    # The resumed job's weights are not those a fresh job starts from.
    env = GymVectorEnv(small(1).env_id, 4)
    fresh = [v.numpy() for v in build_ppo_agent(small(1), env).trainable_weights]
    env.close()
    restored = [v.numpy() for v in resumed.agent.trainable_weights]
    assert not all(np.allclose(a, b) for a, b in zip(restored, fresh))
    assert any(name.startswith("events") for name in os.listdir(summaries))


@pytest.mark.slow  # two PPO trainings compared step by step (~30 s)
def test_direct_and_learner_paths_train_the_same(tmp_path):
    direct = train_ppo(small(3))
    via_learner = train_ppo(small(3), root_dir=str(tmp_path))
    np.testing.assert_allclose(direct.losses, via_learner.losses, rtol=1e-4, atol=1e-5)


def test_resumed_job_keeps_the_reward_scale(tmp_path):
    """scale_rewards_by_return's running statistics are collection state: a restarted job must
    continue them, not scale its first rewards by a fresh variance of 1 (every value target
    would shift)."""
    root = str(tmp_path / "root")
    config = lambda n: replace(small(n), scale_rewards_by_return=True)  # noqa: E731
    first = train_ppo(config(4), root_dir=root, checkpoint_interval=4)
    count, mean, var = first.reward_scaler.statistics()
    assert count > 4 * 64 * 0.9 and var != 1.0  # every acting env step counted
    # Nothing left to run: the restored statistics are exactly the saved ones.
    same = train_ppo(config(4), root_dir=root, checkpoint_interval=4)
    assert len(same.losses) == 0
    assert same.reward_scaler.statistics() == (count, mean, var)
    # Two more iterations continue the count from there.
    more = train_ppo(config(6), root_dir=root, checkpoint_interval=4)
    assert len(more.losses) == 2 and more.reward_scaler.statistics()[0] > count + 64 * 0.9


def test_turning_the_reward_scale_on_resumes_a_job_checkpointed_without_it(tmp_path, caplog):
    """A root_dir checkpointed without scale_rewards_by_return (or by a version that did not
    save it): the agent and step restore, the scale starts fresh with a warning; the checkpoint
    is not declared unreadable."""
    import logging

    root = str(tmp_path / "root")
    train_ppo(small(4), root_dir=root, checkpoint_interval=4)
    with caplog.at_level(logging.WARNING):
        resumed = train_ppo(replace(small(6), scale_rewards_by_return=True), root_dir=root, checkpoint_interval=4)
    assert len(resumed.losses) == 2 and int(resumed.agent.train_step_counter.numpy()) == 12
    assert "holds no reward_scaler" in caplog.text and "it starts from scratch" in caplog.text
    assert resumed.reward_scaler.statistics()[0] <= 2 * 64 + 1  # counted from this job's steps only


def test_ppo_acts_and_learns_in_a_discrete_space_that_starts_below_zero():
    """Gymnasium's Discrete(start=-1): the agent's action spec is [-1, 1], collection hands the
    env its own ids (all three explored), and PPO learns that id 1 pays."""
    PickOneEnv.taken.clear()
    config = PPOConfig(
        env_id="rlops-test/PickOne-v0",
        num_envs=4,
        num_steps=16,
        total_env_steps=40 * 64,
        num_epochs=4,
        learning_rate=1e-2,
        hidden_sizes=(16,),
        eval_episodes=10,
        log_every=0,
        target_return=None,
        vector_env="sync",
    )
    result = train_ppo(config)
    spec = result.agent.action_spec
    assert (int(spec.minimum), int(spec.maximum)) == (-1, 1)
    assert set(PickOneEnv.taken[:200]) == {-1, 0, 1}  # the untrained policy tries every id
    assert np.mean(result.episode_returns[-100:]) > 0.9 and result.eval_mean_return == 1.0
