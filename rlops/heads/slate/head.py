"""The slate head: a page of L items out of K scored candidates, drawn without replacement, with
the exact probabilities off-policy evaluation needs. PolicySaver's `serving_ranked` and the
ranking agents' policies call `slate_head`; the LiteRT converter `litert_slate_head` (the same
math in float32 TFLite builtins); the Pusher checks both with `rlops.heads.slate.verifier`.

`slate_head(scores, num_slots, slate_policy, mask, seed, row_seeds, uniforms)` is the serving decision:

    slate                     [B, L] int32   item indices in display order (no item twice, none masked)
    propensity_item_position  [B, L] float32 P(the shown item at its slot): what IIPS needs
    propensity_cascade        [B, L] float32 P(the shown prefix through each slot): RIPS, Cascade-DR
    greedy_slate              [B, L] int32   the top L allowed items by score
    seed                      [B]    int64   the row seeds the draw came from (log them to replay it;
                                             absent when the caller passed `uniforms`)

`slate_policy` is one of `probabilities`' numpy policies, used as the configuration:
`PlackettLuce(temperature)` (Gumbel-top-L), `EpsilonPerSlot(epsilon)`, `UniformWithoutReplacement()`
or `Greedy()`; the probabilities are `tf_probabilities`' (the numpy module's math in TF).

Randomness: each row's draw is a pure function of one int64 row seed (`tf_probabilities.row_uniforms`).
With no seed the row seeds come from a RandomUniformInt op whose seeds are pinned to (0, 0), so
TensorFlow seeds it from OS entropy once per process: draws are fresh on every call and independent
across processes, whatever `tf.random.set_seed` said while tracing (the contract of
`rlops.heads.epsilon_greedy`). `seed` [2] (TensorFlow's stateless convention) makes the whole
batch replayable; `row_seeds` [B] makes each request replayable on its own, whatever else was in
its batch (the returned `seed` is that input when given). `uniforms` [B, n] replace the seeds
altogether: the slate is a pure function of them (`tf_probabilities.numpy_sample_slates` is its
numpy twin), which is the shape of the bandit head's replay contract and what a LiteRT graph without
the int64 hash can feed from its builtin RANDOM_UNIFORM.

The LiteRT twin (`litert_slate_head`): TFLite builtins have no float64 arithmetic, no 64-bit
bitwise ops (the row-seed hash) and no Assert, so it draws float32 uniforms from one builtin
RANDOM_UNIFORM (seeds pinned to (0, 0), kept off 0 by SMALLEST_UNIFORM so every Gumbel key is
finite) and a request with fewer than L allowed candidates holds -1 in its slots past the allowed
count, with propensities 0 (rlops.train.litert_ranked says more).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from rlops.heads.slate import tf_probabilities
from rlops.heads.slate.probabilities import (
    EpsilonPerSlot,
    Greedy,
    PlackettLuce,
    SlatePolicy,
    UniformWithoutReplacement,
)

SLATE = "slate"
PROPENSITY_ITEM_POSITION = "propensity_item_position"
PROPENSITY_CASCADE = "propensity_cascade"
GREEDY_SLATE = "greedy_slate"
SEED = "seed"
SMALLEST_UNIFORM = 2.0**-24  # the LiteRT head's uniforms are kept off 0: every Gumbel key is finite


def policy_kind(slate_policy: SlatePolicy) -> tuple[str, float]:
    """(kind, parameter) of a numpy slate policy for `tf_probabilities`."""
    if isinstance(slate_policy, PlackettLuce):
        return "plackett_luce", slate_policy.temperature
    if isinstance(slate_policy, EpsilonPerSlot):
        return "epsilon_per_slot", slate_policy.epsilon
    if isinstance(slate_policy, UniformWithoutReplacement):
        return "uniform", 1.0
    if isinstance(slate_policy, Greedy):
        return "greedy", 0.0
    raise ValueError(
        f"slate_policy must be PlackettLuce, EpsilonPerSlot, UniformWithoutReplacement or Greedy; got {slate_policy!r}"
    )


def fresh_row_seeds(batch: tf.Tensor) -> tf.Tensor:
    """[batch] int64 seeds from OS entropy (op seeds pinned to (0, 0): see the module docstring)."""
    return tf.raw_ops.RandomUniformInt(
        shape=tf.reshape(tf.cast(batch, tf.int32), [1]),
        minval=tf.constant(0, tf.int64),
        maxval=tf.constant(np.iinfo(np.int64).max, tf.int64),
        seed=0,
        seed2=0,
    )


def resolve_row_seeds(batch: tf.Tensor, seed: Any = None, row_seeds: Any = None) -> tf.Tensor:
    """[batch] int64 row seeds: `row_seeds` as given, else derived from the stateless `seed` [2]
    (a Python int s means [s, 0]), else fresh."""
    if row_seeds is not None:
        if seed is not None:
            raise ValueError("give `seed` (one [2] seed for the batch) or `row_seeds` ([B], one per row), not both")
        return tf.reshape(tf.cast(row_seeds, tf.int64), [-1])
    if seed is None:
        return fresh_row_seeds(batch)
    if isinstance(seed, (int, np.integer)):
        seed = [int(seed), 0]
    seed = tf.cast(seed, tf.int64)
    if seed.shape.rank != 1 or seed.shape[0] != 2:
        raise ValueError(f"seed must be a stateless seed of shape [2] (row seeds go in `row_seeds`); got {seed.shape}")
    return tf.random.stateless_uniform(tf.reshape(batch, [1]), seed, minval=None, maxval=None, dtype=tf.int64)


def slate_head(
    scores: tf.Tensor,
    num_slots: int,
    slate_policy: SlatePolicy,
    mask: tf.Tensor | None = None,
    seed: Any = None,
    row_seeds: tf.Tensor | None = None,
    uniforms: tf.Tensor | None = None,
    parameter: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """The served slate for scores [B, K] (see the module docstring); `mask` [B, K] (1 = allowed).
    `uniforms` [B, tf_probabilities.num_uniforms(...)] in (0, 1), when given, are the draw's
    randomness (replay, or a LiteRT graph's RANDOM_UNIFORM); the outputs then have no `seed`.
    `parameter` (a float64 tensor) replaces the policy's temperature or epsilon: one read from a
    variable at call time (a served epsilon a checkpoint or the Pusher may change).
    A request with fewer than `num_slots` allowed candidates fails with an error naming the slate
    length."""
    kind, own = policy_kind(slate_policy)
    parameter = own if parameter is None else parameter
    scores = tf.convert_to_tensor(scores)
    allowed = tf.ones(tf.shape(scores), tf.bool) if mask is None else tf.cast(mask, tf.bool)
    allowed = tf_probabilities.check_allowed(allowed, num_slots)
    extra: dict[str, tf.Tensor] = {}
    if uniforms is None:
        row = resolve_row_seeds(tf.shape(scores)[0], seed, row_seeds)
        count = tf_probabilities.num_uniforms(kind, tf.shape(scores)[1], num_slots)
        uniforms, extra = tf_probabilities.row_uniforms(row, count), {SEED: row}
    elif seed is not None or row_seeds is not None:
        raise ValueError("give `uniforms` or a seed (`seed` / `row_seeds`), not both")
    checked = {"check": False}  # check_allowed ran above
    slate = tf_probabilities.sample_slates(kind, scores, allowed, num_slots, uniforms, parameter, **checked)
    greedy = (
        slate
        if kind == "greedy"
        else tf_probabilities.sample_slates("greedy", scores, allowed, num_slots, None, **checked)
    )
    step = getattr(slate_policy, "quadrature_step", tf_probabilities.QUADRATURE_STEP)  # PL: the policy's grid
    marginals = tf_probabilities.slate_marginals(kind, scores, allowed, num_slots, parameter, step, **checked)
    at_slot = tf.gather(tf.transpose(marginals, [0, 2, 1]), slate[..., None], axis=2, batch_dims=2)[..., 0]
    cascade = tf_probabilities.slate_prefix_probs(kind, scores, allowed, slate, parameter)
    return {
        SLATE: slate,
        PROPENSITY_ITEM_POSITION: tf.cast(at_slot, tf.float32),
        PROPENSITY_CASCADE: tf.cast(cascade, tf.float32),
        GREEDY_SLATE: greedy,
        **extra,
    }


# ---- the LiteRT twin: float32, TFLite builtins only ---------------------------------------------
def head_parameters(metadata: Mapping[str, Any]) -> tuple[str, int, float, float]:
    """(kind, L, temperature or epsilon, quadrature step) from a ranking export's get_metadata."""
    kind = str(metadata["slate_policy"])
    parameter = float(metadata.get("temperature", metadata.get("epsilon", 1.0 if kind == "uniform" else 0.0)))
    step = float(metadata.get("quadrature_step", tf_probabilities.QUADRATURE_STEP))
    return kind, int(metadata["num_slots"]), parameter, step


def fresh_uniforms(batch: tf.Tensor, count: int) -> tf.Tensor:
    """[batch, count] float32 uniforms in (0, 1) from one builtin RANDOM_UNIFORM, seeds pinned to
    (0, 0): LiteRT seeds it from OS entropy (see the module docstring)."""
    shape = tf.stack([tf.cast(batch, tf.int32), tf.constant(count, tf.int32)])
    return tf.maximum(tf.raw_ops.RandomUniform(shape=shape, dtype=tf.float32, seed=0, seed2=0), SMALLEST_UNIFORM)


def litert_slate_head(
    scores: tf.Tensor, allowed: tf.Tensor, num_slots: int, kind: str, parameter: float, step: float
) -> dict[str, tf.Tensor]:
    """serving_ranked's decision in float32 TFLite builtins, drawn from a fresh RANDOM_UNIFORM
    (see the module docstring)."""
    scores = tf.cast(scores, tf.float32)
    allowed = tf.cast(allowed, tf.bool)
    count = tf_probabilities.num_uniforms(kind, int(scores.shape[1]), num_slots)
    uniforms = fresh_uniforms(tf.shape(scores)[0], count) if count else None
    f32 = {"dtype": tf.float32, "check": False}
    slate = tf_probabilities.sample_slates(kind, scores, allowed, num_slots, uniforms, parameter, **f32)
    greedy = tf_probabilities.sample_slates("greedy", scores, allowed, num_slots, None, **f32)
    marginals = tf_probabilities.slate_marginals(kind, scores, allowed, num_slots, parameter, step, **f32)  # [B, K, L]
    at_slot = tf.gather(tf.transpose(marginals, [0, 2, 1]), slate[..., None], axis=2, batch_dims=2)[..., 0]
    cascade = tf_probabilities.slate_prefix_probs(kind, scores, allowed, slate, parameter, dtype=tf.float32)
    filled = tf.range(num_slots)[None, :] < tf.reduce_sum(tf.cast(allowed, tf.int32), -1)[:, None]
    none = tf.fill(tf.shape(slate), -1)
    return {
        SLATE: tf.where(filled, slate, none),
        PROPENSITY_ITEM_POSITION: tf.where(filled, at_slot, tf.zeros_like(at_slot)),
        PROPENSITY_CASCADE: tf.where(filled, cascade, tf.zeros_like(cascade)),
        GREEDY_SLATE: tf.where(filled, greedy, none),
    }
