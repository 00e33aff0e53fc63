"""Learner on the default strategy: the tf.function loop, data, checkpoints, summaries, errors."""

import logging
import os

import learner_testlib as lt
import numpy as np
import pytest
import tensorflow as tf

from rlops.train import Learner, create_train_step_counter

BATCH = 8


def make_learner(root, agent=None, **kwargs):
    agent = agent or lt.RegressionAgent()
    kwargs.setdefault("experience_dataset_fn", lt.step_keyed_dataset_fn(agent.train_step_counter, BATCH))
    kwargs.setdefault("checkpoint_interval", -1)
    kwargs.setdefault("summary_interval", 0)
    return Learner(str(root), agent.train_step_counter, agent, **kwargs), agent


def test_run_is_one_tf_function_and_matches_eager_training(tmp_path):
    learner, agent = make_learner(tmp_path)
    traces = agent.python_train_calls
    loss = learner.run(iterations=5)
    assert learner.train_step_numpy == 5
    traced = agent.python_train_calls - traces
    learner.run(iterations=7)
    learner.run(iterations=1)
    # Step counts change per call, yet no Python runs per step: no retrace at all.
    assert agent.python_train_calls - traces == traced
    assert learner.train_step_numpy == 13

    # The same 13 global batches trained eagerly give the same variables.
    ref = lt.RegressionAgent()
    for step in range(13):
        ref_loss = ref.train(lt.make_global_batch(step, BATCH))
        if step == 4:
            np.testing.assert_allclose(loss.loss.numpy(), ref_loss.loss.numpy(), rtol=1e-5)
    for a, b in zip(lt.agent_weights(agent), lt.agent_weights(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_summaries_losses_and_steps_per_sec(tmp_path):
    learner, _ = make_learner(tmp_path, summary_interval=4)
    for _ in range(4):
        learner.run(iterations=3)
    learner.summary_writer.flush()
    scalars = lt.read_scalars(os.path.join(tmp_path, "train"))
    assert [s for s, _ in scalars["Learner/loss"]] == [4, 8, 12]
    assert [s for s, _ in scalars["Learner/extra/max_abs_error"]] == [4, 8, 12]
    # steps/sec after the runs that crossed a multiple of 4 (ending at 6, 9, 12); the first run
    # traced the tf.function and is left out of the average.
    assert [s for s, _ in scalars["Learner/steps_per_sec"]] == [6, 9, 12]
    assert all(v > 0 for _, v in scalars["Learner/steps_per_sec"])
    assert learner.last_steps_per_sec > 0


def test_triggers_after_step_fn_and_kwargs(tmp_path):
    agent = lt.RegressionAgent()
    calls = tf.Variable(0, dtype=tf.int64)
    seen_steps = []

    def dataset_fn():
        batch = lt.make_global_batch(0, BATCH)
        return tf.data.Dataset.from_tensors(dict(experience=batch, weights=tf.zeros([BATCH, 1]))).repeat()

    def after_step(sample, loss_info):
        experience, sample_info = sample  # TF-Agents: ((experience, sample_info), loss_info)
        assert set(experience) == {"experience", "weights"} and sample_info is None
        calls.assign_add(1)

    learner, _ = make_learner(
        tmp_path,
        agent,
        experience_dataset_fn=dataset_fn,
        use_kwargs_in_agent_train=True,
        after_train_strategy_step_fn=after_step,
        triggers=[seen_steps.append],
    )
    before = lt.agent_weights(agent)
    loss = learner.run(iterations=3)
    learner.run(iterations=2)
    assert seen_steps == [3, 5]
    assert calls.numpy() == 5
    # weights=0 reached agent.train: zero loss, no update.
    assert loss.loss.numpy() == 0.0
    for a, b in zip(before, lt.agent_weights(agent)):
        np.testing.assert_array_equal(a, b)


def _one_batch_dataset(batch):
    return lambda: tf.data.Dataset.from_tensors(batch).repeat()


def test_bad_experience_names_the_field(tmp_path):
    good = lt.make_global_batch(0, BATCH)
    bad_dtype = good._replace(reward=tf.cast(good.reward, tf.float64))
    learner, _ = make_learner(
        tmp_path / "a", experience_dataset_fn=_one_batch_dataset(bad_dtype), run_optimizer_variable_init=False
    )
    with pytest.raises(TypeError, match=r"experience\.reward: dtype float64"):
        learner.run()

    bad_shape = good._replace(observation=tf.zeros([BATCH, 1, lt.OBS_DIM + 1]))
    learner, _ = make_learner(
        tmp_path / "b", experience_dataset_fn=_one_batch_dataset(bad_shape), run_optimizer_variable_init=False
    )
    with pytest.raises(ValueError, match=r"experience\.observation: shape"):
        learner.run()

    missing = {k: v for k, v in good._asdict().items() if k != "discount"}
    learner, _ = make_learner(
        tmp_path / "c", experience_dataset_fn=_one_batch_dataset(missing), run_optimizer_variable_init=False
    )
    with pytest.raises(ValueError, match=r"experience: structure does not match"):
        learner.run()


def test_nan_loss_fails_naming_the_step(tmp_path):
    agent = lt.RegressionAgent()
    learner, _ = make_learner(
        tmp_path,
        agent,
        checkpoint_interval=1,
        experience_dataset_fn=lt.step_keyed_dataset_fn(agent.train_step_counter, BATCH, nan_at_step=3),
    )
    learner.run(iterations=2)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"(?s)LossInfo\.loss is NaN or Inf in the train step starting at train_step =.*\[3\]",
    ):
        learner.run(iterations=5)
    # Failing inside run means no checkpoint of the poisoned variables was written.
    assert tf.train.latest_checkpoint(os.path.join(tmp_path, "train", "checkpoints")).endswith("ckpt-2")


def test_checkpoints_restore_and_fallback_from_corrupt_latest(tmp_path, caplog):
    learner, agent = make_learner(tmp_path, checkpoint_interval=4, max_checkpoints_to_keep=2)
    weights = {}
    for _ in range(6):
        learner.run(iterations=2)
        weights[learner.train_step_numpy] = lt.agent_weights(agent)
    ckpt_dir = os.path.join(tmp_path, "train", "checkpoints")
    state = tf.train.get_checkpoint_state(ckpt_dir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-8", "ckpt-12"]

    # A new job restores the newest checkpoint, optimizer included, and continues the data.
    resumed, agent2 = make_learner(tmp_path, checkpoint_interval=4)
    assert resumed.train_step_numpy == 12
    for a, b in zip(weights[12], lt.agent_weights(agent2)):
        np.testing.assert_array_equal(a, b)

    # Damage the newest checkpoint: the next job warns and falls back to ckpt-8.
    data_file = os.path.join(ckpt_dir, "ckpt-12.data-00000-of-00001")
    with open(data_file, "r+b") as f:
        f.seek(0)
        f.write(b"\xff" * 16)
    with caplog.at_level(logging.WARNING):
        fallback, agent3 = make_learner(tmp_path, checkpoint_interval=4)
    assert fallback.train_step_numpy == 8
    assert "ckpt-12 could not be restored" in caplog.text and "older checkpoint" in caplog.text
    for a, b in zip(weights[8], lt.agent_weights(agent3)):
        np.testing.assert_array_equal(a, b)

    # A missing, then a corrupt, state file: the checkpoint files on disk still decide (ckpt-8).
    state_file = os.path.join(ckpt_dir, "checkpoint")
    os.remove(state_file)
    assert make_learner(tmp_path, checkpoint_interval=4)[0].train_step_numpy == 8
    with open(state_file, "w") as f:
        f.write('model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths {{{ garbage')
    assert make_learner(tmp_path, checkpoint_interval=4)[0].train_step_numpy == 8

    # With every checkpoint unreadable the job refuses to silently start from scratch.
    os.remove(os.path.join(ckpt_dir, "ckpt-8.index"))
    with pytest.raises(RuntimeError, match="None of the 1 checkpoints"):  # ckpt-8 lost its index
        make_learner(tmp_path, checkpoint_interval=4)


def test_checkpoint_extras_are_saved_and_restored_with_the_agent(tmp_path):
    extra = tf.Module()
    extra.stat = tf.Variable(0.0, dtype=tf.float64)
    learner, _ = make_learner(tmp_path, checkpoint_interval=2, checkpoint_extras={"collector": extra})
    extra.stat.assign(3.5)
    learner.run(iterations=2)  # checkpoint at step 2 holds 3.5
    extra.stat.assign(-1.0)
    fresh = tf.Module()
    fresh.stat = tf.Variable(0.0, dtype=tf.float64)
    resumed, _ = make_learner(tmp_path, checkpoint_interval=2, checkpoint_extras={"collector": fresh})
    assert resumed.train_step_numpy == 2 and fresh.stat.numpy() == 3.5
    with pytest.raises(ValueError, match="checkpoint_extras may not use the names"):
        make_learner(tmp_path / "other", checkpoint_extras={"agent": fresh})


def test_checkpoint_interval_minus_one_disables_with_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        learner, _ = make_learner(tmp_path, checkpoint_interval=-1)
    assert "Checkpointing is disabled" in caplog.text
    learner.run(iterations=3)
    assert learner.save_checkpoint() is None
    assert not os.path.exists(os.path.join(tmp_path, "train", "checkpoints"))


def test_argument_errors(tmp_path):
    agent = lt.RegressionAgent()
    with pytest.raises(ValueError, match="checkpoint_interval"):
        Learner(str(tmp_path), agent.train_step_counter, agent, checkpoint_interval=0)
    with pytest.raises(TypeError, match="train_step"):
        Learner(str(tmp_path), tf.Variable(0), agent)
    learner = Learner(
        str(tmp_path), agent.train_step_counter, agent, checkpoint_interval=-1, run_optimizer_variable_init=False
    )
    with pytest.raises(ValueError, match="needs an iterator"):
        learner.run()
    with pytest.raises(ValueError, match="iterations"):
        learner.run(iterations=0, iterator=iter(tf.data.Dataset.range(1)))


def test_separate_train_step_is_incremented_by_learner(tmp_path):
    agent = lt.RegressionAgent()
    own_step = create_train_step_counter()
    learner = Learner(str(tmp_path), own_step, agent, lt.step_keyed_dataset_fn(own_step, BATCH), checkpoint_interval=-1)
    learner.run(iterations=4)
    assert learner.train_step_numpy == 4 and agent.train_step_counter.numpy() == 4


def test_real_bandit_agent_trains_in_learner(tmp_path):
    import tf_keras

    from rlops.agents.bandits import NeuralEpsilonGreedyAgent
    from rlops.agents.networks import RewardNetwork

    proto = lt.RegressionAgent()
    network = RewardNetwork(proto.time_step_spec.observation, lt.NUM_ACTIONS, (16,))
    step = create_train_step_counter()
    agent = NeuralEpsilonGreedyAgent(
        proto.time_step_spec,
        proto.action_spec,
        network,
        tf_keras.optimizers.Adam(0.05),
        epsilon=0.1,
        train_step_counter=step,
    )

    def with_propensity(s):  # the epsilon-greedy collect policy logs propensities
        batch = lt.make_global_batch(s, 64)
        info = tf.nest.map_structure(
            lambda spec: tf.ones([64, 1] + spec.shape.as_list(), spec.dtype), agent.collect_data_spec.policy_info
        )
        return batch._replace(policy_info=info)

    data = lambda: tf.data.Dataset.range(10**6).map(with_propensity)  # noqa: E731
    learner = Learner(str(tmp_path), step, agent, data, checkpoint_interval=-1, summary_interval=10)
    first = learner.run(iterations=1).loss.numpy()
    last = learner.run(iterations=150).loss.numpy()
    assert learner.train_step_numpy == 151
    assert last < 0.3 * first


def test_ppo_update_through_learner_matches_agent_train(tmp_path):
    import tf_keras

    from rlops.agents.ppo import PPOAgent

    def make_agent():
        time_step_spec, action_spec = lt.cartpole_specs()
        return PPOAgent(
            time_step_spec,
            action_spec,
            tf_keras.optimizers.Adam(1e-3),
            num_epochs=3,
            train_step_counter=create_train_step_counter(),
        )

    agent, twin = make_agent(), make_agent()
    learner = Learner(
        str(tmp_path),
        agent.train_step_counter,
        agent,
        checkpoint_interval=-1,
        summary_interval=0,
        run_optimizer_variable_init=False,
    )  # saves a PPO trace; no checkpoint to restore
    for seed in range(2):  # on-policy: a fresh batch per Learner.run
        experience = lt.ppo_experience(agent, seed=seed)
        loss = learner.run_on_batch(experience)
        twin_loss = twin.train(experience)
        np.testing.assert_allclose(loss.loss.numpy(), twin_loss.loss.numpy(), rtol=1e-4, atol=1e-6)
    assert learner.train_step_numpy == 2 * 3  # one train step per gradient step (3 epochs)
    for a, b in zip(agent.trainable_variables, twin.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_neural_bandit_mirrored_matches_default_strategy(tmp_path):
    """The real agent's per-replica loss scaling and gradient clipping: 2 replicas (logical CPUs)
    update like one."""
    import tf_keras

    from rlops.agents import specs as specs_lib
    from rlops.agents.bandits import NeuralEpsilonGreedyAgent
    from rlops.agents.networks import RewardNetwork
    from rlops.agents.trajectories import single_step_trajectory, time_step_spec

    obs_spec = tf.TensorSpec([6], tf.float32)
    action_spec = specs_lib.BoundedTensorSpec((), tf.int32, 0, 3)
    rng = np.random.default_rng(0)
    batches = [
        single_step_trajectory(
            tf.constant(rng.normal(size=(64, 6)), tf.float32),
            tf.constant(rng.integers(0, 4, 64), tf.int32),
            tf.constant(rng.normal(size=64), tf.float32),
            {"propensity": tf.fill([64], 0.25)},
        )
        for _ in range(3)
    ]

    def run(strategy):
        with strategy.scope():
            agent = NeuralEpsilonGreedyAgent(
                time_step_spec(obs_spec),
                action_spec,
                RewardNetwork(obs_spec, 4, (16,)),
                tf_keras.optimizers.SGD(0.1),
                epsilon=0.1,
                gradient_clipping=0.05,  # bites: clip the replicas' summed gradient
                train_step_counter=create_train_step_counter(),
            )
        learner = Learner(
            str(tmp_path / type(strategy).__name__),
            agent.train_step_counter,
            agent,
            checkpoint_interval=-1,
            summary_interval=0,
            strategy=strategy,
        )
        losses = [float(learner.run_on_batch(batch).loss) for batch in batches]
        return losses, [v.numpy() for v in agent.reward_network.trainable_variables]

    default_losses, default_vars = run(tf.distribute.get_strategy())
    # ReductionToOneDevice: no collective ops. TF's collective executor caches instance
    # parameters per process, so a second MirroredStrategy with other tensor shapes (the other
    # strategy tests) would otherwise hit "Shape mismatch in the collective instance".
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    mirrored_losses, mirrored_vars = run(mirrored)
    np.testing.assert_allclose(mirrored_losses, default_losses, rtol=1e-4, atol=1e-6)
    for a, b in zip(mirrored_vars, default_vars):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


_ppo = lt.make_ppo_agent
PPO_OPTIONS = lt.PPO_OPTIONS


@pytest.mark.slow  # PPO under MirroredStrategy against one replica, twice (~25 s each)
@pytest.mark.parametrize("advantages", ["batch", "minibatch"])
def test_ppo_mirrored_two_replicas_equals_one_replica_on_the_global_batch(tmp_path, advantages):
    """Gradients, advantage moments, the KL mean and normalizer statistics are all-reduced, so
    PPO through the Learner on 2 replicas (logical CPUs) trains exactly like one replica on the
    same global batch: losses, train steps, weights, adaptive beta and normalizers. "minibatch":
    the moments are taken in the gradient step (here one step per epoch, on the whole batch)."""
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    options = dict(PPO_OPTIONS, normalize_advantages=advantages)
    one, two = _ppo(tf.distribute.get_strategy(), **options), _ppo(mirrored, **options)
    learner = Learner(
        str(tmp_path), two.train_step_counter, two, checkpoint_interval=-1, summary_interval=0, strategy=mirrored
    )
    for seed in range(2):
        experience = lt.ppo_mixed_experience(one, seed)
        ref, got = one.train(experience), learner.run_on_batch(experience)
        np.testing.assert_allclose(got.loss.numpy(), ref.loss.numpy(), rtol=1e-4, atol=1e-6)
        for a, b in zip(got.extra, ref.extra):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    assert one.train_step_counter.numpy() == learner.train_step_numpy == 6
    for a, b in zip(two.trainable_weights, one.trainable_weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(two.adaptive_kl_beta.numpy(), one.adaptive_kl_beta.numpy(), rtol=1e-6)
    for n2, n1 in (
        (two.observation_normalizer, one.observation_normalizer),
        (two.reward_normalizer, one.reward_normalizer),
    ):
        np.testing.assert_allclose(n2.count.numpy(), n1.count.numpy(), rtol=1e-9)
        np.testing.assert_allclose(n2.mean.numpy(), n1.mean.numpy(), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(n2.m2.numpy(), n1.m2.numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.slow  # PPO under MirroredStrategy with every summary, against one replica (~50 s)
def test_ppo_debug_and_gradient_summaries_under_mirrored_equal_one_replica(tmp_path):
    """Debug histograms gather every replica's rows and the gradient summaries are the applied
    (summed) gradients, so 2 replicas write what one replica writes on the same global batch."""
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    options = dict(PPO_OPTIONS, debug_summaries=True, summarize_grads_and_vars=True)
    written = {}
    for name, strategy in (("one", tf.distribute.get_strategy()), ("two", mirrored)):
        agent = _ppo(strategy, **options)
        learner = Learner(
            str(tmp_path / name),
            agent.train_step_counter,
            agent,
            checkpoint_interval=-1,
            summary_interval=1,
            strategy=strategy,
        )
        learner.run_on_batch(lt.ppo_mixed_experience(agent, 0))
        learner.summary_writer.flush()
        written[name] = lt.read_scalars(str(tmp_path / name / "train"), histograms=True)
    one, two = written["one"], written["two"]
    assert set(two) == set(one)
    tags = [t for t in one if t.startswith(("Debug/", "Gradients/"))]
    assert "Debug/returns" in tags and any(t.endswith("_gradient_norm") for t in tags)
    for tag in tags:  # histogram value counts (global rows), debug means, gradient norms
        np.testing.assert_allclose(
            [v for _, v in two[tag]], [v for _, v in one[tag]], rtol=1e-4, atol=1e-6, err_msg=tag
        )


def test_ppo_global_batch_and_minibatches_under_mirrored():
    """agent.train(global batch) under strategy.scope() splits the batch over the replicas; with
    minibatches the train step counts every minibatch of every epoch."""
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    agent = _ppo(mirrored, use_gae=True, minibatch_size=12, normalize_observations=False)
    before = [v.numpy().copy() for v in agent.trainable_weights]
    with mirrored.scope():
        info = agent.train(lt.ppo_experience(agent, seed=5))
    # 4 envs x 9 rows = 36 rows, 18 per replica in minibatches of 6: 3 epochs x 3 steps.
    assert agent.train_step_counter.numpy() == 3 * 3
    assert np.isfinite(mirrored.reduce("SUM", info.loss, axis=None).numpy())
    assert all(not np.allclose(b, v.numpy()) for b, v in zip(before, agent.trainable_weights) if b.ndim == 2)


def test_ppo_inside_strategy_run_with_several_replicas_explains_what_to_do():
    """Checked by a direct strategy.run, not through a Learner: the error is raised while tracing,
    before any collective op runs."""
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    agent = _ppo(strategy)
    experience = lt.ppo_experience(agent)
    with pytest.raises(RuntimeError, match="cross-replica context"):
        strategy.run(agent.train, args=(experience,))


def test_tf_agents_data_contract_and_arguments(tmp_path):
    """(experience, sample_info) elements; after_train_strategy_step_fn gets both; non-scalar
    loss fields summed over all axes; agent.initialize() called; triggers re-armed on restore;
    TF-Agents' Learner arguments accepted or refused with the reason."""

    class Agent(lt.RegressionAgent):
        initialized = 0

        def initialize(self):
            Agent.initialized += 1

        def train(self, experience, weights=None):
            info = super().train(experience, weights)
            return info._replace(extra={"per_row": tf.reshape(experience.reward, [-1])})

    batch = lt.make_global_batch(0, BATCH)
    seen = []

    def after(experience_and_info, loss_info):
        experience, sample_info = experience_and_info
        seen.append(sample_info)

    dataset_fn = lambda: tf.data.Dataset.from_tensors((batch, tf.constant(7))).repeat()  # noqa: E731
    agent = Agent()
    learner, _ = make_learner(
        tmp_path,
        agent,
        experience_dataset_fn=dataset_fn,
        after_train_strategy_step_fn=after,
        experience_dataset_options=tf.distribute.InputOptions(),
        strategy_run_options=tf.distribute.RunOptions(),
    )
    loss = learner.run(iterations=2)
    assert Agent.initialized == 1 and seen and all(info is not None for info in seen)  # (at trace time)
    assert loss.extra["per_row"].shape == () and np.isclose(loss.extra["per_row"], batch.reward.numpy().sum())

    direct, _ = make_learner(
        tmp_path / "direct",
        Agent(),
        direct_sampling=True,
        experience_dataset_fn=lambda: tf.data.Dataset.from_tensors(batch).repeat(),
    )
    direct.run(iterations=1)
    with pytest.raises(ValueError, match="Reverb is not part of rlops' stack"):
        make_learner(tmp_path / "reverb", use_reverb_v2=True)

    from rlops.train.triggers import IntervalTrigger

    calls = []
    ckpt_learner, ckpt_agent = make_learner(tmp_path / "ckpt", checkpoint_interval=3)
    ckpt_learner.run(iterations=3)
    trigger = IntervalTrigger(5, lambda: calls.append(1))
    restored, _ = make_learner(tmp_path / "ckpt", checkpoint_interval=3, triggers=[trigger])
    assert restored.train_step_numpy == 3
    restored.run(iterations=2)  # step 5: only 2 steps since the restore, so no firing yet
    assert calls == []
    restored.run(iterations=3)  # step 8: 5 steps since the restore at 3
    assert calls == [1]
