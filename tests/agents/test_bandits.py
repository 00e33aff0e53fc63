"""Bandit agents: numbers vs NumPy references, masks, propensities, specs, and learning on digits."""

import glob

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import specs, trajectories
from rlops.agents.bandits import LinearThompsonSamplingAgent, LinUCBAgent, NeuralEpsilonGreedyAgent
from rlops.agents.networks import RewardNetwork
from rlops.envs.bandit_envs import DigitsBandit, make_interaction_loop

K, D = 5, 3
OBS_SPEC = tf.TensorSpec([D], tf.float32, "context")
ACTION_SPEC = specs.BoundedTensorSpec((), tf.int32, 0, K - 1, name="action")
TS_SPEC = trajectories.time_step_spec(OBS_SPEC)


def _neural_agent(epsilon=0.1, time_step_spec=TS_SPEC, optimizer=None, action_spec=ACTION_SPEC, **kwargs):
    net = RewardNetwork(OBS_SPEC, K, hidden_sizes=(8,), seed=1)
    optimizer = optimizer or tf_keras.optimizers.Adam(1e-2)
    return NeuralEpsilonGreedyAgent(time_step_spec, action_spec, net, optimizer, epsilon, **kwargs)


def _numpy_reward_net(net, x):
    h = np.maximum(x @ net.mlp.layers[0].kernel.numpy() + net.mlp.layers[0].bias.numpy(), 0.0)
    return h @ net.mlp.output_layer.kernel.numpy() + net.mlp.output_layer.bias.numpy()


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    a = rng.integers(0, K, size=n).astype(np.int32)
    r = rng.normal(size=n).astype(np.float32)
    w = rng.uniform(0.5, 2.0, size=n).astype(np.float32)
    return x, a, r, w


def _chain_laplacian(k):
    adj = np.eye(k, k=1) + np.eye(k, k=-1)
    return np.diag(adj.sum(1)) - adj


# --- specs ------------------------------------------------------------------------------------

BAD_ACTION_SPECS = {
    "float": specs.BoundedTensorSpec((), tf.float32, 0.0, 4.0),
    "vector": specs.BoundedTensorSpec((2,), tf.int32, 0, 4),
    "unbounded": tf.TensorSpec((), tf.int32),
    "nested": (ACTION_SPEC, ACTION_SPEC),
}


@pytest.mark.parametrize("bad", list(BAD_ACTION_SPECS))
@pytest.mark.parametrize("make", ["neural", "linucb", "lints"])
def test_bad_action_spec_raises(make, bad):
    spec = BAD_ACTION_SPECS[bad]
    with pytest.raises(ValueError, match="action spec"):
        if make == "neural":
            NeuralEpsilonGreedyAgent(TS_SPEC, spec, RewardNetwork(OBS_SPEC, K), tf_keras.optimizers.Adam(), 0.1)
        elif make == "linucb":
            LinUCBAgent(TS_SPEC, spec)
        else:
            LinearThompsonSamplingAgent(TS_SPEC, spec)


def test_agent_surface():
    agent = _neural_agent()
    assert agent.train_sequence_length is None
    assert agent.time_step_spec is TS_SPEC and agent.action_spec is ACTION_SPEC
    assert agent.train_step_counter.numpy() == 0
    assert any("kernel" in v.name for v in agent.variables)
    assert isinstance(agent.collect_data_spec, trajectories.Trajectory)
    assert set(agent.collect_data_spec.policy_info) == {"propensity"}
    lin = LinUCBAgent(TS_SPEC, ACTION_SPEC)
    assert lin.train_sequence_length is None and "propensity" in lin.collect_data_spec.policy_info


# --- neural epsilon-greedy --------------------------------------------------------------------


def test_neural_loss_matches_numpy_with_weights_and_laplacian():
    lap = _chain_laplacian(K)
    agent = _neural_agent(laplacian_matrix=lap, laplacian_smoothing_weight=0.05)
    x, a, r, w = _data(16)
    pred = _numpy_reward_net(agent.reward_network, x)
    taken = pred[np.arange(16), a]
    smooth = np.einsum("bi,ij,bj->b", pred, lap, pred)
    expected = np.mean(w * (r - taken) ** 2) + 0.05 * np.mean(w * smooth)
    loss = agent.loss(trajectories.single_step_trajectory(x, a, r), w)
    np.testing.assert_allclose(loss.loss.numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(agent.reward_loss(x, a, r, w).numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(loss.extra["error_loss"].numpy(), np.mean(w * (r - taken) ** 2), rtol=1e-5)
    # No weights, no Laplacian: plain MSE on the taken actions.
    plain = _neural_agent()
    pred = _numpy_reward_net(plain.reward_network, x)
    np.testing.assert_allclose(
        plain.reward_loss(x, a, r).numpy(), np.mean((r - pred[np.arange(16), a]) ** 2), rtol=1e-5
    )


def test_neural_laplacian_must_be_valid():
    with pytest.raises(ValueError, match="sum to 0"):
        _neural_agent(laplacian_matrix=np.eye(K))


def test_neural_loss_only_touches_taken_actions():
    agent = _neural_agent()
    x, _, r, _ = _data(8)
    a = np.array([0, 2, 0, 2, 2, 0, 0, 2], np.int32)
    out_bias = agent.reward_network.mlp.output_layer.bias
    with tf.GradientTape() as tape:
        loss = agent.reward_loss(x, a, r)
    g = tape.gradient(loss, out_bias).numpy()
    assert g[0] != 0 and g[2] != 0
    np.testing.assert_array_equal(g[[1, 3, 4]], 0.0)


def test_neural_train_step_matches_manual_adam_step_and_shapes():
    x, a, r, w = _data(12)
    agents = [_neural_agent() for _ in range(2)]
    flat = tf.nest.map_structure(lambda t: tf.squeeze(t, 1), trajectories.single_step_trajectory(x, a, r))
    info_b1 = agents[0].train(trajectories.single_step_trajectory(x, a, r), weights=w[:, None])
    info_b = agents[1].train(flat, weights=w)
    np.testing.assert_allclose(info_b1.loss.numpy(), info_b.loss.numpy(), rtol=1e-6)
    net0, net1 = agents[0].reward_network, agents[1].reward_network
    for v0, v1 in zip(net0.trainable_variables, net1.trainable_variables):
        np.testing.assert_allclose(v0.numpy(), v1.numpy(), rtol=1e-6)
    assert agents[0].train_step_counter.numpy() == 1
    # Reference: one Adam step on the same loss, from the same initial weights.
    ref = _neural_agent()
    opt = tf_keras.optimizers.Adam(1e-2)
    with tf.GradientTape() as tape:
        loss = ref.reward_loss(x, a, r, w)
    variables = ref.reward_network.trainable_variables
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    for v0, v1 in zip(agents[0].reward_network.trainable_variables, variables):
        np.testing.assert_allclose(v0.numpy(), v1.numpy(), rtol=1e-5, atol=1e-7)


def test_neural_gradient_clipping_bounds_each_gradient():
    x, a, r, _ = _data(12)
    experience = trajectories.single_step_trajectory(x, a, 10 * r)
    for clip in (1e-3, None):
        agent = _neural_agent(optimizer=tf_keras.optimizers.SGD(1.0), gradient_clipping=clip)
        before = [v.numpy() for v in agent.reward_network.trainable_variables]
        agent.train(experience)
        after = agent.reward_network.trainable_variables
        steps = [np.linalg.norm(v.numpy() - b) for b, v in zip(before, after)]
        if clip:  # SGD(1.0): each variable moved by exactly its (clipped) gradient
            assert max(steps) <= clip * (1 + 1e-4)
        else:
            assert max(steps) > 10 * 1e-3


def _masked_setup():
    obs_spec = {"context": OBS_SPEC, "mask": tf.TensorSpec([K], tf.int32, "mask")}
    ts_spec = trajectories.time_step_spec(obs_spec)
    splitter = lambda o: (o["context"], o["mask"])  # noqa: E731
    return ts_spec, splitter


def test_neural_policies_never_choose_masked_actions_and_train_with_masks():
    tf.random.set_seed(0)
    ts_spec, splitter = _masked_setup()
    agent = _neural_agent(
        0.5, ts_spec, observation_and_action_constraint_splitter=splitter, emit_policy_info=("predicted_rewards_mean",)
    )
    rng = np.random.default_rng(0)
    n = 2000
    mask = (rng.uniform(size=(n, K)) < 0.5).astype(np.int32)
    mask[np.arange(n), rng.integers(0, K, n)] = 1
    obs = {"context": rng.normal(size=(n, D)).astype(np.float32), "mask": mask}
    ts = trajectories.restart(obs, n)
    greedy = agent.policy.action(ts)
    pred = greedy.info["predicted_rewards_mean"].numpy()
    np.testing.assert_array_equal(greedy.action.numpy(), np.where(mask == 1, pred, -np.inf).argmax(1))
    collected = agent.collect_policy.action(ts)
    assert mask[np.arange(n), collected.action.numpy()].all()
    assert mask[np.arange(n), greedy.action.numpy()].all()
    exp = trajectories.single_step_trajectory(obs, collected.action, np.ones(n, np.float32), collected.info)
    specs.check_nest_matches_spec(exp, agent.collect_data_spec, num_outer_dims=2)
    assert np.isfinite(agent.train(exp).loss.numpy())


def test_epsilon_greedy_propensities_sum_to_one_and_match_frequencies():
    tf.random.set_seed(1)
    ts_spec, splitter = _masked_setup()
    agent = _neural_agent(0.3, ts_spec, observation_and_action_constraint_splitter=splitter)
    n = 40000
    mask = np.tile(np.array([[1, 1, 0, 1, 1]], np.int32), (n, 1))
    obs = {"context": np.tile(np.array([[0.3, -1.0, 2.0]], np.float32), (n, 1)), "mask": mask}
    step = agent.collect_policy.action(trajectories.restart(obs, n))
    actions, prop = step.action.numpy(), step.info["propensity"].numpy()
    assert not (actions == 2).any()
    greedy = agent.policy.action(trajectories.restart(obs, 1)).action.numpy()
    per_action = {}
    for act in np.unique(actions):
        values = np.unique(prop[actions == act])
        assert len(values) == 1  # same context -> same propensity for the same action
        per_action[int(act)] = float(values[0])
        expected = 0.3 / 4 + (0.7 if act == greedy[0] else 0.0)
        assert per_action[int(act)] == pytest.approx(expected, rel=1e-6)
        assert np.mean(actions == act) == pytest.approx(expected, abs=0.01)
    assert sorted(per_action) == [0, 1, 3, 4]
    assert sum(per_action.values()) == pytest.approx(1.0, rel=1e-6)


def test_neural_summaries_are_written(tmp_path):
    agent = _neural_agent(debug_summaries=True, summarize_grads_and_vars=True)
    x, a, r, _ = _data(8)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        agent.train(trajectories.single_step_trajectory(x, a, r))
    writer.flush()
    tags = set()
    for path in glob.glob(str(tmp_path / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    assert "Losses/loss" in tags and any(t.startswith("Gradients/") for t in tags)


# --- linear agents ----------------------------------------------------------------------------


class NumpyRidge:
    """Per-arm ridge regression, the textbook way (one row at a time, explicit solves)."""

    def __init__(self, d, k, lam, gamma):
        self.a = np.zeros((k, d, d))
        self.b = np.zeros((k, d))
        self.lam, self.gamma = lam, gamma

    def update(self, x, actions, rewards, weights):
        self.a *= self.gamma
        self.b *= self.gamma
        for xi, ai, ri, wi in zip(x.astype(np.float64), actions, rewards, weights):
            self.a[ai] += wi * np.outer(xi, xi)
            self.b[ai] += wi * ri * xi

    def theta(self):
        eye = self.lam * np.eye(self.a.shape[1])
        return np.stack([np.linalg.solve(ak + eye, bk) for ak, bk in zip(self.a, self.b)])

    def mean_std(self, x):
        eye = self.lam * np.eye(self.a.shape[1])
        inv = np.stack([np.linalg.inv(ak + eye) for ak in self.a])
        return x @ self.theta().T, np.sqrt(np.einsum("bi,kij,bj->bk", x, inv, x))


@pytest.mark.parametrize("add_bias", [False, True])
def test_linucb_update_and_scores_match_numpy(add_bias):
    alpha, lam, gamma = 0.7, 0.5, 0.9
    agent = LinUCBAgent(
        TS_SPEC,
        ACTION_SPEC,
        alpha=alpha,
        gamma=gamma,
        tikhonov_weight=lam,
        add_bias=add_bias,
        emit_policy_info=("predicted_rewards_mean", "predicted_rewards_optimistic"),
    )
    ref = NumpyRidge(D + add_bias, K, lam, gamma)
    feats = (lambda x: np.concatenate([x, np.ones((len(x), 1), np.float32)], 1)) if add_bias else (lambda x: x)
    for seed in range(3):
        x, a, r, w = _data(40, seed)
        experience = trajectories.single_step_trajectory(x, a, r)
        theta_before = ref.theta()
        expected = np.mean(w * (r - np.sum(feats(x) * theta_before[a], 1)) ** 2)
        np.testing.assert_allclose(agent.loss(experience, w).loss.numpy(), expected, rtol=1e-4)
        loss = agent.train(experience, weights=w)
        np.testing.assert_allclose(loss.loss.numpy(), expected, rtol=1e-4)  # the loss before the update
        assert loss.extra == ()
        ref.update(feats(x), a, r, w)
    np.testing.assert_allclose(agent.cov_matrix.numpy(), ref.a, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(agent.data_vector.numpy(), ref.b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(agent.theta.numpy(), ref.theta(), rtol=1e-4, atol=1e-5)
    assert agent.train_step_counter.numpy() == 120  # counts examples, as in TF-Agents
    np.testing.assert_array_equal(agent.num_samples.numpy().sum(), 120)

    x, *_ = _data(64, seed=9)
    step = agent.policy.action(trajectories.restart(tf.constant(x), 64))
    mean, std = ref.mean_std(feats(x))
    ucb = mean + alpha * std
    np.testing.assert_allclose(step.info["predicted_rewards_mean"].numpy(), mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(step.info["predicted_rewards_optimistic"].numpy(), ucb, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(step.action.numpy(), ucb.argmax(1))
    np.testing.assert_array_equal(step.info["propensity"].numpy(), np.ones(64))
    greedy = agent.greedy_policy.action(trajectories.restart(tf.constant(x), 64)).action.numpy()
    np.testing.assert_array_equal(greedy, mean.argmax(1))


def test_lints_samples_have_the_ridge_mean_and_std():
    tf.random.set_seed(3)
    alpha = 0.5
    agent = LinearThompsonSamplingAgent(
        TS_SPEC, ACTION_SPEC, alpha=alpha, emit_policy_info=("predicted_rewards_sampled",)
    )
    x, a, r, _ = _data(30)
    agent.train(trajectories.single_step_trajectory(x, a, r))
    ref = NumpyRidge(D, K, 1.0, 1.0)
    ref.update(x, a, r, np.ones(30))
    n = 50000
    context = np.tile(x[:1], (n, 1))
    step = agent.policy.action(trajectories.restart(tf.constant(context), n))
    sampled = step.info["predicted_rewards_sampled"].numpy()
    mean, std = ref.mean_std(x[:1])
    np.testing.assert_allclose(sampled.mean(0), mean[0], atol=4 * alpha * std.max() / np.sqrt(n))
    np.testing.assert_allclose(sampled.std(0), alpha * std[0], rtol=0.03)
    np.testing.assert_array_equal(step.action.numpy(), sampled.argmax(1))
    assert "propensity" not in step.info  # Thompson sampling has no closed-form propensity


@pytest.mark.parametrize("cls", [LinUCBAgent, LinearThompsonSamplingAgent])
def test_linear_agents_honour_masks(cls):
    tf.random.set_seed(0)
    ts_spec, splitter = _masked_setup()
    agent = cls(ts_spec, ACTION_SPEC, alpha=5.0, observation_and_action_constraint_splitter=splitter)
    rng = np.random.default_rng(1)
    for _ in range(3):
        n = 500
        mask = (rng.uniform(size=(n, K)) < 0.4).astype(np.int32)
        mask[np.arange(n), rng.integers(0, K, n)] = 1
        obs = {"context": rng.normal(size=(n, D)).astype(np.float32), "mask": mask}
        step = agent.collect_policy.action(trajectories.restart(obs, n))
        assert mask[np.arange(n), step.action.numpy()].all()
        greedy = agent.greedy_policy.action(trajectories.restart(obs, n)).action.numpy()
        assert mask[np.arange(n), greedy].all()
        rewards = rng.normal(size=n).astype(np.float32)
        agent.train(trajectories.single_step_trajectory(obs, step.action, rewards))


def test_linear_train_accepts_flat_and_time_major_experience():
    x, a, r, w = _data(20)
    agents = [LinUCBAgent(TS_SPEC, ACTION_SPEC) for _ in range(3)]
    experience = trajectories.single_step_trajectory(x, a, r)
    agents[0].train(experience, weights=w[:, None])
    agents[1].train(tf.nest.map_structure(lambda t: tf.squeeze(t, 1), experience), weights=w)
    agents[2].train(experience, weights=w)  # [B, 1] experience with [B] weights
    for other in agents[1:]:
        np.testing.assert_allclose(agents[0].theta.numpy(), other.theta.numpy(), rtol=1e-6)
    neural = [_neural_agent() for _ in range(2)]
    losses = [neural[0].train(experience, weights=w[:, None]).loss, neural[1].train(experience, weights=w).loss]
    np.testing.assert_allclose(losses[0].numpy(), losses[1].numpy(), rtol=1e-6)


# --- learning on the digits bandit -----------------------------------------------------------


@pytest.mark.slow  # XLA compilation of the neural bandit's interaction loop (~25 s)
def test_neural_interaction_loop_compiles_with_xla():
    env = DigitsBandit(seed=0)
    agent = NeuralEpsilonGreedyAgent(
        env.time_step_spec,
        env.action_spec,
        RewardNetwork(env.observation_spec, env.num_actions),
        tf_keras.optimizers.Adam(1e-3),
        epsilon=0.1,
    )
    regret = make_interaction_loop(env, agent, batch_size=8, jit_compile=True)(tf.constant(5))
    assert regret.shape == (5,) and agent.train_step_counter.numpy() == 5


def _greedy_accuracy(env, policy):
    batch = env.all_contexts()
    actions = policy.action(env.time_step(batch)).action.numpy()
    return float(np.mean(actions == env.labels.numpy()))


@pytest.mark.slow
def test_neural_epsilon_greedy_learns_digits():
    tf.random.set_seed(0)
    env = DigitsBandit(seed=0)
    net = RewardNetwork(env.observation_spec, env.num_actions, hidden_sizes=(64,), seed=0)
    agent = NeuralEpsilonGreedyAgent(
        env.time_step_spec, env.action_spec, net, tf_keras.optimizers.Adam(1e-3), epsilon=0.1
    )
    regret = make_interaction_loop(env, agent, batch_size=32)(2000).numpy()
    assert agent.train_step_counter.numpy() == 2000
    assert _greedy_accuracy(env, agent.policy) >= 0.97
    # Exploration alone costs ~0.1 * 0.9 per interaction; learning must cut the rest.
    assert regret[-200:].sum() / (200 * 32) < 0.15


@pytest.mark.slow
def test_linucb_learns_digits_with_low_regret():
    env = DigitsBandit(seed=0)
    agent = LinUCBAgent(env.time_step_spec, env.action_spec, alpha=1.0)
    regret = make_interaction_loop(env, agent, batch_size=32)(2000).numpy()
    assert regret.sum() <= 1900
    assert _greedy_accuracy(env, agent.greedy_policy) >= 0.95


# --- every replica's rows count (MirroredStrategy on 2 logical CPUs) ---------------------------


def _mirrored():
    # ReductionToOneDevice: no collective ops, whose per-process instance cache breaks when other
    # tests build MirroredStrategies over other tensor shapes (see tests/train/test_learner.py).
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def _learner_run(tmp_path, strategy, make_agent, batches, summaries=False):
    from rlops.train.learner import Learner, create_train_step_counter

    with strategy.scope():
        agent = make_agent(create_train_step_counter())
    learner = Learner(
        str(tmp_path / f"{type(strategy).__name__}_{id(agent)}"),
        agent.train_step_counter,
        agent,
        checkpoint_interval=-1,
        summary_interval=1 if summaries else 0,
        strategy=strategy,
    )
    losses = [float(learner.run_on_batch(b).loss) for b in batches]
    return agent, losses, learner


def _linear_batches(n=3, size=32, seed=0):
    out = []
    for i in range(n):
        x, a, r, _ = _data(size, seed + i)
        out.append(trajectories.single_step_trajectory(x, a, r, {"propensity": np.ones(size, np.float32)}))
    return out


@pytest.mark.parametrize("cls", [LinUCBAgent, LinearThompsonSamplingAgent])
def test_linear_mirrored_two_replicas_equal_one_replica(tmp_path, cls):
    """Reported bug: 2 replicas counted 32 of 64 rows after two steps of 32 (one replica's share)."""
    batches = _linear_batches()
    if cls is LinearThompsonSamplingAgent:  # LinTS logs no propensity
        batches = [b._replace(policy_info=()) for b in batches]
    make = lambda step: cls(TS_SPEC, ACTION_SPEC, gamma=0.9, add_bias=True, train_step_counter=step)  # noqa: E731
    one, one_losses, _ = _learner_run(tmp_path, tf.distribute.get_strategy(), make, batches)
    two, two_losses, _ = _learner_run(tmp_path, _mirrored(), make, batches)
    assert two.train_step_counter.numpy() == one.train_step_counter.numpy() == 96
    assert two.num_samples.numpy().sum() == 96
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)  # global-batch loss, not R x
    for name in ("cov_matrix", "data_vector", "num_samples", "theta"):
        var = getattr(two, name)
        np.testing.assert_allclose(var.numpy(), getattr(one, name).numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
        copies = [v.numpy() for v in var.values]  # both replicas hold the same statistics
        np.testing.assert_array_equal(copies[0], copies[1], err_msg=name)


def _scalars(logdir):
    out = {}
    for path in sorted(glob.glob(f"{logdir}/**/events.*", recursive=True)):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                out.setdefault(v.tag, []).append(float(tf.make_ndarray(v.tensor)))
    return out


def test_neural_mirrored_equals_one_replica_and_reports_the_unscaled_loss(tmp_path):
    """Two replicas: same weights and loss as one replica on the global batch, and the agent's
    own Losses/loss summary is the global-batch loss, not the replica's 1/R share."""
    x_all, a_all, r_all, w_all = _data(96, seed=4)
    batches = [
        dict(
            experience=trajectories.single_step_trajectory(
                x_all[i : i + 32], a_all[i : i + 32], r_all[i : i + 32], {"propensity": np.ones(32, np.float32)}
            ),
            weights=w_all[i : i + 32],
        )
        for i in (0, 32, 64)
    ]

    def make(step):
        return _neural_agent(
            optimizer=tf_keras.optimizers.SGD(0.1),
            train_step_counter=step,
            laplacian_matrix=_chain_laplacian(K),
            laplacian_smoothing_weight=0.1,
        )

    from rlops.train.learner import Learner, create_train_step_counter

    results = {}
    for key, strategy in (("one", tf.distribute.get_strategy()), ("two", _mirrored())):
        with strategy.scope():
            agent = make(create_train_step_counter())
        learner = Learner(
            str(tmp_path / key),
            agent.train_step_counter,
            agent,
            checkpoint_interval=-1,
            summary_interval=1,
            strategy=strategy,
            use_kwargs_in_agent_train=True,
        )
        losses = [learner.run_on_batch(b) for b in batches]
        learner.summary_writer.flush()
        results[key] = (agent, losses, _scalars(str(tmp_path / key)))
    (one, one_losses, one_tags), (two, two_losses, two_tags) = results["one"], results["two"]
    for l1, l2 in zip(one_losses, two_losses):
        np.testing.assert_allclose(l2.loss.numpy(), l1.loss.numpy(), rtol=1e-5)
        np.testing.assert_allclose(l2.extra["laplacian_loss"].numpy(), l1.extra["laplacian_loss"].numpy(), rtol=1e-5)
    for v1, v2 in zip(one.reward_network.trainable_variables, two.reward_network.trainable_variables):
        np.testing.assert_allclose(v2.numpy(), v1.numpy(), rtol=1e-5, atol=1e-6)
    expected = [float(loss.loss) for loss in one_losses]
    np.testing.assert_allclose(one_tags["Losses/loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(two_tags["Losses/loss"], expected, rtol=1e-5)  # not expected / 2
    np.testing.assert_allclose(two_tags["Learner/loss"], expected, rtol=1e-5)


# --- action specs with minimum != 0, one-element nests -----------------------------------------


@pytest.mark.parametrize("make", ["neural", "linucb"])
def test_action_minimum_offsets_actions_in_training_and_acting(make):
    """Arms [3, 3 + K): the agent trained on actions + 3 equals the minimum-0 agent on actions."""
    shifted_spec = specs.BoundedTensorSpec((), tf.int64, 3, 3 + K - 1)
    nested_spec = [shifted_spec]  # a one-element nest is accepted as TF-Agents does

    def build(spec):
        if make == "neural":
            return _neural_agent(action_spec=spec, emit_policy_info=("predicted_rewards_mean",))
        return LinUCBAgent(TS_SPEC, spec, emit_policy_info=("predicted_rewards_mean",))

    base, shifted = build(ACTION_SPEC), build(nested_spec)
    x, a, r, w = _data(64)
    base.train(trajectories.single_step_trajectory(x, a, r), w)
    shifted.train(trajectories.single_step_trajectory(x, [(a + 3).astype(np.int64)], r), w)
    ts = trajectories.restart(tf.constant(x), 64)
    for p_base, p_shift in ((base.policy, shifted.policy), (base.collect_policy, shifted.collect_policy)):
        tf.random.set_seed(5)
        s_base = p_base.action(ts)
        tf.random.set_seed(5)
        s_shift = p_shift.action(ts)
        assert isinstance(s_shift.action, list) and s_shift.action[0].dtype == tf.int64
        np.testing.assert_array_equal(s_shift.action[0].numpy(), s_base.action.numpy() + 3)
        np.testing.assert_allclose(
            s_shift.info["predicted_rewards_mean"].numpy(), s_base.info["predicted_rewards_mean"].numpy(), rtol=1e-6
        )
    # Every arm, the last one included, is reachable: no arm is dropped by the offset.
    chosen = shifted.collect_policy.action(trajectories.restart(tf.constant(np.tile(x, (40, 1))), 64 * 40)).action
    if make == "neural":
        assert set(np.unique(chosen[0].numpy())) == set(range(3, 3 + K))


# --- TF-Agents' policy-info names and constructor arguments ------------------------------------


def test_neural_emits_tf_agents_info_fields():
    tf.random.set_seed(2)
    agent = _neural_agent(
        0.5,
        emit_policy_info=("predicted_rewards_mean", "log_probability", "bandit_policy_type"),
        info_fields_to_inherit_from_greedy=("predicted_rewards_mean",),
    )
    x, *_ = _data(4000)
    ts = trajectories.restart(tf.constant(x), 4000)
    greedy = agent.policy.action(ts)
    np.testing.assert_array_equal(greedy.info["log_probability"].numpy(), 0.0)
    np.testing.assert_array_equal(greedy.info["bandit_policy_type"].numpy(), 1)
    step = agent.collect_policy.action(ts)
    info = {k: v.numpy() for k, v in step.info.items()}
    assert set(info) == {"propensity", "predicted_rewards_mean", "log_probability", "bandit_policy_type"}
    np.testing.assert_allclose(info["log_probability"], np.log(info["propensity"]), rtol=1e-6)
    explored = info["bandit_policy_type"] == 2
    assert 0.45 < explored.mean() < 0.55 and set(np.unique(info["bandit_policy_type"])) == {1, 2}
    np.testing.assert_array_equal(step.action.numpy()[~explored], greedy.action.numpy()[~explored])
    np.testing.assert_allclose(info["predicted_rewards_mean"], greedy.info["predicted_rewards_mean"].numpy())
    specs.check_nest_matches_spec(
        trajectories.single_step_trajectory(x, step.action, x[:, 0], step.info),
        agent.collect_data_spec,
        num_outer_dims=2,
    )
    with pytest.raises(ValueError, match="predicted_rewards_sampled"):
        _neural_agent(emit_policy_info=("predicted_rewards_sampled",))
    with pytest.raises(ValueError, match="Unknown emit_policy_info"):
        _neural_agent(emit_policy_info=("predicted_reward",))
    with pytest.raises(ValueError, match="info_fields_to_inherit_from_greedy"):
        _neural_agent(info_fields_to_inherit_from_greedy=("predicted_rewards_mean",))
    with pytest.raises(NotImplementedError, match="constraints"):
        _neural_agent(constraints=[object()])


def test_linear_tf_agents_arguments():
    x, a, r, _ = _data(50)
    experience = trajectories.single_step_trajectory(x, a, r)
    # use_eigendecomp: A's eigendecomposition is kept, as TF-Agents' eig_vals / eig_matrix.
    agent = LinUCBAgent(TS_SPEC, ACTION_SPEC, use_eigendecomp=True, emit_log_probability=True)
    agent.train(experience)
    for k in range(K):
        vals, vecs = agent.eig_vals.numpy()[k], agent.eig_matrix.numpy()[k]
        np.testing.assert_allclose(vecs @ np.diag(vals) @ vecs.T, agent.cov_matrix.numpy()[k], atol=1e-4)
    step = agent.policy.action(trajectories.restart(tf.constant(x), 50))
    np.testing.assert_array_equal(step.info["log_probability"].numpy(), 0.0)  # deterministic: p = 1
    with pytest.raises(AttributeError, match="use_eigendecomp"):
        _ = LinUCBAgent(TS_SPEC, ACTION_SPEC).eig_vals
    with pytest.raises(ValueError, match="no closed-form probability"):
        LinearThompsonSamplingAgent(TS_SPEC, ACTION_SPEC, emit_log_probability=True)
    # variable_collection: a second agent over the same statistics sees the first one's training.
    twin = LinearThompsonSamplingAgent(
        TS_SPEC, ACTION_SPEC, variable_collection=agent.variable_collection, use_eigendecomp=True
    )
    np.testing.assert_array_equal(twin.theta.numpy(), agent.theta.numpy())
    assert np.abs(twin.theta.numpy()).sum() > 0
    with pytest.raises(ValueError, match="does not fit"):
        LinUCBAgent(TS_SPEC, ACTION_SPEC, variable_collection=agent.variable_collection)  # no eigendecomp
    with pytest.raises(TypeError, match="LinearBanditVariables"):
        LinUCBAgent(TS_SPEC, ACTION_SPEC, variable_collection=[])


# --- per-arm features ---------------------------------------------------------------------------


def _per_arm_agent(kind, env, seed=0):
    from rlops.agents.bandits import PerArmRewardNetwork

    if kind == "linucb":
        return LinUCBAgent(
            env.time_step_spec,
            env.action_spec,
            add_bias=True,
            accepts_per_arm_features=True,
            emit_policy_info=("predicted_rewards_mean",),
        )
    net = PerArmRewardNetwork(env.observation_spec, common_layers=(64, 32), seed=seed)
    return NeuralEpsilonGreedyAgent(
        env.time_step_spec,
        env.action_spec,
        net,
        tf_keras.optimizers.Adam(3e-3),
        epsilon=0.05,
        accepts_per_arm_features=True,
        emit_policy_info=("predicted_rewards_mean",),
    )


@pytest.mark.parametrize("kind", ["neural", "linucb"])
def test_per_arm_policies_score_each_candidate_and_log_its_features(kind):
    from rlops.envs.bandit_envs import PerArmBandit

    env = PerArmBandit(global_dim=3, arm_dim=2, num_actions=5, seed=1)
    agent = _per_arm_agent(kind, env)
    batch = env.sample(400)
    obs = {k: v.numpy() for k, v in batch.contexts.items()}
    greedy = agent.greedy_policy if kind == "linucb" else agent.policy
    for policy in (agent.policy, agent.collect_policy, greedy):
        step = policy.action(env.time_step(batch))
        actions = step.action.numpy()
        assert (actions < obs["num_actions"]).all()  # arms >= num_actions are not candidates
        np.testing.assert_array_equal(step.info["chosen_arm_features"].numpy(), obs["per_arm"][np.arange(400), actions])
        pred = step.info["predicted_rewards_mean"].numpy()
        allowed = np.arange(5)[None] < obs["num_actions"][:, None]
        if policy is greedy:
            np.testing.assert_array_equal(actions, np.where(allowed, pred, -np.inf).argmax(1))
    # Scores are per arm: permuting the candidate arms permutes the scores.
    perm = np.array([2, 0, 1, 4, 3])
    full = {"global": obs["global"], "per_arm": obs["per_arm"], "num_actions": np.full(400, 5, np.int32)}
    shuffled = dict(full, per_arm=obs["per_arm"][:, perm])
    scores = [
        greedy.action(trajectories.restart(o, 400)).info["predicted_rewards_mean"].numpy() for o in (full, shuffled)
    ]
    np.testing.assert_allclose(scores[1], scores[0][:, perm], rtol=1e-5, atol=1e-6)
    # Training data carries no 'per_arm' (TF-Agents' training_data_spec): the chosen arm's features
    # come from policy_info.
    assert "per_arm" not in agent.training_data_spec.observation
    assert "chosen_arm_features" in agent.training_data_spec.policy_info
    step = agent.collect_policy.action(env.time_step(batch))
    train_obs = {"global": obs["global"], "num_actions": obs["num_actions"]}
    exp = trajectories.single_step_trajectory(train_obs, step.action, env.rewards(batch, step.action), step.info)
    specs.check_nest_matches_spec(exp, agent.training_data_spec, num_outer_dims=2)
    assert np.isfinite(agent.train(exp).loss.numpy())
    with pytest.raises(ValueError, match="chosen_arm_features"):
        agent.train(exp._replace(policy_info={"propensity": exp.policy_info["propensity"]}))


@pytest.mark.slow
@pytest.mark.parametrize("kind,ratio", [("neural", 0.25), ("linucb", 0.55)])
def test_per_arm_agents_beat_random_by_a_wide_margin(kind, ratio):
    from rlops.envs.bandit_envs import PerArmBandit

    tf.random.set_seed(0)
    env = PerArmBandit(global_dim=4, arm_dim=4, num_actions=8, seed=0)
    agent = _per_arm_agent(kind, env)
    loop = make_interaction_loop(env, agent, batch_size=16)
    loop(120)
    # Fresh decisions, greedy/exploring policy as deployed: regret vs a uniform choice.
    batch = env.sample(4000)
    step = agent.collect_policy.action(env.time_step(batch))
    from rlops.envs.regret import regret

    ours = float(tf.reduce_mean(regret(batch.expected_rewards, step.action)))
    random = float(tf.reduce_mean(PerArmBandit.uniform_regret(batch)))
    assert ours < ratio * random, (ours, random)


# --- MultiWorkerMirroredStrategy: 2 worker processes -------------------------------------------


# `python SCRIPT ARGS` for one worker whose TF_CONFIG is argv[1] (no GPU).
_RUN_WORKER = """
import os, runpy, sys
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["TF_CONFIG"] = sys.argv[1]
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(sys.argv[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_multi_worker_two_processes_equal_one_replica(tmp_path):
    """LinUCB, LinTS and NeuralEpsilonGreedy trained by 2 workers (half of each global batch
    each) end where one process on the global batches ends."""
    import json
    import os
    import socket
    import subprocess
    import sys

    from helpers import child_env, fresh_python

    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    sys.path.insert(0, here)
    import bandit_job

    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    # The workers run forked from the suite's warm interpreter when there is one (conftest: it has
    # imported TensorFlow, nothing of rlops, and run no op): its TF_* environment must be theirs, so
    # each sets its TF_CONFIG itself, before the job's strategy reads it.
    env, python = child_env(), fresh_python()
    procs = []
    for i in range(2):
        procs.append(
            subprocess.Popen(
                [
                    python,
                    "-c",
                    _RUN_WORKER,
                    json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                    os.path.join(here, "bandit_job.py"),
                    "--root",
                    str(tmp_path / f"w{i}"),
                    "--out",
                    str(tmp_path / f"w{i}.npz"),
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=repo,
            )
        )
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"worker failed:\n{out}\n{err[-3000:]}"
    finally:
        for p in procs:
            p.kill()
    workers = [dict(np.load(tmp_path / f"w{i}.npz")) for i in range(2)]
    assert all(w["multi_worker"] and w["replicas"] == 2 for w in workers)
    reference = bandit_job.train_all(tf.distribute.get_strategy(), str(tmp_path / "ref"), seed=0)
    for key, ref in reference.items():
        for w in workers:
            np.testing.assert_allclose(w[key], ref, rtol=1e-4, atol=1e-5, err_msg=key)
    assert workers[0]["linucb_step"] == 96 and workers[0]["linucb_num_samples"].sum() == 96
    assert workers[0]["lints_step"] == 96 and workers[0]["lints_num_samples"].sum() == 96
