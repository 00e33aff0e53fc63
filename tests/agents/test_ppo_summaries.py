"""PPO's TensorBoard summaries, read back from the event files: which tags, how many per train
call, and values checked against the update itself (issue 12: debug histograms were missing,
variable histograms shared tags, gradient histograms absent)."""

import collections
import glob

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from test_ppo import CONTINUOUS, DISCRETE, OBS, make_experience

from rlops.agents.networks import ActorNetwork, ValueNetwork
from rlops.agents.ppo import PPOAgent
from rlops.agents.trajectories import time_step_spec


def make_agent(action_spec, optimizer=None, **kwargs):
    # Summaries are written outside the compiled update: XLA (seconds of compile per agent) is
    # exercised once, in the last test.
    kwargs.setdefault("jit_compile", False)
    kwargs.setdefault("normalize_observations", False)
    kwargs.setdefault("normalize_rewards", False)
    return PPOAgent(
        time_step_spec(OBS),
        action_spec,
        optimizer or tf_keras.optimizers.Adam(1e-3),
        ActorNetwork(OBS, action_spec, (8,), seed=1),
        ValueNetwork(OBS, (8,), seed=2),
        **kwargs,
    )


def read_events(logdir):
    """{tag: [(step, kind, value)]} with value a float (scalars) or (num, sum, sum_squares) (histograms)."""
    out = collections.defaultdict(list)
    for path in glob.glob(f"{logdir}/events*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                kind = v.metadata.plugin_data.plugin_name
                array = tf.make_ndarray(v.tensor)
                if kind == "histograms":  # [buckets, 3]: left, right, count
                    value = float(array[:, 2].sum())
                else:
                    value = float(array)
                out[v.tag].append((event.step, kind, value))
    return out


def train_with_writer(agent, exp, logdir, calls=2):
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for _ in range(calls):
            agent.train(exp)
    writer.flush()
    return read_events(str(logdir))


@pytest.mark.slow  # PPO training with every debug and gradient summary read back (~30 s)
def test_debug_and_gradient_summaries_once_per_train_call(tmp_path):
    action_spec = CONTINUOUS  # its extra distribution histograms included (discrete: the test below)
    agent = make_agent(
        action_spec,
        importance_ratio_clipping=0.2,
        num_epochs=3,
        minibatch_size=7,
        use_gae=True,
        normalize_rewards=True,
        debug_summaries=True,
        summarize_grads_and_vars=True,
    )
    exp = make_experience(agent, boundary_at=2)
    events = train_with_writer(agent, exp, tmp_path)
    steps_per_call = 3 * 4  # 3 epochs x ceil(4 * 7 rows / 7)
    assert agent.train_step_counter.numpy() == 2 * steps_per_call
    expected = [
        "Debug/actions",
        "Debug/observations",
        "Debug/rewards",
        "Debug/rewards_normalized",
        "Debug/returns",
        "Debug/advantages",
        "Debug/advantages_normalized",
        "Debug/value_preds",
        "Debug/value_estimation_error",
        "Debug/action_log_prob",
        "Debug/action_log_prob_sample",
        "Debug/importance_ratio",
        "Debug/importance_ratio_clipped",
        "Debug/per_timestep_objective",
        "Debug/policy_entropy",
        "Debug/kl_divergence",
        "Debug/value_pred_avg",
        "Debug/rewards_mean",
        "Debug/importance_ratio_mean",
        "Losses/policy_gradient_loss",
        "Metrics/learning_rate",
    ]
    if action_spec is CONTINUOUS:
        expected += ["Debug/actions_distribution_mean", "Debug/actions_distribution_stddev"]
    names = agent._variable_paths()
    assert len(set(names)) == len(names) == len(agent.trainable_weights)
    expected += [f"Variables/{n}" for n in names] + [f"Gradients/{n}_gradient" for n in names]
    expected += [f"Gradients/{n}_gradient_norm" for n in names]
    missing = [t for t in expected if t not in events]
    assert not missing, missing
    # Every tag once per train call (not per minibatch), at the step after the call's update.
    for tag, values in events.items():
        assert [step for step, _, _ in values] == [steps_per_call, 2 * steps_per_call], tag
    # Histograms over the rows that count: 4 x 7 rows minus 4 bootstrap rows and 1 boundary row.
    valid_rows = 4 * 7 - 4 - 1
    for tag in ("Debug/returns", "Debug/importance_ratio", "Debug/value_preds"):
        assert events[tag][0][2] == valid_rows, tag
    # Variable histograms hold each variable's final values.
    for name, var in zip(names, agent.trainable_weights):
        assert events[f"Variables/{name}"][-1][2] == var.numpy().size


def test_gradient_summaries_are_the_applied_gradients(tmp_path):
    """With plain SGD and one full-batch step per call, the applied gradient is
    (w_before - w_after) / lr: the written norms must equal it."""
    lr = 0.1
    agent = make_agent(
        DISCRETE,
        tf_keras.optimizers.SGD(lr),
        num_epochs=1,
        importance_ratio_clipping=0.2,
        summarize_grads_and_vars=True,
    )
    exp = make_experience(agent)
    before = [v.numpy().copy() for v in agent.trainable_weights]
    events = train_with_writer(agent, exp, tmp_path, calls=1)
    for name, b, v in zip(agent._variable_paths(), before, agent.trainable_weights):
        grad = (b - v.numpy()) / lr
        ((step, kind, norm),) = events[f"Gradients/{name}_gradient_norm"]
        assert step == 1 and kind == "scalars"
        np.testing.assert_allclose(norm, np.linalg.norm(grad), rtol=1e-3, atol=1e-6, err_msg=name)
    assert not any(tag.startswith("Debug/") for tag in events)  # debug_summaries is off


def test_default_agent_writes_no_histograms_and_compiled_update_has_no_summary_ops(tmp_path):
    agent = make_agent(
        CONTINUOUS,
        importance_ratio_clipping=0.2,
        num_epochs=2,
        minibatch_size=7,
        debug_summaries=True,
        summarize_grads_and_vars=True,
        jit_compile=True,
    )
    exp = make_experience(agent)
    assert np.isfinite(agent.train(exp).loss.numpy())  # the update with debug outputs compiles with XLA
    default = make_agent(CONTINUOUS, importance_ratio_clipping=0.2, num_epochs=2, minibatch_size=7)
    events = train_with_writer(default, exp, tmp_path, calls=1)
    assert events and all(kind == "scalars" for values in events.values() for _, kind, _ in values)
    # The XLA-compiled update (summaries or not) holds no summary op: they are written outside it.
    for a in (agent, default):
        graph = a._core_fn.get_concrete_function(
            tf.nest.map_structure(tf.convert_to_tensor, exp), tf.ones_like(exp.reward)
        ).graph.as_graph_def()
        ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
        assert not [op for op in ops if "Summary" in op], sorted(set(ops))


@pytest.mark.slow  # PPO through the Learner with summaries read back (~15-30 s)
def test_through_the_learner_summaries_follow_the_interval(tmp_path):
    """Through the Learner, PPO's own summaries are written (the Learner's trace-only variable
    init used to cache a writer-less trace of agent.train: none were), and a train call that
    advances the step 12 times records when it crossed a multiple of summary_interval."""
    from rlops.train.learner import Learner

    agent = make_agent(DISCRETE, importance_ratio_clipping=0.2, num_epochs=3, minibatch_size=7, debug_summaries=True)
    exp = make_experience(agent)
    learner = Learner(str(tmp_path), agent.train_step_counter, agent, summary_interval=30, checkpoint_interval=-1)
    for _ in range(5):
        learner.run_on_batch(exp)
    learner.summary_writer.flush()
    events = read_events(str(tmp_path / "train"))
    for tag in ("Losses/policy_gradient_loss", "Debug/returns", "Learner/loss"):
        # Steps after each call: 12, 24, 36, 48, 60; multiples of 30 crossed by the 3rd and 5th.
        assert [step for step, _, _ in events[tag]] == [36, 60], tag


def test_minibatch_advantages_are_not_reported_as_batch_normalized(tmp_path):
    """With normalize_advantages="minibatch" the batch holds raw advantages (each gradient step
    normalizes its own rows), so no Debug/advantages_normalized histogram claims otherwise."""
    agent = make_agent(
        DISCRETE,
        importance_ratio_clipping=0.2,
        num_epochs=1,
        minibatch_size=7,
        normalize_advantages="minibatch",
        debug_summaries=True,
    )
    events = train_with_writer(agent, make_experience(agent), tmp_path, calls=1)
    assert "Debug/advantages" in events and "Debug/importance_ratio" in events
    assert "Debug/advantages_normalized" not in events
