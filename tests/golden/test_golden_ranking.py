"""rlops' RankingAgent against TF-Agents 0.19's own (fixtures from make_fixtures_ranking.py).

Same initial weights, same batches: the loss before each step, the loss each train step returns,
the updated weights, the policy's scores and its greedy (DESCENDING_SCORES) slate must agree to
float tolerance, for SCORE_VECTOR and CASCADING feedback, with and without positional bias,
example weights and num_actions.
"""

import inspect
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import specs, trajectories
from rlops.agents.bandits import PerArmRewardNetwork
from rlops.agents.ranking import CHOSEN_INDEX, CHOSEN_VALUE, FeedbackModel, RankingAgent, RankingPolicyType

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
K, L, DG, DA = 6, 3, 3, 2
CASES = [
    "score_vector_sgd",
    "cascading_adam_num_actions",
    "cascading_base_bias",
    "cascading_exponent_bias",
    "score_vector_exponent_num_actions",
    "score_vector_base_positive_only",
]


def load(name):
    with np.load(os.path.join(FIXTURES, f"ranking_{name}.npz")) as data:
        return {k: data[k] for k in data.files}


def build(f):
    num_actions = bool(f["num_actions"])
    obs_spec = {"global": tf.TensorSpec([DG], tf.float32), "per_arm": tf.TensorSpec([K, DA], tf.float32)}
    if num_actions:
        obs_spec["num_actions"] = specs.BoundedTensorSpec((), tf.int32, 1, K)
    cascading = str(f["feedback"]) == "cascading"
    if cascading:
        reward_spec = {
            CHOSEN_INDEX: specs.BoundedTensorSpec((), tf.int32, 0, L),
            CHOSEN_VALUE: tf.TensorSpec((), tf.float32),
        }
    else:
        reward_spec = tf.TensorSpec([L], tf.float32)
    net = PerArmRewardNetwork(obs_spec, global_layers=(4,), arm_layers=(4,), common_layers=(8,))
    layers = [
        net.global_tower.layers[0],
        net.arm_tower.layers[0],
        net.common_tower.layers[0],
        net.common_tower.output_layer,
    ]
    variables = [v for layer in layers for v in (layer.kernel, layer.bias)]
    for i, v in enumerate(variables):
        v.assign(f[f"init_{i}"])
    optimizer = tf_keras.optimizers.SGD(0.1) if str(f["optimizer"]) == "SGD" else tf_keras.optimizers.Adam(0.01)
    bias = str(f["bias_type"])
    agent = RankingAgent(
        trajectories.time_step_spec(obs_spec, reward_spec),
        specs.BoundedTensorSpec([L], tf.int32, 0, K - 1),
        net,
        optimizer,
        policy_type=RankingPolicyType.DESCENDING_SCORES,
        feedback_model=FeedbackModel.CASCADING if cascading else FeedbackModel.SCORE_VECTOR,
        non_click_score=None if np.isnan(f["non_click_score"]) else float(f["non_click_score"]),
        positional_bias_type=None if bias == "None" else bias,
        positional_bias_severity=None if np.isnan(f["severity"]) else float(f["severity"]),
        positional_bias_positive_only=bool(f["positive_only"]),
    )
    return agent, variables, cascading, num_actions


def experience(f, i, cascading, num_actions):
    b = lambda k: f[f"batch{i}_{k}"]  # noqa: E731
    obs = {"global": b("global"), "per_arm": b("per_arm")}
    if num_actions:
        obs["num_actions"] = b("num_actions")
    reward = {CHOSEN_INDEX: b("chosen_index"), CHOSEN_VALUE: b("chosen_value")} if cascading else b("r")
    add_t = lambda t: tf.nest.map_structure(lambda x: tf.expand_dims(tf.convert_to_tensor(x), 1), t)  # noqa: E731
    n = len(b("global"))
    return trajectories.Trajectory(
        step_type=add_t(tf.fill([n], trajectories.StepType.FIRST)),
        observation=add_t(obs),
        action=add_t(tf.zeros([n, L], tf.int32)),
        policy_info=(),
        next_step_type=add_t(tf.fill([n], trajectories.StepType.LAST)),
        reward=add_t(reward),
        discount=add_t(tf.zeros([n])),
    )


@pytest.mark.parametrize("case", CASES)
def test_ranking_agent_matches_tf_agents(case):
    f = load(case)
    agent, variables, cascading, num_actions = build(f)
    weights = {"per_example": lambda i: f[f"batch{i}_w"], "scalar": lambda i: np.float32(0.7), "None": lambda i: None}[
        str(f["weights"])
    ]
    for i in range(3):
        exp = experience(f, i, cascading, num_actions)
        np.testing.assert_allclose(agent.loss(exp, weights(i)).loss.numpy(), f[f"loss_before_{i}"], rtol=1e-5)
        np.testing.assert_allclose(agent.train(exp, weights(i)).loss.numpy(), f[f"train_loss_{i}"], rtol=1e-5)
    for i, v in enumerate(variables):
        np.testing.assert_allclose(v.numpy(), f[f"final_{i}"], rtol=1e-4, atol=1e-6)
    assert agent.train_step_counter.numpy() == f["train_step"]
    ev = {"global": f["eval_global"], "per_arm": f["eval_per_arm"]}
    if num_actions:
        ev["num_actions"] = f["eval_num_actions"]
    step = agent.policy.action(trajectories.restart(ev, len(ev["global"])))
    np.testing.assert_allclose(step.info["predicted_rewards_mean"].numpy(), f["eval_scores"], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(step.action.numpy(), f["eval_slate"])


def test_signature_covers_tf_agents_arguments():
    with open(os.path.join(FIXTURES, "signatures_ranking.json")) as fh:
        sigs = json.load(fh)
    assert sigs["tf_agents_version"] == "0.19.0"
    ours = [p for p in inspect.signature(RankingAgent.__init__).parameters if p != "self"]
    assert ours[: len(sigs["RankingAgent"])] == sigs["RankingAgent"]  # positional order too
