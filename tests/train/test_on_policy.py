"""On-policy PPO through the Learner: checkpoints, resume after a restart, summaries."""
import os
from dataclasses import replace

import numpy as np

from rlops.train.on_policy import PPOConfig, train_ppo


def small(iterations: int) -> PPOConfig:
    return PPOConfig(num_envs=4, num_steps=16, total_env_steps=iterations * 64, num_epochs=2, eval_episodes=0,
                     log_every=0, target_return=None)


def test_learner_path_checkpoints_and_resumes(tmp_path):
    root, summaries = str(tmp_path / "root"), str(tmp_path / "tb")
    # One train step per gradient step: 2 epochs per iteration, a checkpoint every 2 iterations.
    first = train_ppo(small(4), root_dir=root, summary_dir=summaries, checkpoint_interval=4)
    assert int(first.agent.train_step_counter.numpy()) == 4 * 2 and len(first.losses) == 4
    # A restarted job (fresh agent, same root_dir) resumes at step 4 and only runs what is left.
    resumed = train_ppo(small(6), root_dir=root, summary_dir=summaries, checkpoint_interval=4)
    assert int(resumed.agent.train_step_counter.numpy()) == 6 * 2 and len(resumed.losses) == 2
    assert resumed.env_steps == 6 * 64
    restored = [v.numpy() for v in resumed.agent.trainable_weights]
    assert not all(np.allclose(a, b) for a, b in zip(restored, [v.numpy() for v in
                                                               train_ppo(small(1)).agent.trainable_weights]))
    assert any(name.startswith("events") for name in os.listdir(summaries))


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
