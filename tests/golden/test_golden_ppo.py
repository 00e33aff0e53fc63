"""rlops PPO against TF-Agents 0.19's own numbers (fixtures from make_fixtures_ppo.py).

Each fixture holds TF-Agents' initial weights, a fixed [B, T] batch and what two `train` calls
returned and left behind. Here rlops builds the same architecture, loads those weights, trains
on the same batch and must agree to float tolerance: returns and values, every loss term of the
last gradient step, the train step, the adaptive KL beta, normalizer statistics and every
updated weight.
"""

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork, ValueNetwork
from rlops.agents.ppo import PPOAgent
from rlops.agents.trajectories import Trajectory, time_step_spec

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CASES = sorted(glob.glob(os.path.join(FIXTURES, "ppo_*.npz")))
RTOL, ATOL = 2e-4, 2e-5
JIT_CASES = ("ppo_discrete_gae_td.npz", "ppo_continuous_normalizers_warm.npz")
LOSS_FIELDS = (
    "policy_gradient_loss",
    "value_estimation_loss",
    "l2_regularization_loss",
    "entropy_regularization_loss",
    "kl_penalty_loss",
    "clip_fraction",
)


def load(path):
    data = np.load(path)
    return json.loads(str(data["config"])), {k: data[k] for k in data.files}


def build(config, data, jit_compile=True):
    obs_spec = tf.TensorSpec([data["experience/observation"].shape[-1]], tf.float32, "observation")
    if config["discrete"]:
        action_spec = specs.BoundedTensorSpec((), tf.int32, 0, 2, name="action")
    else:
        action_spec = specs.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0, name="action")
    actor = ActorNetwork(obs_spec, action_spec, tuple(config["hidden"]))
    value = ValueNetwork(obs_spec, tuple(config["hidden"]))
    for prefix, net in (("actor_init", actor), ("value_init", value)):
        variables = net.layer_variables
        assert len(variables) == sum(k.startswith(prefix + "/") for k in data)
        for i, v in enumerate(variables):
            v.assign(data[f"{prefix}/{i}"].reshape(v.shape))
    opt = config["optimizer"]
    optimizer = tf_keras.optimizers.Adam(learning_rate=opt["learning_rate"], epsilon=opt["epsilon"])
    # XLA compilation costs seconds per agent: two cases check the compiled update, the rest the
    # same graph without XLA.
    agent = PPOAgent(
        time_step_spec(obs_spec), action_spec, optimizer, actor, value, jit_compile=jit_compile, **config["kwargs"]
    )
    if "warmup/observation" in data:
        agent.observation_normalizer.update(data["warmup/observation"])
        agent.reward_normalizer.update(data["warmup/reward"])
    return agent


def experience(agent, data):
    params = {k.split("/", 2)[2]: tf.constant(v) for k, v in data.items() if k.startswith("experience/dist_params/")}
    dist = agent.actor_net.distribution(params)
    action = tf.constant(data["experience/action"])
    info = {"dist_params": params, "log_probability": dist.log_prob(action)}
    if "experience/value_prediction" in data:  # stored by the collect policy (values outside train)
        info["value_prediction"] = tf.constant(data["experience/value_prediction"])
    return Trajectory(
        step_type=tf.constant(data["experience/step_type"]),
        observation=tf.constant(data["experience/observation"]),
        action=action,
        policy_info=info,
        next_step_type=tf.constant(data["experience/next_step_type"]),
        reward=tf.constant(data["experience/reward"]),
        discount=tf.constant(data["experience/discount"]),
    )


@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(p)[4:-4] for p in CASES])
def test_ppo_matches_tf_agents(path):
    config, data = load(path)
    agent = build(config, data, jit_compile=os.path.basename(path) in JIT_CASES)
    exp = experience(agent, data)
    weights = data.get("weights")

    shape = data["preprocess/return"].shape
    if not config["kwargs"].get("compute_value_and_advantage_in_train", True):
        # TF-Agents' flow: preprocess_sequence adds return and advantage; train reads them.
        exp = agent.preprocess_sequence(exp)
        specs.check_nest_matches_spec(exp, agent.training_data_spec, "experience", num_outer_dims=2)
        np.testing.assert_allclose(
            exp.policy_info["advantage"],
            data["preprocess/advantage"],
            rtol=RTOL,
            atol=ATOL,
            err_msg="preprocessed advantages",
        )
        np.testing.assert_allclose(
            exp.policy_info["return"], data["preprocess/return"], rtol=RTOL, atol=ATOL, err_msg="preprocessed returns"
        )
    prepared = agent._prepare(exp, agent._weights(exp, weights))
    np.testing.assert_allclose(
        tf.reshape(prepared["old_values"], shape),
        data["preprocess/value_prediction"],
        rtol=RTOL,
        atol=ATOL,
        err_msg="value predictions",
    )
    np.testing.assert_allclose(
        tf.reshape(prepared["returns"], shape), data["preprocess/return"], rtol=RTOL, atol=ATOL, err_msg="returns"
    )

    for call in (1, 2):
        p = f"train{call}"
        info = agent.train(exp, weights=weights)
        np.testing.assert_allclose(info.loss.numpy(), data[f"{p}/loss"], rtol=RTOL, atol=ATOL, err_msg=f"{p} loss")
        for field in LOSS_FIELDS:
            np.testing.assert_allclose(
                getattr(info.extra, field).numpy(), data[f"{p}/{field}"], rtol=RTOL, atol=ATOL, err_msg=f"{p} {field}"
            )
        assert agent.train_step_counter.numpy() == data[f"{p}/train_step"]
        if f"{p}/adaptive_kl_beta" in data:
            np.testing.assert_allclose(agent.adaptive_kl_beta.numpy(), data[f"{p}/adaptive_kl_beta"], rtol=1e-6)
        for prefix, norm in (("obs_norm", agent.observation_normalizer), ("reward_norm", agent.reward_normalizer)):
            if f"{p}/{prefix}/count" in data:
                np.testing.assert_allclose(norm.count.numpy(), data[f"{p}/{prefix}/count"], rtol=1e-6)
                np.testing.assert_allclose(norm.mean.numpy(), data[f"{p}/{prefix}/mean"], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(norm.m2.numpy(), data[f"{p}/{prefix}/m2"], rtol=1e-5, atol=1e-5)
        for prefix, net in (("actor", agent.actor_net), ("value", agent.value_net)):
            for i, v in enumerate(net.layer_variables):
                np.testing.assert_allclose(
                    v.numpy().reshape(-1),
                    data[f"{p}/{prefix}/{i}"].reshape(-1),
                    rtol=RTOL,
                    atol=ATOL,
                    err_msg=f"{p} {prefix} variable {i}",
                )


def test_signatures_cover_tf_agents_arguments():
    """Every TF-Agents argument name exists here (signatures_*.json are generated by inspect in
    the golden venv); rlops-only additions are listed so they stay deliberate."""
    import inspect

    from rlops.agents import train_utils
    from rlops.agents.ppo import PPOClipAgent, PPOKLPenaltyAgent
    from rlops.train.learner import Learner

    with open(os.path.join(FIXTURES, "signatures_ppo.json")) as f:
        tfa = json.load(f)
    ours = {
        "PPOAgent": PPOAgent.__init__,
        "PPOClipAgent": PPOClipAgent.__init__,
        "PPOKLPenaltyAgent": PPOKLPenaltyAgent.__init__,
        "Learner": Learner.__init__,
        "Learner.run": Learner.run,
        "create_train_step": train_utils.create_train_step,
        "create_train_op": train_utils.create_train_op,
    }
    for name, fn in ours.items():
        params = [p for p in inspect.signature(fn).parameters if p not in ("self", "kwargs")]
        missing = [a for a in tfa[name] if a not in params]
        assert not missing, f"{name} lacks TF-Agents arguments {missing}"
        # Positional order: TF-Agents' arguments come first, in TF-Agents' order.
        assert params[: len(tfa[name])] == tfa[name] or name.startswith("Learner"), (name, params, tfa[name])
