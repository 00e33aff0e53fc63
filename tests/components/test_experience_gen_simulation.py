"""Simulated logs (bandit environments, Gymnasium) go through the same path as real logs."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import StepType
from rlops.components.common import records
from rlops.components.experience_gen import ExperienceGenConfig, SimulationSource, run_experience_gen


def _examples(uri: str) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(os.path.join(uri, "Split-*", "*.gz")))
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(10_000)
    parsed = [tf.io.parse_example(b, records.bandit_feature_spec(64)) for b in ds]
    return {k: np.concatenate([p[k].numpy() for p in parsed]) for k in parsed[0]}


def test_uniform_random_digits_bandit_is_logged_and_reproducible(tmp_path):
    config = ExperienceGenConfig(
        source=SimulationSource(env="digits", num_records=300, num_shards=2, batch_size=64, seed=3),
        max_bad_record_ratio=0.0,
    )
    runs = []
    for name in ("a", "b"):
        result = run_experience_gen(config, str(tmp_path / name / "ex"), str(tmp_path / name / "q"))
        assert (result.records_read, result.records_written) == (300, 300)
        runs.append(_examples(str(tmp_path / name / "ex")))
    a, b = runs
    np.testing.assert_allclose(a["propensity"], 0.1, rtol=1e-6)  # 10 arms, uniform
    assert set(a["reward"].tolist()) <= {0.0, 1.0} and a["context"].min() >= 0 and a["context"].max() <= 1
    assert len(set(a["action"].tolist())) > 5
    order_a, order_b = np.lexsort(a["context"].T), np.lexsort(b["context"].T)
    for k in a:  # same seed, same records (the order within a split is not a contract)
        np.testing.assert_array_equal(a[k][order_a], b[k][order_b])


def _constant_policy(action: int):
    """A stand-in policy that always picks `action`, exported as the Pusher exports policies."""
    from rlops.agents import specs
    from rlops.agents.policies import Policy
    from rlops.agents.trajectories import PolicyStep, time_step_spec

    class Constant(Policy):
        def _action(self, time_step, seed):
            return PolicyStep(tf.fill(tf.shape(time_step.step_type), action), (), ())

    return Constant(
        time_step_spec(tf.TensorSpec([64], tf.float32, "observation")),
        specs.BoundedTensorSpec((), tf.int32, 0, 9, name="action"),
    )


@pytest.mark.slow  # trains and saves a policy, then simulates logs around it (~25 s)
def test_epsilon_greedy_around_a_saved_policy_logs_its_propensities(tmp_path):
    path = str(tmp_path / "policy")
    from rlops.train.policy_saver import PolicySaver

    PolicySaver(_constant_policy(3)).save(path)
    config = ExperienceGenConfig(
        source=SimulationSource(env="digits", num_records=400, policy="epsilon_greedy", policy_path=path, epsilon=0.2),
        max_bad_record_ratio=0.0,
    )
    run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    got = _examples(str(tmp_path / "ex"))
    greedy = got["action"] == 3
    np.testing.assert_allclose(got["propensity"][greedy], 0.8 + 0.2 / 10, rtol=1e-5)
    np.testing.assert_allclose(got["propensity"][~greedy], 0.2 / 10, rtol=1e-5)
    assert 0.7 < greedy.mean() < 0.95


def test_gym_cartpole_trajectories(tmp_path):
    config = ExperienceGenConfig(
        record_kind="trajectory",
        max_bad_record_ratio=0.0,
        source=SimulationSource(env="gym:CartPole-v1", num_episodes=6, num_shards=2, seed=1),
    )
    result = run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert sum(result.outputs_per_split.values()) == 6
    obs_spec = tf.TensorSpec([4], tf.float32)
    action_spec = specs.BoundedTensorSpec((), tf.int32, 0, 1)
    info_spec = {"log_probability": tf.TensorSpec((), tf.float32)}
    episodes = list(
        records.episode_dataset(os.path.join(str(tmp_path / "ex"), "Split-*", "*.gz"), obs_spec, action_spec, info_spec)
    )
    assert len(episodes) == 6 and sum(int(e.reward.shape[0]) for e in episodes) == result.records_written
    for e in episodes:
        n = int(e.reward.shape[0])
        specs.check_nest_matches_spec(e.observation, obs_spec, "observation", num_outer_dims=1)
        np.testing.assert_allclose(e.policy_info["log_probability"].numpy(), np.log(0.5), rtol=1e-6)
        assert e.step_type.numpy()[0] == StepType.FIRST and e.next_step_type.numpy()[-1] == StepType.LAST
        assert e.reward.numpy().tolist() == [1.0] * n
        assert e.discount.numpy()[-1] == (0.0 if n < 500 else 1.0)  # pole fell: terminal; 500 steps: cut off
