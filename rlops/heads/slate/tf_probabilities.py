"""The TensorFlow twin of `probabilities`: slates drawn from uniforms, and their exact marginals and
prefix (cascade) probabilities, in graph-friendly ops (float64 inside; `dtype=tf.float32` and
`check=False` give the same math in TFLite builtin ops only, for the LiteRT twin:
rlops.heads.slate.head.litert_slate_head).

    sample_slates(kind, scores, allowed, num_slots, uniforms, parameter)  -> slates [B, L] int32
    slate_marginals(kind, scores, allowed, num_slots, parameter)           -> [B, K, L]
    slate_prefix_probs(kind, scores, allowed, slates, parameter)           -> [B, L]

`kind` is a numpy policy's `name` ('plackett_luce', 'epsilon_per_slot', 'uniform', 'greedy');
`parameter` its temperature or epsilon. Conventions are `probabilities`': `allowed` [B, K] bool,
masked items never shown and of probability 0, greedy ties broken by the lowest item index, and the
same numbers to float64 round-off (PL: the same quadrature; epsilon per slot: the same dynamic
program, vectorized over requests). `check_allowed` fails a request with fewer than L allowed items.

Randomness is an input: a slate is a pure function of its row's uniforms (`num_uniforms` per row),
so a draw is replayed from its uniforms (`numpy_sample_slates` is the numpy twin of the draw), and
`row_uniforms` makes them from one int64 seed per row (a counter-based hash: splitmix64 of seed and
counter; `numpy_row_uniforms` is its numpy twin). Uniforms should be float64: float32 ones tie
Gumbel keys about once in 3,000 draws at K = 100 (ties go to the lower index).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from rlops.heads.slate.probabilities import (
    LEFT_TAIL_BASE,
    QUADRATURE_STEP,
    epsilon_rank_marginals as numpy_epsilon_rank_marginals,
)

# The numpy module's grid (`PlackettLuce.marginals`): u = log t from -(LEFT_TAIL_BASE + log(K) / 2)
# to 4 past -log of the (L+1)-th largest weight, in steps of QUADRATURE_STEP.
# float32 (a LiteRT file) carries 6e-8 relative: its grid starts where the mass left of it is below
# K e^(-2 left) / 2 = 1e-9 (left = 10 + log(K) / 2) instead of 3e-12.
LEFT_TAIL_BASE_FLOAT32 = 10.0
RIGHT_TAIL = 4.0

KINDS = ("plackett_luce", "epsilon_per_slot", "uniform", "greedy")

_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def num_uniforms(kind: str, num_items: int | tf.Tensor, num_slots: int) -> int | tf.Tensor:
    """Uniforms one request consumes: a Gumbel key per item (PL, uniform), an explore coin and a pick
    per slot (epsilon per slot), none (greedy)."""
    if kind in ("plackett_luce", "uniform"):
        return num_items
    if kind == "epsilon_per_slot":
        return 2 * num_slots
    if kind == "greedy":
        return 0
    raise ValueError(f"unknown slate policy kind {kind!r}; known: {KINDS}")


# ---- uniforms from per-row seeds ---------------------------------------------------------------
def _mix64(z: tf.Tensor) -> tf.Tensor:
    for shift, mult in ((30, _MIX1), (27, _MIX2)):
        z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(shift, tf.uint64)))
        z = z * tf.constant(mult, tf.uint64)
    return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(31, tf.uint64)))


def row_uniforms(seeds: tf.Tensor, n: int | tf.Tensor) -> tf.Tensor:
    """[B, n] float64 uniforms in (0, 1), row b a function of seeds[b] (int64) alone: output c is
    splitmix64 of the stream seeded by mix(seed) at counter c (53 bits, centred in its cell)."""
    key = _mix64(tf.bitcast(tf.cast(seeds, tf.int64), tf.uint64))  # [B]
    counter = tf.cast(tf.range(1, tf.cast(n, tf.int64) + 1), tf.uint64) * tf.constant(_GOLDEN, tf.uint64)
    bits = tf.bitwise.right_shift(_mix64(key[:, None] + counter[None, :]), tf.constant(11, tf.uint64))
    return (tf.cast(bits, tf.float64) + 0.5) * 2.0**-53


def numpy_row_uniforms(seeds: npt.ArrayLike, n: int) -> npt.NDArray[np.float64]:
    """The numpy twin of `row_uniforms` (bit for bit)."""

    def mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
        return z ^ (z >> np.uint64(31))

    with np.errstate(over="ignore"):
        key = mix(np.asarray(seeds, np.int64).view(np.uint64))
        counter = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
        bits = mix(key[:, None] + counter[None, :]) >> np.uint64(11)
    return (bits.astype(np.float64) + 0.5) * 2.0**-53


# ---- validation and shared pieces --------------------------------------------------------------
def check_allowed(allowed: tf.Tensor, num_slots: int) -> tf.Tensor:
    """`allowed` [B, K] bool, with a runtime error naming the slate length when a request has fewer
    than num_slots allowed items (InvalidArgumentError in graphs, eagerly too)."""
    allowed = tf.convert_to_tensor(allowed, tf.bool)
    counts = tf.reduce_sum(tf.cast(allowed, tf.int32), -1)
    short = counts < num_slots
    first = tf.argmax(tf.cast(short, tf.int32), output_type=tf.int32)
    check = tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(short)),
        [
            f"slate length {num_slots} needs at least {num_slots} allowed candidates per request; request",
            first,
            "has",
            tf.gather(counts, first),
        ],
        name="check_slate_length",
    )
    with tf.control_dependencies([check]):
        return tf.identity(allowed)


def _counts(allowed: tf.Tensor, dtype: tf.DType = tf.float64) -> tf.Tensor:
    return tf.reduce_sum(tf.cast(allowed, dtype), -1)


def _ranks(scores: tf.Tensor, allowed: tf.Tensor, dtype: tf.DType = tf.float64) -> tf.Tensor:
    """[B, K] int32 rank of each item by descending score (ties: lowest index first), disallowed
    items after every allowed one."""
    keys = tf.where(allowed, -tf.cast(scores, dtype), tf.constant(np.inf, dtype))
    order = tf.argsort(keys, axis=-1, stable=True)
    return tf.argsort(order, axis=-1, stable=True)


def _taken_before(slates: tf.Tensor, num_items: tf.Tensor, dtype: tf.DType = tf.float64) -> tf.Tensor:
    """[B, L, K] bool: item k is shown at a slot before l."""
    onehot = tf.one_hot(slates, num_items, dtype=dtype)  # [B, L, K]
    return tf.math.cumsum(onehot, axis=1, exclusive=True) > 0


def _masked_logits(
    scores: tf.Tensor, allowed: tf.Tensor, temperature: float, dtype: tf.DType = tf.float64
) -> tf.Tensor:
    return tf.where(allowed, tf.cast(scores, dtype) / temperature, tf.constant(-np.inf, dtype))


def _cumprod(x: tf.Tensor) -> tf.Tensor:
    """Running products along axis 1 of [B, L] (L static): TFLite has no CUMPROD builtin."""
    columns = [x[:, 0]]
    for slot in range(1, int(x.shape[1])):
        columns.append(columns[-1] * x[:, slot])
    return tf.stack(columns, axis=1)


def _arrived(wt: tf.Tensor, decay: tf.Tensor) -> tf.Tensor:
    """1 - e^(-wt) for wt >= 0 (`decay` = e^(-wt)). float64: 1 - decay, whose absolute error (1e-16)
    is all the marginals see (a Poisson-binomial coefficient moves by at most K times it), and one
    subtraction costs a tenth of expm1. float32 (a LiteRT file) needs relative precision where the
    arrival is small: its Taylor series below 1/2 (truncation < 1e-9 relative), 1 - decay above
    (relative error < 2e-7 there, as 1 - e^(-wt) >= 0.39)."""
    if wt.dtype == tf.float64:
        return 1.0 - decay
    series = tf.ones_like(wt)
    for n in range(9, 1, -1):  # x (1 - x/2 (1 - x/3 (1 - ...)))
        series = 1.0 - wt / float(n) * series
    return tf.where(wt < 0.5, wt * series, 1.0 - decay)


# ---- sampling ----------------------------------------------------------------------------------
def sample_slates(
    kind: str,
    scores: tf.Tensor,
    allowed: tf.Tensor,
    num_slots: int,
    uniforms: tf.Tensor | None,
    parameter: float = 1.0,
    dtype: tf.DType = tf.float64,
    check: bool = True,
) -> tf.Tensor:
    """Slates [B, L] int32 (item indices in display order) for uniforms [B, num_uniforms] in (0, 1).
    `dtype` is the arithmetic's (float32: TFLite builtins); `check` False skips check_allowed (a
    request with fewer than L allowed items then fills its last slots with masked ones)."""
    allowed = check_allowed(allowed, num_slots) if check else tf.convert_to_tensor(allowed, tf.bool)
    if kind == "greedy":  # top_k puts the lower index first among equal keys
        return tf.math.top_k(tf.where(allowed, tf.cast(scores, dtype), tf.constant(-np.inf, dtype)), num_slots).indices
    u = tf.cast(uniforms, dtype)
    if kind in ("plackett_luce", "uniform"):
        # Gumbel-top-L: the L largest perturbed logits are an exact PL draw without replacement.
        logits = tf.zeros_like(u) if kind == "uniform" else tf.cast(scores, dtype) / parameter
        keys = tf.where(allowed, logits - tf.math.log(-tf.math.log(u)), tf.constant(-np.inf, dtype))
        return tf.math.top_k(keys, num_slots).indices
    if kind != "epsilon_per_slot":
        raise ValueError(f"unknown slate policy kind {kind!r}; known: {KINDS}")
    ranks = tf.cast(_ranks(scores, allowed, dtype), dtype)
    remaining = tf.cast(allowed, dtype)
    picks = []
    for slot in range(num_slots):
        # best remaining by rank; else the j-th remaining item, j = floor(u * count)
        best = tf.argmin(tf.where(remaining > 0, ranks, np.inf), axis=-1, output_type=tf.int32)
        count = tf.reduce_sum(remaining, -1)
        j = tf.minimum(tf.floor(u[:, 2 * slot + 1] * count), count - 1.0)
        uniform = tf.argmax(tf.cast(tf.cumsum(remaining, -1) > j[:, None], tf.int32), -1, output_type=tf.int32)
        pick = tf.where(u[:, 2 * slot] < parameter, uniform, best)
        picks.append(pick)
        remaining *= 1.0 - tf.one_hot(pick, tf.shape(remaining)[-1], dtype=dtype)
    return tf.stack(picks, axis=1)


def numpy_sample_slates(
    kind: str,
    scores: npt.ArrayLike,
    allowed: npt.ArrayLike,
    num_slots: int,
    uniforms: npt.ArrayLike | None,
    parameter: float = 1.0,
) -> npt.NDArray[np.int64]:
    """The numpy twin of `sample_slates`: the same slates for the same uniforms (a replay, or a
    check of a LiteRT file's draws without TensorFlow)."""
    s = np.asarray(scores, np.float64)
    ok = np.asarray(allowed, bool)
    n, k = s.shape
    order = np.argsort(np.where(ok, -s, np.inf), axis=1, kind="stable")
    if kind == "greedy":
        return order[:, :num_slots].astype(np.int64)
    u = np.asarray(uniforms, np.float64)
    if kind in ("plackett_luce", "uniform"):
        logits = np.zeros_like(u) if kind == "uniform" else s / parameter
        keys = np.where(ok, logits - np.log(-np.log(u)), -np.inf)
        return np.argsort(-keys, axis=1, kind="stable")[:, :num_slots].astype(np.int64)
    if kind != "epsilon_per_slot":
        raise ValueError(f"unknown slate policy kind {kind!r}; known: {KINDS}")
    ranks = np.argsort(order, axis=1)
    remaining = ok.copy()
    rows = np.arange(n)
    out = np.empty((n, num_slots), np.int64)
    for slot in range(num_slots):
        best = np.argmin(np.where(remaining, ranks, k), axis=1)
        count = remaining.sum(1)
        j = np.minimum(np.floor(u[:, 2 * slot + 1] * count), count - 1)
        uniform = np.argmax(np.cumsum(remaining, 1) > j[:, None], axis=1)
        out[:, slot] = np.where(u[:, 2 * slot] < parameter, uniform, best)
        remaining[rows, out[:, slot]] = False
    return out


# ---- prefix (cascade) probabilities ------------------------------------------------------------
def slate_prefix_probs(
    kind: str,
    scores: tf.Tensor,
    allowed: tf.Tensor,
    slates: tf.Tensor,
    parameter: float = 1.0,
    dtype: tf.DType = tf.float64,
) -> tf.Tensor:
    """[B, L] `dtype`: P(slates[:, :l+1] is the shown prefix); a slate that repeats an item or shows a
    masked one gets 0 from the offending slot on."""
    allowed = tf.convert_to_tensor(allowed, tf.bool)
    slates = tf.cast(slates, tf.int32)
    num_items = tf.shape(allowed)[-1]
    taken = _taken_before(slates, num_items, dtype)
    remaining = tf.logical_and(tf.expand_dims(allowed, 1), tf.logical_not(taken))  # [B, L, K]
    shown_ok = tf.gather(remaining, slates[..., None], axis=2, batch_dims=2)[..., 0]  # [B, L]
    if kind in ("plackett_luce", "uniform"):
        logits = tf.zeros(tf.shape(allowed), dtype) if kind == "uniform" else tf.cast(scores, dtype) / parameter
        logits = tf.broadcast_to(tf.expand_dims(logits, 1), tf.shape(remaining))
        masked = tf.where(remaining, logits, tf.constant(-np.inf, dtype))
        picked = tf.gather(logits, slates[..., None], axis=2, batch_dims=2)[..., 0]
        cond = tf.exp(picked - tf.reduce_logsumexp(masked, -1))
    elif kind in ("epsilon_per_slot", "greedy"):
        eps = parameter if kind == "epsilon_per_slot" else 0.0
        ranks = tf.cast(_ranks(scores, allowed, dtype), dtype)
        best = tf.argmin(tf.where(remaining, tf.expand_dims(ranks, 1), np.inf), axis=-1, output_type=tf.int32)  # [B, L]
        left = tf.reduce_sum(tf.cast(remaining, dtype), -1)
        cond = (1.0 - eps) * tf.cast(tf.equal(best, slates), dtype) + eps / tf.maximum(left, 1.0)
    else:
        raise ValueError(f"unknown slate policy kind {kind!r}; known: {KINDS}")
    return _cumprod(tf.where(shown_ok, cond, tf.zeros_like(cond)))


# ---- marginals ---------------------------------------------------------------------------------
def slate_marginals(
    kind: str,
    scores: tf.Tensor,
    allowed: tf.Tensor,
    num_slots: int,
    parameter: float = 1.0,
    quadrature_step: float = QUADRATURE_STEP,
    dtype: tf.DType = tf.float64,
    check: bool = True,
) -> tf.Tensor:
    """[B, K, L] `dtype`: P(item k shown at slot l), exact (PL: to the quadrature's ~1e-13 in
    float64). `dtype` and `check` as sample_slates'."""
    allowed = check_allowed(allowed, num_slots) if check else tf.convert_to_tensor(allowed, tf.bool)
    if kind == "plackett_luce":
        return plackett_luce_marginals(_masked_logits(scores, allowed, parameter, dtype), num_slots, quadrature_step)
    if kind == "uniform":
        per_item = tf.cast(allowed, dtype) / tf.maximum(_counts(allowed, dtype), 1.0)[:, None]
        return tf.tile(per_item[:, :, None], [1, 1, num_slots])
    ranks = _ranks(scores, allowed, dtype)
    if kind == "greedy":
        return tf.one_hot(ranks, num_slots, dtype=dtype)  # ranks >= L (and masked items) give 0
    if kind == "epsilon_per_slot":
        static_k = allowed.shape[-1]
        if isinstance(parameter, (int, float)) and static_k is not None:  # a constant table: few ops
            tables = tf.constant(_epsilon_tables(int(static_k), num_slots, float(parameter)), dtype)
            table = tf.gather(tables, tf.reduce_sum(tf.cast(allowed, tf.int32), -1))  # [B, K, L]
        else:
            table = tf.cast(
                epsilon_rank_marginals(_counts(allowed), num_slots, parameter, tf.shape(allowed)[-1]), dtype
            )
        return tf.gather(table, ranks, axis=1, batch_dims=1) * tf.cast(allowed, dtype)[..., None]
    raise ValueError(f"unknown slate policy kind {kind!r}; known: {KINDS}")


@functools.lru_cache(maxsize=32)
def _epsilon_tables(num_items: int, num_slots: int, epsilon: float) -> npt.NDArray[np.float64]:
    """[K + 1, K, L]: `propensities.epsilon_rank_marginals(M, L, epsilon)` for every allowed count M
    (zero-padded to K ranks; zero for M < L, which check_allowed rejects)."""
    out = np.zeros((num_items + 1, num_items, num_slots))
    for m in range(num_slots, num_items + 1):
        out[m, :m] = numpy_epsilon_rank_marginals(m, num_slots, epsilon)
    return out


def plackett_luce_marginals(logits: tf.Tensor, num_slots: int, step: float = QUADRATURE_STEP) -> tf.Tensor:
    """[B, K, L] PL marginals of logits [B, K] (-inf: masked; float64, or float32 for TFLite), by the
    quadrature of `propensities.PlackettLuce.marginals`: P(i at l) = int w_i e^(-w_i t) PB_{-i}(l) dt
    in u = log t, one grid for the batch (ending where the widest row's grid ends), the leave-one-out
    Poisson-binomial polynomials by a binary tree of truncated products on [items, batch * nodes]
    tensors (static but for the long axis: no shape arithmetic per level)."""
    logits = tf.convert_to_tensor(logits)
    dtype = logits.dtype
    first = tf.nn.softmax(logits, axis=-1)
    if num_slots == 1:
        return first[:, :, None]
    static_k = logits.shape[1]
    if static_k is None:
        raise ValueError("Plackett-Luce marginals need a static number of candidates K (scores [B, K])")
    num_items = int(static_k)
    peak = tf.reduce_max(logits, -1, keepdims=True)
    logits = logits - tf.where(peak > -np.inf, peak, tf.zeros_like(peak))  # w_max = 1 in every row
    allowed_count = tf.reduce_sum(tf.cast(logits > -np.inf, tf.int32), -1)
    # The grid ends at -log of the (L+1)-th largest weight (the smallest when only L are allowed).
    top = tf.math.top_k(logits, min(num_slots + 1, num_items)).values
    edge = tf.gather(top, tf.maximum(tf.minimum(num_slots, allowed_count - 1), 0), axis=1, batch_dims=1)
    edge = tf.where(edge > -np.inf, edge, tf.zeros_like(edge))  # a row with nothing allowed: any grid
    left = (LEFT_TAIL_BASE if dtype == tf.float64 else LEFT_TAIL_BASE_FLOAT32) + 0.5 * math.log(num_items)
    span = tf.reduce_max(-edge) + (left + RIGHT_TAIL)
    num_nodes = tf.cast(tf.math.ceil(span / step), tf.int32) + 1
    node = tf.range(num_nodes)
    log_t = -left + step * tf.cast(node, dtype)  # [Q]
    # Layout [item, batch, node] (in the tree: a list of coefficients, each [item, batch * node]):
    # the long axis innermost, every product elementwise on equal shapes.
    batch = tf.shape(logits)[0]
    weights = tf.reshape(tf.transpose(tf.exp(logits)), [-1, 1])  # [K * B, 1]
    wt = weights * tf.reshape(tf.exp(log_t), [1, -1])  # [K * B, Q] = w_k t
    ends = tf.logical_or(tf.equal(node, 0), tf.equal(node, num_nodes - 1))
    trapezoid = tf.where(ends, tf.constant(0.5 * step, dtype), tf.constant(step, dtype))
    decay = tf.exp(-wt)  # P(T_k > t)
    density = wt * decay * tf.expand_dims(trapezoid, 0)  # density of T_k in u, with the weights
    wt, decay, density = (tf.reshape(x, [num_items, -1]) for x in (wt, decay, density))
    terms = _leave_one_out(wt, decay, density, num_slots)  # [K, B * Q] each; slot 0 is the softmax
    shape = tf.stack([num_items, batch, num_nodes])
    out = tf.stack([tf.reduce_sum(tf.reshape(t, shape), -1) for t in terms[1:]], -1)  # [K, B, L - 1]
    return tf.concat([first[:, :, None], tf.transpose(out, [1, 0, 2])], axis=-1)


def _leave_one_out(wt: tf.Tensor, decay: tf.Tensor, weight: tf.Tensor, num_slots: int) -> list[tf.Tensor]:
    """Coefficients z^0..z^(L-1) ([K, M] each) of weight_k prod_{j != k} ((1 - q_j) + q_j z), q_j =
    1 - e^(-wt_j), for wt and weight [K, M] (decay = e^(-wt); the weight multiplies the leaves'
    sibling factors, 2 products per item instead of L): an up pass of pairwise products (node i with
    node i + n/2 at a level of n nodes; an odd level gets the polynomial 1 as its last node), then a
    down pass handing each node the product of everything outside its subtree. A polynomial is the
    list of its coefficients ([nodes, M] each), keeping only those it can have (2^depth + 1, at most
    L): every product is elementwise on equal shapes, over exactly the terms of degree < L."""
    num_items = int(wt.shape[0])
    node = [decay, _arrived(wt, decay)]
    levels = []  # per level: its halves and its number of real nodes (before an odd level's padding)
    while True:
        size = int(node[0].shape[0])
        if size % 2:  # pad with the polynomial 1
            node = [tf.pad(c, [[0, 1], [0, 0]], constant_values=float(d == 0)) for d, c in enumerate(node)]
        half = (size + 1) // 2
        low, high = (list(x) for x in zip(*(tf.split(c, 2) for c in node)))
        levels.append((low, high, size))
        if half == 1:  # the root's own product is never needed
            break
        node = _poly_mul(low, high, min(num_slots, 2 * len(node) - 1))
    rest: list[tf.Tensor] = []  # the product outside each node (at the root: 1)
    for low, high, size in reversed(levels):
        siblings = [tf.concat([h, lo], 0) for lo, h in zip(low, high)]
        if size == num_items:  # the leaves
            padded = tf.pad(weight, [[0, size % 2], [0, 0]])
            siblings = [c * padded for c in siblings]
        if rest:
            terms = min(num_slots, len(rest) + len(siblings) - 1)
            rest = _poly_mul([tf.concat([c, c], 0) for c in rest], siblings, terms)
        else:
            rest = siblings
        if size % 2:
            rest = [c[:size] for c in rest]
    assert int(rest[0].shape[0]) == num_items
    return rest + [tf.zeros_like(rest[0])] * (num_slots - len(rest))  # fewer items than slots: 0


def _poly_mul(a: list[tf.Tensor], b: list[tf.Tensor], terms: int) -> list[tf.Tensor]:
    """Coefficients z^0..z^(terms-1) of a(z) b(z), for polynomials as lists of equal-shape
    coefficient tensors."""
    out = []
    for d in range(terms):
        products = [a[i] * b[d - i] for i in range(max(0, d - len(b) + 1), min(d + 1, len(a)))]
        out.append(products[0] if len(products) == 1 else tf.add_n(products))
    return out


def epsilon_rank_marginals(
    num_allowed: tf.Tensor, num_slots: int, epsilon: float | tf.Tensor, num_items: tf.Tensor | int
) -> tf.Tensor:
    """[B, K, L]: P(the r-th best of M_b allowed items is shown at slot l) under epsilon per slot,
    the dynamic program of `propensities.epsilon_rank_marginals` over states (h, m) (the h best
    taken, m more taken among the A = M - h - 1 below the (h+1)-th) for every row's M at once."""
    size = tf.cast(num_allowed, tf.float64)[:, None, None]  # M [B, 1, 1]
    eps = epsilon if isinstance(epsilon, tf.Tensor) else tf.constant(epsilon, tf.float64)  # not via float32
    eps = tf.cast(eps, tf.float64)
    n = num_slots
    h = tf.range(n, dtype=tf.float64)[None, :, None]
    m = tf.range(n, dtype=tf.float64)[None, None, :]
    below = size - h - 1.0  # A [B, L, 1]
    untaken = tf.math.divide_no_nan(tf.maximum(below - m, 0.0), below)  # P(a given lower item is untaken)
    states = tf.tile(tf.reshape(tf.one_hot(0, n * n, dtype=tf.float64), [1, n, n]), [tf.shape(size)[0], 1, 1])
    ranks = tf.range(num_items)
    slots = []
    for slot in range(n):
        share = eps / (size - slot)  # eps / items left
        p_top = states * ((1.0 - eps) + share)
        top = tf.reduce_sum(p_top, -1)  # [B, L]: the (h+1)-th best item taken at this slot
        lower = tf.reduce_sum(states * untaken * share, -1)  # [B, L]: each lower untaken item, per h
        # rank r < M gets top[r] (r < L) and sum_{h < r} lower[h]
        cum = tf.concat([tf.zeros_like(lower[:, :1]), tf.cumsum(lower, -1)], -1)  # [B, L+1]
        column = tf.gather(cum, tf.minimum(ranks, n), axis=1) + tf.pad(top, [[0, 0], [0, num_items - n]])
        slots.append(tf.where(tf.cast(ranks, tf.float64)[None, :] < size[:, 0], column, 0.0))
        if slot == n - 1:
            break
        # another lower item taken: (h, m) -> (h, m + 1)
        following = tf.pad(states * tf.maximum(below - m, 0.0) * share, [[0, 0], [0, 0], [1, 0]])[:, :, :n]
        # the (h+1)-th taken, with the run of j taken items right below it: (h, m) -> (h + 1 + j, m - j)
        run = tf.ones_like(states)
        for j in range(n):
            moved = p_top * run * tf.math.divide_no_nan(tf.maximum(below - m, 0.0), below - j)
            moved = tf.where(m >= j, moved, 0.0)[:, :, j:]  # [B, L, L - j] at m' = m - j
            moved = tf.pad(moved, [[0, 0], [1 + j, 0], [0, j]])[:, :n]  # h' = h + 1 + j
            following += moved
            run *= tf.math.divide_no_nan(tf.maximum(m - j, 0.0), below - j)
        states = following
    return tf.stack(slots, axis=-1)


__all__ = [
    "KINDS",
    "QUADRATURE_STEP",
    "num_uniforms",
    "row_uniforms",
    "numpy_row_uniforms",
    "check_allowed",
    "sample_slates",
    "numpy_sample_slates",
    "slate_prefix_probs",
    "slate_marginals",
    "plackett_luce_marginals",
    "epsilon_rank_marginals",
]
