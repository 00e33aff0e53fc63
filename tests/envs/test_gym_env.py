"""Vectorized Gymnasium collection: step types, terminated vs truncated, NEXT_STEP autoreset."""

import gymnasium as gym
import numpy as np
import pytest

from rlops.agents.policies import RandomPolicy
from rlops.agents.trajectories import StepType
from rlops.envs.gym_env import GymVectorEnv, VectorDriver, evaluate_policy


class CountEnv(gym.Env):
    """obs = [t]; reward = t+1 on the step from t; terminates on reaching `terminate_at`."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, terminate_at=None):
        self.terminate_at = terminate_at

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        reward = float(self.t + 1)
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return np.array([self.t], np.float32), reward, terminated, False, {}


gym.register("rlops-test/Terminating-v0", entry_point=lambda: CountEnv(terminate_at=3))
gym.register("rlops-test/Truncated-v0", entry_point=lambda: CountEnv(), max_episode_steps=4)


def collect(env_id, steps):
    env = GymVectorEnv(env_id, num_envs=2, seed=0)
    policy = RandomPolicy(env.time_step_spec, env.action_spec)
    driver = VectorDriver(env, policy, steps)
    return driver, driver.run()


def test_terminated_episode_rows():
    driver, traj = collect("rlops-test/Terminating-v0", 8)
    assert traj.observation.shape == (2, 9, 1)
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    np.testing.assert_array_equal(traj.step_type[0], [F, M, M, L, F, M, M, L, F])
    np.testing.assert_array_equal(traj.next_step_type[0, :8], [M, M, L, F, M, M, L, F])
    np.testing.assert_array_equal(traj.observation[0, :5, 0], [0, 1, 2, 3, 0])  # LAST row sees the final obs
    np.testing.assert_array_equal(traj.reward[0, :4], [1, 2, 3, 0])  # reset step pays nothing
    np.testing.assert_array_equal(traj.discount[0, :4], [1, 1, 0, 1])  # no bootstrap past termination
    assert driver.stats.returns[:2] == [6.0, 6.0] and driver.stats.lengths[:2] == [3, 3]


def test_truncated_episode_keeps_discount_for_bootstrapping():
    _, traj = collect("rlops-test/Truncated-v0", 6)
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    np.testing.assert_array_equal(traj.step_type[1, :6], [F, M, M, M, L, F])
    np.testing.assert_array_equal(traj.discount[1, :6], [1, 1, 1, 1, 1, 1])  # truncation bootstraps
    np.testing.assert_array_equal(traj.observation[1, 4, 0], 4)  # V(final obs) is available


def test_collection_continues_across_runs_and_counts_steps():
    env = GymVectorEnv("rlops-test/Terminating-v0", num_envs=3, seed=0)
    driver = VectorDriver(env, RandomPolicy(env.time_step_spec, env.action_spec), 5)
    first, second = driver.run(), driver.run()
    np.testing.assert_array_equal(first.step_type[:, -1], second.step_type[:, 0])  # bootstrap row = next start
    np.testing.assert_array_equal(first.observation[:, -1], second.observation[:, 0])
    assert driver.total_env_steps == 30


def test_cartpole_specs_and_evaluation_episode_count():
    env = GymVectorEnv("CartPole-v1", num_envs=4, seed=1)
    assert env.observation_spec.shape == (4,) and env.action_spec.maximum == 1
    returns = evaluate_policy("CartPole-v1", RandomPolicy(env.time_step_spec, env.action_spec), 7, num_envs=3)
    assert returns.shape == (7,) and np.all(returns >= 8) and np.all(returns < 200)


def test_continuous_actions_are_clipped_to_the_space():
    env = GymVectorEnv("Pendulum-v1", num_envs=2, seed=0)
    assert env.action_spec.dtype.name == "float32" and float(env.action_spec.maximum[0]) == pytest.approx(2.0)
    reward, discount, _ = env.step(np.array([[100.0], [-100.0]], np.float32))  # would explode unclipped
    assert np.all(np.isfinite(reward)) and np.all(reward > -20)


def test_continuous_ppo_trains_on_collected_batches_without_nan():
    """The bootstrap row never acts, yet the learner evaluates log-probabilities on every row:
    it must hold a valid distribution (it was a Normal with scale 0: NaN loss on step one)."""
    from rlops.train.on_policy import PPOConfig, build_ppo_agent

    config = PPOConfig(
        env_id="Pendulum-v1",
        num_envs=2,
        num_steps=16,
        num_epochs=1,
        normalize_observations=True,
        normalize_rewards=True,
        total_env_steps=32,
    )
    env = GymVectorEnv(config.env_id, config.num_envs, seed=0)
    agent = build_ppo_agent(config, env)
    traj = VectorDriver(env, agent.collect_policy, config.num_steps).run()
    assert np.all(traj.policy_info["dist_params"]["scale"] > 0)
    np.testing.assert_array_equal(traj.action[:, -1], traj.action[:, -2])
    before = [v.numpy().copy() for v in agent.actor_net.trainable_variables]
    loss = agent.train(traj)
    assert np.isfinite(float(loss.loss))
    after = agent.actor_net.trainable_variables
    assert all(np.all(np.isfinite(v.numpy())) for v in after)
    assert any(not np.allclose(b, a.numpy()) for b, a in zip(before, after))  # it did learn something


def test_return_scaler_divides_rewards_by_the_std_of_discounted_returns():
    """Stored rewards = raw / sqrt(var + 1e-8) of every acting env's running discounted return
    (reset after each episode end), clipped at 10; episode returns stay raw. Reference: a plain
    per-step loop over the raw rewards with Gymnasium's own RunningMeanStd."""
    from gymnasium.wrappers.utils import RunningMeanStd

    from rlops.envs.gym_env import ReturnScaler

    gamma = 0.9
    raw_driver, raw = collect("rlops-test/Terminating-v0", 12)
    env = GymVectorEnv("rlops-test/Terminating-v0", num_envs=2, seed=0)
    driver = VectorDriver(
        env, RandomPolicy(env.time_step_spec, env.action_spec), 12, reward_scaler=ReturnScaler(2, gamma)
    )
    scaled = driver.run()
    rms, ret, expected = RunningMeanStd(shape=()), np.zeros(2), np.zeros((2, 12))
    for t in range(12):
        acting = raw.step_type[:, t] != StepType.LAST
        ret = np.where(acting, ret * gamma + raw.reward[:, t], ret)
        if acting.any():
            rms.update(ret[acting])
        expected[:, t] = np.clip(raw.reward[:, t] / np.sqrt(rms.var + 1e-8), -10, 10)
        ret[raw.next_step_type[:, t] == StepType.LAST] = 0.0
    np.testing.assert_allclose(scaled.reward[:, :12], expected, rtol=1e-5)
    assert not np.allclose(scaled.reward[:, :12], raw.reward[:, :12])  # the scaling did something
    assert driver.stats.returns == raw_driver.stats.returns == [6.0] * len(raw_driver.stats.returns)
