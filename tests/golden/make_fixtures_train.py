"""Golden fixtures for create_train_step, written by TF-Agents 0.19's eager_utils (golden venv).

A linear model y = x @ w + b on fixed data; each case records the loss returned by every call
and the variables and global step afterwards. TF-Agents' eager branch runs one step per call and
passes `global_step` to `apply_gradients`, so the cases use tf.compat.v1 optimizers (what it
supports); the graph case builds the op once in a tf.compat.v1 graph and runs it in a session.
"""

import os

import numpy as np
import tensorflow as tf
from tf_agents.utils import eager_utils

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
STEPS = 3


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]]) + 0.3 + rng.normal(0, 0.1, (8, 1))).astype(np.float32)
    w0 = rng.normal(0, 0.5, (3, 1)).astype(np.float32)
    return x, y, w0


def eager_case(name, make_optimizer, loss_kind, only_w=False, **kwargs):
    x, y, w0 = data()
    w = tf.Variable(w0, name="w")
    b = tf.Variable(np.zeros([1], np.float32), name="b")
    global_step = tf.Variable(0, dtype=tf.int64, name="global_step")

    def loss():
        mse = tf.reduce_mean(tf.square(x @ w + b - y))
        if loss_kind == "pair":
            return mse, tf.reduce_sum(tf.square(w))
        return mse

    optimizer = make_optimizer()
    if only_w:
        kwargs["variables_to_train"] = lambda: [w]
    out = {"x": x, "y": y, "w0": w0}
    for i in range(STEPS):
        value = eager_utils.create_train_step(loss, optimizer, global_step=global_step, **kwargs)
        out[f"loss/{i}"] = np.asarray(tf.nest.map_structure(lambda t: t.numpy(), value), np.float32)
    out.update({"w": w.numpy(), "b": b.numpy(), "global_step": global_step.numpy()})
    np.savez_compressed(os.path.join(OUT, f"train_step_{name}.npz"), **out)
    print(f"wrote train_step_{name}.npz: losses {[float(np.sum(out[f'loss/{i}'])) for i in range(STEPS)]}")


def graph_case():
    x, y, w0 = data()
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=w0, use_resource=True)
        b = tf.compat.v1.get_variable("b", initializer=np.zeros([1], np.float32), use_resource=True)
        counter = tf.compat.v1.get_variable("counter", initializer=0, use_resource=True, trainable=False)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        update = counter.assign_add(1)  # a non-callable update op
        loss = eager_utils.create_train_step(
            lambda: tf.reduce_mean(tf.square(x @ w + b - y)),
            tf.compat.v1.train.GradientDescentOptimizer(0.1),
            update_ops=[update],
        )
        out = {"x": x, "y": y, "w0": w0}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for i in range(STEPS):
                out[f"loss/{i}"] = np.float32(sess.run(loss))
            out.update(
                {"w": sess.run(w), "b": sess.run(b), "global_step": sess.run(global_step), "counter": sess.run(counter)}
            )
    np.savez_compressed(os.path.join(OUT, "train_step_graph_sgd.npz"), **out)
    print(f"wrote train_step_graph_sgd.npz: losses {[float(out[f'loss/{i}']) for i in range(STEPS)]}")


def main():
    os.makedirs(OUT, exist_ok=True)
    eager_case(
        "eager_sgd_clip",
        lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
        "mse",
        transform_grads_fn=eager_utils.clip_gradient_norms_fn(0.5),
    )
    eager_case(
        "eager_adam_pair_vars",
        lambda: tf.compat.v1.train.AdamOptimizer(0.05),
        "pair",
        only_w=True,
        total_loss_fn=lambda pair: pair[0] + 0.1 * pair[1],
    )
    graph_case()


if __name__ == "__main__":
    main()
