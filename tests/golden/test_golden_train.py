"""rlops create_train_step against TF-Agents 0.19's eager_utils (fixtures: make_fixtures_train.py)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import train_utils

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
STEPS = 3


def load(name):
    data = np.load(os.path.join(FIXTURES, f"train_step_{name}.npz"))
    return {k: data[k] for k in data.files}


@pytest.mark.parametrize("name", ["eager_sgd_clip", "eager_adam_pair_vars"])
def test_eager_create_train_step_matches_tf_agents(name):
    d = load(name)
    x, y = d["x"], d["y"]
    w = tf.Variable(d["w0"], name="w")
    b = tf.Variable(np.zeros([1], np.float32), name="b")
    global_step = tf.Variable(0, dtype=tf.int64)
    if name == "eager_sgd_clip":
        step = train_utils.create_train_step(
            lambda: tf.reduce_mean(tf.square(x @ w + b - y)),
            tf.compat.v1.train.GradientDescentOptimizer(0.1),
            global_step=global_step,
            transform_grads_fn=train_utils.clip_gradient_norms(0.5),
        )
    else:
        step = train_utils.create_train_step(
            lambda: (tf.reduce_mean(tf.square(x @ w + b - y)), tf.reduce_sum(tf.square(w))),
            tf.compat.v1.train.AdamOptimizer(0.05),
            global_step=global_step,
            total_loss_fn=lambda pair: pair[0] + 0.1 * pair[1],
            variables_to_train=lambda: [w],
        )
    for i in range(STEPS):
        value = step()
        np.testing.assert_allclose(
            np.asarray(tf.nest.map_structure(lambda t: t.numpy(), value)), d[f"loss/{i}"], rtol=1e-5
        )
    np.testing.assert_allclose(w.numpy(), d["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), d["b"], rtol=1e-5, atol=1e-6)
    assert global_step.numpy() == d["global_step"] == STEPS


def test_graph_create_train_step_returns_the_loss_tensor_like_tf_agents():
    """In a tf.compat.v1 graph create_train_step returns the loss tensor (run after the update
    op and the non-callable update op), not a callable."""
    d = load("graph_sgd")
    x, y = d["x"], d["y"]
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=d["w0"], use_resource=True)
        b = tf.compat.v1.get_variable("b", initializer=np.zeros([1], np.float32), use_resource=True)
        counter = tf.compat.v1.get_variable("counter", initializer=0, use_resource=True, trainable=False)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        loss = train_utils.create_train_step(
            lambda: tf.reduce_mean(tf.square(x @ w + b - y)),
            tf.compat.v1.train.GradientDescentOptimizer(0.1),
            update_ops=[counter.assign_add(1)],
        )
        assert isinstance(loss, tf.Tensor)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for i in range(STEPS):
                np.testing.assert_allclose(sess.run(loss), d[f"loss/{i}"], rtol=1e-5)
            np.testing.assert_allclose(sess.run(w), d["w"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(sess.run(b), d["b"], rtol=1e-5, atol=1e-6)
            assert sess.run(global_step) == d["global_step"] == STEPS
            assert sess.run(counter) == d["counter"] == STEPS
