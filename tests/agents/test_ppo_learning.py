"""PPO actually learns (fixed seeds): CartPole-v1 solved, Pendulum-v1 clearly improved."""

import numpy as np
import pytest

from rlops.train.on_policy import PPOConfig, train_ppo

pytestmark = pytest.mark.slow


def test_ppo_solves_cartpole_within_100k_env_steps():
    # The benchmark configuration (benchmarks/ppo_cartpole.py).
    result = train_ppo(PPOConfig(env_id="CartPole-v1", total_env_steps=100_000, seed=0, log_every=0))
    assert result.env_steps <= 100_000
    assert len(result.eval_returns) == 20
    assert result.eval_mean_return >= 475, result.summary()


def test_ppo_continuous_actions_learn_pendulum():
    """Pendulum-v1 (continuous torque): a random policy scores about -1,200 per episode; after
    100k env steps the greedy policy should be far better (observed here: about -250)."""
    config = PPOConfig(
        env_id="Pendulum-v1",
        num_envs=8,
        num_steps=128,
        total_env_steps=100_000,
        num_epochs=10,
        minibatch_size=256,
        learning_rate=1e-3,
        discount_factor=0.9,
        lambda_value=0.95,
        normalize_observations=True,
        normalize_rewards=True,
        gradient_clipping=0.5,
        initial_log_std=-0.5,
        target_return=None,
        log_every=0,
        seed=0,
    )
    result = train_ppo(config)
    first = np.mean(result.episode_returns[:16])
    assert first < -900, first  # started out bad
    assert result.eval_mean_return > -500, result.summary()
    assert result.eval_mean_return - first > 600
