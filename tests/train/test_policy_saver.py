"""Policy export: SavedModel served by plain TensorFlow, checkpoint-only updates, loader, specs,
and the export / steps-per-second triggers."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import learner_testlib as lt
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents.ppo import PPOAgent
from rlops.agents.trajectories import TimeStep
from rlops.train import (
    Learner,
    PolicySavedModelTrigger,
    PolicySaver,
    StepPerSecondLogTrigger,
    latest_checkpoint,
    load,
    load_specs,
    restore_checkpoint,
)

OBS = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)

# Runs in a fresh interpreter: TensorFlow only, never rlops.
PLAIN_TF_SERVER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    saved_dir, collect_dir, ckpt_dir = sys.argv[1:4]
    obs = np.array(json.loads(sys.argv[4]), np.float32)
    b = obs.shape[0]
    inputs = dict(step_type=np.zeros([b], np.int32), reward=np.zeros([b], np.float32),
                  discount=np.ones([b], np.float32), observation=obs)
    policy = tf.saved_model.load(saved_dir)
    out = {"signatures": sorted(policy.signatures)}
    out["before"] = policy.signatures["action"](**inputs)["action"].numpy().tolist()
    out["dtype"] = policy.signatures["action"](**inputs)["action"].dtype.name
    out["initial_state"] = list(policy.signatures["get_initial_state"](batch_size=tf.constant(b)))
    out["step_before"] = int(policy.get_train_step())
    out["metadata"] = {k: float(v) for k, v in policy.signatures["get_metadata"]().items()}
    # Checkpoint-only update, plain TensorFlow (the three names the saver writes).
    tf.train.Checkpoint(model_variables=policy.model_variables, train_step=policy.train_step,
                        metadata=policy.metadata).read(ckpt_dir + "/variables/variables").assert_consumed()
    out["after"] = policy.signatures["action"](**inputs)["action"].numpy().tolist()
    out["step_after"] = int(policy.signatures["get_train_step"]()["train_step"])
    collect = tf.saved_model.load(collect_dir)
    sampled = collect.signatures["action"](**inputs)
    out["collect_keys"] = sorted(sampled)
    out["collect_actions"] = sampled["action"].numpy().tolist()
    out["log_probs"] = sampled["info/log_probability"].numpy().tolist()
    out["rlops_imported"] = any(m == "rlops" or m.startswith("rlops.") for m in sys.modules)
    print(json.dumps(out))
""")


def make_ppo_agent():
    time_step_spec, action_spec = lt.cartpole_specs()
    return PPOAgent(time_step_spec, action_spec, tf_keras.optimizers.Adam(1e-3), normalize_observations=True)


def flip_policy(agent):
    """Negating the actor's output layer reverses every greedy choice."""
    out = agent.actor_net.mlp.output_layer
    out.kernel.assign(-out.kernel)
    out.bias.assign(-out.bias)


def greedy_actions(policy, obs=OBS):
    time_step = TimeStep(**{k: tf.constant(v) for k, v in lt.cartpole_time_step(obs).items()})
    return policy.action(time_step).action.numpy()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A PPO CartPole agent's greedy and collect policies exported before training, and a
    checkpoint-only update written after the policy changed."""
    root = tmp_path_factory.mktemp("export")
    agent = make_ppo_agent()
    shared = list(agent.collect_policy.variables)
    metadata = {"eval_return": tf.Variable(123.5, dtype=tf.float64)}
    saver = PolicySaver(agent.policy, train_step=agent.train_step_counter, metadata=metadata, variables=shared)
    collect_saver = PolicySaver(
        agent.collect_policy, train_step=agent.train_step_counter, metadata=metadata, variables=shared
    )
    saver.save(str(root / "greedy"))
    collect_saver.save(str(root / "collect"))
    before = greedy_actions(agent.policy)
    flip_policy(agent)
    agent.train_step_counter.assign(7)
    metadata["eval_return"].assign(200.0)
    saver.save_checkpoint(str(root / "ckpt"))
    after = greedy_actions(agent.policy)
    assert (after == 1 - before).all()
    return dict(root=root, agent=agent, before=before, after=after)


def test_saved_model_serves_with_plain_tensorflow_in_fresh_process(exported):
    root = exported["root"]
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PLAIN_TF_SERVER,
            str(root / "greedy"),
            str(root / "collect"),
            str(root / "ckpt"),
            json.dumps(OBS.tolist()),
        ],
        env=lt.subprocess_env(PYTHONPATH=""),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["rlops_imported"]
    assert out["signatures"] == ["action", "get_initial_state", "get_metadata", "get_train_step"]
    assert out["dtype"] == "int32"
    assert out["before"] == exported["before"].tolist()  # acts as the exported policy did
    assert out["initial_state"] == [] and out["step_before"] == 0
    assert out["metadata"] == {"eval_return": 123.5}
    # The checkpoint-only update changes what the loaded policy does.
    assert out["after"] == exported["after"].tolist() and out["after"] != out["before"]
    assert out["step_after"] == 7
    assert set(out["collect_actions"]) <= {0, 1} and len(out["collect_actions"]) == len(OBS)
    assert "info/log_probability" in out["collect_keys"] and all(p <= 0 for p in out["log_probs"])


def test_loader_specs_and_mismatched_checkpoint(exported, tmp_path):
    root = exported["root"]
    policy = load(str(root / "greedy"), str(root / "ckpt"))
    np.testing.assert_array_equal(
        policy.signatures["action"](**lt.cartpole_time_step(OBS))["action"].numpy(), exported["after"]
    )
    assert int(policy.get_train_step()) == 7
    assert float(policy.get_metadata()["eval_return"]) == 200.0
    # The nested attribute function takes a TimeStep, like TF-Agents' saved policies.
    step = policy.action(TimeStep(**{k: tf.constant(v) for k, v in lt.cartpole_time_step(OBS).items()}), ())
    np.testing.assert_array_equal(step.action.numpy(), exported["after"])

    specs = load_specs(str(root / "greedy"))
    time_step_spec, action_spec = lt.cartpole_specs()
    assert specs["action_spec"] == action_spec and specs["time_step_spec"] == time_step_spec
    assert isinstance(specs["time_step_spec"], TimeStep)
    assert specs["signatures"]["action"]["inputs"] == ["step_type", "reward", "discount", "observation"]
    assert specs["signatures"]["action"]["outputs"] == ["action"]

    other = lt.RegressionAgent()
    other_saver = PolicySaver(other.policy)
    other_saver.save_checkpoint(str(tmp_path / "other_ckpt"))
    with pytest.raises(ValueError, match="does not match the saved policy"):
        restore_checkpoint(load(str(root / "greedy")), str(tmp_path / "other_ckpt"))


def test_policy_export_trigger_and_steps_per_sec_trigger(tmp_path, caplog):
    agent = lt.RegressionAgent()
    step = agent.train_step_counter
    policies_dir = str(tmp_path / "policies")
    export = PolicySavedModelTrigger(
        policies_dir, agent, step, interval=4, metadata_metrics={"env_steps": lambda: step * 32}
    )
    assert sorted(os.listdir(policies_dir)) == ["collect_policy", "greedy_policy", "policy"]
    sps = StepPerSecondLogTrigger(step, interval=4)
    learner = Learner(
        str(tmp_path),
        step,
        agent,
        lt.step_keyed_dataset_fn(step, 8),
        triggers=[export, sps],
        checkpoint_interval=-1,
        summary_interval=0,
    )
    with caplog.at_level(logging.INFO, logger="rlops.train.triggers"):
        for _ in range(4):
            learner.run(iterations=2)
    ckpts = sorted(os.listdir(os.path.join(policies_dir, "checkpoints")))
    assert ckpts == ["policy_checkpoint_0000000004", "policy_checkpoint_0000000008"]
    latest = latest_checkpoint(os.path.join(policies_dir, "checkpoints"))
    assert latest.endswith("policy_checkpoint_0000000008")

    greedy = load(os.path.join(policies_dir, "greedy_policy"), latest)
    assert int(greedy.get_train_step()) == 8 and float(greedy.get_metadata()["env_steps"]) == 256.0
    obs = np.random.default_rng(1).normal(size=(32, lt.OBS_DIM)).astype(np.float32)
    inputs = dict(
        step_type=np.zeros([32], np.int32),
        reward=np.zeros([32], np.float32),
        discount=np.ones([32], np.float32),
        observation=obs,
    )
    expected = agent.policy.action(TimeStep(**{k: tf.constant(v) for k, v in inputs.items()})).action
    np.testing.assert_array_equal(greedy.signatures["action"](**inputs)["action"], expected)
    # One checkpoint serves all three exports: they share one variable list.
    load(os.path.join(policies_dir, "collect_policy"), latest)

    assert sps.steps_per_sec is not None and sps.steps_per_sec > 0
    assert "steps/sec" in caplog.text


def test_nested_observation_with_action_mask(tmp_path):
    from rlops.agents import specs as specs_lib
    from rlops.agents.policies import RandomPolicy
    from rlops.agents.trajectories import time_step_spec

    obs_spec = {"context": tf.TensorSpec([3], tf.float32, "context"), "mask": tf.TensorSpec([4], tf.int32, "mask")}
    policy = RandomPolicy(
        time_step_spec(obs_spec),
        specs_lib.BoundedTensorSpec((), tf.int32, 0, 3, name="action"),
        observation_and_action_constraint_splitter=lambda o: (o["context"], o["mask"]),
    )
    PolicySaver(policy).save(str(tmp_path / "p"))
    assert load_specs(str(tmp_path / "p"))["signatures"]["action"] == {
        "inputs": ["step_type", "reward", "discount", "observation_context", "observation_mask"],
        "outputs": ["action", "info/propensity"],
    }
    out = tf.saved_model.load(str(tmp_path / "p")).signatures["action"](
        step_type=np.zeros([50], np.int32),
        reward=np.zeros([50], np.float32),
        discount=np.ones([50], np.float32),
        observation_context=np.zeros([50, 3], np.float32),
        observation_mask=np.tile([[0, 1, 0, 1]], [50, 1]),
    )
    assert set(out["action"].numpy()) <= {1, 3}
    np.testing.assert_allclose(out["info/propensity"].numpy(), 0.5)


# --- serving_default: the exploring head a server runs -------------------------------------------


class _LinearGreedy(tf.Module):
    """argmax(observation @ W): a stateless discrete policy with a known greedy action."""

    def __init__(self, w):
        from rlops.agents import specs
        from rlops.agents.trajectories import time_step_spec

        super().__init__()
        self.w = tf.Variable(w, dtype=tf.float32)
        self.time_step_spec = self._no_dependency(time_step_spec(tf.TensorSpec((w.shape[0],), tf.float32, "context")))
        self.action_spec = self._no_dependency(specs.BoundedTensorSpec((), tf.int32, 0, w.shape[1] - 1, name="action"))
        self.info_spec, self.policy_state_spec = (), ()

    def action(self, time_step, policy_state=(), seed=None):
        from rlops.agents.trajectories import PolicyStep

        return PolicyStep(tf.argmax(time_step.observation @ self.w, -1, output_type=tf.int32), (), ())

    def get_initial_state(self, batch_size=None):
        return ()


def test_serving_default_samples_the_exploring_policy_and_reports_its_propensity(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 4)).astype(np.float32)
    obs = rng.normal(size=(5, 3)).astype(np.float32)
    policy = _LinearGreedy(w)
    with pytest.raises(ValueError, match="serving_epsilon must be in"):
        PolicySaver(policy, serving_epsilon=1.5)
    PolicySaver(policy, serving_epsilon=0.3).save(str(tmp_path / "p"))
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    assert {"action", "serving_default", "serving_masked"} <= set(loaded.signatures)
    assert float(loaded.signatures["get_metadata"]()["serving_epsilon"]) == pytest.approx(0.3)
    serve = loaded.signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["context"]  # the dense feature, by its name
    greedy = np.argmax(obs @ w, -1)
    n = 4000
    out = serve(context=tf.constant(np.repeat(obs, n, axis=0)))
    a = out["action"].numpy().reshape(5, n)
    p = out["propensity"].numpy().reshape(5, n)
    np.testing.assert_array_equal(out["greedy_action"].numpy().reshape(5, n), np.repeat(greedy[:, None], n, 1))
    expected = np.where(a == greedy[:, None], 0.7 + 0.3 / 4, 0.3 / 4)
    np.testing.assert_allclose(p, expected, rtol=1e-6)
    for i in range(5):  # empirical action frequencies match the reported probabilities
        freq = np.bincount(a[i], minlength=4) / n
        want = np.full(4, 0.3 / 4)
        want[greedy[i]] += 0.7
        np.testing.assert_allclose(freq, want, atol=0.03)
    # The evaluator's `action` signature is unchanged: the greedy action.
    acted = loaded.signatures["action"](
        step_type=tf.zeros([5], tf.int32), reward=tf.zeros([5]), discount=tf.ones([5]), observation=tf.constant(obs)
    )["action"]
    np.testing.assert_array_equal(acted.numpy(), greedy)


def test_serving_masked_never_picks_a_masked_action(tmp_path):
    w = np.eye(3, dtype=np.float32)
    obs = np.array([[5, 0, 0], [5, 0, 0]], np.float32)  # greedy action 0 for both rows
    PolicySaver(_LinearGreedy(w), serving_epsilon=0.2).save(str(tmp_path / "p"))
    serve = tf.saved_model.load(str(tmp_path / "p")).signatures["serving_masked"]
    n = 3000
    mask = np.repeat(np.array([[1, 1, 0], [0, 1, 1]], np.int64), n, axis=0)  # row 2 masks the greedy action
    out = serve(context=tf.constant(np.repeat(obs, n, axis=0)), action_mask=tf.constant(mask))
    a, p = out["action"].numpy().reshape(2, n), out["propensity"].numpy().reshape(2, n)
    assert set(a[0]) <= {0, 1} and set(a[1]) <= {1, 2}
    np.testing.assert_allclose(p[0], np.where(a[0] == 0, 0.8 + 0.1, 0.1), rtol=1e-6)
    np.testing.assert_allclose(p[1], 0.5, rtol=1e-6)  # greedy masked out: uniform over the 2 allowed
    assert abs(np.mean(a[0] == 0) - 0.9) < 0.03 and abs(np.mean(a[1] == 1) - 0.5) < 0.04
