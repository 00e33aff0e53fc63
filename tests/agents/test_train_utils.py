"""create_train_step / create_train_op against hand-computed gradient steps."""

import logging

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from rlops.agents import train_utils

X = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32)
Y = np.array([1.0, -2.0, 0.0], np.float32)


def numpy_grad(w):
    # d/dw mean((Xw - y)^2) = 2/N X^T (Xw - y)
    return 2.0 / len(Y) * X.T @ (X @ w - Y)


def test_loss_must_be_callable():
    with pytest.raises(ValueError, match="must be callable"):
        train_utils.create_train_step(tf.constant(1.0), tf_keras.optimizers.SGD(0.1))


def test_train_step_applies_sgd_update_and_increments_step():
    w = tf.Variable([0.5, -0.5])
    step = tf.Variable(0, dtype=tf.int64)
    loss_fn = lambda: tf.reduce_mean(tf.square(tf.linalg.matvec(X, w) - Y))  # noqa: E731
    train = train_utils.create_train_step(loss_fn, tf_keras.optimizers.SGD(0.1), global_step=step)
    w0 = w.numpy().copy()
    loss = train()
    np.testing.assert_allclose(loss.numpy(), np.mean((X @ w0 - Y) ** 2), rtol=1e-6)  # loss before the update
    np.testing.assert_allclose(w.numpy(), w0 - 0.1 * numpy_grad(w0), rtol=1e-5)
    assert step.numpy() == 1
    tf.function(train)()  # same callable works inside tf.function
    assert step.numpy() == 2


def test_nested_loss_transform_grads_and_variables_to_train():
    w = tf.Variable([0.5, -0.5])
    frozen = tf.Variable(2.0)
    step = tf.Variable(0, dtype=tf.int64)

    def loss_fn():
        return {"mse": tf.reduce_mean(tf.square(tf.linalg.matvec(X, w) - Y)), "reg": 0.1 * frozen * tf.reduce_sum(w)}

    clip = train_utils.clip_global_norm(0.05)
    train = train_utils.create_train_step(
        loss_fn, tf_keras.optimizers.SGD(1.0), global_step=step, variables_to_train=[w], transform_grads_fn=clip
    )
    w0 = w.numpy().copy()
    out = train()
    assert set(out) == {"mse", "reg"}
    g = numpy_grad(w0) + 0.1 * 2.0
    g = g * min(1.0, 0.05 / np.linalg.norm(g))
    np.testing.assert_allclose(w.numpy(), w0 - g, rtol=1e-5)
    assert frozen.numpy() == 2.0  # not in variables_to_train


def test_update_ops_run_before_the_step():
    counter = tf.Variable(0.0)
    w = tf.Variable(1.0)
    train = train_utils.create_train_step(
        lambda: tf.square(w - counter),
        tf_keras.optimizers.SGD(0.5),
        global_step=None,
        update_ops=[lambda: counter.assign_add(1.0)],
    )
    loss = train()
    assert counter.numpy() == 1.0
    np.testing.assert_allclose(loss.numpy(), 0.0)  # loss saw the updated counter


def test_check_numerics_names_the_loss_and_step():
    w = tf.Variable(1.0)
    step = tf.Variable(7, dtype=tf.int64)
    train = train_utils.create_train_step(
        lambda: {"value_loss": w * np.nan}, tf_keras.optimizers.SGD(0.1), global_step=step
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="value_loss"):
        train()
    assert w.numpy() == 1.0 and step.numpy() == 7  # nothing applied
    with pytest.raises(tf.errors.InvalidArgumentError, match="train step"):
        tf.function(train_utils.create_train_step(lambda: w * np.inf, tf_keras.optimizers.SGD(0.1), global_step=step))()


def test_gradient_summaries_are_written(tmp_path):
    w = tf.Variable([0.5, -0.5], name="w")
    step = tf.Variable(0, dtype=tf.int64)
    train = train_utils.create_train_step(
        lambda: tf.reduce_sum(tf.square(w)), tf_keras.optimizers.SGD(0.1), global_step=step, summarize_gradients=True
    )
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        train()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["tensors"]) | set(acc.Tags()["histograms"])
    assert any("gradient_norm" in t for t in tags), tags


def test_create_train_op_graph_mode_semantics(caplog):
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([0.5, -0.5]))
        counter = tf.compat.v1.get_variable("counter", initializer=0.0, trainable=False)
        update = tf.compat.v1.assign_add(counter, 1.0)
        other_update = tf.compat.v1.assign_add(counter, 10.0, name="other_update")
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, update)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, other_update)
        loss = tf.reduce_mean(tf.square(tf.linalg.matvec(tf.constant(X), w) - Y))
        with caplog.at_level(logging.WARNING):
            train_op = train_utils.create_train_op(
                loss, tf.compat.v1.train.GradientDescentOptimizer(0.1), update_ops=[update]
            )
        assert getattr(other_update, "op", other_update).name in caplog.text
        assert repr(getattr(update, "op", update).name) not in caplog.text
        step = tf.compat.v1.train.get_global_step()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            w0 = sess.run(w)
            loss_value = sess.run(train_op)
            np.testing.assert_allclose(loss_value, np.mean((X @ w0 - Y) ** 2), rtol=1e-6)
            np.testing.assert_allclose(sess.run(w), w0 - 0.1 * numpy_grad(w0), rtol=1e-5)
            assert sess.run(counter) == 1.0  # the listed update op ran, the other did not
            assert sess.run(step) == 1


def test_create_train_op_defaults_to_update_ops_collection_and_keras_optimizer():
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(3.0))
        counter = tf.compat.v1.get_variable("counter", initializer=0.0, trainable=False)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, tf.compat.v1.assign_add(counter, 1.0))
        train_op = train_utils.create_train_op(
            tf.square(w),
            tf.compat.v1.train.GradientDescentOptimizer(0.25),
            transform_grads_fn=train_utils.clip_gradient_norms(1.0),
        )
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            assert sess.run(train_op) == 9.0
            np.testing.assert_allclose(sess.run(w), 3.0 - 0.25 * 1.0)  # gradient 6 clipped to 1
            assert sess.run(counter) == 1.0
            assert train_op in graph.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP)


def test_create_train_op_refuses_eager_mode():
    with pytest.raises(RuntimeError, match="create_train_step"):
        train_utils.create_train_op(tf.constant(1.0), tf_keras.optimizers.SGD(0.1))


def test_lazily_created_variables_train_from_the_first_step():
    """variables_to_train is resolved after loss() ran: a layer built by its first call trains then."""
    layer = tf_keras.layers.Dense(1, kernel_initializer="ones")
    x = tf.ones([4, 2])
    step = train_utils.create_train_step(
        lambda: tf.reduce_mean(layer(x)),
        tf_keras.optimizers.SGD(0.5),
        global_step=None,
        total_loss_fn=None,
        variables_to_train=lambda: layer.trainable_variables,
    )
    step()
    np.testing.assert_allclose(layer.kernel.numpy(), np.full((2, 1), 0.5))  # 1 - 0.5 * d(mean)/dk (= 1)


def test_non_callable_update_ops_run_inside_tf_function():
    v = tf.Variable(1.0)
    counter = tf.Variable(0)
    optimizer = tf_keras.optimizers.SGD(0.1)
    optimizer.build([v])

    @tf.function(autograph=False)
    def run():
        step = train_utils.create_train_step(
            lambda: tf.square(v), optimizer, global_step=None, update_ops=[counter.assign_add(1)]
        )
        return step()

    run()
    assert counter.numpy() == 1
    np.testing.assert_allclose(v.numpy(), 0.8)


@pytest.mark.parametrize("method, widest_sum", [(None, 3), (tf.AggregationMethod.EXPERIMENTAL_TREE, 2)])
def test_create_train_op_passes_aggregation_method_to_tf_gradients(method, widest_sum):
    """A variable used three times gets three partial gradients: tf.gradients sums them in one
    3-input AddN by default, pairwise under EXPERIMENTAL_TREE; the update is the same."""
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(2.0))
        loss = tf.sin(w) + tf.square(w) + 3.0 * w
        train_op = train_utils.create_train_op(
            loss, tf.compat.v1.train.GradientDescentOptimizer(0.1), aggregation_method=method
        )
        sums = [len(op.inputs) for op in graph.get_operations() if op.type == "AddN" and "gradients" in op.name]
        assert max(sums) == widest_sum
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train_op)
            np.testing.assert_allclose(sess.run(w), 2.0 - 0.1 * (np.cos(2.0) + 4.0 + 3.0), rtol=1e-6)


def test_eager_train_step_warns_that_aggregation_method_has_no_effect(caplog):
    w = tf.Variable(1.0)
    with caplog.at_level(logging.WARNING):
        train_utils.create_train_step(
            lambda: tf.square(w),
            tf_keras.optimizers.SGD(0.1),
            aggregation_method=tf.AggregationMethod.EXPERIMENTAL_TREE,
        )
    assert "aggregation_method" in caplog.text and "no effect" in caplog.text
