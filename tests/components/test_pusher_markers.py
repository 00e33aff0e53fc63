"""The TFX Pusher and the KFP Pusher write the same version marker (one lineage builder), so
`latest_published` finds a TFX-pushed version's model id as it finds a KFP-pushed one's."""

import json
import os
from types import SimpleNamespace

import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.trajectories import time_step_spec
from rlops.components.pusher import publish
from rlops.train.policy_saver import PolicySaver

OBS = tf.TensorSpec((4,), tf.float32, "observation")  # CartPole's: the Pushers verify on its observations
ACTIONS = specs.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
BLESSING = {
    "blessed": 1,
    "current_model": "/runs/Trainer/model/7",
    "current_model_id": 7,
    "reason": "improvement in dr over logging_policy: lower 95% bound 0.1 > 0.0",
    "baseline_model": "/runs/Trainer/model/3",
    "baseline_model_id": 3,
}


@pytest.fixture(scope="module")
def model_uri(tmp_path_factory):
    from rlops.components.trainer.core import serving_dir

    uri = str(tmp_path_factory.mktemp("model"))
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    PolicySaver(policy).save(serving_dir(uri))
    return uri


def _marker(destination: str) -> dict:
    (version,) = [v for v in publish.scan(publish.open_store(destination)) if v.is_rlops]
    return version.marker


def _tfx_push(model_uri: str, destination: str) -> None:
    from tfx.types import standard_artifacts

    from rlops.components.pusher.executor import Executor

    def artifact(cls, uri):
        a = cls()
        a.uri = uri
        return a

    model = artifact(standard_artifacts.Model, model_uri)
    model.id = 7
    blessing = artifact(standard_artifacts.ModelBlessing, os.path.join(model_uri, "blessing"))
    for key, value in BLESSING.items():
        setter = blessing.set_int_custom_property if isinstance(value, int) else blessing.set_string_custom_property
        setter(key, value)
    pushed = artifact(standard_artifacts.PushedModel, os.path.join(model_uri, "pushed"))
    Executor().Do(
        {"model": [model], "model_blessing": [blessing]},
        {"pushed_model": [pushed]},
        {"push_destination": destination, "keep_last": 5, "verify_env_id": "CartPole-v1"},
    )


def _kfp_push(model_uri: str, destination: str) -> None:
    from rlops.components.kfp import entrypoint

    model = SimpleNamespace(uri=model_uri, name="7", metadata={})
    blessing = SimpleNamespace(uri=os.path.join(model_uri, "blessing"), metadata=dict(BLESSING))
    pushed = SimpleNamespace(uri="", metadata={})
    assert entrypoint.pusher(model, blessing, destination, pushed, verify_env_id="CartPole-v1")


def test_tfx_and_kfp_pushers_write_the_same_marker(model_uri, tmp_path):
    from rlops.components.kfp import entrypoint

    _tfx_push(model_uri, str(tmp_path / "tfx"))
    _kfp_push(model_uri, str(tmp_path / "kfp"))
    tfx, kfp = _marker(str(tmp_path / "tfx")), _marker(str(tmp_path / "kfp"))
    assert tfx["lineage"] == kfp["lineage"]
    assert tfx["lineage"]["evaluation"] == BLESSING and tfx["lineage"]["training_run"] == model_uri
    assert json.loads(json.dumps(tfx["lineage"])) == tfx["lineage"]
    for face in ("tfx", "kfp"):  # the KFP resolver reads either face's version back
        base, baseline = SimpleNamespace(uri="", metadata={}), SimpleNamespace(uri="", metadata={})
        entrypoint.latest_published(str(tmp_path / face), base, baseline)
        assert base.uri == baseline.uri == model_uri and base.metadata["model_id"] == 7
