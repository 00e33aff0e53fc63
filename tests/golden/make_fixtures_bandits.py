"""Golden fixtures for the bandit agents, written by TF-Agents 0.19 itself.

Run with the golden virtualenv (TF-Agents 0.19, TF 2.15.1, TFP 0.23, Python 3.11), never the
main one:  <golden-venv>/bin/python tests/golden/make_fixtures_bandits.py
(or `tests/golden/make_fixtures.py`, which runs every make_fixtures_*.py).

Each case builds a TF-Agents agent with fixed seeds, trains it on fixed batches and saves into
fixtures/bandits_<case>.npz: the inputs, the initial weights, the losses, the updated weights
or statistics (A, b, counts, theta), and the policies' outputs on fixed evaluation contexts
(greedy actions, predicted rewards, and action frequencies of the stochastic policies, sampled
N_SAMPLES times). fixtures/signatures_bandits.json lists TF-Agents' constructor arguments.
"""

import inspect
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_agents  # noqa: E402
from tf_agents.bandits.agents import (  # noqa: E402
    lin_ucb_agent,
    linear_thompson_sampling_agent as lints_agent,
    neural_epsilon_greedy_agent,  # noqa: E402
)
from tf_agents.bandits.specs import utils as bandit_spec_utils  # noqa: E402
from tf_agents.networks import q_network  # noqa: E402
from tf_agents.policies import policy_saver  # noqa: E402
from tf_agents.specs import tensor_spec  # noqa: E402
from tf_agents.trajectories import time_step as ts, trajectory  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
K, D = 4, 3
N_EVAL, N_SAMPLES = 6, 4000


def _experience(obs, actions, rewards, policy_info=()):
    """A [B, 1] single-step Trajectory (what the agents train on)."""
    add_t = lambda t: tf.nest.map_structure(lambda x: tf.expand_dims(tf.convert_to_tensor(x), 1), t)  # noqa: E731
    b = len(rewards)
    return trajectory.Trajectory(
        step_type=add_t(tf.fill([b], ts.StepType.FIRST)),
        observation=add_t(obs),
        action=add_t(actions),
        policy_info=add_t(policy_info),
        next_step_type=add_t(tf.fill([b], ts.StepType.LAST)),
        reward=add_t(rewards),
        discount=add_t(tf.zeros([b])),
    )


def _restart(obs, b):
    return ts.restart(obs, batch_size=b)


def _batch(rng, n, mask=False):
    x = rng.normal(size=(n, D)).astype(np.float32)
    a = rng.integers(0, K, n).astype(np.int32)
    r = (x @ rng.normal(size=(D, K)).astype(np.float32))[np.arange(n), a] + 0.1 * rng.normal(size=n)
    out = {"x": x, "a": a, "r": r.astype(np.float32), "w": rng.uniform(0.5, 2.0, n).astype(np.float32)}
    if mask:
        m = (rng.uniform(size=(n, K)) < 0.6).astype(np.int32)
        m[np.arange(n), a] = 1  # the logged action was allowed
        out["mask"] = m
    return out


def _save(name, **arrays):
    path = os.path.join(OUT, f"bandits_{name}.npz")
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    print("wrote", path, sorted(arrays))


def _frequencies(policy, obs, n_eval):
    """[n_eval, K] how often each action was taken over N_SAMPLES draws per context."""
    tiled = tf.nest.map_structure(lambda t: tf.repeat(t, N_SAMPLES, axis=0), obs)
    actions = policy.action(_restart(tiled, n_eval * N_SAMPLES)).action.numpy().reshape(n_eval, N_SAMPLES)
    return np.stack([(actions == k).mean(1) for k in range(K)], 1)


def neural_case(name, mask, laplacian, optimizer, weights):
    tf.random.set_seed(11)
    rng = np.random.default_rng(1)
    context_spec = tensor_spec.TensorSpec([D], tf.float32)
    splitter = None
    if mask:
        obs_spec = {"context": context_spec, "mask": tensor_spec.TensorSpec([K], tf.int32)}
        splitter = lambda o: (o["context"], o["mask"])  # noqa: E731
    else:
        obs_spec = context_spec
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int32, 0, K - 1)
    net = q_network.QNetwork(context_spec, action_spec, fc_layer_params=(8,))
    net.create_variables()
    lap = None
    if laplacian:
        adj = np.eye(K, k=1) + np.eye(K, k=-1)
        lap = (np.diag(adj.sum(1)) - adj).astype(np.float32)
    agent = neural_epsilon_greedy_agent.NeuralEpsilonGreedyAgent(
        ts.time_step_spec(obs_spec),
        action_spec,
        net,
        optimizer,
        epsilon=0.3,
        observation_and_action_constraint_splitter=splitter,
        laplacian_matrix=lap,
        laplacian_smoothing_weight=0.1,
        emit_policy_info=("predicted_rewards_mean",),
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )  # not the process-wide global step
    init = [v.numpy() for v in net.trainable_variables]
    batches = [_batch(rng, 32, mask) for _ in range(2)]
    obs_of = lambda b: {"context": b["x"], "mask": b["mask"]} if mask else b["x"]  # noqa: E731
    out = {"kernel_names": np.array([v.name for v in net.trainable_variables])}
    for i, b in enumerate(batches):
        info = tf.nest.map_structure(
            lambda s: tf.zeros([32] + s.shape.as_list(), s.dtype), agent.training_data_spec.policy_info
        )
        exp = _experience(obs_of(b), b["a"], b["r"], info)
        w = b["w"] if weights else None
        out[f"loss_before_{i}"] = agent.loss(exp, w).loss.numpy()
        obs = b["x"]
        out[f"reward_loss_{i}"] = agent.reward_loss(obs, b["a"], b["r"], w).numpy()
        out[f"train_loss_{i}"] = agent.train(exp, w).loss.numpy()
        for k, v in b.items():
            out[f"batch{i}_{k}"] = v
    ev = _batch(np.random.default_rng(99), N_EVAL, mask)
    ev_obs = obs_of(ev)
    step = agent._policy._greedy_policy.action(_restart(ev_obs, N_EVAL))  # the greedy policy inside
    _save(
        name,
        **out,
        **{f"init_{i}": v for i, v in enumerate(init)},
        **{f"final_{i}": v.numpy() for i, v in enumerate(net.trainable_variables)},
        eval_x=ev["x"],
        eval_mask=ev.get("mask", np.ones((N_EVAL, K), np.int32)),
        greedy_action=step.action.numpy(),
        predicted_rewards_mean=step.info.predicted_rewards_mean.numpy(),
        collect_frequencies=_frequencies(agent.collect_policy, ev_obs, N_EVAL),
        epsilon=0.3,
        train_step=agent.train_step_counter.numpy(),
        n_samples=N_SAMPLES,
        laplacian=lap if lap is not None else np.zeros((0,)),
    )


def linear_case(name, cls, gamma, mask, add_bias, alpha=0.5, tikhonov=0.7):
    tf.random.set_seed(12)
    rng = np.random.default_rng(2)
    context_spec = tensor_spec.TensorSpec([D], tf.float32)
    splitter = None
    if mask:
        obs_spec = {"context": context_spec, "mask": tensor_spec.TensorSpec([K], tf.int32)}
        splitter = lambda o: (o["context"], o["mask"])  # noqa: E731
    else:
        obs_spec = context_spec
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int32, 0, K - 1)
    emit = (
        "predicted_rewards_mean",
        "predicted_rewards_optimistic" if cls is lin_ucb_agent.LinearUCBAgent else "predicted_rewards_sampled",
    )
    agent = cls(
        ts.time_step_spec(obs_spec),
        action_spec,
        alpha=alpha,
        gamma=gamma,
        tikhonov_weight=tikhonov,
        add_bias=add_bias,
        emit_policy_info=emit,
        observation_and_action_constraint_splitter=splitter,
    )
    obs_of = lambda b: {"context": b["x"], "mask": b["mask"]} if mask else b["x"]  # noqa: E731
    out = {}
    # Linear agents count on the process-wide global step (no train_step_counter argument): keep the delta.
    step0 = agent.train_step_counter.numpy()
    for i in range(3):
        b = _batch(rng, 24, mask)
        info = tf.nest.map_structure(
            lambda s: tf.zeros([24] + s.shape.as_list(), s.dtype), agent.training_data_spec.policy_info
        )
        out[f"train_loss_{i}"] = agent.train(_experience(obs_of(b), b["a"], b["r"], info)).loss.numpy()
        for k, v in b.items():
            out[f"batch{i}_{k}"] = v
    ev = _batch(np.random.default_rng(98), N_EVAL, mask)
    step = agent.policy.action(_restart(obs_of(ev), N_EVAL))
    out.update(
        eval_x=ev["x"],
        eval_mask=ev.get("mask", np.ones((N_EVAL, K), np.int32)),
        cov_matrix=np.stack([v.numpy() for v in agent.cov_matrix]),
        data_vector=np.stack([v.numpy() for v in agent.data_vector]),
        num_samples=np.stack([v.numpy() for v in agent.num_samples]),
        theta=agent.theta.numpy(),
        train_step=agent.train_step_counter.numpy() - step0,
        alpha=alpha,
        gamma=gamma,
        tikhonov=tikhonov,
        add_bias=add_bias,
        predicted_rewards_mean=step.info.predicted_rewards_mean.numpy(),
    )
    if cls is lin_ucb_agent.LinearUCBAgent:
        out.update(
            action=step.action.numpy(), predicted_rewards_optimistic=step.info.predicted_rewards_optimistic.numpy()
        )
    else:  # sampled rewards of the first eval context, N_SAMPLES draws: their mean and std per arm
        tiled = tf.nest.map_structure(lambda t: tf.repeat(t[:1], N_SAMPLES, axis=0), obs_of(ev))
        sampled = agent.policy.action(_restart(tiled, N_SAMPLES)).info.predicted_rewards_sampled.numpy()
        out.update(sampled_mean=sampled.mean(0), sampled_std=sampled.std(0), n_samples=N_SAMPLES)
    _save(name, **out)


def per_arm_linucb_case(name, alpha=0.5, tikhonov=0.7):
    tf.random.set_seed(13)
    rng = np.random.default_rng(3)
    dg, da = 3, 2
    obs_spec = bandit_spec_utils.create_per_arm_observation_spec(dg, da, K, add_num_actions_feature=True)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int32, 0, K - 1)
    agent = lin_ucb_agent.LinearUCBAgent(
        ts.time_step_spec(obs_spec),
        action_spec,
        alpha=alpha,
        tikhonov_weight=tikhonov,
        add_bias=True,
        accepts_per_arm_features=True,
        emit_policy_info=("predicted_rewards_mean", "predicted_rewards_optimistic"),
    )
    out = {}
    step0 = agent.train_step_counter.numpy()
    theta = rng.normal(size=dg + da).astype(np.float32)
    for i in range(2):
        g = rng.normal(size=(24, dg)).astype(np.float32)
        arms = rng.normal(size=(24, K, da)).astype(np.float32)
        n_act = rng.integers(2, K + 1, 24).astype(np.int32)
        obs = {"global": g, "per_arm": arms, "num_actions": n_act}
        step = agent.policy.action(_restart(obs, 24))
        chosen = step.info.chosen_arm_features.numpy()
        r = (np.concatenate([g, chosen], 1) @ theta + 0.1 * rng.normal(size=24)).astype(np.float32)
        info = step.info  # what the policy logged, chosen_arm_features included
        train_obs = {"global": g, "num_actions": n_act}  # training data drops 'per_arm' (TF-Agents)
        out[f"action_{i}"] = step.action.numpy()
        out[f"train_loss_{i}"] = agent.train(_experience(train_obs, step.action.numpy(), r, info)).loss.numpy()
        out.update(
            {
                f"batch{i}_global": g,
                f"batch{i}_per_arm": arms,
                f"batch{i}_num_actions": n_act,
                f"batch{i}_chosen": chosen,
                f"batch{i}_r": r,
            }
        )
    _save(
        name,
        **out,
        cov_matrix=np.stack([v.numpy() for v in agent.cov_matrix]),
        data_vector=np.stack([v.numpy() for v in agent.data_vector]),
        theta=agent.theta.numpy(),
        train_step=agent.train_step_counter.numpy() - step0,
        alpha=alpha,
        tikhonov=tikhonov,
    )


def per_arm_neural_case(name):
    """Per-arm NeuralEpsilonGreedy with GlobalAndArmCommonTowerNetwork (global (4,), arm (4,),
    common (8,)): weights saved per tower in rlops' order (global, arm, common, output)."""
    from tf_agents.bandits.networks import global_and_arm_feature_network as gafn

    tf.random.set_seed(14)
    rng = np.random.default_rng(4)
    dg, da = 3, 2
    obs_spec = bandit_spec_utils.create_per_arm_observation_spec(dg, da, K, add_num_actions_feature=True)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int32, 0, K - 1)
    net = gafn.create_feed_forward_common_tower_network(obs_spec, (4,), (4,), (8,))
    agent = neural_epsilon_greedy_agent.NeuralEpsilonGreedyAgent(
        ts.time_step_spec(obs_spec),
        action_spec,
        net,
        tf.keras.optimizers.SGD(0.1),
        epsilon=0.2,
        accepts_per_arm_features=True,
        emit_policy_info=("predicted_rewards_mean",),
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )
    towers = [net._global_network, net._arm_network, net._common_network]
    variables = [v for t in towers for v in t.trainable_variables]
    out = {f"init_{i}": v.numpy() for i, v in enumerate(variables)}
    out["var_names"] = np.array([v.name for v in variables])
    greedy = agent._policy._greedy_policy
    for i in range(2):
        g = rng.normal(size=(24, dg)).astype(np.float32)
        arms = rng.normal(size=(24, K, da)).astype(np.float32)
        n_act = rng.integers(2, K + 1, 24).astype(np.int32)
        obs = {"global": g, "per_arm": arms, "num_actions": n_act}
        step = greedy.action(_restart(obs, 24))
        chosen = step.info.chosen_arm_features.numpy()
        r = rng.normal(size=24).astype(np.float32)
        train_obs = {"global": g, "num_actions": n_act}
        exp = _experience(train_obs, step.action.numpy(), r, step.info)
        out[f"loss_before_{i}"] = agent.loss(exp).loss.numpy()
        out[f"train_loss_{i}"] = agent.train(exp).loss.numpy()
        out.update(
            {
                f"batch{i}_global": g,
                f"batch{i}_per_arm": arms,
                f"batch{i}_num_actions": n_act,
                f"batch{i}_chosen": chosen,
                f"batch{i}_r": r,
                f"greedy_action_{i}": step.action.numpy(),
                f"predicted_rewards_mean_{i}": step.info.predicted_rewards_mean.numpy(),
            }
        )
    _save(
        name,
        **out,
        **{f"final_{i}": v.numpy() for i, v in enumerate(variables)},
        train_step=agent.train_step_counter.numpy(),
    )


def signatures():
    def args(fn):
        return [p for p in inspect.signature(fn).parameters if p != "self"]

    out = {
        "tf_agents_version": tf_agents.__version__,
        "NeuralEpsilonGreedyAgent": args(neural_epsilon_greedy_agent.NeuralEpsilonGreedyAgent.__init__),
        "LinearUCBAgent": args(lin_ucb_agent.LinearUCBAgent.__init__),
        "LinearThompsonSamplingAgent": args(lints_agent.LinearThompsonSamplingAgent.__init__),
        "PolicySaver": args(policy_saver.PolicySaver.__init__),
    }
    path = os.path.join(OUT, "signatures_bandits.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


def main():
    os.makedirs(OUT, exist_ok=True)
    neural_case(
        "neural_mask_laplacian_sgd", mask=True, laplacian=True, optimizer=tf.keras.optimizers.SGD(0.1), weights=True
    )
    neural_case("neural_adam", mask=False, laplacian=False, optimizer=tf.keras.optimizers.Adam(0.01), weights=False)
    linear_case("linucb", lin_ucb_agent.LinearUCBAgent, gamma=1.0, mask=False, add_bias=True)
    linear_case("linucb_gamma_mask", lin_ucb_agent.LinearUCBAgent, gamma=0.8, mask=True, add_bias=False)
    linear_case("lints", lints_agent.LinearThompsonSamplingAgent, gamma=1.0, mask=False, add_bias=True, alpha=2.0)
    linear_case("lints_gamma", lints_agent.LinearThompsonSamplingAgent, gamma=0.9, mask=False, add_bias=False)
    per_arm_linucb_case("per_arm_linucb")
    per_arm_neural_case("per_arm_neural")
    signatures()


if __name__ == "__main__":
    main()
