"""Reward models q(x, a) behind DM and the DR family: ridge, logistic, and the shared [global,
arm] model for per-arm records whose candidate sets vary.

Fitted on a bounded uniform sample of the split -- the `sample_size` records whose key hashes are
smallest (a bottom-k sample: the same records whatever order or engine reads them) -- and
cross-fitted by hash folds: record i's prediction comes from the model fitted on the sample's
records of the other folds, so DM/DR never reuse a record's own reward to predict it. Records
outside the sample are predicted by their fold's model too (they were fitted on by none).
`FoldModels` holds the fitted parameters, so the Beam engine predicts batch by batch on its workers.
By default fitted on rows balanced toward the evaluated policies (balancing_weights) and clipped
to the sample's observed reward range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from rlops.components.common.feedback import LoggedFeedback, first_bad
from rlops.components.evaluator import bootstrap

REWARD_MODELS = ("ridge", "logistic")  # the fitted kinds (links)
# Every name a reward model is chosen by, everywhere (config, CLI, Python API): "auto" is
# logistic when every reward is 0 or 1, else ridge; "bilinear" is auto's link plus, for per-arm
# records whose candidates vary (the shared [global, arm] model), the user x item term
# x^T B f(m) (other records: as auto); "network" is the candidate's own predicted rewards
# (resolved by the Evaluator, which holds the SavedModel); "low_rank" is auto's link on a
# factorization shared across items (LowRank: a user tower x W . each item's embedding).
AUTO, BILINEAR, NETWORK, LOW_RANK = "auto", "bilinear", "network", "low_rank"
REWARD_MODEL_CHOICES = (AUTO,) + REWARD_MODELS + (NETWORK, BILINEAR, LOW_RANK)
BILINEAR_SUFFIX = "_bilinear"  # "bilinear" resolves to "logistic_bilinear" or "ridge_bilinear"
LOW_RANK_SUFFIX = "_low_rank"  # "low_rank" resolves to "logistic_low_rank" or "ridge_low_rank"
_STRUCTURES = {BILINEAR: BILINEAR_SUFFIX, LOW_RANK: LOW_RANK_SUFFIX}
DEFAULT_REWARD_MODEL = AUTO  # logistic for 0/1 rewards: predictions stay click rates (docs/benchmarks.md)
DEFAULT_BALANCE = True  # fit the reward model on rows weighted toward the evaluated policies (balancing_weights)
DEFAULT_DM_REFITS = 30  # reward-model refits behind DM's interval (see refit_dm_replicates)
DEFAULT_DM_REFIT_RECORDS = 20_000
DEFAULT_SAMPLE = 200_000  # records the reward model is fitted on (evaluator.reward_model_sample)
DEFAULT_FOLDS = 2
# reward_model "bilinear": the ridge weight on B in x^T B f(m); DM is insensitive to it between 1
# and 3 on per-arm click logs, so 1 keeps the interaction term's shrinkage light.
DEFAULT_BILINEAR_L2 = 1.0
# reward_model "low_rank": its rank and L2 weight (on the summed loss), the settings of a low-rank
# click model that fits the simulated per-arm click worlds (rlops.envs.logged_feedback, latent dim 4).
DEFAULT_LOW_RANK, DEFAULT_LOW_RANK_L2 = 4, 10.0
_FOLD_SALT, _SAMPLE_SALT = 0x5F01D, 0x5A3B1E  # distinct hashes for fold and sample membership

RewardModelFn = Callable[[np.ndarray], np.ndarray]  # contexts [N, D] -> q [N, K]


def resolve_reward_model(kind: str, rewards: np.ndarray) -> str:
    """A fitted kind from any name in REWARD_MODEL_CHOICES but "network" ("auto": logistic for
    0/1 rewards, else ridge; "bilinear" / "low_rank": that link + "_bilinear" / "_low_rank"); a
    fitted kind resolves to itself; an unknown name is an error listing every choice."""
    if kind == AUTO:
        return "logistic" if np.isin(rewards, (0.0, 1.0)).all() else "ridge"
    if kind in _STRUCTURES:
        return resolve_reward_model(AUTO, rewards) + _STRUCTURES[kind]
    if any(kind.endswith(suffix) and kind[: -len(suffix)] in REWARD_MODELS for suffix in _STRUCTURES.values()):
        return kind
    if kind == NETWORK:
        raise ValueError(
            "reward_model: 'network' is the candidate SavedModel's own predicted rewards; pass them "
            "as a callable (the Evaluator does), or choose auto, ridge or logistic"
        )
    if kind not in REWARD_MODELS:
        raise ValueError(
            f"reward_model: unknown kind '{kind}'; choose one of {', '.join(REWARD_MODEL_CHOICES)} "
            "(or pass a callable giving q(x, a) for all a)"
        )
    return kind


def clip_to_observed(q: np.ndarray, rewards: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
    """Predictions clipped to [min, max] of the observed rewards (a ridge fit can predict a
    negative click rate; no reward outside the observed range is evidence-backed). Padding
    slots (`slots` False) stay 0."""
    clipped = np.clip(q, float(np.min(rewards)), float(np.max(rewards)))
    return clipped if slots is None else np.where(slots, clipped, 0.0)


# ---- sample and folds by hash -------------------------------------------------------------------------


def hash_folds(keys: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """[n] fold of each record, from its key: the same in every engine and order."""
    if folds <= 1:
        return np.zeros(len(keys), int)
    return (bootstrap.hash_value(keys, _FOLD_SALT + 7 * seed) % np.uint64(folds)).astype(int)


def sample_hashes(keys: np.ndarray, seed: int) -> np.ndarray:
    return bootstrap.hash_value(keys, _SAMPLE_SALT + 7 * seed)


def bottom_k(keys: np.ndarray, size: int | None, seed: int) -> np.ndarray:
    """Row indices of the (at most) `size` records with the smallest sample hashes, in hash order
    (a uniform sample without replacement; every engine picks the same records)."""
    h = sample_hashes(keys, seed)
    order = np.argsort(h, kind="stable")
    return order if size is None else order[:size]


# ---- fixed candidate sets: one model per action ---------------------------------------------------


def _fit_ridge(x, actions, rewards, s, k, l2) -> np.ndarray:
    d = x.shape[1]
    x1 = np.concatenate([x, np.ones((len(x), 1))], 1)
    theta = np.zeros((k, d + 1))
    for a in range(k):
        rows = actions == a
        xa, ra, sa = x1[rows], rewards[rows], s[rows]
        theta[a] = np.linalg.solve((xa * sa[:, None]).T @ xa + l2 * np.eye(d + 1), (xa * sa[:, None]).T @ ra)
    return theta


def _predict_ridge(theta, x) -> np.ndarray:
    return np.concatenate([x, np.ones((len(x), 1))], 1) @ theta.T


def _newton_logistic(features, r, sw, penalty, offset, theta, iterations: int = 30, tol: float = 1e-7) -> np.ndarray:
    """Newton's method with backtracking on sum sw * logloss(r, sigmoid(offset + features @ theta))
    + penalty . theta^2 / 2 (plain Newton can overshoot into separation on sparse one-hot rows)."""

    def loss(t):
        z = offset + features @ t
        return float(sw @ (np.logaddexp(0, z) - r * z)) + 0.5 * float(penalty @ (t * t))

    current = loss(theta)
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-np.clip(offset + features @ theta, -30, 30)))
        grad = features.T @ (sw * (p - r)) + penalty * theta
        hess = (features * (sw * p * (1 - p))[:, None]).T @ features + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-4:
            candidate = theta - scale * step
            value = loss(candidate)
            if value <= current:
                break
            scale /= 2
        else:
            break  # no descent along the Newton direction: converged as far as floats go
        theta, current = candidate, value
        if np.abs(scale * step).max() < tol:
            break
    return theta


def _prior_logit(r: np.ndarray, sw: np.ndarray) -> float:
    """The intercept a logistic fit starts from: the logit of the weighted click rate."""
    prior = min(max(float(r @ sw) / max(float(sw.sum()), 1e-12), 1e-6), 1 - 1e-6)
    return math.log(prior / (1 - prior))


def _fit_logistic(xa, act, r, sw, k, l2, interaction_l2: float = 10.0):
    """Two stages. (1) logit = b + theta_a + x . beta over all rows (b unpenalized, so a rare
    click rate is no problem; shared beta, so it fits when clicks are rare). (2) per action, an
    interaction x . gamma_a on top of (1), shrunk towards 0 by `interaction_l2`: it only moves
    where an action's own rows carry enough signal."""
    n, d = xa.shape
    features = np.concatenate([np.ones((n, 1)), np.eye(k)[act], xa], 1)  # [n, 1 + K + D]
    penalty = np.full(1 + k + d, l2)
    penalty[0] = 1e-6
    theta = np.zeros(1 + k + d)
    theta[0] = _prior_logit(r, sw)
    theta = _newton_logistic(features, r, sw, penalty, np.zeros(n), theta)
    base_train = features @ theta
    gamma = np.zeros((k, d + 1))
    for a in range(k):
        rows = act == a
        if min(r[rows].sum(), (1 - r[rows]).sum()) < 5:  # too few clicks (or non-clicks) to move: skip
            continue
        x_rows = np.concatenate([np.ones((int(rows.sum()), 1)), xa[rows]], 1)  # own intercept and slopes
        gamma[a] = _newton_logistic(
            x_rows,
            r[rows],
            sw[rows],
            np.full(d + 1, interaction_l2),
            base_train[rows],
            np.zeros(d + 1),
            iterations=10,
            tol=1e-4,
        )
    return theta, gamma


def _predict_logistic(params, x) -> np.ndarray:
    theta, gamma = params
    k = len(gamma)
    logits = (
        theta[0] + theta[1 : 1 + k][None, :] + (x @ theta[1 + k :])[:, None] + gamma[:, 0][None, :] + x @ gamma[:, 1:].T
    )
    return 1 / (1 + np.exp(-np.clip(logits, -30, 30)))


# ---- per-arm records whose candidate sets vary: one model shared across arms ---------------------


def _arm_design(x: np.ndarray, item: np.ndarray, f: np.ndarray) -> np.ndarray:
    m = len(f)
    return np.concatenate([np.ones((len(x), 1)), np.eye(m)[item], x, f[item]], 1)  # [n, 1 + M + D + Da]


class _Bilinear:
    """The design's x (x) f(m) block as an operator: row i's D x Da columns are the outer product of
    its global x_i and its item's arm features f(m_i), so the block's coefficients are a matrix B
    and its logit term is x_i^T B f(m_i). Never materialized ([n, D * Da] is 10k x 5k doubles for a
    34-item catalog with an item-id feature): rows are grouped by item, so products with it cost
    O(n D + M D Da) and the first stage solves it by Newton with conjugate-gradient steps."""

    def __init__(self, x: np.ndarray, item: np.ndarray, f: np.ndarray):
        self.x, self.item, self.f = x, item, f
        self.shape = (x.shape[1], f.shape[1])
        self.order = np.argsort(item, kind="stable")
        self.items, self.starts = np.unique(item[self.order], return_index=True)
        self.sorted_x = x[self.order]  # rows grouped by item, once

    def item_sums(self, w: np.ndarray, power: int = 1) -> np.ndarray:
        """[M, D] per item the sum of w_i x_i**power over its rows (0 for items with none)."""
        rows = w[self.order][:, None] * (self.sorted_x if power == 1 else self.sorted_x**power)
        out = np.zeros((len(self.f), self.shape[0]))
        if len(self.items):
            out[self.items] = np.add.reduceat(rows, self.starts, axis=0)
        return out

    def matvec(self, b: np.ndarray) -> np.ndarray:  # [D * Da] -> [n]
        per_item = self.f @ b.reshape(self.shape).T  # [M, D]: row m is B f(m)
        return np.einsum("nd,nd->n", self.x, per_item[self.item])

    def rmatvec(self, w: np.ndarray) -> np.ndarray:  # [n] -> [D * Da]
        return (self.item_sums(w).T @ self.f).reshape(-1)

    def diag(self, h: np.ndarray) -> np.ndarray:  # the Gram matrix's diagonal, weights h [n]
        return (self.item_sums(h, 2).T @ self.f**2).reshape(-1)


def _newton_cg(
    dense: np.ndarray,
    block: _Bilinear,
    r: np.ndarray,
    sw: np.ndarray,
    penalty: np.ndarray,
    params: np.ndarray,
    kind: str,
    iterations: int = 50,
    tol: float = 1e-6,
    cg_iterations: int = 200,
) -> np.ndarray:
    """Minimizes sum sw * loss(r, z) + penalty . params^2 / 2 over params = [dense coefficients,
    vec(B)], z = dense @ params[:P] + block(params[P:]); loss: log loss of sigmoid(z) (logistic)
    or squared error / 2 (ridge). Newton steps solved by Jacobi-preconditioned conjugate
    gradients on Hessian-vector products (the Hessian is [P + D Da]^2), with backtracking as
    _newton_logistic has."""
    p0 = dense.shape[1]

    def logits(t):
        return dense @ t[:p0] + block.matvec(t[p0:])

    def loss(t):
        z = logits(t)
        data = np.logaddexp(0, z) - r * z if kind == "logistic" else 0.5 * (z - r) ** 2
        return float(sw @ data) + 0.5 * float(penalty @ (t * t))

    current, first = loss(params), None
    for _ in range(iterations):
        z = logits(params)
        if kind == "logistic":
            mu = 1 / (1 + np.exp(-np.clip(z, -30, 30)))
            h = sw * mu * (1 - mu)
        else:
            mu, h = z, sw
        resid = sw * (mu - r)
        grad = np.concatenate([dense.T @ resid, block.rmatvec(resid)]) + penalty * params
        norm = float(np.linalg.norm(grad))
        first = norm if first is None else first
        if norm <= tol * max(first, 1.0):
            break

        def hess(v, h=h):
            hv = h * (dense @ v[:p0] + block.matvec(v[p0:]))
            return np.concatenate([dense.T @ hv, block.rmatvec(hv)]) + penalty * v

        precond = 1 / (np.concatenate([(dense**2).T @ h, block.diag(h)]) + penalty)
        # Inexact Newton: CG to a relative residual that tightens as the gradient falls
        # (superlinear convergence without solving early steps exactly).
        step = _conjugate_gradient(hess, grad, precond, cg_iterations, min(0.1, math.sqrt(norm / first)))
        scale = 1.0
        while scale > 1e-4:
            candidate = params - scale * step
            value = loss(candidate)
            if value <= current:
                break
            scale /= 2
        else:
            break  # no descent along the Newton direction: converged as far as floats go
        params, current = candidate, value
    return params


def _conjugate_gradient(hess, g: np.ndarray, precond: np.ndarray, iterations: int, rtol: float) -> np.ndarray:
    """Solves hess(s) = g (hess symmetric positive definite) by preconditioned CG, to a residual
    of rtol * |g|."""
    s = np.zeros_like(g)
    res = g.copy()
    y = precond * res
    d = y.copy()
    ry = float(res @ y)
    stop = rtol * float(np.linalg.norm(g))
    for _ in range(iterations):
        hd = hess(d)
        alpha = ry / float(d @ hd)
        s += alpha * d
        res -= alpha * hd
        if float(np.linalg.norm(res)) <= stop:
            break
        y = precond * res
        ry, ry_old = float(res @ y), ry
        d = y + (ry / ry_old) * d
    return s


def _fit_arm_model(x, item, r, sw, f, kind, l2, interaction_l2, bilinear_l2: float | None = None):
    """First stage: link = b + theta_m + x . beta + f(m) . eta (+ x^T B f(m) when `bilinear_l2` is
    not None: B [D, Da] ridge-penalized by it), jointly over all rows; second stage: per item an
    interaction (1, x) . gamma_m on top, shrunk by `interaction_l2`. Returns (theta, gamma, B or None)."""
    m, d = len(f), x.shape[1]
    features = _arm_design(x, item, f)
    penalty = np.full(features.shape[1], l2)
    penalty[0] = 1e-6
    # Item effects shrunk harder than the shared feature slopes: what the arm features explain
    # goes to eta (and so carries over to items rarely or never logged), the rest to theta_m.
    penalty[1 : 1 + m] = interaction_l2
    gamma = np.zeros((m, d + 1))
    bilinear = None
    if bilinear_l2 is not None:
        # x^T B f(m): the user x item interaction shared across items through their features (an
        # item with few clicks still gets its users' tastes for its category, price, ...).
        block = _Bilinear(x, item, f)
        full_penalty = np.concatenate([penalty, np.full(d * f.shape[1], bilinear_l2)])
        start = np.zeros(len(full_penalty))
        if kind == "logistic":
            start[0] = _prior_logit(r, sw)
        solved = _newton_cg(features, block, r, sw, full_penalty, start, kind)
        theta, bilinear = solved[: features.shape[1]], solved[features.shape[1] :].reshape(block.shape)
        base = features @ theta + block.matvec(solved[features.shape[1] :])
    elif kind == "ridge":
        weighted = features * sw[:, None]
        theta = np.linalg.solve(weighted.T @ features + np.diag(penalty), weighted.T @ r)
        base = features @ theta
    else:
        theta = np.zeros(features.shape[1])
        theta[0] = _prior_logit(r, sw)
        theta = _newton_logistic(features, r, sw, penalty, np.zeros(len(r)), theta)
        base = features @ theta
    if kind == "ridge":
        res = r - base
        for a in np.unique(item):
            rows = item == a
            xa = np.concatenate([np.ones((int(rows.sum()), 1)), x[rows]], 1)
            gamma[a] = np.linalg.solve(
                (xa * sw[rows, None]).T @ xa + interaction_l2 * np.eye(d + 1), (xa * sw[rows, None]).T @ res[rows]
            )
        return theta, gamma, bilinear
    for a in np.unique(item):
        rows = item == a
        if min(r[rows].sum(), (1 - r[rows]).sum()) < 5:  # too few clicks (or non-clicks) to move: skip
            continue
        xa = np.concatenate([np.ones((int(rows.sum()), 1)), x[rows]], 1)
        gamma[a] = _newton_logistic(
            xa, r[rows], sw[rows], np.full(d + 1, interaction_l2), base[rows], np.zeros(d + 1), iterations=10, tol=1e-4
        )
    return theta, gamma, bilinear


def _predict_arm_model(theta, gamma, x, items, f, kind, bilinear: np.ndarray | None = None) -> np.ndarray:
    m, d = len(f), x.shape[1]
    per_item = theta[1 : 1 + m] + f @ theta[1 + m + d :] + gamma[:, 0]  # [M]
    # Per item, the slopes on x: its own gamma_m plus B f(m) (the shared bilinear interaction).
    slopes = gamma[:, 1:] if bilinear is None else gamma[:, 1:] + f @ bilinear.T  # [M, D]
    row = theta[0] + x @ theta[1 + m : 1 + m + d]  # [n]
    pad = items < 0
    it = np.maximum(items, 0)
    out = np.empty(items.shape)
    for k in range(items.shape[1]):  # slot by slot: memory O(n x D), whatever M is
        out[:, k] = row + per_item[it[:, k]] + np.einsum("nd,nd->n", x, slopes[it[:, k]])
    if kind == "logistic":
        out = 1 / (1 + np.exp(-np.clip(out, -30, 30)))
    return np.where(pad, 0.0, out)


def balancing_weights(propensities: np.ndarray, target: np.ndarray | None = None, cap: float = 50.0) -> np.ndarray:
    """target / propensity, scaled to mean 1 and capped: rows reweighted as if the evaluated
    policies had logged them (`target`: their mean probability of each logged action, see
    evaluated_probability; None: 1 / propensity, as if every action had been logged equally
    often). A logging policy that rarely shows an action otherwise lets the reward model fill that
    action in from the popular ones (selection bias, which DM inherits in full). Weighting toward
    the evaluated policies, not toward uniform, matters when they stay close to the logger (a
    nightly candidate against the policy that served): a model that cannot fit every (user, item)
    then fits where DM will read it, not the uniformly explored rows."""
    p = np.asarray(propensities, float)
    w = np.broadcast_to((1.0 if target is None else np.asarray(target, float)) / p, p.shape)
    if not (w > 0).any():  # the policies take none of the logged actions: nothing to point at
        w = 1.0 / p
    return np.minimum(w / np.mean(w), cap)


def evaluated_probability(policies: list, actions: np.ndarray) -> np.ndarray | None:
    """[N] the mean, over the evaluated policies given as probabilities [N, K] (LOGGING_POLICY and
    other names skipped: the logger needs no reward model), of each record's logged action's
    probability; None when there is no such policy (the reward model is then balanced toward
    uniform)."""
    arrays = [np.asarray(p, float) for p in policies if not isinstance(p, str)]
    if not arrays:
        return None
    rows = np.arange(len(actions))
    return np.mean([p[rows, actions] for p in arrays], axis=0)


# ---- low rank: one factorization shared across items -------------------------------------------


@dataclass
class LowRank:
    """A rank-r factorization reward model, the two-tower shape of a recommender:

        link(q) = c + x.w + b_m + (x W) . v_m,   b_m = f_m.beta + e_m,   v_m = f_m M + E_m

    x the record's global features, f_m item m's arm features (none: b_m = e_m, v_m = E_m), e_m,
    E_m the item's own bias and embedding. Every item shares the user tower x W, so an item shown
    rarely still gets its users' tastes from the items like it; a per-item model shrinks such an
    item to its mean and so values any personalized policy low where the logger rarely went."""

    link: str  # "logistic" or "ridge"
    c: float
    w: np.ndarray  # [D]
    bias: np.ndarray  # [M] b_m
    user: np.ndarray  # [D, r] W
    item: np.ndarray  # [M, r] v_m

    def predict(self, x: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        """[N, K] predictions for slot k = item items[:, k] (padding -1: 0), or [N, M] for every
        item when `items` is None."""
        row = self.c + x @ self.w  # [N]
        u = x @ self.user  # [N, r]
        if items is None:
            z = row[:, None] + self.bias[None, :] + u @ self.item.T
        else:
            it = np.maximum(items, 0)
            z = row[:, None] + self.bias[it] + np.einsum("nr,nkr->nk", u, self.item[it])
        q = 1 / (1 + np.exp(-np.clip(z, -30, 30))) if self.link == "logistic" else z
        return q if items is None else np.where(items < 0, 0.0, q)


def fit_low_rank(
    x: np.ndarray,
    item: np.ndarray,
    r: np.ndarray,
    sw: np.ndarray,
    num_items: int,
    link: str,
    item_features: np.ndarray | None = None,
    rank: int = DEFAULT_LOW_RANK,
    l2: float = DEFAULT_LOW_RANK_L2,
    item_ids: bool = True,
    max_iterations: int = 2000,
) -> LowRank:
    """Fits LowRank by L-BFGS on sum sw * loss(r, z) + l2 / 2 * every weight's square but c
    (loss: log loss for link "logistic", squared error / 2 for "ridge"). Rows with the same
    (x, item) are merged first (their weights and weighted rewards summed): logs repeat contexts.
    `item_ids` False keeps e and E at 0 (items known by their features only). Deterministic: a
    fixed random start (zero is a saddle point of the bilinear term)."""
    from scipy.optimize import minimize

    keys, inverse = np.unique(np.column_stack([x, item]), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    weight, weighted_r = np.bincount(inverse, sw), np.bincount(inverse, sw * r)
    x, item = keys[:, :-1], keys[:, -1].astype(np.int64)
    f = np.zeros((num_items, 0)) if item_features is None else np.asarray(item_features, float)
    dx, df = x.shape[1], f.shape[1]
    shapes = {"c": (1,), "w": (dx,), "beta": (df,), "e": (num_items,), "W": (dx, rank), "M": (df, rank)}
    shapes["E"] = (num_items, rank)
    sizes = {name: int(np.prod(shape)) for name, shape in shapes.items()}
    starts = dict(zip(shapes, np.cumsum([0] + list(sizes.values()))[:-1]))

    def unpack(theta: np.ndarray) -> dict[str, np.ndarray]:
        return {name: theta[starts[name] : starts[name] + sizes[name]].reshape(shapes[name]) for name in shapes}

    def loss_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        p = unpack(theta)
        v = f @ p["M"] + p["E"]
        u = x @ p["W"]
        z = p["c"][0] + x @ p["w"] + f[item] @ p["beta"] + p["e"][item] + (u * v[item]).sum(1)
        if link == "logistic":
            data = float(weight @ np.logaddexp(0.0, z) - weighted_r @ z)
            g = weight / (1.0 + np.exp(-z)) - weighted_r  # d loss / d z
        else:
            data = float(0.5 * weight @ (z * z) - weighted_r @ z)
            g = weight * z - weighted_r
        g_bias = np.bincount(item, g, minlength=num_items)
        g_v = np.stack([np.bincount(item, g * u[:, j], minlength=num_items) for j in range(rank)], 1)
        grads = {
            "c": np.array([g.sum()]),
            "w": x.T @ g,
            "beta": f.T @ g_bias,
            "e": g_bias,
            "W": x.T @ (g[:, None] * v[item]),
            "M": f.T @ g_v,
            "E": g_v,
        }
        grad = np.concatenate([grads[name].ravel() for name in shapes]) + l2 * theta
        grad[0] -= l2 * theta[0]  # the intercept is not penalized
        return data + 0.5 * l2 * float(theta[1:] @ theta[1:]), grad * free

    theta = np.random.default_rng(0).normal(scale=0.1, size=sum(sizes.values()))
    free = np.ones_like(theta)
    if not item_ids:
        for name in ("e", "E"):
            free[starts[name] : starts[name] + sizes[name]] = 0.0
    theta *= free
    mean = float(weighted_r.sum() / max(weight.sum(), 1e-12))
    theta[0] = math.log(max(mean, 1e-3) / max(1.0 - mean, 1e-3)) if link == "logistic" else mean
    fit = minimize(loss_and_grad, theta, jac=True, method="L-BFGS-B", options={"maxiter": max_iterations})
    p = unpack(fit.x)
    return LowRank(link, float(p["c"][0]), p["w"], f @ p["beta"] + p["e"], p["W"], f @ p["M"] + p["E"])


# ---- the cross-fitted model -------------------------------------------------------------------------


@dataclass
class FoldModels:
    """A reward model fitted per hash fold on a sample: predict(contexts, keys[, items]) gives each
    record the prediction of the model fitted without its fold."""

    kind: str
    num_actions: int
    folds: int
    seed: int
    params: list
    reward_range: tuple[float, float] | None  # clip predictions to it (None: no clipping)
    item_features: np.ndarray | None = None  # per-arm: [M, Da] of the sample's items

    def predict(self, contexts: np.ndarray, keys: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        x = np.asarray(contexts, float).reshape(len(keys), -1)
        fold = hash_folds(keys, self.folds, self.seed)
        shape = (len(keys), self.num_actions) if items is None else items.shape
        q = np.zeros(shape)
        for f, params in enumerate(self.params):
            rows = fold == f
            if not rows.any():
                continue
            if isinstance(params, LowRank):
                slots = items[rows] if items is not None and self.item_features is not None else None
                q[rows] = params.predict(x[rows], slots)
            elif self.item_features is not None and items is not None:
                theta, gamma, bilinear = params
                q[rows] = _predict_arm_model(
                    theta, gamma, x[rows], items[rows], self.item_features, self.kind, bilinear
                )
            elif self.kind == "ridge":
                q[rows] = _predict_ridge(params, x[rows])
            else:
                q[rows] = _predict_logistic(params, x[rows])
        if self.reward_range is not None:
            clipped = np.clip(q, *self.reward_range)
            q = clipped if items is None else np.where(items >= 0, clipped, 0.0)
        return q


def fit_fold_models(
    data: LoggedFeedback,
    num_actions: int,
    kind: str,
    seed: int = 0,
    balance: bool = DEFAULT_BALANCE,
    clip: bool = True,
    folds: int = DEFAULT_FOLDS,
    l2: float = 1.0,
    interaction_l2: float = 10.0,
    bilinear_l2: float = DEFAULT_BILINEAR_L2,
    target: np.ndarray | None = None,
) -> FoldModels:
    """Fit `kind` on every record of `data` (the sample), once per hash fold leaving that fold out
    (a "_bilinear" kind: per-arm records whose candidates vary also get x^T B f(m), B
    ridge-penalized by `bilinear_l2`; see _fit_arm_model. A "_low_rank" kind: LowRank over the
    per-arm catalog's items and their features, or over the actions; `l2` is not its weight).
    `target` [N]: the evaluated policies' probability of each logged action, what `balance`
    weights toward (balancing_weights)."""
    kind = resolve_reward_model(kind, data.rewards)
    bilinear = bilinear_l2 if kind.endswith(BILINEAR_SUFFIX) else None
    low_rank = kind.endswith(LOW_RANK_SUFFIX)
    kind = kind.removesuffix(BILINEAR_SUFFIX).removesuffix(LOW_RANK_SUFFIX)  # the link
    if kind == "logistic" and not np.isin(data.rewards, (0.0, 1.0)).all():
        first_bad("reward_model 'logistic' needs rewards in {0, 1}", data.rewards, ~np.isin(data.rewards, (0.0, 1.0)))
    n = len(data.actions)
    x = np.asarray(data.contexts, float).reshape(n, -1)
    s = data.record_weights * balancing_weights(data.propensities, target) if balance else data.record_weights
    r = np.asarray(data.rewards, float)
    fold = hash_folds(data.record_keys, folds, seed)
    params: list = []
    for f in range(max(folds, 1)):
        train = fold != f if folds > 1 else np.ones(n, bool)
        if low_rank:  # items: the per-arm catalog's (with their features), else the actions
            logged = data.actions if data.items is None else data.items[np.arange(n), data.actions]
            catalog = num_actions if data.item_features is None else len(data.item_features)
            params.append(fit_low_rank(x[train], logged[train], r[train], s[train], catalog, kind, data.item_features))
        elif data.items is not None:
            logged = data.items[np.arange(n), data.actions]
            params.append(
                _fit_arm_model(
                    x[train],
                    logged[train],
                    r[train],
                    s[train],
                    data.item_features,
                    kind,
                    l2,
                    interaction_l2,
                    bilinear,
                )
            )
        elif kind == "ridge":
            params.append(_fit_ridge(x[train], data.actions[train], r[train], s[train], num_actions, l2))
        else:
            params.append(
                _fit_logistic(x[train], data.actions[train], r[train], s[train], num_actions, l2, interaction_l2)
            )
    if data.items is not None and data.items.shape[1] != num_actions:
        raise ValueError(f"items have {data.items.shape[1]} candidate slots; expected {num_actions}")
    return FoldModels(
        kind,
        num_actions,
        folds,
        seed,
        params,
        (float(r.min()), float(r.max())) if clip else None,
        None if data.items is None else np.asarray(data.item_features, float),
    )


def fit_reward_model(
    contexts: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    num_actions: int,
    kind: str = "ridge",
    weights: np.ndarray | None = None,
    l2: float = 1.0,
    folds: int = 2,
    seed: int = 0,
    keys: np.ndarray | None = None,
) -> np.ndarray:
    """Cross-fitted reward model q(x, a) -> [N, K] predictions (unclipped, unbalanced: `weights`
    weight the fit). ridge: one ridge regression per action. logistic (rewards in {0, 1}): an
    L2-regularized logistic regression with an item effect plus a shared context effect, then
    per-action context interactions shrunk towards it (see _fit_logistic)."""
    data = LoggedFeedback(
        np.asarray(contexts, float).reshape(len(actions), -1),
        np.asarray(actions),
        np.asarray(rewards, float),
        np.ones(len(actions)),
        weights=weights,
        keys=keys,
    )
    model = fit_fold_models(data, num_actions, kind, seed, balance=False, clip=False, folds=folds, l2=l2)
    return model.predict(data.contexts, data.record_keys)


def fit_arm_reward_model(
    contexts: np.ndarray,
    items: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    item_features: np.ndarray,
    kind: str = "ridge",
    weights: np.ndarray | None = None,
    l2: float = 1.0,
    folds: int = 2,
    seed: int = 0,
    interaction_l2: float = 10.0,
    keys: np.ndarray | None = None,
    bilinear_l2: float = DEFAULT_BILINEAR_L2,
) -> np.ndarray:
    """Cross-fitted q(x, arm) -> [N, K] for candidate sets that vary (0 on padding slots).

    One model shared across arms, on [global x, the arm's features f(m), an item effect]:
        link(q) = b + theta_m + x . beta + f(m) . eta + x^T B f(m)  +  (1, x) . gamma_m
    fitted in two stages as the fixed-candidate models are (see _fit_arm_model): the first stage
    (all but gamma_m) jointly. The B term only for a "_bilinear" kind (or "bilinear"), ridge-
    penalized by `bilinear_l2`. An item never
    logged in the training folds gets theta_m = gamma_m = 0: its prediction comes from its
    features, through eta and B. Items are identities, not slots, so slot k of two records may be
    two items."""
    n = len(actions)
    data = LoggedFeedback(
        np.asarray(contexts, float).reshape(n, -1),
        np.asarray(actions),
        np.asarray(rewards, float),
        np.ones(n),
        weights=weights,
        items=items,
        item_features=np.asarray(item_features, float),
        keys=keys,
    )
    model = fit_fold_models(
        data,
        items.shape[1],
        kind,
        seed,
        balance=False,
        clip=False,
        folds=folds,
        l2=l2,
        interaction_l2=interaction_l2,
        bilinear_l2=bilinear_l2,
    )
    return model.predict(data.contexts, data.record_keys, items)


def subset(data: LoggedFeedback, rows: np.ndarray, weights: np.ndarray | None = None) -> LoggedFeedback:
    """The records `rows` of `data` (record weights replaced by `weights` when given)."""

    def take(value):
        return None if value is None else np.asarray(value)[rows]

    return LoggedFeedback(
        data.contexts[rows],
        data.actions[rows],
        data.rewards[rows],
        data.propensities[rows],
        weights=take(data.weights) if weights is None else weights,
        action_mask=take(data.action_mask),
        features=None if data.features is None else {k: np.asarray(v)[rows] for k, v in data.features.items()},
        items=take(data.items),
        item_features=data.item_features,
        keys=data.record_keys[rows],
        copy_keys=take(data.copy_keys),
    )


def reward_sample(data: LoggedFeedback, sample_size: int | None, seed: int = 0) -> np.ndarray:
    """Rows of the reward model's sample (all rows, in hash order, when there are no more)."""
    return bottom_k(data.record_keys, sample_size, seed)


def reward_predictions(
    model: str | RewardModelFn,
    data: LoggedFeedback,
    num_actions: int,
    seed: int = 0,
    balance: bool = DEFAULT_BALANCE,
    clip: bool = True,
    sample_size: int | None = None,
    target: np.ndarray | None = None,
) -> np.ndarray:
    """q [N, K] from a reward model name (fitted on the bottom-k hash sample of at most
    `sample_size` records -- None: all -- cross-fitted by hash folds; record weights times
    balancing weights when `balance`, toward `target`, the evaluated policies' probability of each
    logged action [N], when given) or a callable (e.g. the trained network), clipped to the
    observed reward range (`clip`)."""
    if callable(model):
        q = np.asarray(model(data.contexts), float)
        if q.shape != (len(data.actions), num_actions):
            raise ValueError(f"reward model returned shape {q.shape}; expected ({len(data.actions)}, {num_actions})")
        slots = None if data.items is None else data.items >= 0
        return clip_to_observed(q, data.rewards, slots) if clip else q
    if data.items is not None and data.items.shape[1] != num_actions:
        raise ValueError(f"items have {data.items.shape[1]} candidate slots; expected {num_actions}")
    # The sample in hash order (all records when there are no more): every engine fits on the
    # same rows in the same order, so their floats agree.
    rows = reward_sample(data, sample_size, seed)
    fitted = fit_fold_models(
        subset(data, rows),
        num_actions,
        resolve_reward_model(model, data.rewards),
        seed,
        balance,
        clip,
        target=None if target is None else np.asarray(target)[rows],
    )
    return fitted.predict(data.contexts, data.record_keys, data.items)


def refit_dm_replicates(
    data: LoggedFeedback,
    policies: list[np.ndarray | str],
    model: str,
    num_actions: int,
    replicates: int = DEFAULT_DM_REFITS,
    max_records: int = DEFAULT_DM_REFIT_RECORDS,
    seed: int = 0,
    balance: bool = DEFAULT_BALANCE,
    clip: bool = True,
    population: int | None = None,
) -> tuple[np.ndarray, float]:
    """DM's sampling spread with the reward model's own error in it: `replicates` Poisson(1)
    bootstrap resamples, the reward model refitted on each, DM of every policy recomputed.
    Affordable at any size: the resamples are drawn from the (at most) `max_records` records of
    `data` with the smallest sample hashes (an m-out-of-n bootstrap); the returned scale
    sqrt(m / population) shrinks their spread to the full split's size (`population`: the
    split's record count when `data` is already a sample of it; default len(data)). Returns
    ([replicates, len(policies)] DM values, scale). A policy is action probabilities [N, K]
    (rows of `data`) or LOGGING_POLICY (its DM is the observed mean)."""
    n = population or len(data.actions)
    rows = reward_sample(data, max_records, seed)  # hash order: the same rows, same order, in every engine
    s = data.record_weights[rows]
    target = evaluated_probability(
        [p if isinstance(p, str) else np.asarray(p)[rows] for p in policies], data.actions[rows]
    )
    keys = data.record_keys[rows]
    multiplicity = bootstrap.poisson_weights(keys, replicates, seed + 7919)  # [replicates, m]
    out = np.full((replicates, len(policies)), np.nan)
    for b in range(replicates):
        m = multiplicity[b] * s
        if not (m > 0).any():
            continue
        keep = m > 0  # rows drawn at least once: the resample (Poisson multiplicity as weight)
        sample = subset(data, rows[keep], m[keep])
        try:
            q = reward_predictions(
                model,
                sample,
                num_actions,
                seed=seed + b,
                balance=balance,
                clip=clip,
                target=None if target is None else target[keep],
            )
        except (ValueError, np.linalg.LinAlgError):
            continue  # a degenerate resample (e.g. no clicks): left out, as an invalid bootstrap draw
        for j, policy in enumerate(policies):
            dm = sample.rewards if isinstance(policy, str) else (np.asarray(policy)[rows[keep]] * q).sum(1)
            out[b, j] = float((m[keep] * dm).sum() / m[keep].sum())
    return out, math.sqrt(len(rows) / n)
