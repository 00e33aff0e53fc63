"""Round trip: what goes in, per source format and record kind, reads back through the agents'
specs unchanged (in a TFX-layout Examples directory with both splits)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import StepType
from rlops.components.common import records
from rlops.components.common.decision_kinds import read_record_kind
from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SpecConfig,
    TrajectoryColumns,
    run_experience_gen,
)

D, K, OBS = 6, 4, 3  # as in conftest.py

FORMATS = ["csv", "jsonl", "parquet", "tfrecord"]
OBS_SPEC = tf.TensorSpec([D], tf.float32, "context")
ACTION_SPEC = specs.BoundedTensorSpec((), tf.int32, 0, K - 1, name="action")


def _all_splits(examples_uri: str) -> str:
    return os.path.join(examples_uri, "Split-*", "*.gz")


@pytest.mark.parametrize("fmt", FORMATS)
def test_bandit_round_trip(tmp_path, eg_uris, eg_data, fmt):
    logs = eg_data.bandit_logs(60, seed=1)
    path = eg_data.write_logs(str(tmp_path / f"logs/part.{fmt}"), fmt, logs, "context", "x")
    cols = BanditColumns(context_prefix="x") if fmt == "csv" else BanditColumns(context=("context",))
    config = ExperienceGenConfig(
        source=FileSource(pattern=path, format=fmt),
        bandit_columns=cols,
        action_spec=SpecConfig.from_tensor_spec(ACTION_SPEC),
    )
    result = run_experience_gen(config, *eg_uris)

    assert (result.records_read, result.records_written, result.records_quarantined) == (60, 60, 0)
    assert sorted(os.listdir(eg_uris[0])) == [
        "Split-eval",
        "Split-train",
        "record_kind.json",
        "rlops_feature_schema.json",
        "schema.pbtxt",
    ]
    assert read_record_kind(eg_uris[0]).name == "bandit"
    assert all(f.endswith(".gz") for f in glob.glob(_all_splits(eg_uris[0])))
    feature_spec = records.bandit_feature_spec(D)
    parsed = [b for b in records.bandit_dataset(_all_splits(eg_uris[0]), feature_spec, batch_size=100)]
    traj = records.bandit_trajectory({k: tf.concat([p[k] for p in parsed], 0) for k in parsed[0]}, ACTION_SPEC)
    specs.check_nest_matches_spec(traj.observation, OBS_SPEC, "observation", num_outer_dims=2)
    specs.check_nest_matches_spec(traj.action, ACTION_SPEC, "action", num_outer_dims=2)

    got_order = np.lexsort(traj.observation.numpy()[:, 0].T[::-1])
    want_order = np.lexsort(logs["context"].T[::-1])
    np.testing.assert_array_equal(traj.observation.numpy()[got_order, 0], logs["context"][want_order])
    np.testing.assert_array_equal(traj.action.numpy()[got_order, 0], logs["action"][want_order])
    np.testing.assert_array_equal(traj.reward.numpy()[got_order, 0], logs["reward"][want_order])
    np.testing.assert_array_equal(traj.policy_info["propensity"].numpy()[got_order, 0], logs["propensity"][want_order])
    assert result.written_per_split["train"] + result.written_per_split["eval"] == 60


@pytest.mark.parametrize("fmt", FORMATS)
def test_trajectory_round_trip(tmp_path, eg_uris, eg_data, fmt):
    logs = eg_data.trajectory_logs(12, seed=2)
    perm = np.random.default_rng(3).permutation(len(logs["step"]))  # steps arrive out of order
    path = eg_data.write_logs(
        str(tmp_path / f"logs/steps.{fmt}"), fmt, {k: v[perm] for k, v in logs.items()}, "observation", "obs_"
    )
    cols = (
        TrajectoryColumns(observation_prefix="obs_", log_probability="log_probability")
        if fmt == "csv"
        else TrajectoryColumns(log_probability="log_probability")
    )
    config = ExperienceGenConfig(
        record_kind="trajectory",
        source=FileSource(pattern=path, format=fmt),
        trajectory_columns=cols,
        action_spec=SpecConfig.discrete(K),
    )
    result = run_experience_gen(config, *eg_uris)

    n = len(logs["step"])
    assert (result.records_read, result.records_written, result.records_quarantined) == (n, n, 0)
    assert sum(result.outputs_per_split.values()) == 12
    obs_spec = tf.TensorSpec([OBS], tf.float32)
    info_spec = {"log_probability": tf.TensorSpec((), tf.float32)}
    got = list(records.episode_dataset(_all_splits(eg_uris[0]), obs_spec, ACTION_SPEC, info_spec))
    assert len(got) == 12
    for traj in got:
        rewards = traj.reward.numpy()
        (idx,) = np.nonzero(np.isclose(logs["reward"], rewards[0]) & (logs["step"] == 0))
        episode = logs["episode_id"][idx[0]]
        mine = logs["episode_id"] == episode
        length = int(mine.sum())
        specs.check_nest_matches_spec(traj.observation, obs_spec, "observation", num_outer_dims=1)
        np.testing.assert_array_equal(traj.observation.numpy(), logs["observation"][mine])
        np.testing.assert_array_equal(traj.action.numpy(), logs["action"][mine])
        np.testing.assert_allclose(rewards, logs["reward"][mine], rtol=1e-6)
        np.testing.assert_allclose(traj.policy_info["log_probability"].numpy(), np.log(1.0 / K), rtol=1e-6)
        want_types = [StepType.FIRST] + [StepType.MID] * (length - 1)
        assert traj.step_type.numpy().tolist() == want_types
        assert traj.next_step_type.numpy().tolist() == [StepType.MID] * (length - 1) + [StepType.LAST]
        terminal = bool(logs["terminated"][mine][-1])
        assert traj.discount.numpy().tolist() == [1.0] * (length - 1) + [0.0 if terminal else 1.0]
