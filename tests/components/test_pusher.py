"""Pusher core: blessed only, monotonic versions, verification in a fresh process, retention,
Vertex AI Model Registry request."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.trajectories import time_step_spec
from rlops.components.pusher import core, verify
from rlops.train.policy_saver import PolicySaver

OBS = tf.TensorSpec((4,), tf.float32, "observation")
ACTIONS = specs.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
INPUTS = {"observation": np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)}


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("model") / "policy")
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    PolicySaver(policy).save(path)
    return path


def test_not_blessed_pushes_nothing(policy_dir, tmp_path):
    result = core.push_policy(policy_dir, str(tmp_path / "serving"), blessed=False, verify_inputs=INPUTS)
    assert not result.pushed and result.reason == "model not blessed"
    assert not (tmp_path / "serving").exists()


def in_process_verifier(tmp_path):
    """The verify module's own check, run in this process (the fresh-process path is tested once)."""
    npz = str(tmp_path / "inputs.npz")
    np.savez(npz, **INPUTS)

    def check(local_dir):
        result = verify.verify(local_dir, npz)
        assert result["ok"] and result["num_actions"] == 16, result

    return check


def test_push_verifies_versions_and_keeps_last_n(policy_dir, tmp_path):
    dest = str(tmp_path / "serving")
    fast = in_process_verifier(tmp_path)
    pushed = [
        core.push_policy(
            policy_dir,
            dest,
            True,
            INPUTS,
            keep_last=2,
            lineage={"training_run": f"r{i}"},
            verifier=None if i == 0 else fast,
        )
        for i in range(3)
    ]
    versions = [p.version for p in pushed]
    assert versions == sorted(versions) and len(set(versions)) == 3  # strictly increasing
    assert core.existing_versions(dest) == versions[-2:]  # oldest pruned
    assert pushed[-1].removed_versions == (versions[0],)
    assert sorted(os.listdir(dest)) == sorted([".rlops"] + [str(v) for v in versions[-2:]])  # no staging left
    assert os.path.exists(os.path.join(dest, str(versions[-1]), "saved_model.pb"))
    with open(os.path.join(dest, str(versions[-1]), "rlops_version.json")) as f:
        assert json.load(f)["lineage"] == {"training_run": "r2"}
    served = tf.saved_model.load(os.path.join(dest, str(versions[-1])))  # the published copy loads and acts
    actions = served.signatures["action"](
        observation=tf.constant(INPUTS["observation"]),
        step_type=tf.zeros([16], tf.int32),
        reward=tf.zeros([16]),
        discount=tf.ones([16]),
    )["action"].numpy()
    assert actions.shape == (16,) and set(actions.tolist()) <= {0, 1}


def test_verifier_refuses_zero_rows(policy_dir, tmp_path):
    npz = str(tmp_path / "empty.npz")
    np.savez(npz, observation=np.zeros((0, 4), np.float32))
    result = verify.verify(policy_dir, npz)
    assert not result["ok"] and "0 rows" in result["error"]


def test_component_refuses_keep_last_below_one():
    from tfx.types import channel_utils, standard_artifacts

    from rlops.components.pusher.component import Pusher

    model = channel_utils.as_channel([standard_artifacts.Model()])
    blessing = channel_utils.as_channel([standard_artifacts.ModelBlessing()])
    with pytest.raises(ValueError, match="keep_last must be an integer >= 1"):
        Pusher(model=model, model_blessing=blessing, push_destination="/tmp/x", keep_last=0)


def test_failed_verification_publishes_nothing(policy_dir, tmp_path):
    dest = str(tmp_path / "serving")
    bad_inputs = {"observation": np.zeros((4, 7), np.float32)}  # wrong observation width
    with pytest.raises(RuntimeError, match="failed verification"):
        core.push_policy(policy_dir, dest, True, bad_inputs)
    assert [n for n in os.listdir(dest) if not n.startswith(".rlops")] == []  # no version, no staging


def test_missing_saved_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="saved_model.pb"):
        core.push_policy(str(tmp_path), str(tmp_path / "serving"), True, INPUTS)


# ---- exploration: the Pusher checks draws, not only greedy actions --------------------------------
def _exploring_policy(path: str) -> str:
    """serving_default explores (epsilon 0.3), exported under a global seed as the Trainer exports."""
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    tf.random.set_seed(0)
    try:
        PolicySaver(policy, serving_epsilon=0.3).save(path)
    finally:
        tf.random.set_seed(None)
    return path


def test_an_exploring_policy_is_published_after_its_draws_are_checked(tmp_path):
    path = _exploring_policy(str(tmp_path / "policy"))
    pushed = core.push_policy(path, str(tmp_path / "serving"), True, INPUTS)  # fresh processes, LiteRT too
    assert pushed.pushed and os.path.exists(os.path.join(pushed.destination, "policy.tflite"))


def test_a_head_that_repeats_its_draws_is_not_published(tmp_path, monkeypatch):
    """A head whose random op has a seed baked in draws the same stream in every process: both the
    SavedModel's check and the LiteRT file's refuse it, and no version appears."""
    from rlops.heads import epsilon_greedy

    def seeded(batch):
        shape = tf.stack([tf.cast(batch, tf.int32), epsilon_greedy.NUM_UNIFORMS])
        return tf.raw_ops.RandomUniform(shape=shape, dtype=tf.float32, seed=1, seed2=1)

    with monkeypatch.context() as m:
        m.setattr(epsilon_greedy, "fresh_uniforms", seeded)
        path = _exploring_policy(str(tmp_path / "policy"))
    dest = str(tmp_path / "serving")
    with pytest.raises(RuntimeError, match="two fresh processes: serving_default at batch 1: two fresh processes draw"):
        core.push_policy(path, dest, True, INPUTS, litert=False)
    with pytest.raises(RuntimeError, match="LiteRT at batch 1: two fresh processes draw the same actions"):
        core.push_policy(path, dest, True, INPUTS, verifier=lambda d: None)
    assert core.existing_versions(dest) == []
