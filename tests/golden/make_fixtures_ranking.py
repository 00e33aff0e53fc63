"""Golden fixtures for the ranking agent, written by TF-Agents 0.19's own RankingAgent.

Run with the golden virtualenv (see requirements.txt), never the main one:
    <golden-venv>/bin/python tests/golden/make_fixtures_ranking.py

Each case builds TF-Agents' RankingAgent over a GlobalAndArmCommonTowerNetwork (global (4,),
arm (4,), common (8,)) with fixed seeds, trains it on fixed [B, 1] batches (per_arm holds the L
shown items in display order, as TF-Agents trains) and saves into fixtures/ranking_<case>.npz:
the batches, the initial and final weights (rlops' order: global, arm, common hidden, output;
kernel then bias), the loss before and the loss returned by each train step, and on fixed
evaluation contexts over K candidates the policy's predicted scores and its DESCENDING_SCORES
slate. fixtures/signatures_ranking.json lists RankingAgent's constructor arguments. (0.19 takes
`positional_bias_type` as 'base' / 'exponent'; the PositionalBiasType enum and its
FIXED_BIAS_WEIGHTS came after the release.)
"""

import inspect
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_agents  # noqa: E402
from tf_agents.bandits.agents import ranking_agent  # noqa: E402
from tf_agents.bandits.networks import global_and_arm_feature_network as gafn  # noqa: E402
from tf_agents.specs import bandit_spec_utils, tensor_spec  # noqa: E402
from tf_agents.trajectories import time_step as ts, trajectory  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
K, L, DG, DA, B = 6, 3, 3, 2, 16
N_EVAL = 5


def _experience(obs, reward):
    """A [B, 1] single-step Trajectory (the action is unused by the ranking agent)."""
    add_t = lambda t: tf.nest.map_structure(lambda x: tf.expand_dims(tf.convert_to_tensor(x), 1), t)  # noqa: E731
    b = len(obs["global"])
    return trajectory.Trajectory(
        step_type=add_t(tf.fill([b], ts.StepType.FIRST)),
        observation=add_t(obs),
        action=add_t(tf.zeros([b, L], tf.int32)),
        policy_info=(),
        next_step_type=add_t(tf.fill([b], ts.StepType.LAST)),
        reward=add_t(reward),
        discount=add_t(tf.zeros([b])),
    )


def _batch(rng, feedback, num_actions):
    g = rng.normal(size=(B, DG)).astype(np.float32)
    items = rng.normal(size=(B, L, DA)).astype(np.float32)
    out = {"global": g, "per_arm": items, "w": rng.uniform(0.5, 2.0, B).astype(np.float32)}
    if num_actions:
        out["num_actions"] = rng.integers(1, L + 1, B).astype(np.int32)  # shown slots per slate
    if feedback == "score_vector":
        r = rng.normal(size=(B, L)).astype(np.float32)
        r[rng.uniform(size=(B, L)) < 0.4] = 0.0  # unclicked slots
        out["r"] = r
    else:
        out["chosen_index"] = rng.integers(0, L + 1, B).astype(np.int32)  # L: no click
        out["chosen_value"] = rng.uniform(0.5, 2.0, B).astype(np.float32)
    return out


def case(
    name,
    feedback,
    optimizer,
    weights=None,
    num_actions=False,
    non_click_score=None,
    bias_type=None,
    severity=None,
    positive_only=False,
    seed=0,
):
    tf.random.set_seed(20 + seed)
    rng = np.random.default_rng(20 + seed)
    obs_spec = bandit_spec_utils.create_per_arm_observation_spec(DG, DA, K, add_num_actions_feature=num_actions)
    net = gafn.create_feed_forward_common_tower_network(obs_spec, (4,), (4,), (8,))
    if feedback == "score_vector":
        reward_spec = tensor_spec.TensorSpec([L], tf.float32)
        model = ranking_agent.FeedbackModel.SCORE_VECTOR
    else:
        reward_spec = {
            ranking_agent.CHOSEN_INDEX: tensor_spec.BoundedTensorSpec([], tf.int32, 0, L),
            ranking_agent.CHOSEN_VALUE: tensor_spec.TensorSpec([], tf.float32),
        }
        model = ranking_agent.FeedbackModel.CASCADING
    action_spec = tensor_spec.BoundedTensorSpec([L], tf.int32, 0, K - 1)
    agent = ranking_agent.RankingAgent(
        ts.time_step_spec(obs_spec, reward_spec=reward_spec),
        action_spec,
        net,
        optimizer,
        policy_type=ranking_agent.RankingPolicyType.DESCENDING_SCORES,
        feedback_model=model,
        non_click_score=non_click_score,
        positional_bias_type=bias_type,
        positional_bias_severity=severity,
        positional_bias_positive_only=positive_only,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )
    towers = [net._global_network, net._arm_network, net._common_network]
    variables = [v for t in towers for v in t.trainable_variables]
    out = {f"init_{i}": v.numpy() for i, v in enumerate(variables)}
    out["var_names"] = np.array([v.name for v in variables])
    for i in range(3):
        b = _batch(rng, feedback, num_actions)
        obs = {"global": b["global"], "per_arm": b["per_arm"]}
        if num_actions:
            obs["num_actions"] = b["num_actions"]
        if feedback == "score_vector":
            reward = b["r"]
        else:
            reward = {ranking_agent.CHOSEN_INDEX: b["chosen_index"], ranking_agent.CHOSEN_VALUE: b["chosen_value"]}
        exp = _experience(obs, reward)
        w = {"per_example": b["w"], "scalar": np.float32(0.7), None: None}[weights]
        w = None if w is None else tf.constant(w)
        out[f"loss_before_{i}"] = agent.loss(exp, w).loss.numpy()
        out[f"train_loss_{i}"] = agent.train(exp, w).loss.numpy()
        out.update({f"batch{i}_{k}": v for k, v in b.items()})
    ev_rng = np.random.default_rng(99)
    ev = {
        "global": ev_rng.normal(size=(N_EVAL, DG)).astype(np.float32),
        "per_arm": ev_rng.normal(size=(N_EVAL, K, DA)).astype(np.float32),
    }
    if num_actions:
        ev["num_actions"] = np.full(N_EVAL, K, np.int32)
    step = agent.policy.action(ts.restart(ev, batch_size=N_EVAL, reward_spec=reward_spec))
    np.savez(
        os.path.join(OUT, f"ranking_{name}.npz"),
        **out,
        **{f"final_{i}": v.numpy() for i, v in enumerate(variables)},
        **{f"eval_{k}": v for k, v in ev.items()},
        eval_scores=step.info.predicted_rewards_mean.numpy(),
        eval_slate=step.action.numpy(),
        train_step=agent.train_step_counter.numpy(),
        feedback=feedback,
        weights=str(weights),
        num_actions=num_actions,
        non_click_score=np.nan if non_click_score is None else non_click_score,
        bias_type=str(bias_type),
        severity=np.nan if severity is None else severity,
        positive_only=positive_only,
        optimizer=type(optimizer).__name__,
    )
    print("wrote", name, [float(out[f"train_loss_{i}"]) for i in range(3)])


def signatures():
    params = [p for p in inspect.signature(ranking_agent.RankingAgent.__init__).parameters if p != "self"]
    path = os.path.join(OUT, "signatures_ranking.json")
    with open(path, "w") as f:
        json.dump({"tf_agents_version": tf_agents.__version__, "RankingAgent": params}, f, indent=1)
        f.write("\n")
    print("wrote", path)


def main():
    os.makedirs(OUT, exist_ok=True)
    sgd = lambda: tf.keras.optimizers.SGD(0.1)  # noqa: E731
    case("score_vector_sgd", "score_vector", sgd(), weights="per_example", seed=0)
    case("cascading_adam_num_actions", "cascading", tf.keras.optimizers.Adam(0.01), num_actions=True, seed=1)
    case(
        "cascading_base_bias",
        "cascading",
        sgd(),
        "scalar",
        non_click_score=-0.5,
        bias_type="base",
        severity=0.5,
        seed=2,
    )
    case("cascading_exponent_bias", "cascading", sgd(), "per_example", bias_type="exponent", severity=0.8, seed=3)
    case("score_vector_exponent_num_actions", "score_vector", sgd(), "per_example", num_actions=True,
         bias_type="exponent", severity=0.5, seed=4)  # fmt: skip
    # positional_bias_positive_only: rlops keeps the unbiased weight of non-positive slots where
    # TF-Agents sets it to 1; they agree with no example weights, no num_actions and SCORE_VECTOR.
    case("score_vector_base_positive_only", "score_vector", sgd(), bias_type="base", severity=1.0,
         positive_only=True, seed=5)  # fmt: skip
    signatures()


if __name__ == "__main__":
    main()
