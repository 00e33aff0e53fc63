"""The TFX Pusher and the KFP Pusher are two faces of one core (pusher.core.run_pusher and
PushResult.properties): a version pushed through either carries the same artifact properties and
the same version marker, and `latest_published` finds either's model id."""

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

# Slow: trains and pushes through the TFX and the KFP faces; `make test` runs it.
pytestmark = pytest.mark.slow

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
    from rlops.components.common.model import serving_dir

    uri = str(tmp_path_factory.mktemp("model"))
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    PolicySaver(policy).save(serving_dir(uri))
    return uri


def _marker(destination: str) -> dict:
    (version,) = [v for v in publish.scan(publish.open_store(destination)) if v.is_rlops]
    return version.marker


def _tfx_push(model_uri: str, destination: str) -> dict:
    """Pushes through the TFX executor; the PushedModel's custom properties."""
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
    return {k: pushed.get_custom_property(k) for k in pushed.mlmd_artifact.custom_properties}


def _kfp_push(model_uri: str, destination: str) -> dict:
    """Pushes through the KFP entry point; the PushedModel's metadata."""
    from rlops.components.kfp import entrypoint

    model = SimpleNamespace(uri=model_uri, name="7", metadata={})
    blessing = SimpleNamespace(uri=os.path.join(model_uri, "blessing"), metadata=dict(BLESSING))
    pushed = SimpleNamespace(uri="", metadata={})
    assert entrypoint.pusher(model, blessing, destination, pushed, verify_env_id="CartPole-v1")
    assert pushed.uri == pushed.metadata["pushed_destination"]  # downstream KFP steps get the served SavedModel
    return pushed.metadata


def test_tfx_and_kfp_pushers_write_the_same_properties_and_marker(model_uri, tmp_path):
    from rlops.components.kfp import entrypoint

    destinations = {face: str(tmp_path / face) for face in ("tfx", "kfp")}
    pushed = {"tfx": _tfx_push(model_uri, destinations["tfx"]), "kfp": _kfp_push(model_uri, destinations["kfp"])}
    # Every property, both faces: the KFP artifact's serving container (containerSpec, the
    # google.UnmanagedContainerModel shape) is KFP's own; the model's id is TFX's ML Metadata id
    # (an int) and KFP's artifact name ("7").
    kfp = {k: v for k, v in pushed["kfp"].items() if k != "containerSpec"}
    assert pushed["kfp"]["containerSpec"] == {"imageUri": entrypoint.SERVING_IMAGE}
    assert str(pushed["tfx"].pop("pushed_model_id")) == kfp.pop("pushed_model_id") == "7"
    markers = {face: _marker(destinations[face]) for face in ("tfx", "kfp")}
    for face, properties in (("tfx", pushed["tfx"]), ("kfp", kfp)):
        version = markers[face]["version"]  # versions are numbered by the time of the push
        assert properties == {
            "pushed": 1,
            "pushed_destination": os.path.join(destinations[face], str(version)),
            "pushed_version": version,
            "pushed_model": model_uri,
        }, face
    # The whole marker (format, source, files, lineage) but the version and the time of the push.
    tfx, kfp_marker = (
        {k: v for k, v in markers[face].items() if k not in ("version", "pushed_at")} for face in markers
    )
    assert tfx == kfp_marker
    assert tfx["lineage"]["evaluation"] == BLESSING and tfx["lineage"]["training_run"] == model_uri
    assert json.loads(json.dumps(tfx["lineage"])) == tfx["lineage"]
    for face in ("tfx", "kfp"):  # the KFP resolver reads either face's version back
        base, baseline = SimpleNamespace(uri="", metadata={}), SimpleNamespace(uri="", metadata={})
        entrypoint.latest_published(destinations[face], base, baseline)
        assert base.uri == baseline.uri == model_uri and base.metadata["model_id"] == 7
        assert base.metadata["pushed_version"] == markers[face]["version"]


def test_tfx_and_kfp_pushers_agree_when_not_blessed(model_uri, tmp_path):
    """Not blessed: nothing published, and both faces say so with the same properties."""
    from tfx.types import standard_artifacts

    from rlops.components.kfp import entrypoint
    from rlops.components.pusher.executor import Executor

    blessing_dir = tmp_path / "blessing"
    blessing_dir.mkdir()
    (blessing_dir / "NOT_BLESSED").write_text("no")  # TFX's marker file: no `blessed` property needed
    tfx_blessing = standard_artifacts.ModelBlessing()
    tfx_blessing.uri = str(blessing_dir)
    model, tfx_pushed = standard_artifacts.Model(), standard_artifacts.PushedModel()
    model.uri, model.id = model_uri, 7
    Executor().Do(
        {"model": [model], "model_blessing": [tfx_blessing]},
        {"pushed_model": [tfx_pushed]},
        {"push_destination": str(tmp_path / "tfx")},
    )
    kfp_pushed = SimpleNamespace(uri="", metadata={})
    kfp_blessing = SimpleNamespace(uri=str(blessing_dir), metadata={})
    assert not entrypoint.pusher(
        SimpleNamespace(uri=model_uri, name="7", metadata={}), kfp_blessing, str(tmp_path / "kfp"), kfp_pushed
    )
    tfx = {k: tfx_pushed.get_custom_property(k) for k in tfx_pushed.mlmd_artifact.custom_properties}
    assert tfx == kfp_pushed.metadata == {"pushed": 0, "reason": "model not blessed"}
    assert not (tmp_path / "tfx").exists() or not os.listdir(tmp_path / "tfx")
