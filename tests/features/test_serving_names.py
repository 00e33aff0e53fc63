"""One function names serving inputs (rlops.features.serving_names), and a per-arm policy with
categorical-string and float item features is pushed through the Pusher's own verifier, then
served from a fresh process that imports only TensorFlow: raw strings in (unseen ones too), the
in-process policy's answer out, and the version it was published as in every row."""

import json
import os

import numpy as np
import pytest
from helpers import run_fresh_python

from rlops.features.schema import FeatureSchemaError
from rlops.features.serving_names import (
    serving_input_for_record_key,
    serving_input_name,
    serving_inputs,
    serving_inputs_from_records,
)


@pytest.mark.parametrize(
    "feature,per_arm,expected",
    [
        ("user_a", False, "user_a"),
        ("item_category", True, "per_arm_item_category"),
        ("user-id.v2", False, "user_id_v2"),
        ("Prix €", True, "per_arm_Prix__"),
        ("0day", False, "arg_0day"),
        ("_x", False, "arg__x"),
    ],
)
def test_names_are_ones_tensorflow_leaves_alone(feature, per_arm, expected):
    from tensorflow.core.function.polymorphism.function_type import sanitize_arg_name

    name = serving_input_name(feature, per_arm)
    assert name == expected
    assert sanitize_arg_name(name) == name  # TF would not rename it: SignatureDef key == parameter name


def test_record_keys_map_to_serving_inputs_and_back():
    inputs = serving_inputs(["user-a", "price"], ["item_category"])
    assert inputs == {
        "user_a": "user-a",
        "price": "price",
        "per_arm_item_category": "per_arm/item_category",
        "num_actions": "num_actions",
    }
    assert {serving_input_for_record_key(k): k for k in inputs.values()} == inputs
    cols = {"per_arm/item_price": 1, "user-a": 2, "num_actions": 3, "action_mask": 4}
    assert serving_inputs_from_records(cols) == {
        "per_arm_item_price": 1,
        "user_a": 2,
        "num_actions": 3,
        "action_mask": 4,
    }


def test_two_features_sharing_an_input_name_fail_naming_both():
    with pytest.raises(
        FeatureSchemaError,
        match=r"features 'user-a' and 'user\.a' would both be served as input "
        r"'user_a'",
    ):
        serving_inputs(["user-a", "user.a"])
    with pytest.raises(FeatureSchemaError, match="'per_arm_x' and 'per_arm/x'"):
        serving_inputs(["per_arm_x"], ["x"])


# --- end to end: ingest -> train -> push (verified) -> serve without rlops ------------------------
ITEM_FEATURES = ["item_category", "item_price"]  # a categorical string and a float item feature
NUM_ITEMS = 6


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    from rlops.components.common.model import serving_dir
    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.components.pusher import core
    from rlops.components.pusher.core import verification_inputs
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    d = tmp_path_factory.mktemp("serving_names")
    gen = LogGenerator(LogConfig(num_items=NUM_ITEMS, ctr=0.05, seed=0))
    logs = gen.sample(2000, seed=1)
    paths = logs.to_files(str(d), format="parquet")
    cfg = {
        "source": {"kind": "file", "pattern": paths["impressions"], "format": "parquet"},
        "item_source": {"kind": "file", "pattern": paths["items"], "format": "parquet"},
        "bandit_columns": {
            "features": list(logs.context_columns),
            "item_id": "item_id",
            "item_features": ITEM_FEATURES,
        },
    }
    run_experience_gen(ExperienceGenConfig.from_json(cfg), str(d / "ex"), str(d / "q"))
    model = str(d / "model")
    run_trainer(
        TrainerConfig(
            agent="lin_ucb", num_actions=NUM_ITEMS, batch_size=64, train_steps=20, steps_per_run=10, serving_epsilon=0.2
        ),
        model,
        str(d / "run"),
        str(d / "ex"),
    )
    inputs = verification_inputs(str(d / "ex"), None)  # what the TFX and KFP Pushers verify on
    first = core.push_policy(serving_dir(model), str(d / "serving"), True, inputs)
    # The same model again, for a second version number: its SavedModel is verified as the first's
    # was; its LiteRT twin would be the first's converted and checked again (test_litert checks
    # that every pushed version's policy.tflite answers its own number).
    second = core.push_policy(serving_dir(model), str(d / "serving"), True, inputs, litert=False)
    return {"gen": gen, "logs": logs, "model": model, "versions": [first, second]}


FRESH = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
args = json.loads(sys.argv[1])
out = {"rlops": False, "models": {}}
for path in args["models"]:
    loaded = tf.saved_model.load(path)
    name = "serving_features" if "serving_features" in loaded.signatures else "serving_default"  # feature arrays
    sig = loaded.signatures[name]
    proto = saved_model_pb2.SavedModel()
    with open(path + "/saved_model.pb", "rb") as f:
        proto.ParseFromString(f.read())
    keys = sorted(proto.meta_graphs[0].signature_def[name].inputs)
    specs = sig.structured_input_signature[1]
    feeds = {k: tf.constant(v, tf.string if isinstance(np.ravel(v)[0], str) else specs[k].dtype)
             for k, v in args["inputs"].items()}
    got = sig(**feeds)
    out["models"][path] = {"signature_def_inputs": keys, "parameters": sorted(sig.structured_input_signature[1]),
                           **{k: got[k].numpy().tolist() for k in ("action", "propensity", "greedy_action",
                                                                    "policy_version")}}
out["rlops"] = any(m.split(".")[0] == "rlops" for m in sys.modules)
print(json.dumps(out))
"""


def _requests(gen, n=12):
    """Raw serving inputs (by serving name) and the same rows as record columns (by record key):
    real users, then unseen user strings and an unseen item category, candidates varying 1..K."""
    ctx = gen.sample_contexts(n, seed=3)
    record = {c: np.asarray(ctx[c]) for c in gen.user_columns + gen.float_columns + ("position",)}
    for c in gen.user_columns:  # every other row: a user value no vocabulary has seen
        record[c] = np.where(np.arange(n) % 2 == 1, "never-seen-" + c, record[c].astype(str)).astype(object)
    category = np.broadcast_to(gen.items["item_category"].astype(object), (n, NUM_ITEMS)).copy()
    category[:, 0] = "a-category-never-seen"
    record["per_arm/item_category"] = category
    record["per_arm/item_price"] = np.broadcast_to(gen.items["item_price"].astype(np.float32), (n, NUM_ITEMS)).copy()
    record["num_actions"] = (np.arange(n) % NUM_ITEMS + 1).astype(np.int64)
    record["position"] = record["position"].astype(np.int64)
    for c in gen.float_columns:
        record[c] = record[c].astype(np.float32)
    return serving_inputs_from_records(record), record


def _fresh(models, inputs, cwd):
    payload = json.dumps({"models": models, "inputs": {k: np.asarray(v).tolist() for k, v in inputs.items()}})
    return run_fresh_python(FRESH, payload, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_pushed_per_arm_policy_serves_raw_strings_without_rlops_and_answers_its_version(pushed, tmp_path):
    from rlops.components.common.model import serving_dir
    from rlops.train.policy_saver import SavedPolicy

    gen, versions = pushed["gen"], pushed["versions"]
    assert [v.pushed for v in versions] == [True, True] and versions[0].version < versions[1].version
    inputs, record = _requests(gen)
    trained = serving_dir(pushed["model"])
    got = _fresh([v.destination for v in versions] + [trained], inputs, tmp_path)
    assert not got["rlops"]
    expected_inputs = sorted(inputs)
    assert "per_arm_item_category" in expected_inputs and "per_arm_item_price" in expected_inputs
    # The in-process policy (the Evaluator's path: record keys, the `action` signature) on the same rows.
    greedy = SavedPolicy(trained).actions(record)
    k = record["num_actions"]
    for v in versions:
        out = got["models"][v.destination]
        assert out["signature_def_inputs"] == out["parameters"] == expected_inputs  # one name per input
        np.testing.assert_array_equal(out["greedy_action"], greedy)
        assert (np.asarray(out["greedy_action"]) < k).all()  # candidates only
        assert out["policy_version"] == [v.version] * len(k)
        action, prop = np.asarray(out["action"]), np.asarray(out["propensity"])
        expected = np.where(action == greedy, 0.8 + 0.2 / k, 0.2 / k)  # epsilon-greedy over the candidates
        np.testing.assert_allclose(prop, expected, rtol=1e-6)
    assert got["models"][trained]["policy_version"] == [-1] * len(k)  # never published


def test_a_rollback_answers_its_new_version(pushed):
    from rlops.components.pusher import publish
    from rlops.components.pusher.storage import open_store

    first = pushed["versions"][0]
    dest = os.path.dirname(first.destination)
    result = publish.rollback(dest, first.version)
    asset = open_store(dest).read(f"{result.version}/{publish.version_asset_key()}").decode().strip()
    assert int(asset) == result.version != first.version
