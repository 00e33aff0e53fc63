"""Pusher core: blessed only, monotonic versions, verification in a fresh process, retention,
Vertex AI Model Registry request."""
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.trajectories import time_step_spec
from rlops.components.pusher import core
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


def test_push_verifies_versions_and_keeps_last_n(policy_dir, tmp_path):
    dest = str(tmp_path / "serving")
    pushed = [core.push_policy(policy_dir, dest, True, INPUTS if i == 0 else None, keep_last=2) for i in range(3)]
    versions = [p.version for p in pushed]
    assert versions == sorted(versions) and len(set(versions)) == 3        # strictly increasing
    assert core.existing_versions(dest) == versions[-2:]                  # oldest pruned
    assert pushed[-1].removed_versions == (versions[0],)
    assert sorted(os.listdir(dest)) == sorted(str(v) for v in versions[-2:])  # no staging left behind
    assert os.path.exists(os.path.join(dest, str(versions[-1]), "saved_model.pb"))


def test_failed_verification_publishes_nothing(policy_dir, tmp_path):
    dest = str(tmp_path / "serving")
    bad_inputs = {"observation": np.zeros((4, 7), np.float32)}  # wrong observation width
    with pytest.raises(RuntimeError, match="failed verification"):
        core.push_policy(policy_dir, dest, True, bad_inputs)
    assert os.listdir(dest) == []


def test_missing_saved_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="saved_model.pb"):
        core.push_policy(str(tmp_path), str(tmp_path / "serving"), True, None)


def test_vertex_model_upload_request_and_send():
    request = core.vertex_model_upload_request(
        display_name="digits-policy", artifact_uri="gs://bucket/serving/17",
        serving_container_image_uri="us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-16:latest",
        project="proj", region="us-central1", labels={"pipeline": "rlops-bandit"}, parent_model="projects/p/models/9")
    assert request["location"] == "us-central1" and request["parent_model"] == "projects/p/models/9"

    class FakeModel:
        calls = []

        @classmethod
        def upload(cls, **kwargs):
            cls.calls.append(kwargs)
            return type("M", (), {"resource_name": "projects/p/locations/us-central1/models/9@2"})()

    fake_aiplatform = type("aip", (), {"Model": FakeModel})
    assert core.upload_to_vertex(request, fake_aiplatform).endswith("@2")
    assert FakeModel.calls == [request]
    with pytest.raises(ValueError, match="gs://"):
        core.vertex_model_upload_request("n", "/local/path", "img", "proj", "us-central1")
    with pytest.raises(ValueError, match="project"):
        core.vertex_model_upload_request("n", "gs://b/1", "img", "", "us-central1")
