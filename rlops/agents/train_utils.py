"""`create_train_step` (eager / tf.function) and `create_train_op` (tf.compat.v1 graph).

The contract follows TF-Agents' `eager_utils.create_train_step` and TF-Slim's
`create_train_op`, so code written against those ports over unchanged:
loss -> gradients -> transform_grads_fn (e.g. clipping) -> optional summaries -> numerics check
-> optimizer.apply_gradients -> global_step += 1 -> return the loss.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import tensorflow as tf

from rlops.agents import specs

log = logging.getLogger(__name__)

GradsAndVars = list[tuple[tf.Tensor, tf.Variable]]

# TF-Slim's gate_gradients values (graph-mode `tf.gradients` gating); eager tapes compute all
# gradients together, which is GATE_OP-equivalent, so they only affect create_train_op.
GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2


def _total_loss(loss: Any) -> tf.Tensor:
    """Default total_loss_fn: the `.loss` field of a LossInfo, else the sum of a nested loss."""
    if hasattr(loss, "loss"):
        return loss.loss
    return tf.add_n([tf.convert_to_tensor(x) for x in tf.nest.flatten(loss)])


def clip_gradient_norms(max_norm: float) -> Callable[[GradsAndVars], GradsAndVars]:
    """transform_grads_fn clipping each gradient's norm to `max_norm`."""

    def _clip(grads_and_vars: GradsAndVars) -> GradsAndVars:
        return [(None if g is None else tf.clip_by_norm(g, max_norm), v) for g, v in grads_and_vars]

    return _clip


def clip_global_norm(max_norm: float) -> Callable[[GradsAndVars], GradsAndVars]:
    """transform_grads_fn clipping all gradients together by their global norm."""

    def _clip(grads_and_vars: GradsAndVars) -> GradsAndVars:
        grads, variables = zip(*grads_and_vars)
        clipped, _ = tf.clip_by_global_norm(list(grads), max_norm)
        return list(zip(clipped, variables))

    return _clip


def add_gradients_summaries(grads_and_vars: GradsAndVars, step: tf.Tensor | None = None) -> None:
    for grad, var in grads_and_vars:
        if grad is None:
            continue
        name = var.name.replace(":", "_")
        values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
        tf.summary.histogram(name + "_gradient", values, step=step)
        tf.summary.scalar(name + "_gradient_norm", tf.linalg.global_norm([values]), step=step)


def add_variables_summaries(grads_and_vars: GradsAndVars, step: tf.Tensor | None = None) -> None:
    for _, var in grads_and_vars:
        name = var.name.replace(":", "_")
        tf.summary.histogram(name + "_value", var, step=step)
        tf.summary.scalar(name + "_value_norm", tf.linalg.global_norm([var]), step=step)


def _check_numerics(loss: Any, total: tf.Tensor, step: tf.Variable | None) -> tf.Tensor:
    """Fails with an error naming the loss (and the train step) when it is NaN or Inf."""
    at = "" if step is None else " at train step "
    for path, value in specs.flatten_with_paths(loss):
        value = tf.convert_to_tensor(value)
        if value.dtype.is_floating:
            tf.debugging.assert_all_finite(value, f"LossTensor `{path or 'loss'}` is inf or nan{at}")
    if step is not None:
        tf.debugging.Assert(
            tf.reduce_all(tf.math.is_finite(total)), ["LossTensor is inf or nan at train step", step.read_value()]
        )
    return tf.debugging.check_numerics(total, "LossTensor is inf or nan")


def create_train_step(
    loss: Callable[[], Any],
    optimizer: Any,
    global_step: tf.Variable | None | bool = True,
    total_loss_fn: Callable[[Any], tf.Tensor] | None = None,
    update_ops: Sequence[Any] | None = None,
    variables_to_train: Sequence[tf.Variable] | Callable[[], Sequence[tf.Variable]] | None = None,
    transform_grads_fn: Callable[[GradsAndVars], GradsAndVars] | None = None,
    summarize_gradients: bool = False,
    gate_gradients: int = GATE_OP,
    aggregation_method: Any = None,
    check_numerics: bool = True,
) -> Any:
    """One optimization step on `loss()` (TF-Agents' eager_utils.create_train_step contract).

    Eager / tf.function: returns a callable `train_step()` that runs one step and returns the
    loss (rlops keeps a reusable step rather than TF-Agents' run-once call). In a tf.compat.v1
    graph: like TF-Agents, builds the train op now and returns the loss nest as tensors that,
    when evaluated, run the update first (`create_train_op` underneath).

    Args:
      loss: a zero-argument callable returning a scalar, a nest of scalars, or a LossInfo.
      optimizer: anything with `apply_gradients(grads_and_vars)` (tf_keras or tf.compat.v1;
        a v1 optimizer increments `global_step` itself, as in TF-Agents).
      global_step: a variable incremented once per step; True (default) takes
        `tf.compat.v1.train.get_or_create_global_step()`, None/False disables the increment.
      total_loss_fn: maps the loss nest to the scalar that is differentiated; None (default):
        the loss itself, a LossInfo's `.loss`, or the sum of a nest.
      update_ops: run before the gradient step: callables are called each step; ops and
        tensors become control dependencies of the loss (graph and tf.function code).
      variables_to_train: variables (or a callable returning them), resolved after `loss()` ran
        so that variables created lazily by the first call are trained from the first step;
        default: the trainable variables the tape watched.
      transform_grads_fn: maps grads_and_vars to new grads_and_vars (clipping, scaling).
      summarize_gradients: write gradient/variable histograms and norms as tf.summary ops.
      gate_gradients, aggregation_method: used by the graph path (`tf.gradients`); an eager
        tape has neither option (a warning says so when aggregation_method is set).
      check_numerics: fail with an error naming the loss when any loss is NaN/Inf.
    """
    if not callable(loss):
        raise ValueError(
            "`loss` must be callable (a function returning the loss); got "
            f"{type(loss).__name__}. In eager mode a loss tensor cannot be differentiated "
            "after the fact."
        )
    if total_loss_fn is None:
        total_loss_fn = _total_loss
    if not callable(total_loss_fn):
        raise ValueError(f"`total_loss_fn` must be a function; got {type(total_loss_fn).__name__}")
    if not tf.compat.v1.executing_eagerly_outside_functions():
        return _graph_train_step(
            loss,
            optimizer,
            global_step,
            total_loss_fn,
            update_ops,
            variables_to_train,
            transform_grads_fn,
            summarize_gradients,
            gate_gradients,
            aggregation_method,
            check_numerics,
        )
    step_var: Any = global_step  # the variable, or None: no increment
    if global_step is True:
        step_var = tf.compat.v1.train.get_or_create_global_step()
    elif global_step is False:
        step_var = None
    if aggregation_method is not None:
        log.warning(
            "create_train_step: aggregation_method=%s has no effect on an eager GradientTape "
            "(it applies to tf.compat.v1 graphs).",
            aggregation_method,
        )
    del gate_gradients  # see GATE_* note above
    v1_optimizer = isinstance(optimizer, tf.compat.v1.train.Optimizer)

    def train_step() -> Any:
        deps = []
        for op in update_ops or ():
            if callable(op):
                op()
            else:
                deps.append(op)
        with tf.control_dependencies(deps if not tf.executing_eagerly() else []):
            with tf.GradientTape() as tape:
                loss_value = loss()
                total = total_loss_fn(loss_value)
        if variables_to_train is None:
            variables = [v for v in tape.watched_variables() if v.trainable]
        else:
            given = variables_to_train() if callable(variables_to_train) else variables_to_train
            variables = list(tf.nest.flatten(given))
        grads = tape.gradient(total, variables, unconnected_gradients=tf.UnconnectedGradients.NONE)
        grads_and_vars = list(zip(grads, variables))
        if transform_grads_fn is not None:
            grads_and_vars = transform_grads_fn(grads_and_vars)
        if summarize_gradients:
            step = step_var if step_var is not None else tf.summary.experimental.get_step()
            add_gradients_summaries(grads_and_vars, step)
            add_variables_summaries(grads_and_vars, step)
        if check_numerics:
            total = _check_numerics(loss_value, total, step_var)
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if v1_optimizer:
            optimizer.apply_gradients(grads_and_vars, global_step=step_var)
        else:
            optimizer.apply_gradients(grads_and_vars)
            if step_var is not None:
                step_var.assign_add(1)
        return loss_value

    return train_step


def _graph_train_step(
    loss: Callable[[], Any],
    optimizer: Any,
    global_step: Any,
    total_loss_fn: Any,
    update_ops: Any,
    variables_to_train: Any,
    transform_grads_fn: Any,
    summarize_gradients: bool,
    gate_gradients: Any,
    aggregation_method: Any,
    check_numerics: bool,
) -> Any:
    """TF-Agents' graph branch: the loss nest, evaluated after the train op."""
    loss_value = loss()
    if callable(variables_to_train):
        variables_to_train = variables_to_train()
    with tf.control_dependencies(tf.nest.flatten(loss_value)):
        loss_value = tf.nest.map_structure(lambda t: tf.identity(t, "loss_pre_train"), loss_value)
    train_op = create_train_op(
        total_loss_fn(loss_value),
        optimizer,
        global_step=global_step,
        update_ops=update_ops,
        variables_to_train=variables_to_train,
        transform_grads_fn=transform_grads_fn,
        summarize_gradients=summarize_gradients,
        gate_gradients=gate_gradients,
        aggregation_method=aggregation_method,
        check_numerics=check_numerics,
    )
    with tf.control_dependencies([train_op]):
        return tf.nest.map_structure(lambda t: tf.identity(t, "loss_post_train"), loss_value)


def create_train_op(
    total_loss: tf.Tensor,
    optimizer: Any,
    global_step: tf.Variable | None | bool = True,
    update_ops: Sequence[tf.Operation] | None = None,
    variables_to_train: Sequence[tf.Variable] | None = None,
    transform_grads_fn: Callable[[GradsAndVars], GradsAndVars] | None = None,
    summarize_gradients: bool = False,
    gate_gradients: int = GATE_OP,
    aggregation_method: Any = None,
    check_numerics: bool = True,
    colocate_gradients_with_ops: bool = False,
) -> tf.Tensor:
    """Graph-mode twin (TF-Slim semantics): returns a tensor that, when evaluated, runs the
    update ops, computes and applies the gradients, increments the global step and yields the
    loss value. Must be called inside a `tf.compat.v1` graph.

    `update_ops` defaults to the graph's UPDATE_OPS collection; when given explicitly but
    missing some of that collection's ops, a warning names the ops that will not run.
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "create_train_op builds a tf.compat.v1 graph op; in eager mode use create_train_step(loss_fn, optimizer)."
        )
    graph = total_loss.graph
    step_var: Any = global_step  # the variable, or None: no increment
    if global_step is True:
        step_var = tf.compat.v1.train.get_or_create_global_step(graph)
    elif global_step is False:
        step_var = None

    global_update_ops = set(graph.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))
    if update_ops is None:
        update_ops = list(global_update_ops)
    else:
        missing = global_update_ops - set(update_ops)
        if missing:
            log.warning(
                "update_ops in create_train_op does not contain all the update_ops in "
                "GraphKeys.UPDATE_OPS; these will not run: %s",
                sorted(op.name for op in missing),
            )

    with tf.compat.v1.name_scope("train_op"):
        if update_ops:
            with tf.control_dependencies(list(update_ops)):
                total_loss = tf.identity(total_loss, name="total_loss_after_updates")
        if variables_to_train is None:
            variables_to_train = tf.compat.v1.trainable_variables()
        variables_to_train = list(variables_to_train)
        grads = tf.compat.v1.gradients(
            total_loss,
            variables_to_train,
            gate_gradients=bool(gate_gradients),
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops,
        )
        grads_and_vars = list(zip(grads, variables_to_train))
        if transform_grads_fn is not None:
            grads_and_vars = transform_grads_fn(grads_and_vars)
        if summarize_gradients:
            for grad, var in grads_and_vars:
                if grad is not None:
                    name = var.op.name
                    tf.compat.v1.summary.histogram(name + "_gradient", grad)
                    tf.compat.v1.summary.scalar(name + "_gradient_norm", tf.linalg.global_norm([grad]))
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if isinstance(optimizer, tf.compat.v1.train.Optimizer):
            grad_updates = optimizer.apply_gradients(grads_and_vars, global_step=step_var)
            increments_step = True
        else:
            grad_updates = optimizer.apply_gradients(grads_and_vars)
            increments_step = False
        if step_var is not None and not increments_step:
            with tf.control_dependencies([grad_updates]):
                grad_updates = step_var.assign_add(1)
        if check_numerics:
            total_loss = tf.debugging.check_numerics(total_loss, "LossTensor is inf or nan")
        with tf.control_dependencies([grad_updates]):
            train_op = tf.identity(total_loss, name="train_op")
    train_ops = graph.get_collection_ref(tf.compat.v1.GraphKeys.TRAIN_OP)
    if train_op not in train_ops:
        train_ops.append(train_op)
    return train_op
