"""Collection backends (sync / async subprocesses / EnvPool) give the same boundary rows.

sync and async must agree exactly (same seeds, same code in different processes). EnvPool has
its own RNG, so it is checked against CartPole's physics instead: every acting row's next
observation is what Gymnasium's CartPole computes from (observation, action), and every
boundary row follows TF-Agents' convention (LAST sees the final observation, the next row is
FIRST with reward 0, termination stops bootstrapping, truncation does not).
"""

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlops.agents.trajectories import StepType
from rlops.envs.gym_env import GymVectorEnv, VectorDriver, make_vector_env

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def _has_envpool() -> bool:
    try:
        from rlops.envs.envpool_env import import_envpool

        import_envpool()
        return True
    except ImportError:
        return False


BACKENDS = [
    "sync",
    "async",
    pytest.param(
        "envpool", marks=pytest.mark.skipif(not _has_envpool(), reason="envpool not installed (extra 'envpool')")
    ),
]


class SeededRandomPolicy:
    """Uniform actions from a numpy RNG: the driver's numpy path, identical across backends."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def numpy_sampler(self, seed=None):
        rng = np.random.default_rng(seed)

        def sample(observation):
            action = rng.integers(0, self.num_actions, observation.shape[0]).astype(np.int64)
            return action, {"log_probability": np.full(observation.shape[0], -np.log(self.num_actions), np.float32)}

        return sample

    def action(self, time_step):  # VectorDriver wraps it; never called on the numpy path
        raise AssertionError("numpy path expected")


def collect(backend, steps=60, runs=2, num_envs=3, **kwargs):
    env = GymVectorEnv("CartPole-v1", num_envs, seed=7, vector_env=backend, **kwargs)
    driver = VectorDriver(env, SeededRandomPolicy(2), steps, seed=3)
    trajs = [driver.run() for _ in range(runs)]
    env.close()
    return driver, trajs


def test_sync_and_async_give_identical_trajectories():
    (d_sync, sync), (d_async, async_) = collect("sync"), collect("async")
    assert d_async.env is not None
    for a, b in zip(sync, async_):
        for field in ("step_type", "observation", "action", "reward", "discount", "next_step_type"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert (sync[0].step_type == L).sum() >= 6  # random CartPole episodes end often: boundaries are covered
    assert d_sync.stats.returns == d_async.stats.returns and len(d_sync.stats.returns) >= 6


def _cartpole_next(observation, action):
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    out = []
    for o, a in zip(observation, action):
        env.state = o.astype(np.float64)
        out.append(env.step(int(a))[0])
    return np.asarray(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_boundary_rows_follow_cartpole_physics(backend):
    driver, (traj, _) = collect(backend, steps=80, runs=2)
    T = 80
    acting = traj.step_type[:, :T] != L
    moved = acting & (traj.next_step_type[:, :T] != F)
    b, t = np.nonzero(moved)
    np.testing.assert_allclose(
        traj.observation[b, t + 1], _cartpole_next(traj.observation[b, t], traj.action[b, t]), atol=1e-5
    )  # the stored action is the one that acted
    np.testing.assert_array_equal(traj.reward[:, :T][acting], 1.0)
    # LAST rows: the final observation (pole past 12 degrees or cart out), nothing paid, next row FIRST
    last_b, last_t = np.nonzero(traj.step_type[:, :T] == L)
    assert len(last_b) >= 6
    fallen = (np.abs(traj.observation[last_b, last_t, 2]) > 0.2094) | (
        np.abs(traj.observation[last_b, last_t, 0]) > 2.4
    )
    assert fallen.all()
    np.testing.assert_array_equal(traj.reward[last_b, last_t], 0.0)
    np.testing.assert_array_equal(traj.step_type[last_b, last_t + 1], F)
    assert np.all(np.abs(traj.observation[last_b, last_t + 1]) <= 0.05)  # a fresh episode's start state
    # the row that ended the episode was a termination: no bootstrap past it
    np.testing.assert_array_equal(traj.discount[last_b, last_t - 1], 0.0)
    assert np.all(traj.discount[:, :T][traj.next_step_type[:, :T] != L] == 1.0)
    lengths = np.asarray(driver.stats.lengths)
    assert lengths.min() >= 8 and np.all(np.asarray(driver.stats.returns) == lengths)


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_keeps_discount(backend):
    _, (traj,) = collect(backend, steps=12, runs=1, max_episode_steps=5)
    np.testing.assert_array_equal(traj.step_type[:, :13], [[F, M, M, M, M, L] * 2 + [F]] * 3)
    np.testing.assert_array_equal(traj.discount[:, :12], 1.0)  # truncated, not terminated: bootstrap


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="vector_env='threads'.*auto, sync, async, envpool"):
        make_vector_env("CartPole-v1", 2, vector_env="threads")


def test_missing_envpool_names_the_option(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool -> ImportError
    with pytest.raises(ImportError, match="vector_env='envpool'.*not installed.*'async'"):
        GymVectorEnv("CartPole-v1", 2, vector_env="envpool")


@pytest.mark.skipif(not _has_envpool(), reason="envpool not installed (extra 'envpool')")
def test_envpool_refuses_ids_it_does_not_have():
    with pytest.raises(ValueError, match="no env 'HalfCheetah-v5'.*HalfCheetah-v4"):
        GymVectorEnv("HalfCheetah-v5", 2, vector_env="envpool")


def test_ppo_config_selects_the_backend():
    from rlops.train.on_policy import PPOConfig, train_ppo

    with pytest.raises(ValueError, match="vector_env='threads'"):
        train_ppo(PPOConfig(vector_env="threads", total_env_steps=64, num_steps=8, eval_episodes=0))
