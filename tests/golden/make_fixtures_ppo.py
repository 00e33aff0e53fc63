"""Golden fixtures for PPO, written by TF-Agents 0.19 itself (run in the golden venv).

For each case: build TF-Agents' PPOAgent with networks whose functions rlops' ActorNetwork /
ValueNetwork can reproduce exactly, save every initial variable and a fixed [B, T] batch, call
`agent.train` twice on that batch and save what it returned and every variable afterwards.
tests/golden/test_golden_ppo.py loads the same weights into rlops and checks the numbers.

Variable layout (the mapping to rlops; `actor/i`, `value/i` in the .npz, creation order):
  actor (discrete):   hidden_0 kernel, bias, hidden_1 kernel, bias, logits kernel, bias
  actor (continuous): hidden_0 kernel, bias, hidden_1 kernel, bias, means kernel, bias,
                      log_std (TF-Agents' BiasLayer under std_transform=tf.exp)
  value:              hidden_0 kernel, bias, hidden_1 kernel, bias, value kernel [H, 1], bias [1]
which is rlops' `ActorNetwork.trainable_variables` order (mlp.layers..., mlp.output_layer, log_std)
and `ValueNetwork.trainable_variables`. TF-Agents' networks are configured to compute the same
functions as rlops': tanh hidden layers, continuous loc = linear layer (mean_transform=None), scale =
exp(state-independent bias).

Experience layout: Trajectory [B, T] (row T-1 only supplies the bootstrap value, as in both
libraries). Episodes end by termination (discount 0 into LAST): TF-Agents never bootstraps a LAST
step, rlops bootstraps truncations (discount 1 at LAST) by design. In the GAE cases every row's
last trainable transition is terminal: TF-Agents' GAE bootstraps the final transition from
V(o_{T-2}) (compute_advantages passes values[:, :-1][:, -1] as final_value), rlops from V(o_{T-1});
a terminal end makes both irrelevant, the Monte-Carlo cases bootstrap for real (row 1).
"""

import functools
import inspect
import json
import os

import numpy as np
import tensorflow as tf
import tf_agents
from tf_agents.agents.ppo import ppo_agent, ppo_clip_agent, ppo_kl_penalty_agent
from tf_agents.networks import actor_distribution_network, normal_projection_network, value_network
from tf_agents.specs import tensor_spec
from tf_agents.train import learner
from tf_agents.trajectories import time_step as ts, trajectory
from tf_agents.utils import eager_utils

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
OBS_DIM, HIDDEN, B, T = 3, (8, 8), 3, 7
F, M, L = 0, 1, 2

# step types per batch row; next_step_type is the next row's (last row: FIRST).
TERMINAL_END = [[F, M, L, F, M, M, L], [F, M, M, M, M, M, L], [M, L, F, M, M, M, L]]
BOOTSTRAP_END = [[F, M, L, F, M, M, L], [F, M, M, M, M, M, M], [M, L, F, M, M, M, L]]

BASE = dict(
    importance_ratio_clipping=0.2,
    lambda_value=0.9,
    discount_factor=0.95,
    entropy_regularization=0.01,
    value_pred_loss_coef=0.5,
    num_epochs=3,
    normalize_rewards=False,
    normalize_observations=False,
    kl_cutoff_factor=0.0,
    initial_adaptive_kl_beta=0.0,
)

CASES = {
    "discrete_mc": dict(discrete=True, layout="bootstrap", use_gae=False, use_td_lambda_return=False),
    "discrete_td_without_gae": dict(discrete=True, layout="bootstrap", use_gae=False, use_td_lambda_return=True),
    "discrete_gae": dict(discrete=True, layout="terminal", use_gae=True, use_td_lambda_return=False),
    "discrete_gae_td": dict(
        discrete=True,
        layout="terminal",
        use_gae=True,
        use_td_lambda_return=True,
        policy_l2_reg=1e-3,
        value_function_l2_reg=2e-3,
        gradient_clipping=0.5,
    ),
    "continuous_gae_td_value_clip": dict(
        discrete=False, layout="terminal", use_gae=True, use_td_lambda_return=True, value_clipping=0.05
    ),
    "continuous_mc_adaptive_kl_cutoff": dict(
        discrete=False,
        layout="bootstrap",
        use_gae=False,
        importance_ratio_clipping=0.0,
        initial_adaptive_kl_beta=1.0,
        kl_cutoff_factor=2.0,
        kl_cutoff_coef=100.0,
        adaptive_kl_target=0.001,
    ),
    "discrete_adaptive_kl_no_cutoff": dict(
        discrete=True,
        layout="terminal",
        use_gae=True,
        importance_ratio_clipping=0.0,
        initial_adaptive_kl_beta=0.5,
        kl_cutoff_factor=0.0,
        adaptive_kl_target=0.05,
    ),
    "discrete_kl_cutoff_only": dict(
        discrete=True,
        layout="terminal",
        use_gae=True,
        initial_adaptive_kl_beta=0.0,
        kl_cutoff_factor=2.0,
        kl_cutoff_coef=50.0,
        adaptive_kl_target=0.001,
    ),
    "continuous_normalizers_warm": dict(
        discrete=False,
        layout="terminal",
        use_gae=True,
        use_td_lambda_return=True,
        normalize_observations=True,
        normalize_rewards=True,
        reward_norm_clipping=3.0,
        warmup=True,
        weights=True,
    ),
    "discrete_normalizers_fresh": dict(
        discrete=True, layout="bootstrap", use_gae=False, normalize_observations=True, normalize_rewards=True
    ),
    # Values stored by the collect policy (perturbed here so that they differ from the value
    # network's), returns and advantages added by agent.preprocess_sequence, train reads them.
    "discrete_values_outside_train_gae_td_value_clip": dict(
        discrete=True,
        layout="terminal",
        use_gae=True,
        use_td_lambda_return=True,
        value_clipping=0.1,
        compute_value_and_advantage_in_train=False,
    ),
    "continuous_values_outside_train_mc_normalizers": dict(
        discrete=False,
        layout="bootstrap",
        use_gae=False,
        normalize_observations=True,
        normalize_rewards=True,
        reward_norm_clipping=3.0,
        warmup=True,
        compute_value_and_advantage_in_train=False,
    ),
}


def specs(discrete):
    obs_spec = tensor_spec.TensorSpec([OBS_DIM], tf.float32, "observation")
    if discrete:
        act_spec = tensor_spec.BoundedTensorSpec((), tf.int32, 0, 2, "action")
    else:
        act_spec = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, "action")
    return obs_spec, act_spec, ts.time_step_spec(obs_spec)


def networks(obs_spec, act_spec, seed):
    projection = functools.partial(
        normal_projection_network.NormalProjectionNetwork,
        mean_transform=None,
        std_transform=tf.exp,
        std_bias_initializer_value=-0.3,
        init_means_output_factor=1.0,
        seed=seed,
    )
    actor = actor_distribution_network.ActorDistributionNetwork(
        obs_spec,
        act_spec,
        fc_layer_params=HIDDEN,
        activation_fn=tf.nn.tanh,
        continuous_projection_net=projection,
        seed=seed,
    )
    value = value_network.ValueNetwork(obs_spec, fc_layer_params=HIDDEN, activation_fn=tf.nn.tanh)
    return actor, value


def ordered(net):
    """Variables in rlops' order: dense layers by creation, the projection, then the std bias."""
    vs = list(net.trainable_variables)
    bias_layer = [v for v in vs if "bias_layer" in v.name]
    rest = [v for v in vs if "bias_layer" not in v.name]
    return rest + bias_layer


def experience(rng, case, collect_policy, act_spec):
    layout = TERMINAL_END if case["layout"] == "terminal" else BOOTSTRAP_END
    step_type = np.array(layout, np.int32)
    next_step_type = np.concatenate([step_type[:, 1:], np.full((B, 1), F, np.int32)], 1)
    discount = np.where(next_step_type == L, 0.0, 1.0).astype(np.float32)
    reward = rng.normal(0.5, 1.0, (B, T)).astype(np.float32)
    reward[step_type == L] = 0.0
    obs = rng.normal(0.3, 1.5, (B, T, OBS_DIM)).astype(np.float32)
    # Collection-time distribution: the policy's own, perturbed so that ratios start away from 1.
    time_steps = ts.TimeStep(tf.constant(step_type), tf.constant(reward), tf.constant(discount), tf.constant(obs))
    dist = collect_policy.distribution(time_steps).action
    if case["discrete"]:
        logits = dist.logits_parameter().numpy()
        params = {"logits": (logits + rng.normal(0, 0.3, logits.shape)).astype(np.float32)}
        action = rng.integers(0, 3, (B, T)).astype(np.int32)
    else:
        loc, scale = dist.mean().numpy(), dist.stddev().numpy()
        params = {
            "loc": (loc + rng.normal(0, 0.2, loc.shape)).astype(np.float32),
            "scale": (scale * np.exp(rng.normal(0, 0.1, scale.shape))).astype(np.float32),
        }
        action = (params["loc"] + params["scale"] * rng.normal(0, 1, loc.shape)).astype(np.float32)
    extra = {}
    if case.get("compute_value_and_advantage_in_train") is False:
        values, _ = collect_policy.apply_value_network(
            tf.constant(obs), tf.constant(step_type), value_state=(), training=False
        )
        extra["value_prediction"] = (values.numpy() + rng.normal(0, 0.3, values.shape)).astype(np.float32)
    return dict(
        **extra,
        step_type=step_type,
        next_step_type=next_step_type,
        discount=discount,
        reward=reward,
        observation=obs,
        action=action,
        **{f"dist_params/{k}": v for k, v in params.items()},
    )


def to_trajectory(data):
    params = {k.split("/", 1)[1]: tf.constant(v) for k, v in data.items() if k.startswith("dist_params/")}
    info = {"dist_params": params}
    if "value_prediction" in data:
        info["value_prediction"] = tf.constant(data["value_prediction"])
    return trajectory.Trajectory(
        step_type=tf.constant(data["step_type"]),
        observation=tf.constant(data["observation"]),
        action=tf.constant(data["action"]),
        policy_info=info,
        next_step_type=tf.constant(data["next_step_type"]),
        reward=tf.constant(data["reward"]),
        discount=tf.constant(data["discount"]),
    )


def normalizer_state(normalizer, prefix):
    if normalizer is None:
        return {}
    count, avg, m2, _ = normalizer.variables
    return {f"{prefix}/count": count.numpy(), f"{prefix}/mean": avg.numpy(), f"{prefix}/m2": m2.numpy()}


def make_case(name, case, seed):
    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    obs_spec, act_spec, time_step_spec = specs(case["discrete"])
    actor, value = networks(obs_spec, act_spec, seed)
    kwargs = {**BASE, **{k: v for k, v in case.items() if k not in ("discrete", "layout", "warmup", "weights")}}
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.01, epsilon=1e-5)
    agent = ppo_agent.PPOAgent(
        time_step_spec,
        act_spec,
        optimizer,
        actor_net=actor,
        value_net=value,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        **kwargs,
    )
    out = {
        "config": np.array(
            json.dumps(
                {
                    "kwargs": kwargs,
                    "discrete": case["discrete"],
                    "hidden": HIDDEN,
                    "optimizer": {"name": "Adam", "learning_rate": 0.01, "epsilon": 1e-5},
                }
            )
        )
    }
    if case.get("warmup"):
        warm_obs = rng.normal(1.0, 2.0, (2, 5, OBS_DIM)).astype(np.float32)
        warm_rew = rng.normal(0.0, 3.0, (2, 5)).astype(np.float32)
        agent.update_observation_normalizer(tf.constant(warm_obs))
        agent.update_reward_normalizer(tf.constant(warm_rew))
        out.update({"warmup/observation": warm_obs, "warmup/reward": warm_rew})
    for i, v in enumerate(ordered(actor)):
        out[f"actor_init/{i}"] = v.numpy()
    for i, v in enumerate(ordered(value)):
        out[f"value_init/{i}"] = v.numpy()
    out["variable_names"] = np.array(json.dumps([v.name for v in ordered(actor) + ordered(value)]))
    data = experience(rng, case, agent.collect_policy, act_spec)
    out.update({f"experience/{k}": v for k, v in data.items()})
    traj = to_trajectory(data)
    weights = None
    if case.get("weights"):
        weights = rng.uniform(0.2, 1.5, (B, T)).astype(np.float32)
        out["weights"] = weights
    if case.get("compute_value_and_advantage_in_train") is False:
        # TF-Agents' flow: preprocess_sequence once (stored values), then train on its output.
        traj = processed = agent.preprocess_sequence(traj)
    else:
        processed = agent._preprocess(traj)  # returns and advantages with the initial weights
    out["preprocess/return"] = processed.policy_info["return"].numpy()
    out["preprocess/advantage"] = processed.policy_info["advantage"].numpy()
    out["preprocess/value_prediction"] = processed.policy_info["value_prediction"].numpy()
    for call in (1, 2):
        loss_info = agent.train(traj, weights=None if weights is None else tf.constant(weights))
        p = f"train{call}"
        out[f"{p}/loss"] = np.float32(loss_info.loss.numpy())
        for field, value_ in loss_info.extra._asdict().items():
            out[f"{p}/{field}"] = np.float32(np.asarray(value_))
        out[f"{p}/train_step"] = np.int64(agent.train_step_counter.numpy())
        if agent._adaptive_kl_beta is not None:
            out[f"{p}/adaptive_kl_beta"] = agent._adaptive_kl_beta.numpy()
        for i, v in enumerate(ordered(actor)):
            out[f"{p}/actor/{i}"] = v.numpy()
        for i, v in enumerate(ordered(value)):
            out[f"{p}/value/{i}"] = v.numpy()
        out.update(normalizer_state(agent._observation_normalizer, f"{p}/obs_norm"))
        out.update(normalizer_state(agent._reward_normalizer, f"{p}/reward_norm"))
    path = os.path.join(OUT, f"ppo_{name}.npz")
    np.savez_compressed(path, **out)
    print(f"wrote {path}: loss1={out['train1/loss']:.6f} loss2={out['train2/loss']:.6f}")


def arg_names(fn):
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "args", "kwargs")]


def signatures():
    sig = {
        "tf_agents_version": tf_agents.__version__,
        "PPOAgent": arg_names(ppo_agent.PPOAgent.__init__),
        "PPOClipAgent": arg_names(ppo_clip_agent.PPOClipAgent.__init__),
        "PPOKLPenaltyAgent": arg_names(ppo_kl_penalty_agent.PPOKLPenaltyAgent.__init__),
        "Learner": arg_names(learner.Learner.__init__),
        "Learner.run": arg_names(learner.Learner.run),
        "create_train_step": arg_names(eager_utils.create_train_step),
        "create_train_op": arg_names(eager_utils.create_train_op),
    }
    path = os.path.join(OUT, "signatures_ppo.json")
    with open(path, "w") as f:
        json.dump(sig, f, indent=1)
    print(f"wrote {path}")


def main():
    os.makedirs(OUT, exist_ok=True)
    signatures()
    for i, (name, case) in enumerate(CASES.items()):
        make_case(name, case, seed=100 + i)


if __name__ == "__main__":
    main()
