"""PPO pieces against plain-numpy references, and the train step's contracts."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork, ValueNetwork
from rlops.agents.normalizers import StreamingNormalizer
from rlops.agents.ppo import PPOAgent, PPOClipAgent, PPOKLPenaltyAgent, value_ops
from rlops.agents.trajectories import StepType, Trajectory, time_step_spec

OBS = tf.TensorSpec((3,), tf.float32, "observation")
DISCRETE = specs.BoundedTensorSpec((), tf.int32, 0, 2, name="action")
CONTINUOUS = specs.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0, name="action")


def numpy_gae(values, next_values, rewards, discounts, trace_continues, gamma, lam):
    B, T = rewards.shape
    adv = np.zeros((B, T))
    for b in range(B):
        acc = 0.0
        for t in reversed(range(T)):
            delta = rewards[b, t] + gamma * discounts[b, t] * next_values[b, t] - values[b, t]
            acc = delta + gamma * lam * discounts[b, t] * trace_continues[b, t] * acc
            adv[b, t] = acc
    return adv


def test_gae_matches_numpy_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    B, T = 3, 7
    values, next_values, rewards = (rng.normal(size=(B, T)) for _ in range(3))
    discounts = (rng.uniform(size=(B, T)) > 0.2).astype(np.float64)
    trace = (rng.uniform(size=(B, T)) > 0.3).astype(np.float64)
    expected = numpy_gae(values, next_values, rewards, discounts, trace, 0.97, 0.9)
    got = value_ops.generalized_advantage_estimation(
        *(tf.constant(x, tf.float64) for x in (values, next_values, rewards, discounts, trace)), 0.97, 0.9
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10)


def test_lambda_one_gives_bootstrapped_monte_carlo_return():
    rewards = np.array([[1.0, 2.0, 3.0]])
    values = np.array([[0.5, -0.2, 0.7]])
    next_values = np.array([[-0.2, 0.7, 10.0]])  # V(o_T) = 10 bootstraps the tail
    ones = np.ones_like(rewards)
    adv = value_ops.generalized_advantage_estimation(values, next_values, rewards, ones, ones, 0.9, 1.0)
    returns = value_ops.td_lambda_return(values, adv).numpy()
    expected0 = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 10
    np.testing.assert_allclose(returns[0, 0], expected0)


def make_agent(action_spec=DISCRETE, **kwargs):
    ts_spec = time_step_spec(OBS)
    kwargs.setdefault("normalize_observations", False)
    kwargs.setdefault("normalize_rewards", False)
    return PPOAgent(
        ts_spec,
        action_spec,
        tf_keras.optimizers.Adam(1e-3),
        ActorNetwork(OBS, action_spec, (8,), seed=1),
        ValueNetwork(OBS, (8,), seed=2),
        **kwargs,
    )


def resetter(agent, tmp_path):
    """A function that puts `agent` back to its state now (weights, optimizer slots, train step):
    several updates from one start with one agent, i.e. one trace and XLA compile."""
    agent.optimizer.build(agent.trainable_weights)
    checkpoint = tf.train.Checkpoint(agent=agent)
    saved = checkpoint.write(str(tmp_path / "initial_state"))
    return lambda: checkpoint.read(saved).assert_consumed()


def make_experience(agent, B=4, T=6, seed=0, boundary_at=None):
    """Random experience sampled from the agent's own collect policy."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(B, T + 1, 3)).astype(np.float32)
    step_type = np.full((B, T + 1), StepType.MID, np.int32)
    step_type[:, 0] = StepType.FIRST
    if boundary_at is not None:
        step_type[0, boundary_at] = StepType.LAST
        step_type[0, boundary_at + 1] = StepType.FIRST
    from rlops.agents.trajectories import TimeStep

    flat_ts = TimeStep(
        step_type.reshape(-1),
        np.zeros(B * (T + 1), np.float32),
        np.ones(B * (T + 1), np.float32),
        obs.reshape(B * (T + 1), 3),
    )
    step = agent.collect_policy.action(flat_ts)
    unflat = lambda x: tf.reshape(x, tf.concat([[B, T + 1], tf.shape(x)[1:]], 0)).numpy()  # noqa: E731
    next_step_type = np.concatenate([step_type[:, 1:], np.full((B, 1), StepType.MID, np.int32)], 1)
    discount = np.ones((B, T + 1), np.float32)
    discount[1, 2] = 0.0  # a termination
    return Trajectory(
        step_type=step_type,
        observation=obs,
        action=unflat(step.action),
        policy_info=tf.nest.map_structure(unflat, step.info),
        next_step_type=next_step_type,
        reward=rng.normal(size=(B, T + 1)).astype(np.float32),
        discount=discount,
    )


def numpy_mc_returns(next_values, rewards, discounts, trace, gamma):
    B, T = rewards.shape
    out = np.zeros((B, T))
    for b in range(B):
        acc = next_values[b, -1]
        for t in reversed(range(T)):
            acc = rewards[b, t] + gamma * discounts[b, t] * (trace[b, t] * acc + (1 - trace[b, t]) * next_values[b, t])
            out[b, t] = acc
    return out


@pytest.mark.parametrize("use_gae,use_td", [(True, True), (True, False), (False, True), (False, False)])
def test_advantages_and_value_targets_follow_use_gae_and_td_lambda(use_gae, use_td):
    """TF-Agents: TD(lambda) targets only with use_gae AND use_td_lambda_return, else Monte-Carlo
    returns; without use_gae the advantage is return - value."""
    agent = make_agent(use_gae=use_gae, use_td_lambda_return=use_td, lambda_value=0.9, discount_factor=0.95)
    exp = make_experience(agent, boundary_at=3)
    values = np.random.default_rng(1).normal(size=exp.reward.shape).astype(np.float32)
    adv, ret = agent.compute_advantages_and_returns(exp, tf.constant(values), tf.constant(exp.reward))
    trace = (exp.next_step_type[:, :-1] != StepType.LAST).astype(np.float64)
    gae = numpy_gae(values[:, :-1], values[:, 1:], exp.reward[:, :-1], exp.discount[:, :-1], trace, 0.95, 0.9)
    mc = numpy_mc_returns(values[:, 1:], exp.reward[:, :-1], exp.discount[:, :-1], trace, 0.95)
    np.testing.assert_allclose(adv.numpy(), gae if use_gae else mc - values[:, :-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret.numpy(), gae + values[:, :-1] if use_gae and use_td else mc, rtol=1e-5, atol=1e-5)
    if use_gae:  # row 2 of env 0 precedes the boundary row 3: a one-step TD error
        np.testing.assert_allclose(adv.numpy()[0, 2], exp.reward[0, 2] + 0.95 * values[0, 3] - values[0, 2], rtol=1e-5)


def test_clipped_surrogate_matches_numpy():
    agent = make_agent(importance_ratio_clipping=0.2)
    rng = np.random.default_rng(3)
    logp, old_logp, adv = (rng.normal(scale=0.5, size=20) for _ in range(3))
    w = (rng.uniform(size=20) > 0.25).astype(np.float64)
    ratio = np.exp(logp - old_logp)
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv)
    expected = -(surrogate * w).sum() / w.size  # aggregate_losses: over all rows, masked ones included
    got, clip_fraction = agent.policy_gradient_loss(*(tf.constant(x, tf.float32) for x in (logp, old_logp, adv, w)))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(clip_fraction.numpy(), (np.abs(ratio - 1) > 0.2).mean(), rtol=1e-6)


def test_minibatch_advantage_normalization_matches_numpy():
    """normalize_advantages="minibatch" (CleanRL; TF-Agents when its PPOLearner feeds minibatches):
    each gradient step normalizes by its own rows' moments, padding of a short last minibatch
    excluded. Checked on that padded minibatch: at lr 0 the ratio is 1, so the clipped surrogate
    is the weighted mean of the normalized advantages."""
    agent = PPOAgent(
        time_step_spec(OBS),
        DISCRETE,
        tf_keras.optimizers.SGD(0.0),
        ActorNetwork(OBS, DISCRETE, (8,), seed=1),
        ValueNetwork(OBS, (8,), seed=2),
        importance_ratio_clipping=0.2,
        use_gae=True,
        normalize_rewards=False,
        normalize_observations=False,
        minibatch_size=8,
        normalize_advantages="minibatch",
    )
    exp = make_experience(agent, boundary_at=3)
    weights = agent._weights(exp, None)
    data = agent._prepare(tf.nest.map_structure(tf.convert_to_tensor, exp), weights)
    orders = agent._orders(data, tf.constant(0, tf.int64))
    mb = agent._minibatch(data, orders, tf.constant(3))  # 4 x 7 = 28 rows: the 4th minibatch has 4 real rows
    in_range, adv, w = (mb[k].numpy() for k in ("in_range", "advantages", "weights"))
    assert in_range.sum() == 4
    real = in_range > 0
    expected_adv = (adv - adv[real].mean()) / np.sqrt(adv[real].var() + 1e-8)
    pg = agent._gradient_step(mb)[1].numpy()
    np.testing.assert_allclose(pg, -(expected_adv * w).sum() / in_range.sum(), rtol=1e-4, atol=1e-6)
    # The batch-level moments are not applied on top: unnormalized advantages reach the step.
    batch = make_agent(minibatch_size=8, normalize_advantages=False, use_gae=True)
    raw = batch._prepare(tf.nest.map_structure(tf.convert_to_tensor, exp), weights)["advantages"].numpy()
    np.testing.assert_allclose(np.sort(data["advantages"].numpy()), np.sort(raw), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="normalize_advantages"):
        make_agent(normalize_advantages="epoch")


def test_observation_normalizer_clip_and_epsilon_options():
    """observation_clip_value / observation_variance_epsilon (CleanRL: 10, 1e-8) reach the
    normalizer the policies and the update share; the defaults stay TF-Agents' 5 and 1e-3."""
    default = make_agent(normalize_observations=True)
    assert (default.observation_normalizer.clip_value, default.observation_normalizer.epsilon) == (5.0, 1e-3)
    agent = make_agent(normalize_observations=True, observation_clip_value=10.0, observation_variance_epsilon=1e-8)
    x = np.array([[0.0, 1.0, 2.0], [2.0, 3.0, 40.0], [1.0, 2.0, 3.0]], np.float32)
    agent.observation_normalizer.update(x)
    mean, var = x.mean(0), x.var(0)
    probe = np.array([[3.0, 0.5, 400.0]], np.float32)
    expected = np.clip((probe - mean) / np.sqrt(var + 1e-8), -10, 10)
    np.testing.assert_allclose(agent.observation_normalizer.normalize(probe).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.observation_normalizer.numpy_normalize()(probe), expected, rtol=1e-5, atol=1e-6)


def test_value_clipping_matches_numpy():
    agent = make_agent(value_clipping=0.1, value_pred_loss_coef=0.5)
    rng = np.random.default_rng(4)
    preds, returns, old = (rng.normal(size=16) for _ in range(3))
    w = np.ones(16)
    clipped = old + np.clip(preds - old, -0.1, 0.1)
    err = np.maximum((returns - preds) ** 2, (returns - clipped) ** 2)
    got = agent.value_estimation_loss(*(tf.constant(x, tf.float32) for x in (preds, returns, old, w)))
    np.testing.assert_allclose(got.numpy(), 0.5 * err.mean(), rtol=1e-5)


def test_entropy_loss_matches_numpy_categorical():
    agent = make_agent(entropy_regularization=0.01)
    logits = np.random.default_rng(5).normal(size=(10, 3))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    entropy = -(p * np.log(p)).sum(-1)
    dist = agent.actor_net.distribution({"logits": tf.constant(logits, tf.float32)})
    got = agent.entropy_loss(dist.entropy(), tf.ones(10))
    np.testing.assert_allclose(got.numpy(), -0.01 * entropy.mean(), rtol=1e-5)


def test_kl_penalty_and_adaptive_beta_match_numpy():
    agent = make_agent(
        initial_adaptive_kl_beta=0.5,
        adaptive_kl_target=0.01,
        adaptive_kl_tolerance=0.3,
        kl_cutoff_factor=2.0,
        kl_cutoff_coef=1000.0,
    )
    kl = np.array([0.01, 0.05, 0.02, 0.04])
    got = agent.kl_penalty_loss(tf.constant(kl, tf.float32))
    mean_kl = kl.mean()
    expected = 1000.0 * max(0.0, mean_kl - 0.02) ** 2 + 0.5 * mean_kl
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)
    agent.update_adaptive_kl_beta(tf.constant(0.02))  # above 0.013: beta * 1.5
    np.testing.assert_allclose(agent.adaptive_kl_beta.numpy(), 0.75, rtol=1e-6)
    agent.update_adaptive_kl_beta(tf.constant(0.01))  # inside the band: unchanged
    np.testing.assert_allclose(agent.adaptive_kl_beta.numpy(), 0.75, rtol=1e-6)
    agent.update_adaptive_kl_beta(tf.constant(0.001))  # below 0.007: beta / 1.5
    np.testing.assert_allclose(agent.adaptive_kl_beta.numpy(), 0.5, rtol=1e-6)


def test_categorical_kl_matches_numpy():
    agent = make_agent()
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    pa = np.exp(a) / np.exp(a).sum(-1, keepdims=True)
    pb = np.exp(b) / np.exp(b).sum(-1, keepdims=True)
    expected = (pa * (np.log(pa) - np.log(pb))).sum(-1)
    da = agent.actor_net.distribution({"logits": tf.constant(a, tf.float32)})
    db = agent.actor_net.distribution({"logits": tf.constant(b, tf.float32)})
    np.testing.assert_allclose(da.kl_divergence(db).numpy(), expected, rtol=1e-5)


def test_streaming_normalizer_matches_numpy_over_masked_batches():
    rng = np.random.default_rng(7)
    norm = StreamingNormalizer((3,), clip_value=None)
    kept = []
    for n in (5, 17, 1, 40):
        x = rng.normal(loc=2.0, scale=3.0, size=(n, 3))
        mask = rng.uniform(size=n) > 0.3
        norm.update(tf.constant(x, tf.float32), tf.constant(mask))
        kept.append(x[mask])
    data = np.concatenate(kept)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.variance.numpy(), data.var(0), rtol=1e-4)
    probe = rng.normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(
        norm.normalize(tf.constant(probe)).numpy(),
        (probe - data.mean(0)) / np.sqrt(data.var(0) + 1e-3),
        rtol=1e-4,
        atol=1e-5,
    )


def test_normalizer_before_data_and_reward_normalizer_does_not_center():
    """TF-Agents' StreamingTensorNormalizer: variance 0 before data, so x / sqrt(1e-3), clipped."""
    norm = StreamingNormalizer((), center_mean=False, clip_value=10.0)
    np.testing.assert_allclose(
        norm.normalize(tf.constant([0.1, -2.0])).numpy(), [0.1 / np.sqrt(1e-3), -10.0], rtol=1e-5
    )
    norm.update(tf.constant([1.0, 3.0]))  # mean 2, var 1: not centered, so 4 -> 4 / sqrt(1 + 1e-3)
    np.testing.assert_allclose(norm.normalize(tf.constant([4.0])).numpy(), [4.0 / np.sqrt(1.001)], rtol=1e-5)


@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_train_returns_loss_info_and_updates_state(action_spec):
    agent = make_agent(
        action_spec,
        importance_ratio_clipping=0.2,
        use_gae=True,
        num_epochs=3,
        minibatch_size=7,
        entropy_regularization=0.01,
        policy_l2_reg=1e-4,
        value_function_l2_reg=1e-4,
        initial_adaptive_kl_beta=1.0,
        normalize_observations=True,
        normalize_rewards=True,
        gradient_clipping=0.5,
        value_clipping=0.2,
    )
    exp = make_experience(agent, boundary_at=2)
    before = [v.numpy().copy() for v in agent.trainable_weights]
    info = agent.train(exp)
    assert np.isfinite(info.loss.numpy())
    extra = info.extra._asdict()
    assert set(extra) == {
        "policy_gradient_loss",
        "value_estimation_loss",
        "l2_regularization_loss",
        "entropy_regularization_loss",
        "kl_penalty_loss",
        "clip_fraction",
    }
    assert extra["l2_regularization_loss"].numpy() > 0 and extra["entropy_regularization_loss"].numpy() < 0
    terms = [v.numpy() for k, v in extra.items() if k != "clip_fraction"]
    np.testing.assert_allclose(info.loss.numpy(), sum(terms), rtol=1e-4)
    # One train step per gradient step (TF-Agents): 3 epochs x ceil(4*7 rows / 7) minibatches.
    assert agent.train_step_counter.numpy() == 3 * 4
    assert all(not np.allclose(b, v.numpy()) for b, v in zip(before, agent.trainable_weights) if b.ndim == 2)
    # Normalizers saw every row of the [4, 7] batch (TF-Agents), on top of the initial 1e-8.
    np.testing.assert_allclose(agent.observation_normalizer.count.numpy(), 4 * 7, rtol=1e-9)
    np.testing.assert_allclose(agent.reward_normalizer.count.numpy(), 4 * 7, rtol=1e-9)


def test_masked_rows_do_not_influence_training(tmp_path):
    """Changing the data of boundary rows and weight-0 rows leaves the update unchanged."""
    results = []
    base = make_experience(make_agent(), boundary_at=3, seed=11)
    agent = make_agent(importance_ratio_clipping=0.2, use_gae=True, num_epochs=2)
    reset = resetter(agent, tmp_path)
    for perturb in (False, True):
        reset()
        exp = base
        weights = np.ones_like(exp.reward)
        weights[2, 4] = 0.0
        if perturb:
            action = exp.action.copy()
            action[0, 3] = (action[0, 3] + 1) % 3  # boundary row: its action never acted
            action[2, 4] = (action[2, 4] + 1) % 3  # weight-0 row
            exp = exp._replace(action=action)
        info = agent.train(exp, weights=weights)
        results.append((info.loss.numpy(), [v.numpy() for v in agent.trainable_weights]))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_per_row_weights_of_shape_b_equal_the_same_weights_over_time(tmp_path):
    """weights [B] (one per batch row, TF-Agents' per-batch-entry weights) train exactly as [B, T]
    with each row's weight repeated over its time steps; unequal weights change the update."""
    exp = make_experience(make_agent(), boundary_at=3, seed=5)
    row_weights = np.array([1.0, 0.5, 2.0, 0.0], np.float32)
    results = []
    agent = make_agent(importance_ratio_clipping=0.2, use_gae=True, num_epochs=2)
    reset = resetter(agent, tmp_path)
    for weights in (row_weights, np.repeat(row_weights[:, None], exp.reward.shape[1], axis=1), None):
        reset()
        info = agent.train(exp, weights=weights)
        results.append((info.loss.numpy(), [v.numpy() for v in agent.trainable_weights]))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.isclose(results[0][0], results[2][0])  # the weights did something


@pytest.mark.parametrize("across_replicas", [True, False])
def test_aggregate_losses_across_replicas_under_two_replicas(across_replicas):
    """True (TF-Agents' default): each replica divides its weighted sum by its rows x replicas, so
    the replicas' losses (and gradients) sum to the global-batch mean. False: each replica takes
    its own mean, and the sum is R times that (TF-Agents' per-replica averaging)."""
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    with mirrored.scope():
        agent = make_agent(aggregate_losses_across_replicas=across_replicas)
    rows = {0: np.array([1.0, 2.0, 3.0, 4.0], np.float32), 1: np.array([10.0, 20.0, 30.0, 40.0], np.float32)}
    weights = {0: np.array([1.0, 0.0, 1.0, 1.0], np.float32), 1: np.ones(4, np.float32)}

    per_replica = lambda values: mirrored.experimental_distribute_values_from_function(  # noqa: E731
        lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group])
    )
    per_row, w = per_replica(rows), per_replica(weights)
    losses = mirrored.run(tf.function(agent.aggregate), args=(per_row, w))
    total = float(mirrored.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None))
    local_means = [float(np.sum(rows[r] * weights[r]) / 4) for r in (0, 1)]
    expected = sum(local_means) / 2 if across_replicas else sum(local_means)
    assert total == pytest.approx(expected, rel=1e-6)


def test_bad_experience_names_the_field():
    agent = make_agent()
    exp = make_experience(agent)
    with pytest.raises(TypeError, match="experience.action"):
        agent.train(exp._replace(action=exp.action.astype(np.float32)))
    with pytest.raises(ValueError, match="experience.observation"):
        agent.train(exp._replace(observation=exp.observation[..., :2]))
    with pytest.raises(ValueError, match="structure"):
        agent.train(exp._replace(policy_info={}))


def test_presets_and_variable_order():
    ts_spec = time_step_spec(OBS)
    # TF-Agents' preset defaults: PPOClipAgent clips nothing unless asked and has no KL terms.
    clip = PPOClipAgent(ts_spec, DISCRETE, tf_keras.optimizers.Adam(1e-3))
    assert clip.importance_ratio_clipping == 0.0 and clip.adaptive_kl_beta is None
    assert clip.kl_cutoff_factor == 0.0 and clip.log_prob_clipping == 0.0 and not clip.use_gae
    kl = PPOKLPenaltyAgent(ts_spec, DISCRETE, num_epochs=3, optimizer=tf_keras.optimizers.Adam(1e-3))
    assert kl.importance_ratio_clipping == 0.0 and kl.adaptive_kl_beta.numpy() == 1.0
    assert kl.use_gae and kl.use_td_lambda_return and kl.kl_cutoff_factor == 0.0 and kl.observation_normalizer is None
    # Actor variables first, then the value network's, each in a fixed order.
    n_actor = len(clip.actor_net.trainable_variables)
    assert [id(v) for v in clip.trainable_weights[:n_actor]] == [id(v) for v in clip.actor_net.trainable_variables]
    assert [id(v) for v in clip.trainable_weights[n_actor:]] == [id(v) for v in clip.value_net.trainable_variables]
    other = PPOClipAgent(ts_spec, DISCRETE, tf_keras.optimizers.Adam(1e-3))
    assert [v.shape for v in clip.trainable_weights] == [v.shape for v in other.trainable_weights]


def test_losses_written_as_tensorboard_scalars(tmp_path):
    agent = make_agent(importance_ratio_clipping=0.2)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        agent.train(make_experience(agent))
    writer.flush()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["tensors"]) | set(acc.Tags()["scalars"])
    for tag in (
        "Losses/policy_gradient_loss",
        "Losses/value_estimation_loss",
        "Losses/kl_penalty_loss",
        "Losses/total_abs_loss",
        "Metrics/learning_rate",
    ):
        assert tag in tags, tags


def test_zero_placeholder_params_in_the_bootstrap_row_stay_harmless():
    """Drivers store zeros as the never-acted bootstrap row's policy info (scale 0): the update
    must stay finite and equal to the one with real parameters there."""
    results = []
    base = make_experience(make_agent(CONTINUOUS), seed=4)
    for zero in (False, True):
        agent = make_agent(CONTINUOUS, importance_ratio_clipping=0.2, num_epochs=2, minibatch_size=5)
        exp = base
        if zero:
            info = tf.nest.map_structure(lambda x: x.copy(), exp.policy_info)
            for leaf in tf.nest.flatten(info):
                leaf[:, -1] = 0.0
            exp = exp._replace(policy_info=info)
        loss = agent.train(exp).loss.numpy()
        results.append((loss, [v.numpy() for v in agent.trainable_weights]))
    assert np.isfinite(results[1][0])
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_discrete_actions_starting_above_zero():
    """Gym's Discrete(3, start=1): actions 1..3 in and out, log-probabilities of the right index."""
    spec = specs.BoundedTensorSpec((), tf.int32, 1, 3, name="action")
    agent = make_agent(spec, num_epochs=2, importance_ratio_clipping=0.2)
    exp = make_experience(agent, seed=2)
    assert set(np.unique(exp.action)) <= {1, 2, 3} and 3 in set(np.unique(exp.action))
    dist = agent.actor_net.distribution({"logits": tf.constant(exp.policy_info["dist_params"]["logits"])})
    np.testing.assert_allclose(dist.log_prob(exp.action - 1).numpy(), exp.policy_info["log_probability"], rtol=1e-5)
    info = agent.train(exp)
    assert np.isfinite(info.loss.numpy())
    from rlops.agents.trajectories import TimeStep

    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    ts = TimeStep(np.ones(64, np.int32), np.zeros(64, np.float32), np.ones(64, np.float32), obs)
    assert set(agent.policy.action(ts).action.numpy().tolist()) <= {1, 2, 3}
    sampled, _ = agent.collect_policy.numpy_sampler(seed=0)(obs)
    assert set(sampled.tolist()) <= {1, 2, 3}


def test_argument_parity_options():
    ts_spec = time_step_spec(OBS)
    stochastic = PPOAgent(ts_spec, DISCRETE, tf_keras.optimizers.Adam(1e-3), greedy_eval=False)
    assert type(stochastic.policy).__name__ == "ActorPolicy"
    # aggregate_losses_across_replicas=False: a plain mean of loss * weight (same with one replica).
    agent = make_agent(aggregate_losses_across_replicas=False, importance_ratio_clipping=0.2)
    w = np.array([1.0, 0.0, 2.0, 1.0], np.float32)
    loss, _ = agent.policy_gradient_loss(tf.zeros(4), tf.zeros(4), tf.constant([1.0, 2.0, 3.0, 4.0]), tf.constant(w))
    np.testing.assert_allclose(loss.numpy(), -(np.array([1.0, 2.0, 3.0, 4.0]) * w).mean(), rtol=1e-6)
    # Continuous actions are stored unclipped, as TF-Agents' PPO policies (environments clip).
    cont = make_agent(CONTINUOUS)
    obs = np.zeros((256, 3), np.float32)
    from rlops.agents.trajectories import TimeStep

    ts = TimeStep(np.ones(256, np.int32), np.zeros(256, np.float32), np.ones(256, np.float32), obs)
    assert np.abs(cont.collect_policy.action(ts).action.numpy()).max() > 1.0


def test_l2_terms_split_actor_value_and_shared_kernels_as_tf_agents():
    """policy_l2_reg on the actor's own kernels, value_function_l2_reg on the value network's own,
    shared_vars_l2_reg on kernels both use (TF-Agents' testL2RegularizationLossWithSharedVariables)."""
    actor = ActorNetwork(OBS, DISCRETE, (8,), seed=1)

    class SharedTorsoValue(ValueNetwork):  # its first layer is the actor's
        @property
        def l2_weights(self):
            return [actor.mlp.kernels[0]] + self.mlp.kernels[1:]

    value = SharedTorsoValue(OBS, (8,), seed=2)
    sq = lambda ws: sum(float(np.sum(np.square(w.numpy()))) for w in ws)  # noqa: E731
    agent = PPOAgent(
        time_step_spec(OBS),
        DISCRETE,
        tf_keras.optimizers.Adam(1e-3),
        actor,
        value,
        normalize_observations=False,
        policy_l2_reg=4e-4,
        value_function_l2_reg=2e-4,
        shared_vars_l2_reg=1e-4,
    )
    expected = 4e-4 * sq(actor.mlp.kernels[1:]) + 2e-4 * sq(value.mlp.kernels[1:]) + 1e-4 * sq(actor.mlp.kernels[:1])
    np.testing.assert_allclose(agent.l2_loss().numpy(), expected, rtol=1e-5)
    # Separate networks share nothing: shared_vars_l2_reg adds 0.
    separate = make_agent(policy_l2_reg=4e-4, value_function_l2_reg=2e-4, shared_vars_l2_reg=1.0)
    np.testing.assert_allclose(
        separate.l2_loss().numpy(),
        4e-4 * sq(separate.actor_net.l2_weights) + 2e-4 * sq(separate.value_net.l2_weights),
        rtol=1e-5,
    )


@pytest.mark.slow  # two PPO trainings compared, per action space (~20-60 s)
@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_values_computed_outside_train_match_values_computed_in_train(action_spec):
    """compute_value_and_advantage_in_train=False (TF-Agents): the collect policy stores V(o) and
    preprocess_sequence adds returns/advantages. With values stored by the same network, train
    gives the update of the default mode; with other stored values it uses those."""
    kwargs = dict(
        importance_ratio_clipping=0.2,
        use_gae=True,
        use_td_lambda_return=True,
        num_epochs=2,
        minibatch_size=9,
        normalize_observations=True,
        normalize_rewards=True,
        value_clipping=0.2,
    )
    # Stored values under XLA (its only compiled check); the default mode compiled is checked by
    # the golden JIT cases, so here it runs without XLA (one compile fewer).
    inside, outside = (
        make_agent(action_spec, jit_compile=False, **kwargs),
        make_agent(action_spec, compute_value_and_advantage_in_train=False, **kwargs),
    )
    for agent in (inside, outside):  # non-trivial normalizer statistics before collection
        agent.observation_normalizer.update(np.random.default_rng(1).normal(1.0, 2.0, (5, 3)))
        agent.reward_normalizer.update(np.random.default_rng(2).normal(0.0, 3.0, (5,)))
    exp = make_experience(outside, boundary_at=2)
    assert "value_prediction" in outside.collect_policy.info_spec
    obs = outside.observation_normalizer.normalize(exp.observation.reshape(-1, 3))
    np.testing.assert_allclose(
        exp.policy_info["value_prediction"].reshape(-1), outside.value_net(obs).numpy(), rtol=1e-5, atol=1e-6
    )
    # The numpy sampler (fast collection) stores the same values.
    _, info = outside.collect_policy.numpy_sampler(seed=0)(exp.observation[:, 0])
    np.testing.assert_allclose(
        info["value_prediction"], exp.policy_info["value_prediction"][:, 0], rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match="structure"):  # train needs preprocess_sequence's output
        outside.train(exp)
    processed = outside.preprocess_sequence(exp)
    assert inside.preprocess_sequence(exp) is exp
    info_in = inside.train(
        exp._replace(policy_info={k: v for k, v in exp.policy_info.items() if k != "value_prediction"})
    )
    info_out = outside.train(processed)
    np.testing.assert_allclose(info_out.loss.numpy(), info_in.loss.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(outside.trainable_weights, inside.trainable_weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    # Stored values are what train uses (value clipping's old values, returns), not the network's.
    values = exp.policy_info["value_prediction"] + 1.0
    shifted = outside.preprocess_sequence(exp._replace(policy_info={**exp.policy_info, "value_prediction": values}))
    prepared = outside._prepare(shifted, tf.ones_like(shifted.reward))
    np.testing.assert_allclose(prepared["old_values"], values.reshape(-1), rtol=1e-6)
    assert np.abs(shifted.policy_info["return"] - processed.policy_info["return"]).max() > 0.1


def test_values_outside_train_through_gym_collection_and_train_ppo():
    """End to end: the vectorized driver's numpy sampler stores value predictions, train_ppo runs
    preprocess_sequence before each update."""
    from rlops.envs.gym_env import GymVectorEnv
    from rlops.train.on_policy import PPOConfig, train_ppo

    config = PPOConfig(
        num_envs=2, num_steps=16, total_env_steps=64, num_epochs=2, eval_episodes=0, log_every=0, anneal_lr=False
    )
    env = GymVectorEnv(config.env_id, 1)
    agent = PPOAgent(
        env.time_step_spec,
        env.action_spec,
        tf_keras.optimizers.Adam(1e-3),
        ActorNetwork(env.observation_spec, env.action_spec, (8,)),
        ValueNetwork(env.observation_spec, (8,)),
        compute_value_and_advantage_in_train=False,
        use_gae=True,
        importance_ratio_clipping=0.2,
        normalize_observations=True,
        num_epochs=2,
        jit_compile=False,
    )
    env.close()
    result = train_ppo(config, agent=agent)
    assert len(result.losses) == 2 and np.isfinite(result.losses).all()
    assert agent.train_step_counter.numpy() == 2 * 2
    np.testing.assert_allclose(agent.observation_normalizer.count.numpy(), 2 * 2 * 17, rtol=1e-9)
