"""rlops' bandit agents against TF-Agents 0.19 itself (fixtures from make_fixtures_bandits.py).

Same initial weights, same batches: losses, updated weights / A / b / theta, greedy actions,
predicted rewards and the exploring policies' action probabilities must agree to float
tolerance (sampled quantities: to a few standard errors of TF-Agents' N draws).
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import specs, trajectories
from rlops.agents.bandits import LinearThompsonSamplingAgent, LinUCBAgent, NeuralEpsilonGreedyAgent
from rlops.agents.networks import RewardNetwork
from rlops.train.policy_saver import PolicySaver

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
K, D = 4, 3
ACTION_SPEC = specs.BoundedTensorSpec((), tf.int32, 0, K - 1)
CONTEXT_SPEC = tf.TensorSpec([D], tf.float32)
MASKED_SPEC = {"context": CONTEXT_SPEC, "mask": tf.TensorSpec([K], tf.int32)}


def splitter(o):
    return o["context"], o["mask"]


def load(name):
    with np.load(os.path.join(FIXTURES, f"bandits_{name}.npz")) as data:
        return {k: data[k] for k in data.files}


def experience(obs, actions, rewards, info=()):
    return trajectories.single_step_trajectory(obs, actions, rewards, info)


# --- NeuralEpsilonGreedy -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,masked,optimizer,weighted",
    [
        ("neural_mask_laplacian_sgd", True, lambda: tf_keras.optimizers.SGD(0.1), True),
        ("neural_adam", False, lambda: tf_keras.optimizers.Adam(0.01), False),
    ],
)
def test_neural_epsilon_greedy_matches_tf_agents(case, masked, optimizer, weighted):
    f = load(case)
    net = RewardNetwork(CONTEXT_SPEC, K, hidden_sizes=(8,), seed=0)
    variables = [
        net.mlp.layers[0].kernel,
        net.mlp.layers[0].bias,
        net.mlp.output_layer.kernel,
        net.mlp.output_layer.bias,
    ]
    for i, v in enumerate(variables):  # TF-Agents' QNetwork order: hidden kernel, bias, output kernel, bias
        v.assign(f[f"init_{i}"])
    lap = f["laplacian"] if f["laplacian"].size else None
    agent = NeuralEpsilonGreedyAgent(
        trajectories.time_step_spec(MASKED_SPEC if masked else CONTEXT_SPEC),
        ACTION_SPEC,
        net,
        optimizer(),
        epsilon=float(f["epsilon"]),
        observation_and_action_constraint_splitter=splitter if masked else None,
        laplacian_matrix=lap,
        laplacian_smoothing_weight=0.1,
        emit_policy_info=("predicted_rewards_mean",),
    )
    for i in range(2):
        b = lambda k, i=i: f[f"batch{i}_{k}"]  # noqa: E731
        obs = {"context": b("x"), "mask": b("mask")} if masked else b("x")
        exp = experience(obs, b("a"), b("r"))
        w = b("w") if weighted else None
        np.testing.assert_allclose(agent.loss(exp, w).loss.numpy(), f[f"loss_before_{i}"], rtol=1e-5)
        np.testing.assert_allclose(
            agent.reward_loss(b("x"), b("a"), b("r"), w).numpy(), f[f"reward_loss_{i}"], rtol=1e-5
        )
        np.testing.assert_allclose(agent.train(exp, w).loss.numpy(), f[f"train_loss_{i}"], rtol=1e-5)
    for i, v in enumerate(variables):
        np.testing.assert_allclose(v.numpy(), f[f"final_{i}"], rtol=1e-4, atol=1e-6)
    assert agent.train_step_counter.numpy() == f["train_step"]

    n_eval, n = len(f["eval_x"]), int(f["n_samples"])
    eval_obs = {"context": f["eval_x"], "mask": f["eval_mask"]} if masked else f["eval_x"]
    step = agent.policy.action(trajectories.restart(eval_obs, n_eval))
    np.testing.assert_array_equal(step.action.numpy(), f["greedy_action"])
    np.testing.assert_allclose(
        step.info["predicted_rewards_mean"].numpy(), f["predicted_rewards_mean"], rtol=1e-4, atol=1e-6
    )
    # The exploring policy: rlops' logged propensities vs TF-Agents' action frequencies.
    tiled = tf.nest.map_structure(lambda t: np.repeat(t, 2000, axis=0), eval_obs)
    collected = agent.collect_policy.action(trajectories.restart(tiled, n_eval * 2000))
    actions = collected.action.numpy().reshape(n_eval, 2000)
    prop = collected.info["propensity"].numpy().reshape(n_eval, 2000)
    probs = np.zeros((n_eval, K))
    for c in range(n_eval):
        for a in np.unique(actions[c]):
            probs[c, a] = prop[c][actions[c] == a][0]
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    freq = f["collect_frequencies"]
    np.testing.assert_array_equal(freq > 0, probs > 0)  # same support (masked arms never chosen)
    tolerance = 5 * np.sqrt(probs * (1 - probs) / n) + 1e-3
    assert (np.abs(freq - probs) <= tolerance).all(), (freq, probs)


# --- LinUCB / LinTS ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,cls,masked",
    [
        ("linucb", LinUCBAgent, False),
        ("linucb_gamma_mask", LinUCBAgent, True),
        ("lints", LinearThompsonSamplingAgent, False),
        ("lints_gamma", LinearThompsonSamplingAgent, False),
    ],
)
def test_linear_agents_match_tf_agents(case, cls, masked):
    f = load(case)
    ucb = cls is LinUCBAgent
    emit = ("predicted_rewards_mean", "predicted_rewards_optimistic" if ucb else "predicted_rewards_sampled")
    agent = cls(
        trajectories.time_step_spec(MASKED_SPEC if masked else CONTEXT_SPEC),
        ACTION_SPEC,
        alpha=float(f["alpha"]),
        gamma=float(f["gamma"]),
        tikhonov_weight=float(f["tikhonov"]),
        add_bias=bool(f["add_bias"]),
        emit_policy_info=emit,
        observation_and_action_constraint_splitter=splitter if masked else None,
    )
    for i in range(3):
        b = lambda k, i=i: f[f"batch{i}_{k}"]  # noqa: E731
        obs = {"context": b("x"), "mask": b("mask")} if masked else b("x")
        loss = agent.train(experience(obs, b("a"), b("r")))  # TF-Agents ignores weights: none here
        np.testing.assert_allclose(loss.loss.numpy(), f[f"train_loss_{i}"], rtol=1e-5)
    np.testing.assert_allclose(agent.cov_matrix.numpy(), f["cov_matrix"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(agent.data_vector.numpy(), f["data_vector"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(agent.num_samples.numpy(), f["num_samples"])
    np.testing.assert_allclose(agent.theta.numpy(), f["theta"], rtol=1e-4, atol=1e-5)  # TF-Agents: conj. gradient
    assert agent.train_step_counter.numpy() == f["train_step"]

    n_eval = len(f["eval_x"])
    eval_obs = {"context": f["eval_x"], "mask": f["eval_mask"]} if masked else f["eval_x"]
    step = agent.policy.action(trajectories.restart(eval_obs, n_eval))
    np.testing.assert_allclose(
        step.info["predicted_rewards_mean"].numpy(), f["predicted_rewards_mean"], rtol=1e-4, atol=1e-5
    )
    if ucb:
        np.testing.assert_allclose(
            step.info["predicted_rewards_optimistic"].numpy(), f["predicted_rewards_optimistic"], rtol=1e-4, atol=1e-5
        )
        np.testing.assert_array_equal(step.action.numpy(), f["action"])
        return
    # Thompson draws for the first eval context: TF-Agents' sample mean/std vs rlops' Normal.
    n = int(f["n_samples"])
    first = tf.nest.map_structure(lambda t: t[:1], eval_obs)
    mean = agent.greedy_policy.scores(agent.greedy_policy.features(first)[0])["mean"].numpy()[0]
    std = float(f["alpha"]) * agent.policy.scores(agent.policy.features(first)[0])["std"].numpy()[0]
    assert (np.abs(f["sampled_mean"] - mean) <= 5 * std / np.sqrt(n)).all(), (f["sampled_mean"], mean)
    np.testing.assert_allclose(f["sampled_std"], std, rtol=0.06)


def test_per_arm_linucb_matches_tf_agents():
    f = load("per_arm_linucb")
    obs_spec = {
        "global": tf.TensorSpec([3], tf.float32),
        "per_arm": tf.TensorSpec([K, 2], tf.float32),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, K),
    }
    agent = LinUCBAgent(
        trajectories.time_step_spec(obs_spec),
        ACTION_SPEC,
        alpha=float(f["alpha"]),
        tikhonov_weight=float(f["tikhonov"]),
        add_bias=True,
        accepts_per_arm_features=True,
        emit_policy_info=("predicted_rewards_mean", "predicted_rewards_optimistic"),
    )
    for i in range(2):
        b = lambda k, i=i: f[f"batch{i}_{k}"]  # noqa: E731
        obs = {"global": b("global"), "per_arm": b("per_arm"), "num_actions": b("num_actions")}
        step = agent.policy.action(trajectories.restart(obs, len(b("r"))))
        np.testing.assert_array_equal(step.action.numpy(), f[f"action_{i}"])
        np.testing.assert_allclose(step.info["chosen_arm_features"].numpy(), b("chosen"), rtol=1e-6)
        assert (step.action.numpy() < b("num_actions")).all()
        train_obs = {"global": b("global"), "num_actions": b("num_actions")}  # no 'per_arm', as TF-Agents
        loss = agent.train(experience(train_obs, step.action, b("r"), step.info))
        np.testing.assert_allclose(loss.loss.numpy(), f[f"train_loss_{i}"], rtol=1e-5)
    np.testing.assert_allclose(agent.cov_matrix.numpy(), f["cov_matrix"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(agent.data_vector.numpy(), f["data_vector"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(agent.theta.numpy(), f["theta"], rtol=1e-4, atol=1e-5)
    assert agent.train_step_counter.numpy() == f["train_step"]


# --- argument parity ---------------------------------------------------------------------------


def test_signatures_cover_tf_agents_arguments():
    """Every TF-Agents constructor argument name (inspect, in the golden venv) is accepted here."""
    import inspect

    with open(os.path.join(FIXTURES, "signatures_bandits.json")) as fh:
        sigs = json.load(fh)
    assert sigs["tf_agents_version"] == "0.19.0"
    ours = {
        "NeuralEpsilonGreedyAgent": NeuralEpsilonGreedyAgent,
        "LinearUCBAgent": LinUCBAgent,
        "LinearThompsonSamplingAgent": LinearThompsonSamplingAgent,
        "PolicySaver": PolicySaver,
    }
    for name, cls in ours.items():
        params = inspect.signature(cls.__init__).parameters
        missing = [a for a in sigs[name] if a not in params]
        assert not missing, f"{name} lacks TF-Agents arguments {missing}"
        # Positional order matches too, for users who pass arguments positionally.
        ours_order = [p for p in params if p != "self"]
        assert ours_order[: len(sigs[name][:5])] == sigs[name][:5], (name, ours_order[:5])


def test_policy_saver_tf_agents_arguments_default_or_clear_error(tmp_path):
    agent = LinUCBAgent(trajectories.time_step_spec(CONTEXT_SPEC), ACTION_SPEC)
    saver = PolicySaver(agent.policy, None, True, None, train_step=agent.train_step_counter, input_fn_and_spec=None)
    saver.save(str(tmp_path / "p"))
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    x = np.random.default_rng(0).normal(size=(3, D)).astype(np.float32)
    out = loaded.signatures["action"](
        step_type=tf.zeros([3], tf.int32), reward=tf.zeros([3]), discount=tf.ones([3]), observation=tf.constant(x)
    )
    np.testing.assert_array_equal(
        out["action"].numpy(), agent.policy.action(trajectories.restart(tf.constant(x), 3)).action.numpy()
    )
    with pytest.raises(ValueError, match="nest path"):
        PolicySaver(agent.policy, use_nest_path_signatures=False)
    with pytest.raises(ValueError, match="seed"):
        PolicySaver(agent.policy, seed=1)
    with pytest.raises(NotImplementedError, match="serving_default"):
        PolicySaver(agent.policy, input_fn_and_spec=(lambda x: x, CONTEXT_SPEC))


def test_per_arm_neural_epsilon_greedy_matches_tf_agents():
    """Per-arm NeuralEpsilonGreedy with TF-Agents' GlobalAndArmCommonTowerNetwork layout."""
    from rlops.agents.bandits import PerArmRewardNetwork

    f = load("per_arm_neural")
    obs_spec = {
        "global": tf.TensorSpec([3], tf.float32),
        "per_arm": tf.TensorSpec([K, 2], tf.float32),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, K),
    }
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
    agent = NeuralEpsilonGreedyAgent(
        trajectories.time_step_spec(obs_spec),
        ACTION_SPEC,
        net,
        tf_keras.optimizers.SGD(0.1),
        epsilon=0.2,
        accepts_per_arm_features=True,
        emit_policy_info=("predicted_rewards_mean",),
    )
    for i in range(2):
        b = lambda k, i=i: f[f"batch{i}_{k}"]  # noqa: E731
        obs = {"global": b("global"), "per_arm": b("per_arm"), "num_actions": b("num_actions")}
        step = agent.policy.action(trajectories.restart(obs, len(b("r"))))  # rlops' policy is the greedy one
        np.testing.assert_array_equal(step.action.numpy(), f[f"greedy_action_{i}"])
        pred, ref = step.info["predicted_rewards_mean"].numpy(), f[f"predicted_rewards_mean_{i}"]
        available = np.arange(K)[None] < b("num_actions")[:, None]  # TF-Agents masks unavailable arms' scores
        np.testing.assert_allclose(pred[available], ref[available], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(step.info["chosen_arm_features"].numpy(), b("chosen"), rtol=1e-6)
        exp = experience({"global": b("global"), "num_actions": b("num_actions")}, step.action, b("r"), step.info)
        np.testing.assert_allclose(agent.loss(exp).loss.numpy(), f[f"loss_before_{i}"], rtol=1e-5)
        np.testing.assert_allclose(agent.train(exp).loss.numpy(), f[f"train_loss_{i}"], rtol=1e-5)
    for i, v in enumerate(variables):
        np.testing.assert_allclose(v.numpy(), f[f"final_{i}"], rtol=1e-4, atol=1e-6)
    assert agent.train_step_counter.numpy() == f["train_step"]
