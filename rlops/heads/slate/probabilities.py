"""Slate policies with exact propensities (numpy only).

A slate policy ranks K candidates into L slots without repeating an item. Every policy here answers
the same four questions, vectorized over n requests:

    sample(rng, scores, num_slots, mask=None)  -> slates [n, L] int64, item indices in display order
    marginals(scores, num_slots, mask=None)    -> [n, K, L]: P(item k shown at slot l)
    prefix_probs(scores, slates, mask=None)    -> [n, L]: P(slates[:, :l+1] is the shown prefix);
                                                  the last column is the slate's joint probability
    conditionals(scores, slates, mask=None)    -> [n, L, K]: P(item k at slot l | slates[:, :l])

Conventions: `scores` [n, K] floats (finite wherever allowed); `mask` [n, K] bool, True = allowed
(default: every item). Masked items are never shown and have probability 0 everywhere. A request
with fewer allowed items than L raises ValueError. Slots are 0-based. `prefix_probs` and
`conditionals` take LOGGED slates: a slate that repeats an item or shows a masked one gets
probability 0 from the offending slot on. Greedy choices break score ties by the lowest item index.

Policies: `PlackettLuce(temperature)` (marginals by quadrature over the exponential race),
`EpsilonPerSlot(epsilon)` (marginals by an exact dynamic program), `UniformWithoutReplacement()`
and `Greedy()` (deterministic top L; for evaluation). `enumerate_slates` and
`brute_force_marginals` are the enumeration reference the tests hold the fast paths to.
"""

from __future__ import annotations

import functools
import itertools
import math
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# PL quadrature: trapezoid rule in u = log t with this step, from u = -log(w_max) - left to
# u = -log(w_(L+1)) + 4 (see PlackettLuce.marginals). Slot 0 is the softmax in closed form;
# for slots >= 1 the integrand is <= w_i t * sum_j w_j t, so the mass left of the grid is
# <= K e^(-2 left) / 2: left = 13 + log(K) / 2 keeps it below 3e-12. The integrand is analytic in a
# strip of half-width pi/2, so the rule's error is ~exp(-pi^2 / step) (measured: 1e-13 at 0.25).
QUADRATURE_STEP = 0.25
LEFT_TAIL_BASE = 13.0
_RIGHT_TAIL = 4.0


def _left_tail(num_items: int) -> float:
    return LEFT_TAIL_BASE + 0.5 * math.log(num_items)


_CHUNK_ELEMENTS = 2_000_000  # rows per PL quadrature chunk: rows * nodes * K * L stays below this


def check_inputs(scores: FloatArray, num_slots: int, mask: BoolArray | None = None) -> tuple[FloatArray, BoolArray]:
    """Validated (scores [n, K] float64, mask [n, K] bool); ValueError names the slate length when a
    request has fewer than num_slots allowed items."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"scores must be [n, K], got shape {scores.shape}")
    allowed = np.ones(scores.shape, bool) if mask is None else np.asarray(mask, dtype=bool)
    if allowed.shape != scores.shape:
        raise ValueError(f"mask shape {allowed.shape} differs from scores shape {scores.shape}")
    if int(num_slots) != num_slots or num_slots < 1:
        raise ValueError(f"slate length (num_slots) must be a positive integer, got {num_slots}")
    if not np.isfinite(scores[allowed]).all():
        raise ValueError("scores must be finite for every allowed item")
    counts = allowed.sum(1)
    short = np.flatnonzero(counts < num_slots)
    if short.size:
        i = int(short[0])
        raise ValueError(
            f"slate length {num_slots} needs at least {num_slots} allowed candidates per request; "
            f"request {i} has {int(counts[i])}"
        )
    return scores, allowed


def _check_slates(slates: IntArray, scores: FloatArray) -> IntArray:
    slates = np.asarray(slates)
    n, k = scores.shape
    if slates.ndim != 2 or slates.shape[0] != n or slates.shape[1] < 1:
        raise ValueError(f"slates must be [n={n}, L], got shape {slates.shape}")
    if slates.dtype.kind not in "iu":
        raise ValueError(f"slates must hold integer item indices, got dtype {slates.dtype}")
    if slates.size and (slates.min() < 0 or slates.max() >= k):
        raise ValueError(f"slate item indices must be in [0, {k}), got {slates.min()}..{slates.max()}")
    return slates.astype(np.int64)


def _remaining(allowed: BoolArray, slates: IntArray) -> BoolArray:
    """[n, L, K]: the allowed items not yet shown before each slot."""
    n, num_slots = slates.shape
    out = np.empty((n, num_slots, allowed.shape[1]), bool)
    out[:, 0] = allowed
    rows = np.arange(n)
    for slot in range(1, num_slots):
        out[:, slot] = out[:, slot - 1]
        out[rows, slot, slates[:, slot - 1]] = False
    return out


def _best_remaining(scores: FloatArray, remaining: BoolArray) -> IntArray:
    """Index of the highest-scoring remaining item per row (ties: lowest index)."""
    return np.argmax(np.where(remaining, scores, -np.inf), axis=-1)


def _greedy_order(scores: FloatArray, allowed: BoolArray) -> IntArray:
    """[n, K] items by descending score, ties by lowest index; disallowed items last."""
    return np.argsort(np.where(allowed, -scores, np.inf), axis=1, kind="stable")


def _top_by_keys(keys: FloatArray, allowed: BoolArray, num_slots: int) -> IntArray:
    return np.argsort(np.where(allowed, -keys, np.inf), axis=1, kind="stable")[:, :num_slots].astype(np.int64)


class SlatePolicy(ABC):
    """A distribution over ordered slates given scores (see the module docstring for shapes)."""

    name: ClassVar[str]

    @abstractmethod
    def sample(
        self, rng: np.random.Generator, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
    ) -> IntArray:
        """Slates [n, L] int64 drawn from the policy (no item twice, no masked item)."""

    @abstractmethod
    def marginals(self, scores: FloatArray, num_slots: int, mask: BoolArray | None = None) -> FloatArray:
        """[n, K, L]: P(item k shown at slot l), exact."""

    @abstractmethod
    def _next_item_probs(self, scores: FloatArray, allowed: BoolArray, remaining: BoolArray) -> FloatArray:
        """[m, K] distribution of the next item given which items remain (rows validated)."""

    def next_item_probs(self, scores: FloatArray, prefixes: IntArray, mask: BoolArray | None = None) -> FloatArray:
        """[n, K]: distribution of the item at slot P given the shown prefix `prefixes` [n, P]
        (P may be 0)."""
        scores = np.asarray(scores, dtype=np.float64)
        prefixes = np.asarray(prefixes, dtype=np.int64).reshape(scores.shape[0], -1)
        scores, allowed = check_inputs(scores, prefixes.shape[1] + 1, mask)
        remaining = allowed.copy()
        if prefixes.shape[1]:
            prefixes = _check_slates(prefixes, scores)
            np.put_along_axis(remaining, prefixes, False, axis=1)
        return self._next_item_probs(scores, allowed, remaining)

    def conditionals(self, scores: FloatArray, slates: IntArray, mask: BoolArray | None = None) -> FloatArray:
        """[n, L, K]: the policy's distribution of the item at slot l given slates[:, :l]."""
        scores, allowed = check_inputs(scores, np.asarray(slates).shape[-1], mask)
        slates = _check_slates(slates, scores)
        n, num_slots = slates.shape
        k = scores.shape[1]
        remaining = _remaining(allowed, slates).reshape(n * num_slots, k)
        probs = self._next_item_probs(np.repeat(scores, num_slots, 0), np.repeat(allowed, num_slots, 0), remaining)
        return probs.reshape(n, num_slots, k)

    def prefix_probs(self, scores: FloatArray, slates: IntArray, mask: BoolArray | None = None) -> FloatArray:
        """[n, L]: probability of the prefix slates[:, :l+1] (the cascade propensity)."""
        cond = self.conditionals(scores, slates, mask)
        picked = np.take_along_axis(cond, np.asarray(slates, np.int64)[..., None], axis=2)[..., 0]
        return np.cumprod(picked, axis=1)


class PlackettLuce(SlatePolicy):
    """Plackett-Luce over exp(score / temperature): each slot draws from the softmax over the
    remaining items. Sampled by Gumbel-top-L; marginals by one-dimensional quadrature."""

    name: ClassVar[str] = "plackett_luce"

    def __init__(self, temperature: float = 1.0, quadrature_step: float = QUADRATURE_STEP):
        if not temperature > 0:
            raise ValueError(f"PlackettLuce: temperature must be > 0, got {temperature}")
        if not 0 < quadrature_step <= 1:
            raise ValueError(f"PlackettLuce: quadrature_step must be in (0, 1], got {quadrature_step}")
        self.temperature = float(temperature)
        self.quadrature_step = float(quadrature_step)

    def __repr__(self) -> str:
        return f"PlackettLuce(temperature={self.temperature})"

    def sample(
        self, rng: np.random.Generator, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
    ) -> IntArray:
        scores, allowed = check_inputs(scores, num_slots, mask)
        keys = scores / self.temperature + rng.gumbel(size=scores.shape)
        return _top_by_keys(keys, allowed, num_slots)

    def _next_item_probs(self, scores: FloatArray, allowed: BoolArray, remaining: BoolArray) -> FloatArray:
        logits = np.where(remaining, scores / self.temperature, -np.inf)
        top = logits.max(axis=1, keepdims=True)
        weights = np.exp(logits - np.where(np.isfinite(top), top, 0.0))
        total = weights.sum(axis=1, keepdims=True)
        return weights / np.where(total > 0, total, 1.0)

    def marginals(self, scores: FloatArray, num_slots: int, mask: BoolArray | None = None) -> FloatArray:
        """Exact up to the quadrature (|error| < 1e-9 in tests): with T_k ~ Exp(w_k) independent,
        the PL ranking is the order of the T_k, so

            P(item i at slot l) = int_0^inf w_i e^(-w_i t) PB_{-i}(l; {1 - e^(-w_j t)}) dt,

        PB_{-i}(l; q) the Poisson-binomial probability that exactly l of the other items finish
        first. The trapezoid rule runs in u = log t; PB_{-i} for every i comes from a binary tree
        of Poisson-binomial generating polynomials truncated at z^(L-1) (stable: sums of
        non-negative terms). Slot 0 is the softmax, in closed form."""
        scores, allowed = check_inputs(scores, num_slots, mask)
        n, k = scores.shape
        first = self._next_item_probs(scores, allowed, allowed)
        if num_slots == 1:
            return first[:, :, None]
        out = np.zeros((n, k, num_slots))
        logits = np.where(allowed, scores / self.temperature, -np.inf)
        logits -= logits.max(axis=1, keepdims=True)  # w_max = 1 in every row
        # The grid ends at -log(w) + 4 for w the (L+1)-th largest weight (the smallest when only L
        # are allowed): beyond it at least L other items have finished with probability
        # >= 1 - L exp(-e^4), so no item can still land in a slot < L.
        ranked = -np.sort(-logits, axis=1)  # descending; masked (-inf) last
        spans = -ranked[np.arange(n), np.minimum(num_slots, allowed.sum(1) - 1)]
        order = np.argsort(spans)  # rows of similar span share a chunk (same number of nodes)
        nodes_per_row = np.ceil((spans + _left_tail(k) + _RIGHT_TAIL) / self.quadrature_step).astype(int) + 1
        nodes = nodes_per_row[order]
        width = 1 << max(0, (k - 1).bit_length())  # items padded to a power of two
        start = 0
        while start < n:  # chunks of rows whose grids fit _CHUNK_ELEMENTS
            stop = start + 1
            while stop < n and (stop + 1 - start) * int(nodes[stop]) * width * num_slots * 3 <= _CHUNK_ELEMENTS:
                stop += 1
            rows = order[start:stop]
            out[rows] = self._quadrature(logits[rows], int(nodes[stop - 1]), num_slots)
            start = stop
        out[:, :, 0] = first
        return out

    def _quadrature(self, logits: FloatArray, num_nodes: int, num_slots: int) -> FloatArray:
        """[m, K, L] marginals of rows sharing one grid of num_nodes points in log t."""
        m, k = logits.shape
        weights = np.exp(logits)  # 0 for masked items
        log_t = -_left_tail(k) + self.quadrature_step * np.arange(num_nodes)
        wt = weights[:, None, :] * np.exp(log_t)[None, :, None]  # [m, Q, K] = w_k t
        # Each item's Poisson-binomial factor (1 - q) + q z, truncated at z^(L-1); padding items
        # to a power of two with the factor 1 lets a binary tree of products give, for every item,
        # the product over all OTHER items in O(log K) vectorized steps. Layout [L, items, m * Q]:
        # coefficient first, so every step works on large contiguous blocks.
        width = 1 << max(0, (k - 1).bit_length())
        flat = wt.transpose(2, 0, 1).reshape(k, m * num_nodes)  # [K, m * Q]
        leaves = np.zeros((num_slots, width, m * num_nodes))
        leaves[0] = 1.0
        leaves[0, :k] = np.exp(-flat)  # P(T_k > t): item k not yet finished
        if num_slots > 1:
            leaves[1, :k] = -np.expm1(-flat)
        others = _leave_one_out_products(leaves)[:, :k].reshape(num_slots, k, m, num_nodes)
        # Density of T_i in u = log t, with the trapezoid weights folded in.
        trapezoid = np.full(num_nodes, self.quadrature_step)
        trapezoid[[0, -1]] *= 0.5
        density = wt * np.exp(-wt) * trapezoid[None, :, None]  # [m, Q, K]
        return np.einsum("mqk,ckmq->mkc", density, others)


def _truncated_product(a: FloatArray, b: FloatArray, a_terms: int, b_terms: int) -> FloatArray:
    """Coefficients of a(z) * b(z) up to z^(L-1), for [L, ...] coefficient arrays (broadcasting over
    the rest) whose coefficients from a_terms / b_terms on are zero (skipped: leaves are linear)."""
    num = a.shape[0]
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape))
    scratch = np.empty_like(out)
    for i in range(min(a_terms, num)):
        terms = min(b_terms, num - i)  # in place: no temporaries on the hot path
        np.multiply(a[i], b[:terms], out=scratch[:terms])
        out[i : i + terms] += scratch[:terms]
    return out


def _leave_one_out_products(leaves: FloatArray) -> FloatArray:
    """For linear polynomials leaves[:, i] ([L, items, M], a power-of-two number of items), the
    truncated product of all leaves except i, for every i: an up pass and a down pass over a
    binary tree."""
    num, _, size = leaves.shape
    levels = [leaves]
    while levels[-1].shape[1] > 1:
        pairs = levels[-1].reshape(num, -1, 2, size)
        terms = len(levels)  # a node at level d has 2^d factors: at most 2^d + 1 coefficients
        levels.append(_truncated_product(pairs[:, :, 0], pairs[:, :, 1], 2 ** (terms - 1) + 1, 2 ** (terms - 1) + 1))
    rest = np.zeros_like(levels[-1])  # product of everything outside the subtree: 1 at the root
    rest[0] = 1.0
    for depth in range(len(levels) - 2, -1, -1):
        siblings = levels[depth].reshape(num, -1, 2, size)[:, :, ::-1]  # each child's sibling
        rest = _truncated_product(siblings, rest[:, :, None], 2**depth + 1, num).reshape(num, -1, size)
    return rest


class EpsilonPerSlot(SlatePolicy):
    """Each slot takes the best remaining allowed item by score with probability 1 - epsilon, else
    one of the remaining allowed items uniformly (the best included). Ties: lowest index first."""

    name: ClassVar[str] = "epsilon_per_slot"

    def __init__(self, epsilon: float = 0.1):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"EpsilonPerSlot: epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = float(epsilon)

    def __repr__(self) -> str:
        return f"EpsilonPerSlot(epsilon={self.epsilon})"

    def sample(
        self, rng: np.random.Generator, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
    ) -> IntArray:
        scores, allowed = check_inputs(scores, num_slots, mask)
        n = scores.shape[0]
        rows = np.arange(n)
        remaining = allowed.copy()
        slates = np.empty((n, num_slots), np.int64)
        for slot in range(num_slots):
            explore = rng.random(n) < self.epsilon
            uniform_pick = np.argmax(np.where(remaining, rng.random(scores.shape), -1.0), axis=1)
            slates[:, slot] = np.where(explore, uniform_pick, _best_remaining(scores, remaining))
            remaining[rows, slates[:, slot]] = False
        return slates

    def _next_item_probs(self, scores: FloatArray, allowed: BoolArray, remaining: BoolArray) -> FloatArray:
        probs = self.epsilon * remaining / np.maximum(remaining.sum(axis=1, keepdims=True), 1)
        rows = np.arange(len(scores))
        best = _best_remaining(scores, remaining)
        probs[rows, best] += (1.0 - self.epsilon) * remaining[rows, best]
        return probs

    def marginals(self, scores: FloatArray, num_slots: int, mask: BoolArray | None = None) -> FloatArray:
        """Exact: the marginal of the r-th best allowed item depends only on (r, number of allowed
        items M, L, epsilon), computed once per M by `epsilon_rank_marginals`."""
        scores, allowed = check_inputs(scores, num_slots, mask)
        n, k = scores.shape
        out = np.zeros((n, k, num_slots))
        order = _greedy_order(scores, allowed)
        counts = allowed.sum(1)
        for m in np.unique(counts):
            rows = np.flatnonzero(counts == m)
            table = epsilon_rank_marginals(int(m), num_slots, self.epsilon)  # [M, L]
            out[rows[:, None], order[rows, : int(m)]] = table[None]
        return out


@functools.lru_cache(maxsize=256)
def _rank_marginals_cached(num_allowed: int, num_slots: int, epsilon: float) -> FloatArray:
    size, eps = num_allowed, epsilon
    out = np.zeros((size, num_slots))
    # State (h, m): the h best items are taken, the (h+1)-th is not, and m more taken items lie
    # among the A = M - h - 1 items below it, every m-subset of them equally likely.
    states: dict[tuple[int, int], float] = {(0, 0): 1.0}
    for slot in range(num_slots):
        left = size - slot  # items still available at this slot
        lower_add = np.zeros(size + 1)  # range adds over ranks h+1..M-1 (difference array)
        following: dict[tuple[int, int], float] = {}
        for (h, m), p in states.items():
            below = size - h - 1
            p_top = p * ((1.0 - eps) + eps / left)
            out[h, slot] += p_top
            if below > m:  # each untaken lower item: P(untaken) * eps / left
                lower_add[h + 1] += p * (below - m) / below * eps / left
                lower_add[size] -= p * (below - m) / below * eps / left
            if slot == num_slots - 1:
                continue
            if below > m:
                key = (h, m + 1)
                following[key] = following.get(key, 0.0) + p * (below - m) * eps / left
            # Taking the (h+1)-th item: the taken run below it (length j) joins the top block.
            run = 1.0
            for j in range(m + 1):
                key = (h + 1 + j, m - j)
                following[key] = following.get(key, 0.0) + p_top * run * (below - m) / (below - j)
                run *= (m - j) / (below - j)
        out[:, slot] += np.cumsum(lower_add)[:size]
        states = following
    out.setflags(write=False)
    return out


def epsilon_rank_marginals(num_allowed: int, num_slots: int, epsilon: float) -> FloatArray:
    """[M, L]: P(the r-th best of M allowed items is shown at slot l) under EpsilonPerSlot(epsilon)
    (exact dynamic program over O(L^2) states; read-only, cached)."""
    if num_allowed < num_slots:
        raise ValueError(f"slate length {num_slots} needs at least {num_slots} allowed candidates, got {num_allowed}")
    return _rank_marginals_cached(int(num_allowed), int(num_slots), float(epsilon))


class UniformWithoutReplacement(SlatePolicy):
    """Every ordered slate of distinct allowed items equally likely."""

    name: ClassVar[str] = "uniform"

    def __repr__(self) -> str:
        return "UniformWithoutReplacement()"

    def sample(
        self, rng: np.random.Generator, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
    ) -> IntArray:
        scores, allowed = check_inputs(scores, num_slots, mask)
        return _top_by_keys(rng.random(scores.shape), allowed, num_slots)

    def _next_item_probs(self, scores: FloatArray, allowed: BoolArray, remaining: BoolArray) -> FloatArray:
        return remaining / np.maximum(remaining.sum(axis=1, keepdims=True), 1)

    def marginals(self, scores: FloatArray, num_slots: int, mask: BoolArray | None = None) -> FloatArray:
        scores, allowed = check_inputs(scores, num_slots, mask)
        per_item = allowed / allowed.sum(axis=1, keepdims=True)
        return np.repeat(per_item[:, :, None], num_slots, axis=2)


class Greedy(SlatePolicy):
    """The L best allowed items by descending score (ties: lowest index); deterministic, so it has
    no overlap with other policies: use it as an evaluation target, not to log."""

    name: ClassVar[str] = "greedy"

    def __repr__(self) -> str:
        return "Greedy()"

    def sample(
        self, rng: np.random.Generator, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
    ) -> IntArray:
        scores, allowed = check_inputs(scores, num_slots, mask)
        return _greedy_order(scores, allowed)[:, :num_slots].astype(np.int64)

    def _next_item_probs(self, scores: FloatArray, allowed: BoolArray, remaining: BoolArray) -> FloatArray:
        probs = np.zeros(scores.shape)
        rows = np.arange(len(scores))
        best = _best_remaining(scores, remaining)
        probs[rows, best] = remaining[rows, best]
        return probs

    def marginals(self, scores: FloatArray, num_slots: int, mask: BoolArray | None = None) -> FloatArray:
        scores, allowed = check_inputs(scores, num_slots, mask)
        out = np.zeros((*scores.shape, num_slots))
        top = _greedy_order(scores, allowed)[:, :num_slots]
        rows = np.arange(len(scores))[:, None]
        out[rows, top, np.arange(num_slots)[None, :]] = 1.0
        return out


# ---- enumeration reference (test aid) ------------------------------------------------------------


def enumerate_slates(num_items: int, num_slots: int) -> IntArray:
    """Every ordered slate of num_slots distinct items out of num_items: [K!/(K-L)!, L] int64."""
    if num_slots > num_items:
        raise ValueError(f"slate length {num_slots} needs at least {num_slots} items, got {num_items}")
    count = math.perm(num_items, num_slots)
    return np.fromiter(
        itertools.chain.from_iterable(itertools.permutations(range(num_items), num_slots)),
        dtype=np.int64,
        count=count * num_slots,
    ).reshape(count, num_slots)


def brute_force_slate_probs(
    policy: SlatePolicy, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
) -> tuple[IntArray, FloatArray]:
    """(slates [S, L], probs [n, S]): every ordered slate and its probability under the policy,
    from the chain of conditionals. Test aid: O(n * K^L)."""
    scores, allowed = check_inputs(scores, num_slots, mask)
    n, k = scores.shape
    slates = enumerate_slates(k, num_slots)
    probs = np.empty((n, len(slates)))
    for i in range(n):
        rows = np.repeat(scores[i : i + 1], len(slates), 0)
        masks = np.repeat(allowed[i : i + 1], len(slates), 0)
        probs[i] = policy.prefix_probs(rows, slates, masks)[:, -1]
    return slates, probs


def brute_force_marginals(
    policy: SlatePolicy, scores: FloatArray, num_slots: int, mask: BoolArray | None = None
) -> FloatArray:
    """[n, K, L] marginals by summing the probabilities of every ordered slate. Test aid."""
    slates, probs = brute_force_slate_probs(policy, scores, num_slots, mask)
    n, k = np.shape(scores)
    out = np.zeros((n, k, num_slots))
    for slot in range(num_slots):
        onehot = np.eye(k)[slates[:, slot]]  # [S, K]
        out[:, :, slot] = probs @ onehot
    return out
