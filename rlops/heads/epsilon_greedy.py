"""The bandit head: epsilon-greedy over the allowed actions. One module holds the rule every
reader uses -- PolicySaver's `serving_default` / `serving_masked` (`head`), the LiteRT file
converted from them, the agents' collect policies (`collect_draw`), the Evaluator's scoring and
the log simulator (`epsilon_greedy_probs`, `mix`, the numpy twin), and the Pusher's verifier
(`draws_error`).

The contract, for server authors:

- Allowed actions (`allowed_mask`): the action mask where there is one (nonzero = allowed), and for
  per-arm inputs the first `num_candidates` candidate slots (rlops.features.serving_candidates
  finds both among a request's named inputs).
- The decision: with probability epsilon a uniformly drawn allowed action, else the greedy one.
  `propensity` is the probability with which the returned action was drawn:
  (1 - eps) * [action == greedy] + eps / n_allowed. A policy whose greedy choice is not allowed
  (served through `serving_masked` without having been trained with masks) has no preference among
  the allowed actions: it serves them uniformly (propensity 1 / n_allowed), and `greedy_action`
  is that uniform draw, what it serves at epsilon 0. `greedy_action` is always an allowed action.
- Randomness: each row takes two uniforms from one RandomUniform op whose seeds are pinned to
  (0, 0), whatever tf.random.set_seed said while the graph was traced (the Trainer sets one).
  TensorFlow seeds such a kernel from OS entropy once per process, then advances it; LiteRT's
  RANDOM_UNIFORM re-seeds from OS entropy whenever the op is prepared, which its signature runner
  does on every call when the inputs hold strings. Either way draws are fresh on every call, at
  any batch size, and independent across processes and replicas. A nonzero seed must never be
  baked in: TensorFlow would then repeat one stream in every process, and LiteRT would re-seed to
  the same value on every call and repeat one draw. (The agents' collect policies draw from
  TensorFlow's seeded stateful ops instead, `collect_draw`: training runs replay under
  tf.random.set_seed; the probabilities are the same rule.)
- Replay: the decision is a pure function of the greedy action, the allowed actions and the two
  uniforms. The SavedModel's `serving_replay` signature (and `head(uniforms=...)`, and its numpy
  twin `decide`) take them from the caller: a simulation or an audit that keeps its uniforms gets
  the same decision again. serving_default and the LiteRT file draw their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rlops.heads.draws import (
    PROPENSITY_TOLERANCE,
    SIGNIFICANCE,
    ChanceFailure,
    frequency_pvalue,
    repeat_pvalue,
)

Array = np.ndarray[Any, Any]

if TYPE_CHECKING:  # TensorFlow loads when a graph is built: the numpy twin and checks run without it
    import tensorflow as tf

NUM_UNIFORMS = 2  # per row: explore or not, which allowed action


# ---- the allowed-actions rule ------------------------------------------------------------------
def allowed_mask(
    batch: int, num_actions: int, action_mask: Array | None = None, num_candidates: Array | None = None
) -> Array:
    """[B, K] bool: the action mask (nonzero = allowed) and the first `num_candidates` slots."""
    allowed = np.ones((batch, num_actions), bool)
    if action_mask is not None:
        allowed &= np.asarray(action_mask) > 0
    if num_candidates is not None:
        allowed &= np.arange(num_actions)[None, :] < np.asarray(num_candidates).reshape(-1, 1)
    return allowed


def allowed_mask_tf(
    num_actions: int, action_mask: tf.Tensor | None = None, num_candidates: tf.Tensor | None = None
) -> tf.Tensor | None:
    """The TensorFlow twin of `allowed_mask`: [B, K] bool, or None where every action is allowed."""
    import tensorflow as tf

    allowed = None if action_mask is None else tf.cast(action_mask, tf.bool)
    if num_candidates is not None:
        count = tf.reshape(tf.cast(num_candidates, tf.int32), [-1, 1])
        candidates = tf.range(num_actions)[None, :] < count
        allowed = candidates if allowed is None else tf.logical_and(allowed, candidates)
    return allowed


def allowed_count_tf(mask: tf.Tensor | None, batch: tf.Tensor, num_actions: int) -> tf.Tensor:
    """[B] float32: how many actions each row allows (all `num_actions` without a mask)."""
    import tensorflow as tf

    if mask is None:
        return tf.fill(tf.reshape(batch, [1]), float(num_actions))
    return tf.reduce_sum(tf.cast(mask, tf.float32), -1)


# ---- the exploration rule in TensorFlow --------------------------------------------------------
def uniform_propensity_tf(n_allowed: tf.Tensor) -> tf.Tensor:
    """1 / n_allowed: an allowed action's probability under the uniform draw."""
    import tensorflow as tf

    return 1.0 / tf.maximum(n_allowed, 1.0)


def propensity_tf(
    epsilon: tf.Tensor,
    n_allowed: tf.Tensor,
    chosen_is_greedy: tf.Tensor,
    greedy_ok: tf.Tensor | None = None,
) -> tf.Tensor:
    """[B] the probability of the chosen action: eps / n_allowed, plus 1 - eps where it is the
    greedy one; 1 / n_allowed where the greedy action is not allowed (`greedy_ok` False)."""
    import tensorflow as tf

    p_uniform = uniform_propensity_tf(n_allowed)
    mixed = epsilon * p_uniform + tf.where(chosen_is_greedy, 1.0 - epsilon, 0.0)
    return mixed if greedy_ok is None else tf.where(greedy_ok, mixed, p_uniform)


def sample_masked_uniform(
    mask: tf.Tensor | None, batch_size: tf.Tensor, num_actions: int, dtype: tf.DType, seed: Any = None
) -> tf.Tensor:
    """Uniform action index among allowed ones (all actions when mask is None), from TensorFlow's
    seeded random ops (the collect policies' stream; `seed`: a stateless seed, unmasked only)."""
    import tensorflow as tf

    if mask is None:
        return (
            tf.random.uniform([batch_size], 0, num_actions, dtype=tf.int32, seed=seed)
            if seed is None
            else tf.random.stateless_uniform([batch_size], seed, 0, num_actions, dtype=tf.int32)
        )
    logits = tf.where(tf.cast(mask, tf.bool), 0.0, tf.float32.min)
    return tf.cast(tf.squeeze(tf.random.categorical(logits, 1, dtype=tf.int32), -1), dtype)


def collect_draw(
    greedy: tf.Tensor,
    num_actions: int,
    epsilon: tf.Tensor | float,
    mask: tf.Tensor | None = None,
    uniform_dtype: tf.DType | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(action, propensity, explore) [B] for an agent's collect policy: greedy actions [B] (always
    allowed: a masked argmax) explored with TensorFlow's seeded stateful ops, so a training run
    replays under tf.random.set_seed. `uniform_dtype`: the uniform draw's dtype under a mask
    (default: the greedy actions')."""
    import tensorflow as tf

    batch = tf.shape(greedy)[0]
    uniform = sample_masked_uniform(mask, batch, num_actions, uniform_dtype or greedy.dtype)
    eps = tf.cast(epsilon, tf.float32)
    explore = tf.random.uniform([batch]) < eps
    action = tf.where(explore, uniform, greedy)
    propensity = propensity_tf(eps, allowed_count_tf(mask, batch, num_actions), tf.equal(action, greedy))
    return action, propensity, explore


def fresh_uniforms(batch: tf.Tensor) -> tf.Tensor:
    """[batch, NUM_UNIFORMS] uniforms in [0, 1) from OS entropy (seeds pinned to 0; see above)."""
    import tensorflow as tf

    shape = tf.stack([tf.cast(batch, tf.int32), NUM_UNIFORMS])
    return tf.raw_ops.RandomUniform(shape=shape, dtype=tf.float32, seed=0, seed2=0)


def head(
    greedy: tf.Tensor,
    num_actions: int,
    epsilon: tf.Tensor | float,
    minimum: int = 0,
    action_mask: tf.Tensor | None = None,
    uniforms: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """The served decision: {action, propensity, greedy_action} for greedy actions [B] (ids from
    `minimum`), drawn with `uniforms` [B, 2] (default: fresh ones). Builtin TFLite ops only."""
    import tensorflow as tf

    greedy = tf.convert_to_tensor(greedy)
    idx = tf.cast(greedy, tf.int32) - minimum
    batch = tf.shape(idx)[0]
    u = fresh_uniforms(batch) if uniforms is None else tf.cast(uniforms, tf.float32)
    eps = tf.cast(epsilon, tf.float32)
    if action_mask is None:
        allowed = tf.ones(tf.stack([batch, num_actions]), tf.float32)
    else:
        allowed = tf.cast(tf.cast(action_mask, tf.bool), tf.float32)
    n_allowed = tf.reduce_sum(allowed, -1)
    # one_hot, not gather: a greedy id outside the spec is "not allowed", not an error
    greedy_ok = tf.reduce_sum(tf.one_hot(idx, num_actions) * allowed, -1) > 0
    # the j-th allowed action, j = floor(u1 * n_allowed): the first slot whose running count passes j
    j = tf.minimum(tf.floor(u[:, 1] * n_allowed), n_allowed - 1.0)
    passed = tf.cast(tf.cumsum(allowed, axis=-1) > j[:, None], tf.float32)
    uniform = tf.argmax(passed, axis=-1, output_type=tf.int32)
    explore = tf.logical_or(u[:, 0] < eps, tf.logical_not(greedy_ok))
    chosen = tf.where(explore, uniform, idx)
    return {
        "action": tf.cast(chosen + minimum, greedy.dtype),
        "propensity": propensity_tf(eps, n_allowed, chosen == idx, greedy_ok),
        "greedy_action": tf.cast(tf.where(greedy_ok, idx, uniform) + minimum, greedy.dtype),
    }


# ---- its numpy twin ----------------------------------------------------------------------------
def uniform_probs(allowed: Array) -> Array:
    """[B, K] the uniform draw over each row's allowed actions (a row allowing none: zeros)."""
    ok = np.asarray(allowed) > 0
    return ok / np.maximum(ok.sum(1, keepdims=True), 1)


def mix(greedy_probs: Array, epsilon: float, allowed: Array | None = None) -> Array:
    """[B, K] the head at `epsilon` from its probabilities at epsilon 0 (`greedy_probs`: one-hot on
    the greedy action, uniform where it is not allowed): (1 - eps) there plus eps spread uniformly
    over the allowed actions (`allowed` None: all)."""
    uniform = uniform_probs(np.ones_like(greedy_probs, bool) if allowed is None else allowed)
    return (1.0 - epsilon) * greedy_probs + epsilon * uniform


def epsilon_greedy_probs(
    greedy: Array, epsilon: float, allowed: Array | None = None, num_actions: int | None = None
) -> Array:
    """[B, K] exact P(action) under the head, over action indices (ids less the spec's minimum):
    eps / n_allowed on each allowed action plus 1 - eps on the greedy one; uniform over the
    allowed actions where the greedy one is not allowed. `allowed` [B, K] (None: all K)."""
    greedy = np.asarray(greedy).astype(np.int64)
    n = len(greedy)
    if allowed is None:
        if num_actions is None:
            raise ValueError("epsilon_greedy_probs needs `allowed` or `num_actions`")
        allowed = np.ones((n, num_actions), bool)
    ok = np.asarray(allowed) > 0
    k = ok.shape[1]
    uniform = uniform_probs(ok)
    inside = (greedy >= 0) & (greedy < k)
    greedy_ok = inside & ok[np.arange(n), np.clip(greedy, 0, k - 1)]
    one_hot = np.zeros((n, k))
    rows = np.flatnonzero(greedy_ok)
    one_hot[rows, greedy[rows]] = 1.0
    return np.where(greedy_ok[:, None], mix(one_hot, epsilon, ok), uniform)


def decide(greedy: Array, epsilon: float, allowed: Array, uniforms: Array) -> tuple[Array, Array, Array]:
    """(action, propensity, greedy_action) indices the head returns for these uniforms [B, 2]:
    the replay of a logged draw (float32, as the graph computes it)."""
    greedy = np.asarray(greedy).astype(np.int64)
    ok = np.asarray(allowed) > 0
    n, k = ok.shape
    u = np.asarray(uniforms, np.float32)
    count = ok.sum(1).astype(np.float32)
    j = np.minimum(np.floor(u[:, 1] * count), count - 1)
    uniform = np.argmax(np.cumsum(ok, 1).astype(np.float32) > j[:, None], axis=1)
    inside = (greedy >= 0) & (greedy < k)
    greedy_ok = inside & ok[np.arange(n), np.clip(greedy, 0, k - 1)]
    chosen = np.where((u[:, 0] < np.float32(epsilon)) | ~greedy_ok, uniform, greedy)
    probs = epsilon_greedy_probs(greedy, epsilon, ok)
    return chosen, probs[np.arange(n), chosen], np.where(greedy_ok, greedy, uniform)


# ---- the verifier: draws against the reported probabilities ------------------------------------
def draws_error(
    runs: Sequence[Array], probs: Array, what: str, propensities: Sequence[Array] | None = None
) -> str | None:
    """`runs`: action indices [R, B] from R calls on the same B rows, one array per process;
    `probs` [B, K] their exact probabilities; `propensities` [R, B] what each call reported.
    Fails (an error naming the check) when an action is one the row cannot take or is reported
    with another probability, when the frequencies of the actions do not match the probabilities
    (Pearson chi-square), or when draws repeat more often than independent draws do: between
    calls within a process, and between processes at the same call (p < SIGNIFICANCE; these
    three return a ChanceFailure)."""
    draws = [np.asarray(r).astype(np.int64) for r in runs]
    for i, r in enumerate(draws):
        taken = probs[np.arange(probs.shape[0])[None, :], np.clip(r, 0, probs.shape[1] - 1)]
        impossible = (r < 0) | (r >= probs.shape[1]) | (taken <= 0)
        if impossible.any():
            call, row = np.argwhere(impossible)[0]
            return f"{what}: call {call} row {row} drew action index {r[call, row]}, which it cannot take"
        if propensities is not None:
            wrong = np.abs(np.asarray(propensities[i]) - taken) > PROPENSITY_TOLERANCE
            if wrong.any():
                call, row = np.argwhere(wrong)[0]
                return (
                    f"{what}: call {call} row {row} reported propensity {propensities[i][call, row]:.6f} "
                    f"for action index {r[call, row]}, drawn with probability {taken[call, row]:.6f}"
                )
    p = frequency_pvalue(np.concatenate(draws), probs)
    if p < SIGNIFICANCE:
        return ChanceFailure(
            f"{what}: the drawn actions' frequencies do not match the reported probabilities (chi-square p={p:.2g})"
        )
    for i, r in enumerate(draws):
        p = repeat_pvalue(r[0::2][: len(r) // 2], r[1::2][: len(r) // 2], probs)
        if p < SIGNIFICANCE:
            return ChanceFailure(f"{what}: process {i} repeats its draws from call to call (p={p:.2g})")
    for i in range(1, len(draws)):
        m = min(len(draws[0]), len(draws[i]))
        p = repeat_pvalue(draws[0][:m], draws[i][:m], probs)
        if p < SIGNIFICANCE:
            return ChanceFailure(f"{what}: two fresh processes draw the same actions (p={p:.2g})")
    return None
