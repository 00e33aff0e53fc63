"""Policies: masks honoured, propensities right, numpy snapshot equal to the TF policy."""

import numpy as np
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork
from rlops.agents.normalizers import StreamingNormalizer
from rlops.agents.policies import ActorPolicy, EpsilonGreedyPolicy, GreedyPolicy, RandomPolicy
from rlops.agents.trajectories import restart, time_step_spec

OBS = tf.TensorSpec((4,), tf.float32)
ACTIONS = specs.BoundedTensorSpec((), tf.int32, 0, 4)
SPLIT = lambda obs: (obs["x"], obs["mask"])  # noqa: E731
MASKED_TS_SPEC = time_step_spec({"x": OBS, "mask": tf.TensorSpec((5,), tf.int32)})


def masked_batch(n=400, seed=0):
    rng = np.random.default_rng(seed)
    mask = (rng.uniform(size=(n, 5)) > 0.5).astype(np.int32)
    mask[np.arange(n), rng.integers(0, 5, n)] = 1  # at least one allowed action
    return restart({"x": tf.constant(rng.normal(size=(n, 4)), tf.float32), "mask": tf.constant(mask)}, n), mask


def test_masked_policies_never_choose_masked_actions():
    ts, mask = masked_batch()
    actor = ActorPolicy(
        MASKED_TS_SPEC, ACTIONS, ActorNetwork(OBS, ACTIONS, (8,)), observation_and_action_constraint_splitter=SPLIT
    )
    for policy in (
        actor,
        GreedyPolicy(actor),
        EpsilonGreedyPolicy(GreedyPolicy(actor), 0.5),
        RandomPolicy(MASKED_TS_SPEC, ACTIONS, observation_and_action_constraint_splitter=SPLIT),
    ):
        action = policy.action(ts).action.numpy()
        assert np.all(mask[np.arange(len(action)), action] == 1), type(policy).__name__


def test_epsilon_greedy_propensity_matches_definition():
    ts, mask = masked_batch(seed=1)
    greedy = GreedyPolicy(
        ActorPolicy(
            MASKED_TS_SPEC, ACTIONS, ActorNetwork(OBS, ACTIONS, (8,)), observation_and_action_constraint_splitter=SPLIT
        )
    )
    step = EpsilonGreedyPolicy(greedy, 0.3).action(ts)
    greedy_action = greedy.action(ts).action.numpy()
    allowed = mask.sum(-1)
    expected = 0.3 / allowed + 0.7 * (step.action.numpy() == greedy_action)
    np.testing.assert_allclose(step.info["propensity"].numpy(), expected, rtol=1e-6)
    random_step = RandomPolicy(MASKED_TS_SPEC, ACTIONS, observation_and_action_constraint_splitter=SPLIT).action(ts)
    np.testing.assert_allclose(random_step.info["propensity"].numpy(), 1.0 / allowed, rtol=1e-6)


def test_numpy_sampler_matches_tf_distribution():
    for action_spec in (ACTIONS, specs.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)):
        net = ActorNetwork(OBS, action_spec, (16, 16), initial_log_std=-0.5, seed=3)
        normalizer = StreamingNormalizer((4,))
        normalizer.update(tf.random.normal([50, 4], 1.0, 2.0))
        policy = ActorPolicy(time_step_spec(OBS), action_spec, net, observation_normalizer=normalizer)
        obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
        action, info = policy.numpy_sampler(seed=0)(obs)
        tf_params = policy.distribution_params(restart(tf.constant(obs), 6))
        for key, value in tf_params.items():
            np.testing.assert_allclose(info["dist_params"][key], value.numpy(), rtol=1e-4, atol=1e-5)
        log_prob = net.distribution(tf_params).log_prob(action).numpy()
        np.testing.assert_allclose(info["log_probability"], log_prob, rtol=1e-4, atol=1e-4)
