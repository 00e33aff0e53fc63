"""The bandit serving head: which actions a request allows, how the served action is drawn, and
the probability reported with it. PolicySaver builds `serving_default` / `serving_masked` from
`epsilon_greedy_head`, the LiteRT file is converted from them, the Evaluator scores the served
policy with `epsilon_greedy_probs`, and the Pusher checks draws with `draws_error`.

The contract, for server authors:

- Allowed actions (`allowed_actions`): the `action_mask` input where there is one (1 = allowed),
  and for per-arm inputs the first `num_actions` candidate slots.
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
  the same value on every call and repeat one draw.
- Replay: the decision is a pure function of the greedy action, the allowed actions and the two
  uniforms. The SavedModel's `serving_replay` signature (and `epsilon_greedy_head(uniforms=...)`,
  and its numpy twin `decide`) take them from the caller: a simulation or an audit that keeps its
  uniforms gets the same decision again. serving_default and the LiteRT file draw their own.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from rlops.features.serving_names import NUM_ACTIONS, PER_ARM_INPUT_PREFIX

Array = np.ndarray[Any, Any]

if TYPE_CHECKING:  # TensorFlow loads when the graph is built: the numpy twin and checks run without it
    import tensorflow as tf

ACTION_MASK = "action_mask"
NUM_UNIFORMS = 2  # per row: explore or not, which allowed action
PROPENSITY_TOLERANCE = 1e-6
# A push runs 16 draw tests (2 artifacts x 2 batch sizes x frequencies, repeats in each of two
# processes, repeats across them): each fails below 1e-3 / 16, so an honest push fails one with
# probability < 1e-3, and `confirmed` draws again before it fails the push: < 1e-6 a night. With
# ~30 draws off the most likely action (draw_calls), a head that never explores, or repeats its
# draws across calls or processes, fails at p < 1e-6, on the fresh draws too.
SIGNIFICANCE = 1e-3 / 16

log = logging.getLogger(__name__)


class ChanceFailure(str):
    """A failed statistical draw check: an honest head fails one with probability < SIGNIFICANCE,
    so a verifier confirms it on fresh draws (`confirmed`) before it fails a push. Failures chance
    cannot explain (an action the row cannot take, a wrong propensity) are plain strings."""


def confirmed(check: Callable[[], str | None]) -> str | None:
    """Runs `check` (fresh draws on each call; it returns an error or None). A ChanceFailure is
    drawn again, and the error stands only when the fresh draws fail too: returns the second run's
    answer. An honest push then fails with probability < (1e-3)^2, a dishonest head fails twice."""
    error = check()
    if isinstance(error, ChanceFailure):
        log.warning("a draw check failed (%s); confirming on fresh draws", error)
        return check()
    return error


# ---- the allowed-actions rule ------------------------------------------------------------------
def is_per_arm(names: Sequence[str]) -> bool:
    """Inputs of a per-arm policy: item features (`per_arm_<name>`, or one dense `per_arm`) beside
    the candidate count."""
    return NUM_ACTIONS in names and any(n.startswith(PER_ARM_INPUT_PREFIX.rstrip("_")) for n in names)


def allowed_actions_tf(
    features: Mapping[str, tf.Tensor], num_actions: int, action_mask: tf.Tensor | None = None
) -> tf.Tensor | None:
    """[B, K] bool: `action_mask` (the argument, else the input of that name) and the per-arm
    candidates; None where every action is allowed."""
    import tensorflow as tf

    if action_mask is None:
        action_mask = features.get(ACTION_MASK)
    allowed = None if action_mask is None else tf.cast(action_mask, tf.bool)
    if is_per_arm(list(features)):
        count = tf.reshape(tf.cast(features[NUM_ACTIONS], tf.int32), [-1, 1])
        candidates = tf.range(num_actions)[None, :] < count
        allowed = candidates if allowed is None else tf.logical_and(allowed, candidates)
    return allowed


def allowed_actions(inputs: Mapping[str, Array], num_actions: int) -> Array:
    """The numpy twin of `allowed_actions_tf` on serving inputs: [B, K] bool."""
    return allowed_mask(
        len(next(iter(inputs.values()))),
        num_actions,
        inputs.get(ACTION_MASK),
        inputs[NUM_ACTIONS] if is_per_arm(list(inputs)) else None,
    )


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


# ---- the TensorFlow head -----------------------------------------------------------------------
def fresh_uniforms(batch: tf.Tensor) -> tf.Tensor:
    """[batch, NUM_UNIFORMS] uniforms in [0, 1) from OS entropy (seeds pinned to 0; see above)."""
    import tensorflow as tf

    shape = tf.stack([tf.cast(batch, tf.int32), NUM_UNIFORMS])
    return tf.raw_ops.RandomUniform(shape=shape, dtype=tf.float32, seed=0, seed2=0)


def epsilon_greedy_head(
    greedy: tf.Tensor,
    num_actions: int,
    epsilon: tf.Tensor | float,
    minimum: int = 0,
    action_mask: tf.Tensor | None = None,
    uniforms: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """{action, propensity, greedy_action} for greedy actions [B] (ids from `minimum`), drawn with
    `uniforms` [B, 2] (default: fresh ones). Builtin TFLite ops only."""
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
    p_uniform = 1.0 / tf.maximum(n_allowed, 1.0)
    propensity = tf.where(greedy_ok, eps * p_uniform + tf.where(chosen == idx, 1.0 - eps, 0.0), p_uniform)
    return {
        "action": tf.cast(chosen + minimum, greedy.dtype),
        "propensity": propensity,
        "greedy_action": tf.cast(tf.where(greedy_ok, idx, uniform) + minimum, greedy.dtype),
    }


# ---- its numpy twin ----------------------------------------------------------------------------
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
    uniform = ok / np.maximum(ok.sum(1, keepdims=True), 1)
    inside = (greedy >= 0) & (greedy < k)
    greedy_ok = inside & ok[np.arange(n), np.clip(greedy, 0, k - 1)]
    probs = np.where(greedy_ok[:, None], epsilon * uniform, uniform)
    rows = np.flatnonzero(greedy_ok)
    probs[rows, greedy[rows]] += 1.0 - epsilon
    return probs


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


# ---- checking draws against the reported probabilities -----------------------------------------
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


def draw_calls(rare: float) -> int:
    """Calls at batch 1 to check a row that leaves its most likely action with probability `rare`:
    ~30 such draws expected, 100 to 2000 calls (rarer exploration is checked with less power)."""
    return int(np.clip(np.ceil(30 / max(rare, 1e-9)), 100, 2000))


def frequency_pvalue(actions: Array, probs: Array) -> float:
    """Pearson chi-square p-value of actions [R, B] against probs [B, K]: cells 'the row's most
    likely action' and each other action index, expected counts summed over rows and calls, cells
    expecting < 5 pooled. (Rows differ, so the counts vary less than a multinomial: conservative.)"""
    calls, batch = actions.shape
    rows = np.arange(batch)
    top = probs.argmax(1)
    others = probs.copy()
    others[rows, top] = 0
    expected = calls * np.concatenate([[probs[rows, top].sum()], others.sum(0)])
    is_top = actions == top[None, :]
    observed = np.concatenate([[is_top.sum()], np.bincount(actions[~is_top], minlength=probs.shape[1])])
    return pearson_pvalue(observed, expected)


def pearson_pvalue(observed: Array, expected: Array) -> float:
    """Pearson chi-square p-value of counts against expected counts, the cells expecting < 5
    pooled into one (1.0 when fewer than two cells are left: nothing random to test)."""
    big = expected >= 5
    expected = np.append(expected[big], expected[~big].sum())
    observed = np.append(observed[big], observed[~big].sum())
    keep = expected > 0
    expected, observed = expected[keep], observed[keep]
    if len(expected) < 2:
        return 1.0
    stat = float(((observed - expected) ** 2 / expected).sum())
    return chi2_sf(stat, len(expected) - 1)


def repeat_pvalue(a: Array, b: Array, probs: Array) -> float:
    """One-sided p-value of 'a and b agree this often' for independent draws [R, B] from probs
    [B, K]: a position agrees with probability sum_k p_k^2 (normal approximation to the count)."""
    if a.size == 0:
        return 1.0
    q = (probs**2).sum(1)
    mean = len(a) * q.sum()
    var = len(a) * (q * (1 - q)).sum()
    if var <= 1e-12:
        return 1.0  # deterministic rows: agreement is certain
    z = (float((a == b).sum()) - mean) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def chi2_sf(x: float, df: int) -> float:
    """P(chi-square(df) > x): the regularized upper incomplete gamma Q(df/2, x/2)."""
    a, x = df / 2.0, x / 2.0
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300  # continued fraction for Q(a, x) (modified Lentz)
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * h
