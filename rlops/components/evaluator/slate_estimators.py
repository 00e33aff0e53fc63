"""Slate off-policy estimators as a table, and their in-memory engine.

A slate is an ordered list of up to L items of K, shown in one decision; each slot l gets a reward
r_l. The value of a slate policy is the expected (position-weighted) sum of its slot rewards,
V = E[sum_l theta_l r_l] (theta = 1 unless the caller gives position weights). Estimators use
Open Bandit Pipeline's names (obp.ope.estimators_slate, 0.5.7) and, on complete slates, its
exact numbers. With importance weights on filled slots

    marginal  w_l    = pi(a_l at l | x) / mu(a_l at l | x)
    prefix    w_1:l  = pi(a_1..a_l | x) / mu(a_1..a_l | x)      (w_1:0 = 1)
    joint     w      = w_1:L_i (the slate's last filled slot)

and E_s the record-weighted mean over slates:

    sips        E_s[w sum_l theta_l r_l]                      unbiased always (high variance)
    iips        E_s[sum_l w_l theta_l r_l]                    unbiased when r_l depends on (x, a_l)
                                                              only, e.g. position-based clicks
    rips        E_s[sum_l w_1:l theta_l r_l]                  unbiased when r_l depends on a_1..a_l
                                                              only (cascade-type clicks)
    snsips      sips / (weighted mean of w over filled slots)  (OBP: one global mean)
    sniips      sum_l (n_l / n) E_l[w_l theta_l r_l] / E_l[w_l]    per-slot means (OBP)
    snrips      the same with w_1:l
    cascade_dr  E_s[sum_l w_1:l (theta_l r_l - q_l(a_l)) + w_1:l-1 sum_a pi(a | x, a_<l) q_l(a)]
                Kiyohara et al. 2022 (OBP's SlateCascadeDoublyRobust); q_l(a) is the estimated
                (position-weighted) reward-to-go sum_{l' >= l} theta_l' r_l' given the logged prefix
                and item a at slot l, and pi(. | x, a_<l) the target's distribution at slot l given
                the logged prefix
    pi          E_s[w_PI R]  the pseudo-inverse for a slate-level reward R (Swaminathan et al.
                2017), unbiased when E[R | x, s] is additive over (item, position); position
                weights do not apply (R is already one number)

E_l is the mean over the slates that have slot l and n_l their number: padded slots (shorter
pages) contribute nothing. For the pseudo-inverse, w_PI = q_x^T Gamma_x^+ 1_s, where 1_s
indicates the logged slate's (item, position) pairs, q_x = E_pi[1_s] the target's marginals and
Gamma_x = E_mu[1_s 1_s^T] the logger's pairwise marginals: the exact form for rankings without
replacement (`pseudo_inverse_weights_uniform` in closed form, `pseudo_inverse_weights_enumerated`
by enumeration for small K). Vowpal Wabbit's sum_l w_l - (L - 1) assumes product logging over a
Cartesian slate space and is biased for rankings; it is not offered.

Where rlops differs from OBP: record weights and padded slots (OBP needs complete, equally long
slates; on those the numbers agree, tests/components/test_slate_estimators_obp.py); SIPS reads the
joint from the prefix probabilities' last filled slot (OBP's `pscore`, the same number); intervals
come from the hash-keyed Poisson bootstrap (bootstrap.py), not OBP's percentile bootstrap over
slates.

One definition, two engines: every estimator declares the per-record term groups it reads; a
slate's terms are columns (`slate_columns`), both this module's in-memory engine and the Beam
CombineFn (slate_beam.py) reduce them to `SlateSums` (point sums and per-replicate bootstrap sums
under the same hash-derived multiplicities, so differences between policies are paired), and
`comparison_from_sums` turns sums into estimates. An estimator whose inputs are missing (no prefix
probabilities: no sips, rips, cascade_dr; no reward model: no cascade_dr; no slate reward or PI
weights: no pi) is reported with a NaN value and the reason, not raised.

Trust, per estimator: an interval needs at least `min_records` slates of positive weight, an
effective sample size (sum s w)^2 / sum (s w)^2 of its weights of at least `min_ess` (for
per-slot weights the smallest over slots; cascade_dr reads the prefix weights) and a valid
bootstrap (estimators.trust_reason); otherwise the bounds are NaN and carry the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from rlops.components.common.feedback import first_bad
from rlops.components.evaluator import bootstrap
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.estimators import (
    DEFAULT_MIN_ESS,
    DEFAULT_MIN_RECORDS,
    TrustRule,
    trust_reason,
)

CHUNK = 16384  # slates per block of columns (memory O(B x chunk) whatever n is)


# ---- inputs ------------------------------------------------------------------------------------


def _optional(value: np.ndarray | None, dtype=float) -> np.ndarray | None:
    return None if value is None else np.asarray(value, dtype)


@dataclass(frozen=True)
class SlateLog:
    """n logged slates of up to L slots. Values on padded slots (slot_mask False) are ignored."""

    keys: np.ndarray  # [n] uint64 record keys, or [2, n] content and copy keys (bootstrap.py)
    slates: np.ndarray  # [n, L] item indices in display order
    rewards: np.ndarray  # [n, L] slot rewards
    propensity: np.ndarray  # [n, L] the logger's marginal probability of the item at its position
    slot_mask: np.ndarray | None = None  # [n, L] False on the padding of shorter pages; None: all shown
    propensity_cascade: np.ndarray | None = None  # [n, L] prefix probabilities (non-increasing)
    slate_reward: np.ndarray | None = None  # [n] a slate-level reward (the pseudo-inverse's)
    weights: np.ndarray | None = None  # [n] record weights >= 0; None: all 1

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "keys", np.asarray(self.keys, np.uint64))
        set_(self, "slates", np.asarray(self.slates, np.int64))
        set_(self, "rewards", np.asarray(self.rewards, float))
        set_(self, "propensity", np.asarray(self.propensity, float))
        set_(self, "slot_mask", _optional(self.slot_mask, bool))
        set_(self, "propensity_cascade", _optional(self.propensity_cascade))
        set_(self, "slate_reward", _optional(self.slate_reward))
        set_(self, "weights", _optional(self.weights))
        self._check()

    def _check(self) -> None:
        if self.slates.ndim != 2 or self.slates.shape[0] == 0 or self.slates.shape[1] == 0:
            raise ValueError(f"slates must be [n, L] with n, L >= 1; got shape {self.slates.shape}")
        shape = self.slates.shape
        n = shape[0]
        for name in ("rewards", "propensity", "slot_mask", "propensity_cascade"):
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"{name} has shape {value.shape}; slates {shape}")
        if self.keys.shape not in ((n,), (2, n)):
            raise ValueError(f"keys has shape {self.keys.shape}; expected ({n},) or (2, {n})")
        for name in ("slate_reward", "weights"):
            value = getattr(self, name)
            if value is not None and value.shape != (n,):
                raise ValueError(f"{name} has shape {value.shape}; expected ({n},)")
        mask = self.mask
        first_bad("slot_mask: a slate shows no item", mask.sum(1), ~mask.any(1))
        gap = mask[:, 1:] & ~mask[:, :-1]
        first_bad("slot_mask: padding must come after the shown slots", mask, gap.any(1))
        p = np.where(mask, self.propensity, 1.0)
        first_bad("propensity must be in (0, 1] on shown slots", self.propensity, ~((p > 0) & (p <= 1)).all(1))
        first_bad(
            "rewards must be finite on shown slots", self.rewards, ~np.isfinite(np.where(mask, self.rewards, 0)).all(1)
        )
        first_bad("slates hold negative item indices", self.slates, (np.where(mask, self.slates, 0) < 0).any(1))
        ordered = np.sort(np.where(mask, self.slates, -1 - np.arange(shape[1])), 1)  # padding: distinct, < 0
        first_bad("an item appears twice in a slate", self.slates, (ordered[:, 1:] == ordered[:, :-1]).any(1))
        if self.propensity_cascade is not None:
            c = np.where(mask, self.propensity_cascade, 1.0)
            first_bad("propensity_cascade must be in (0, 1] on shown slots", c, ~((c > 0) & (c <= 1)).all(1))
            rising = np.where(mask[:, 1:], c[:, 1:] > c[:, :-1] * (1 + 1e-9), False)
            first_bad("propensity_cascade must not increase along the slate", c, rising.any(1))
        if self.slate_reward is not None:
            first_bad("slate_reward must be finite", self.slate_reward, ~np.isfinite(self.slate_reward))
        if self.weights is not None:
            w = self.weights
            first_bad("weights must be finite and >= 0", w, ~(np.isfinite(w) & (w >= 0)))

    @property
    def num_slates(self) -> int:
        return int(self.slates.shape[0])

    @property
    def num_slots(self) -> int:
        return int(self.slates.shape[1])

    @property
    def mask(self) -> np.ndarray:
        return np.ones(self.slates.shape, bool) if self.slot_mask is None else self.slot_mask

    @property
    def record_weights(self) -> np.ndarray:
        return np.ones(self.num_slates) if self.weights is None else self.weights

    def rows(self, rows: slice) -> SlateLog:
        def cut(a):
            return None if a is None else a[rows]

        return SlateLog(
            self.keys[..., rows],
            self.slates[rows],
            self.rewards[rows],
            self.propensity[rows],
            cut(self.slot_mask),
            cut(self.propensity_cascade),
            cut(self.slate_reward),
            cut(self.weights),
        )


@dataclass(frozen=True)
class SlateTarget:
    """The target policy on the logged slates (rows as in the SlateLog)."""

    marginal: np.ndarray  # [n, L] pi(logged item at its position | x)
    cascade: np.ndarray | None = None  # [n, L] pi(logged prefix a_1..a_l | x)
    action_dist: np.ndarray | None = None  # [n, L, K] pi(item at slot l | x, logged a_<l) (cascade_dr)
    q_hat: np.ndarray | None = None  # [n, L, K] estimated reward-to-go at slot l per item (cascade_dr)
    pseudo_inverse: np.ndarray | None = None  # [n] w_PI of the logged slate (pseudo_inverse_weights_*)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "marginal", np.asarray(self.marginal, float))
        for name in ("cascade", "action_dist", "q_hat", "pseudo_inverse"):
            set_(self, name, _optional(getattr(self, name)))
        m = self.marginal
        if m.ndim != 2:
            raise ValueError(f"target marginal must be [n, L]; got shape {m.shape}")
        for name in ("marginal", "cascade"):
            v = getattr(self, name)
            if v is None:
                continue
            if v.shape != m.shape:
                raise ValueError(f"target {name} has shape {v.shape}; marginal {m.shape}")
            first_bad(f"target {name} must be in [0, 1]", v, ~((v >= 0) & (v <= 1)).all(1))
        for name in ("action_dist", "q_hat"):
            v = getattr(self, name)
            if v is not None and (v.ndim != 3 or v.shape[:2] != m.shape):
                raise ValueError(f"target {name} has shape {v.shape}; expected ({m.shape[0]}, {m.shape[1]}, K)")
        if self.action_dist is not None and self.q_hat is not None and self.action_dist.shape != self.q_hat.shape:
            raise ValueError(f"target action_dist has shape {self.action_dist.shape}, q_hat {self.q_hat.shape}")
        if self.pseudo_inverse is not None and self.pseudo_inverse.shape != (m.shape[0],):
            raise ValueError(f"target pseudo_inverse has shape {self.pseudo_inverse.shape}; expected ({m.shape[0]},)")

    def rows(self, rows: slice) -> SlateTarget:
        def cut(a):
            return None if a is None else a[rows]

        return SlateTarget(
            self.marginal[rows], cut(self.cascade), cut(self.action_dist), cut(self.q_hat), cut(self.pseudo_inverse)
        )


# ---- the pseudo-inverse's weights ----------------------------------------------------------------


def shown_item_marginals(slates: np.ndarray, target_marginals: np.ndarray) -> np.ndarray:
    """[n, L, L]: [i, l, m] = the target's probability of putting the logged item s_im at position l,
    from its full marginals target_marginals [n, K, L] (pi(item k at position l | x_i))."""
    slates = np.asarray(slates, np.int64)
    n, length = slates.shape
    rows = np.arange(n)[:, None, None]
    positions = np.arange(length)[None, :, None]
    return np.asarray(target_marginals, float)[rows, np.maximum(slates, 0)[:, None, :], positions]


def pseudo_inverse_weights_uniform(
    target_at_shown: np.ndarray, num_items: int, slot_mask: np.ndarray | None = None
) -> np.ndarray:
    """[n] w_PI = q_x^T Gamma^+ 1_s when the logger draws L_i of `num_items` items uniformly without
    replacement (L_i the slate's shown slots). target_at_shown: shown_item_marginals' [n, L, L].
    Closed form: with E = sum_l q(s_l, l) (the target's mass on the logged item at its own position)
    and C = sum_{l != m} q(s_m, l) (on logged items at other positions),
    w = (K-1)/(K-L) ((K-L+1) E + C) - (L-1) K / (K-L). It needs K > L_i."""
    q = np.asarray(target_at_shown, float)
    n, length, _ = q.shape
    mask = np.ones((n, length), bool) if slot_mask is None else np.asarray(slot_mask, bool)
    pair = mask[:, :, None] & mask[:, None, :]
    diagonal = np.eye(length, dtype=bool)[None]
    exact = np.where(pair & diagonal, q, 0.0).sum((1, 2))
    elsewhere = np.where(pair & ~diagonal, q, 0.0).sum((1, 2))
    shown = mask.sum(1).astype(float)
    k = float(num_items)
    if (shown >= k).any():
        raise ValueError(
            f"the uniform closed form needs more items ({num_items}) than shown slots "
            f"({int(shown.max())}); use pseudo_inverse_weights_enumerated"
        )
    return (k - 1) / (k - shown) * ((k - shown + 1) * exact + elsewhere) - (shown - 1) * k / (k - shown)


def slate_indicators(slates: np.ndarray, num_items: int) -> np.ndarray:
    """[S, K * L] the (item, position) indicator vector 1_s of each slate [S, L] (item-major)."""
    slates = np.asarray(slates, np.int64)
    s, length = slates.shape
    out = np.zeros((s, num_items, length))
    out[np.arange(s)[:, None], slates, np.arange(length)[None]] = 1.0
    return out.reshape(s, num_items * length)


def pseudo_inverse_weights_enumerated(
    slates: np.ndarray, target_marginals: np.ndarray, logging_slates: np.ndarray, logging_probs: np.ndarray
) -> np.ndarray:
    """[n] w_PI = q_x^T Gamma_x^+ 1_s for any logger over an enumerated slate space (small K).
    slates [n, L] logged (complete); target_marginals [n, K, L] or [K, L]; logging_slates [S, L]
    the slates the logger can show and logging_probs their probabilities, [S] (one logger for all
    contexts: one pseudo-inverse) or [n, S]."""
    slates = np.asarray(slates, np.int64)
    marginals = np.asarray(target_marginals, float)
    num_items = marginals.shape[-2]
    x = slate_indicators(logging_slates, num_items)
    logged = slate_indicators(slates, num_items)
    q = marginals.reshape(*marginals.shape[:-2], -1)
    probs = np.asarray(logging_probs, float)
    if probs.ndim == 1:
        inverse = np.linalg.pinv((x * probs[:, None]).T @ x, hermitian=True)
        return np.einsum("ij,jk,ik->i", np.broadcast_to(q, logged.shape), inverse, logged)
    out = np.empty(len(slates))
    for i in range(len(slates)):
        inverse = np.linalg.pinv((x * probs[i][:, None]).T @ x, hermitian=True)
        out[i] = (q if q.ndim == 1 else q[i]) @ inverse @ logged[i]
    return out


# ---- per-record terms ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    name: str
    per_slot: bool  # one column per slot
    boot: bool  # summed per bootstrap replicate too (else point sums only)


# The inputs each term group needs (SlateLog / SlateTarget fields), and its terms.
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "sips": ("log.propensity_cascade", "target.cascade"),
    "iips": (),
    "rips": ("log.propensity_cascade", "target.cascade"),
    "cascade_dr": ("log.propensity_cascade", "target.cascade", "target.action_dist", "target.q_hat"),
    "pi": ("log.slate_reward", "target.pseudo_inverse"),
}
_SLOT_WEIGHTED = (Term("wr", True, True), Term("w", True, True), Term("w2", True, False))
GROUP_TERMS: dict[str, tuple[Term, ...]] = {
    "sips": (Term("wr", False, True), Term("wm", False, True), Term("w", False, False), Term("w2", False, False)),
    "iips": _SLOT_WEIGHTED,
    "rips": _SLOT_WEIGHTED,
    "cascade_dr": (Term("dr", False, True),),
    "pi": (Term("wr", False, True), Term("w", False, False), Term("w2", False, False)),
}
# Shared by all policies: total record weight, per-slot and all-slot record weight, slates with s > 0.
SHARED_TERMS = (Term("total", False, True), Term("count", True, True), Term("slots", False, True))
POSITIVE = Term("positive", False, False)


def missing_inputs(log: SlateLog, target: SlateTarget, group: str) -> tuple[str, ...]:
    owners = {"log": log, "target": target}
    return tuple(
        need for need in REQUIREMENTS[group] if getattr(owners[need.split(".")[0]], need.split(".")[1]) is None
    )


def available_groups(log: SlateLog, target: SlateTarget) -> frozenset[str]:
    return frozenset(group for group in REQUIREMENTS if not missing_inputs(log, target, group))


@dataclass(frozen=True)
class SlateLayout:
    """Where each sum lives: bootstrapped columns first (shared, then per policy its groups' boot
    terms), then point-only columns (per policy its groups' other terms, then `positive`)."""

    num_slots: int
    groups: tuple[frozenset[str], ...]  # per policy the term groups its inputs allow

    @cached_property
    def _index(self) -> tuple[dict[tuple[int | None, str, str], slice], int, int]:
        index: dict[tuple[int | None, str, str], slice] = {}
        at = 0

        def place(key, term):
            nonlocal at
            width = self.num_slots if term.per_slot else 1
            index[key] = slice(at, at + width)
            at += width

        for term in SHARED_TERMS:
            place((None, "", term.name), term)
        for boot in (True, False):
            for p, groups in enumerate(self.groups):
                for group in REQUIREMENTS:
                    if group in groups:
                        for term in GROUP_TERMS[group]:
                            if term.boot == boot:
                                place((p, group, term.name), term)
            if boot:
                boot_width = at
        place((None, "", POSITIVE.name), POSITIVE)
        return index, boot_width, at

    @property
    def boot_width(self) -> int:
        return self._index[1]

    @property
    def width(self) -> int:
        return self._index[2]

    def at(self, policy: int | None, group: str, term: str) -> slice:
        return self._index[0][(policy, group, term)]


def make_layout(log: SlateLog, targets: Sequence[SlateTarget]) -> SlateLayout:
    return SlateLayout(log.num_slots, tuple(available_groups(log, t) for t in targets))


def check_position_weights(position_weights: np.ndarray | Sequence[float] | None, num_slots: int) -> np.ndarray:
    if position_weights is None:
        return np.ones(num_slots)
    theta = np.asarray(position_weights, float)
    if theta.shape != (num_slots,) or not np.isfinite(theta).all():
        raise ValueError(f"position_weights must be {num_slots} finite numbers, got {position_weights!r}")
    return theta


def group_terms(group: str, log: SlateLog, target: SlateTarget, theta: np.ndarray) -> dict[str, np.ndarray]:
    """One policy's record-weighted terms of `group` ([n] or [n, L] per term)."""
    mask = log.mask
    s = log.record_weights
    r = np.where(mask, log.rewards, 0.0) * theta
    if group in ("iips", "rips", "cascade_dr"):
        if group == "iips":
            pi, mu = target.marginal, log.propensity
        else:
            assert target.cascade is not None and log.propensity_cascade is not None
            pi, mu = target.cascade, log.propensity_cascade
        w = np.where(mask, pi / np.where(mask, mu, 1.0), 0.0)
        if group != "cascade_dr":
            sw = s[:, None] * w
            return {"wr": sw * r, "w": sw, "w2": sw**2}
        assert target.q_hat is not None and target.action_dist is not None
        previous = np.concatenate([np.ones((len(w), 1)), w[:, :-1]], 1)
        rows, slots = np.arange(len(w))[:, None], np.arange(w.shape[1])[None]
        q_logged = target.q_hat[rows, slots, np.where(mask, log.slates, 0)]
        expected = (target.action_dist * target.q_hat).sum(2)
        per_slot = np.where(mask, w * (r - q_logged) + previous * expected, 0.0)
        return {"dr": s * per_slot.sum(1)}
    if group == "sips":
        assert target.cascade is not None and log.propensity_cascade is not None
        last = mask.sum(1) - 1
        rows = np.arange(len(last))
        sw = s * target.cascade[rows, last] / log.propensity_cascade[rows, last]
        return {"wr": sw * r.sum(1), "wm": sw * mask.sum(1), "w": sw, "w2": sw**2}
    if group == "pi":
        assert target.pseudo_inverse is not None and log.slate_reward is not None
        sw = s * target.pseudo_inverse
        return {"wr": sw * log.slate_reward, "w": sw, "w2": sw**2}
    raise KeyError(group)


def slate_columns(
    log: SlateLog, targets: Sequence[SlateTarget], layout: SlateLayout, position_weights: np.ndarray | None = None
) -> np.ndarray:
    """[n, layout.width] the per-slate columns both engines sum."""
    n = log.num_slates
    theta = check_position_weights(position_weights, log.num_slots)
    if len(targets) != len(layout.groups):
        raise ValueError(f"{len(targets)} target policies; the layout has {len(layout.groups)}")
    out = np.zeros((n, layout.width))
    s = log.record_weights
    mask = log.mask
    out[:, layout.at(None, "", "total")] = s[:, None]
    out[:, layout.at(None, "", "count")] = s[:, None] * mask
    out[:, layout.at(None, "", "slots")] = (s * mask.sum(1))[:, None]
    out[:, layout.at(None, "", "positive")] = (s > 0)[:, None]
    for p, (target, groups) in enumerate(zip(targets, layout.groups)):
        if target.marginal.shape != log.slates.shape:
            raise ValueError(
                f"target policy {p}: marginal has shape {target.marginal.shape}; slates {log.slates.shape}"
            )
        for group in groups:
            missing = missing_inputs(log, target, group)
            if missing:  # the layout was made from inputs this batch lacks
                raise ValueError(f"target policy {p}: {group} needs {', '.join(missing)}, missing from this batch")
            for name, value in group_terms(group, log, target, theta).items():
                out[:, layout.at(p, group, name)] = value if value.ndim == 2 else value[:, None]
    return out


@dataclass
class SlateSums:
    """The reduced data: point sums [width] and bootstrap sums [B, boot_width] of the columns."""

    layout: SlateLayout
    point: np.ndarray
    boot: np.ndarray

    @classmethod
    def of(cls, columns: np.ndarray, keys: np.ndarray, layout: SlateLayout, num_bootstrap: int, seed: int) -> SlateSums:
        boot = bootstrap.bootstrap_sums(columns[:, : layout.boot_width], keys, num_bootstrap, seed)
        return cls(layout, columns.sum(0), boot)

    def merge(self, other: SlateSums) -> SlateSums:
        return SlateSums(self.layout, self.point + other.point, self.boot + other.boot)


# ---- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyView:
    """One policy's sums (scalars for the point, [B] per replicate; per-slot terms [..., L])."""

    sums: np.ndarray
    layout: SlateLayout
    policy: int

    def shared(self, term: str) -> np.ndarray:
        value = self.sums[..., self.layout.at(None, "", term)]
        return value if term == "count" else value[..., 0]

    def __call__(self, group: str, term: str) -> np.ndarray:
        value = self.sums[..., self.layout.at(self.policy, group, term)]
        per_slot = next(t.per_slot for t in GROUP_TERMS[group] if t.name == term)
        return value if per_slot else value[..., 0]


def _per_slot_self_normalized(t: PolicyView, group: str) -> np.ndarray:
    count, total = t.shared("count"), t.shared("total")
    wr, w = t(group, "wr"), t(group, "w")
    return np.where(count > 0, count / total[..., None] * wr / np.where(count > 0, w, 1.0), 0.0).sum(-1)


def _slot_ess(t: PolicyView, group: str) -> float:
    count = t.shared("count")
    w, w2 = t(group, "w"), t(group, "w2")
    slots = [float(w[j] ** 2 / w2[j]) if w2[j] > 0 else 0.0 for j in range(len(count)) if count[j] > 0]
    return min(slots) if slots else 0.0


def _slate_ess(t: PolicyView, group: str) -> float:
    w, w2 = float(t(group, "w")), float(t(group, "w2"))
    return w**2 / w2 if w2 > 0 else 0.0


@dataclass(frozen=True)
class SlateEstimator:
    name: str
    groups: tuple[str, ...]  # the term groups it reads (their inputs are what it needs)
    from_sums: Callable[[PolicyView], np.ndarray]
    ess: Callable[[PolicyView], float]  # ESS of its importance weights, from point sums


TABLE: tuple[SlateEstimator, ...] = (
    SlateEstimator("sips", ("sips",), lambda t: t("sips", "wr") / t.shared("total"), lambda t: _slate_ess(t, "sips")),
    SlateEstimator(
        "snsips",
        ("sips",),
        lambda t: t("sips", "wr") * t.shared("slots") / (t.shared("total") * t("sips", "wm")),
        lambda t: _slate_ess(t, "sips"),
    ),
    SlateEstimator(
        "iips", ("iips",), lambda t: t("iips", "wr").sum(-1) / t.shared("total"), lambda t: _slot_ess(t, "iips")
    ),
    SlateEstimator("sniips", ("iips",), lambda t: _per_slot_self_normalized(t, "iips"), lambda t: _slot_ess(t, "iips")),
    SlateEstimator(
        "rips", ("rips",), lambda t: t("rips", "wr").sum(-1) / t.shared("total"), lambda t: _slot_ess(t, "rips")
    ),
    SlateEstimator("snrips", ("rips",), lambda t: _per_slot_self_normalized(t, "rips"), lambda t: _slot_ess(t, "rips")),
    SlateEstimator(
        "cascade_dr",
        ("cascade_dr", "rips"),
        lambda t: t("cascade_dr", "dr") / t.shared("total"),
        lambda t: _slot_ess(t, "rips"),
    ),
    SlateEstimator("pi", ("pi",), lambda t: t("pi", "wr") / t.shared("total"), lambda t: _slate_ess(t, "pi")),
)
ESTIMATORS = tuple(e.name for e in TABLE)


# ---- from sums to estimates ------------------------------------------------------------------------


@dataclass(frozen=True)
class SlateComparison:
    """Per estimator: the candidate's, the baseline's and the paired difference's (candidate -
    baseline) estimates; the ESS of each policy's weights per estimator; slates of positive weight."""

    candidate: dict[str, Estimate]
    baseline: dict[str, Estimate] | None
    difference: dict[str, Estimate] | None
    ess: dict[str, dict[str, float]]  # policy ("candidate", "baseline") -> estimator -> ESS
    num_records: int

    def as_dict(self) -> dict:
        out: dict = {"num_records": self.num_records, "ess": self.ess}
        for who in ("candidate", "baseline", "difference"):
            part = getattr(self, who)
            if part is not None:
                out[who] = {name: e.as_dict() for name, e in part.items()}
        return out


def skipped_reason(estimator: SlateEstimator, layout: SlateLayout, policy: int) -> str | None:
    """Why `estimator` cannot run for `policy` (the inputs its term groups need), or None."""
    missing = sorted({need for g in estimator.groups if g not in layout.groups[policy] for need in REQUIREMENTS[g]})
    return f"skipped: {estimator.name} needs {', '.join(missing)}" if missing else None


def comparison_from_sums(
    sums: SlateSums, rule: TrustRule, candidate: int = 0, baseline: int | None = None
) -> SlateComparison:
    """Estimates of policy `candidate` (and `baseline` and the difference, paired) from the sums."""
    layout = sums.layout
    who = {"candidate": candidate} | ({"baseline": baseline} if baseline is not None else {})
    num_records = int(round(float(sums.point[layout.at(None, "", "positive")][0])))
    alpha = (1.0 - rule.confidence) / 2.0
    names = (*who, "difference") if baseline is not None else tuple(who)
    results: dict[str, dict[str, Estimate]] = {name: {} for name in names}
    ess: dict[str, dict[str, float]] = {name: {} for name in who}
    for e in TABLE:
        skipped = {name: skipped_reason(e, layout, p) for name, p in who.items()}
        point, boot = {}, {}
        for name, p in who.items():
            if skipped[name] is None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    point[name] = float(e.from_sums(PolicyView(sums.point, layout, p)))
                    boot[name] = np.asarray(e.from_sums(PolicyView(sums.boot, layout, p)))
                ess[name][e.name] = e.ess(PolicyView(sums.point, layout, p))
        if baseline is not None:
            gone = skipped["candidate"] or skipped["baseline"]
            if gone is None:
                point["difference"] = point["candidate"] - point["baseline"]
                boot["difference"] = boot["candidate"] - boot["baseline"]
            skipped["difference"] = gone
        finite = np.all([np.isfinite(b) for b in boot.values()], axis=0) if boot else np.zeros(0, bool)
        reason = trust_reason(
            num_records, {n: ess[n][e.name] for n in who if e.name in ess[n]}, int(finite.sum()), rule
        )
        for name in names:
            if skipped[name] is not None:
                results[name][e.name] = Estimate(math.nan, math.nan, math.nan, skipped[name])
            elif reason is not None:
                results[name][e.name] = Estimate(point[name], math.nan, math.nan, reason)
            else:
                replicates = boot[name][finite]
                lower, upper = np.quantile(replicates, [alpha, 1 - alpha])
                results[name][e.name] = Estimate(point[name], float(lower), float(upper))
    return SlateComparison(
        results["candidate"],
        results["baseline"] if baseline is not None else None,
        results["difference"] if baseline is not None else None,
        ess,
        num_records,
    )


# ---- the in-memory engine --------------------------------------------------------------------------


def slate_sums(
    log: SlateLog,
    targets: Sequence[SlateTarget],
    num_bootstrap: int = 500,
    seed: int = 0,
    position_weights: np.ndarray | Sequence[float] | None = None,
    layout: SlateLayout | None = None,
    chunk: int = CHUNK,
) -> SlateSums:
    """Sums of every policy's columns over `log`, in chunks of slates (memory O(B x chunk))."""
    layout = make_layout(log, targets) if layout is None else layout
    theta = check_position_weights(position_weights, log.num_slots)
    total: SlateSums | None = None
    for start in range(0, log.num_slates, chunk):
        rows = slice(start, start + chunk)
        part_log = log.rows(rows)
        columns = slate_columns(part_log, [t.rows(rows) for t in targets], layout, theta)
        part = SlateSums.of(columns, part_log.keys, layout, num_bootstrap, seed)
        total = part if total is None else total.merge(part)
    assert total is not None  # a SlateLog holds at least one slate
    return total


def compare_slates(
    log: SlateLog,
    candidate: SlateTarget,
    baseline: SlateTarget | None = None,
    num_bootstrap: int = 500,
    confidence: float = 0.95,
    seed: int = 0,
    min_records: int = DEFAULT_MIN_RECORDS,
    min_ess: float = DEFAULT_MIN_ESS,
    position_weights: np.ndarray | Sequence[float] | None = None,
) -> SlateComparison:
    """Every slate estimator for the candidate (and the baseline, and their paired difference),
    with bootstrap intervals where the trust rule allows them."""
    bootstrap.check_bootstrap_args(num_bootstrap, confidence)
    targets = [candidate] + ([baseline] if baseline is not None else [])
    sums = slate_sums(log, targets, num_bootstrap, seed, position_weights)
    rule = TrustRule(num_bootstrap, confidence, min_records, min_ess)
    return comparison_from_sums(sums, rule, 0, 1 if baseline is not None else None)


def estimate_slates(log: SlateLog, target: SlateTarget, **options) -> dict[str, Estimate]:
    """compare_slates for one policy: its estimate per estimator."""
    return compare_slates(log, target, None, **options).candidate
