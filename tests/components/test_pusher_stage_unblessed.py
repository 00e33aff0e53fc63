"""pusher.stage_unblessed: a candidate that did NOT bless is published, verified as a blessed push
is (fresh processes, draws against propensities, LiteRT), to a staging directory, never to the
serving directory, and marked UNBLESSED there; a blessed candidate goes to serving as before."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.trajectories import time_step_spec
from rlops.components.pusher import core, publish
from rlops.train.policy_saver import PolicySaver

OBS = tf.TensorSpec((4,), tf.float32, "observation")  # CartPole's: verified on its observations
ACTIONS = specs.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
NOT_BLESSED = {"blessed": 0, "reason": "no improvement in dr over logging_policy: lower 95% bound -0.1 <= 0.0"}
BLESSED = {"blessed": 1, "reason": "improvement in dr over logging_policy: lower 95% bound 0.1 > 0.0"}


@pytest.fixture(scope="module")
def model_uri(tmp_path_factory):
    """A Model artifact's directory holding an exploring policy (serving_default draws)."""
    from rlops.components.common.model import serving_dir

    uri = str(tmp_path_factory.mktemp("model"))
    policy = GreedyPolicy(ActorPolicy(time_step_spec(OBS), ACTIONS, ActorNetwork(OBS, ACTIONS, (8,))))
    tf.random.set_seed(0)
    try:
        PolicySaver(policy, serving_epsilon=0.2).save(serving_dir(uri))
    finally:
        tf.random.set_seed(None)
    return uri


def _versions(directory: str) -> list[publish.Version]:
    if not os.path.exists(directory):
        return []
    return [v for v in publish.scan(publish.open_store(directory)) if v.is_rlops]


def _push(model_uri: str, tmp_path, blessing: dict, **kwargs) -> core.PushResult:
    blessing_dir = tmp_path / "blessing"
    blessing_dir.mkdir(exist_ok=True)
    return core.run_pusher(
        model_uri,
        str(tmp_path / "serving"),
        str(blessing_dir),
        blessing,
        verify_env_id="CartPole-v1",
        **kwargs,
    )


def test_an_unblessed_candidate_is_staged_verified_and_marked_never_served(model_uri, tmp_path, monkeypatch, caplog):
    staging = str(tmp_path / "staging")
    calls = []
    original = core.verify_in_subprocess

    def spy(*args, **kwargs):
        calls.append(kwargs.get("draws"))
        return original(*args, **kwargs)

    monkeypatch.setattr(core, "verify_in_subprocess", spy)
    with caplog.at_level(logging.WARNING, logger=core.__name__):
        result = _push(model_uri, tmp_path, NOT_BLESSED, stage_unblessed=staging)

    assert not result.pushed  # nothing to serve
    assert not (tmp_path / "serving").exists() or not _versions(str(tmp_path / "serving"))
    (version,) = _versions(staging)
    assert result.staged_version == version.number
    assert result.staged_destination == os.path.join(staging, str(version.number))
    assert "staged as UNBLESSED version" in result.reason and result.reason.startswith("model not blessed")
    # Verified as a blessed push is: two fresh processes drawing from serving_default, LiteRT twin.
    assert calls and all(calls) and len(calls) >= 2
    version_dir = result.staged_destination
    assert os.path.exists(os.path.join(version_dir, "policy.tflite"))
    # Marked where a reader looks: a file beside the SavedModel and the marker's lineage.
    with open(os.path.join(version_dir, core.UNBLESSED_FILE)) as f:
        text = f.read()
    assert "UNBLESSED candidate" in text and "integration tests only" in text and NOT_BLESSED["reason"] in text
    marker = version.marker or {}
    assert marker["lineage"]["unblessed"] is True
    assert marker["lineage"]["evaluation"]["blessed"] == 0
    assert core.UNBLESSED_FILE in marker["files"]
    assert core.is_unblessed_version(version_dir)
    # The pushed artifact's properties say where it went, and pushed stays 0.
    properties = result.properties(model_uri, 7)["pushed_model"]
    assert properties["pushed"] == 0
    assert properties["staged_unblessed_destination"] == version_dir
    assert properties["staged_unblessed_version"] == version.number
    # A clear warning: unblessed, integration tests only.
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("UNBLESSED candidate" in w and "integration tests only" in w and staging in w for w in warnings)
    # The staged version loads and acts as a pushed one does.
    served = tf.saved_model.load(version_dir)
    out = served.signatures["serving_default"](observation=tf.zeros([3, 4]))
    assert out["policy_version"].numpy().tolist() == [version.number] * 3


def test_a_blessed_candidate_goes_to_serving_as_before(model_uri, tmp_path):
    staging = str(tmp_path / "staging")
    result = _push(model_uri, tmp_path, BLESSED, stage_unblessed=staging)
    assert result.pushed and result.staged_destination is None
    (version,) = _versions(str(tmp_path / "serving"))
    assert result.destination == os.path.join(str(tmp_path / "serving"), str(version.number))
    assert not _versions(staging) and not os.path.exists(staging)
    assert not os.path.exists(os.path.join(result.destination, core.UNBLESSED_FILE))
    assert "unblessed" not in (version.marker or {})["lineage"]
    assert not core.is_unblessed_version(result.destination)
    assert os.path.exists(os.path.join(result.destination, "policy.tflite"))


def test_without_stage_unblessed_an_unblessed_candidate_goes_nowhere(model_uri, tmp_path):
    result = _push(model_uri, tmp_path, NOT_BLESSED)
    assert not result.pushed and result.reason == "model not blessed" and result.staged_destination is None
    assert result.properties(model_uri, 7)["pushed_model"] == {"pushed": 0, "reason": "model not blessed"}
    assert not (tmp_path / "serving").exists()


def test_a_candidate_that_fails_verification_is_not_staged(model_uri, tmp_path):
    from rlops.components.common.model import serving_dir

    staging = str(tmp_path / "staging")
    bad_inputs = {"observation": np.zeros((4, 7), np.float32)}  # wrong observation width
    with pytest.raises(RuntimeError, match="failed verification"):
        core.stage_unblessed_policy(serving_dir(model_uri), staging, bad_inputs, serving=str(tmp_path / "serving"))
    assert _versions(staging) == []
    assert [n for n in os.listdir(staging) if not n.startswith(".rlops")] == []  # no version, no staging copy


def test_the_serving_directory_is_refused_as_the_staging_directory(model_uri, tmp_path):
    serving = str(tmp_path / "serving")
    for staging in (serving, serving + "/", os.path.join(str(tmp_path), ".", "serving")):
        with pytest.raises(ValueError, match="pusher.stage_unblessed: .* is the serving directory"):
            _push(model_uri, tmp_path, NOT_BLESSED, stage_unblessed=staging)
    assert not os.path.exists(serving)


def test_a_directory_holding_blessed_versions_is_refused_as_the_staging_directory(model_uri, tmp_path):
    """A staging directory that already holds ordinary (blessed) rlops versions is a serving
    directory by mistake: nothing is added to it."""
    from rlops.components.common.model import serving_dir

    other = str(tmp_path / "other-serving")
    publish.publish(serving_dir(model_uri), other, verify=None, lineage={"training_run": "r0"})
    before = [v.number for v in _versions(other)]
    with pytest.raises(ValueError, match="holds rlops versions that are not unblessed candidates"):
        _push(model_uri, tmp_path, NOT_BLESSED, stage_unblessed=other)
    assert [v.number for v in _versions(other)] == before


def test_the_tfx_component_refuses_the_serving_directory_at_definition():
    from tfx.types import channel_utils, standard_artifacts

    from rlops.components.pusher.component import Pusher

    model = channel_utils.as_channel([standard_artifacts.Model()])
    blessing = channel_utils.as_channel([standard_artifacts.ModelBlessing()])
    with pytest.raises(ValueError, match="is the serving directory"):
        Pusher(model=model, model_blessing=blessing, push_destination="/tmp/serving", stage_unblessed="/tmp/serving/")
    pusher = Pusher(model=model, model_blessing=blessing, push_destination="/tmp/serving", stage_unblessed="/tmp/st")
    assert pusher.exec_properties[core.STAGE_UNBLESSED_KEY] == "/tmp/st"


def test_the_tfx_executor_stages_an_unblessed_candidate(model_uri, tmp_path):
    """The TFX face passes stage_unblessed through (TFX's NOT_BLESSED marker file, no properties)."""
    from tfx.types import standard_artifacts

    from rlops.components.pusher.executor import Executor

    blessing_dir = tmp_path / "blessing"
    blessing_dir.mkdir()
    (blessing_dir / "NOT_BLESSED").write_text("no")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(blessing_dir)
    model, pushed = standard_artifacts.Model(), standard_artifacts.PushedModel()
    model.uri, model.id = model_uri, 7
    staging = str(tmp_path / "staging")
    Executor().Do(
        {"model": [model], "model_blessing": [blessing]},
        {"pushed_model": [pushed]},
        {
            "push_destination": str(tmp_path / "serving"),
            "verify_env_id": "CartPole-v1",
            core.STAGE_UNBLESSED_KEY: staging,
        },
    )
    properties = {k: pushed.get_custom_property(k) for k in pushed.mlmd_artifact.custom_properties}
    (version,) = _versions(staging)
    assert properties["pushed"] == 0
    assert properties["staged_unblessed_version"] == version.number
    assert json.loads(json.dumps((version.marker or {})["lineage"]))["unblessed"] is True
    assert not (tmp_path / "serving").exists()
