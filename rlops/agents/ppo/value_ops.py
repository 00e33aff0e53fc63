"""Returns and advantages over [B, T] batches (batch-major), boundary-aware.

Row t of a trajectory is the transition t -> t+1 (see trajectories.py). Two continuation flags:
- `discounts[t]` (0 when t+1 terminated, 1 when truncated or not done) scales the bootstrap
  V(o_{t+1}), so truncated episodes bootstrap from their true final observation;
- `trace_continues[t]` (0 when row t+1 is a boundary LAST step) cuts the lambda-trace: the
  boundary row's advantage is meaningless and must not leak into row t.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def generalized_advantage_estimation(
    values: tf.Tensor,
    next_values: tf.Tensor,
    rewards: tf.Tensor,
    discounts: tf.Tensor,
    trace_continues: tf.Tensor,
    gamma: float,
    lambda_: float,
) -> tf.Tensor:
    """A_t = delta_t + gamma * lambda * c_t * A_{t+1},
    delta_t = r_t + gamma * d_t * V(o_{t+1}) - V(o_t). All inputs [B, T]; returns [B, T]."""
    deltas = rewards + gamma * discounts * next_values - values
    weights = gamma * lambda_ * discounts * trace_continues
    # scan runs over time, so go time-major and reverse.
    deltas_tm = tf.reverse(tf.transpose(deltas), [0])
    weights_tm = tf.reverse(tf.transpose(weights), [0])

    def step(acc: Any, inputs: Any) -> Any:
        delta, weight = inputs
        return delta + weight * acc

    adv_tm = tf.scan(step, (deltas_tm, weights_tm), initializer=tf.zeros_like(deltas_tm[0]))
    return tf.transpose(tf.reverse(adv_tm, [0]))


def discounted_return(
    next_values: tf.Tensor, rewards: tf.Tensor, discounts: tf.Tensor, trace_continues: tf.Tensor, gamma: float
) -> tf.Tensor:
    """Monte-Carlo return G_t = r_t + gamma * d_t * (c_t * G_{t+1} + (1 - c_t) * V(o_{t+1})),
    bootstrapped from V(o_T) after the last row. Where the trace is cut (next step LAST) a
    termination (d=0) gives G = r (TF-Agents' value_ops.discounted_return) and a truncation
    bootstraps from the final observation. All inputs [B, T]; returns [B, T]."""
    tm = lambda x: tf.reverse(tf.transpose(x), [0])  # noqa: E731  time-major, reversed
    nv, r, d, c = tm(next_values), tm(rewards), tm(discounts), tm(trace_continues)

    def step(acc: Any, inputs: Any) -> Any:
        next_value, reward, discount, cont = inputs
        return reward + gamma * discount * (cont * acc + (1.0 - cont) * next_value)

    returns = tf.scan(step, (nv, r, d, c), initializer=nv[0])
    return tf.transpose(tf.reverse(returns, [0]))


def td_lambda_return(values: tf.Tensor, advantages: tf.Tensor) -> tf.Tensor:
    """TD(lambda) return = GAE advantage + V: the value target PPO regresses on."""
    return advantages + values
