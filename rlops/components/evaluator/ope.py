"""Off-policy estimates of a target policy's value from logged bandit feedback.

Logged data: contexts x_i, actions a_i, rewards r_i, propensities p_i = mu(a_i | x_i) of the
logging policy mu, optional record weights s_i and action masks. The target policy is given as
action probabilities pi [N, K] (one-hot for a greedy policy). With importance weights
w_i = pi(a_i | x_i) / p_i, a reward model q(x, a) and E_s the s-weighted mean over rows:

    IPS       = E_s[w r]                                  unbiased when p > 0 wherever pi > 0
    SNIPS     = E_s[w r] / E_s[w]                         slightly biased, lower variance
    DM        = E_s[sum_a pi(a|x) q(x, a)]                biased by q, low variance
    DR        = DM + E_s[w (r - q(x, a))]                 unbiased if either p or q is right
    SNDR      = DM + E_s[w (r - q)] / E_s[w]              self-normalized DR (OBP)
    Switch-DR = DM + E_s[w 1{w <= tau} (r - q)]           Wang et al. 2017 (OBP's form)
    DR-os     = DM + E_s[w_os (r - q)], w_os = lam w / (w^2 + lam)   Su et al. 2020

Per-arm records whose candidate sets vary (arm k is a different item in each record): the
`action_mask` marks each record's candidates (padding excluded everywhere), `items` [N, K] says
which item each candidate slot holds, and the reward model is one model shared across arms over
[global features, the arm's features] (plus an item effect) -- see fit_arm_reward_model. The
estimators themselves are unchanged: sums over each record's candidates.

tau and lam are given, or picked per policy from OBP's default grid by estimated MSE (OBP's
tuning: a high-probability bound on the bias against DR, squared, plus the variance). q is
ridge, logistic or any callable (the trained network), named as in REWARD_MODEL_CHOICES
everywhere ("auto": logistic for 0/1 rewards), cross-fitted, by default fitted on
1/propensity-balanced rows so actions the logging policy rarely took are not filled in from the
popular ones, and clipped to the observed reward range (no negative click rates).

The target policy is given by its exact action probabilities: for what the Pusher serves,
epsilon_greedy_probs (serving_default's epsilon-greedy over each record's allowed actions).

Intervals: a streaming Poisson(1) bootstrap. Every estimator is a ratio of weighted column sums,
so each resample only needs those sums; rows are processed in chunks and Poisson multiplicities
are drawn per chunk, so memory is O(resamples x chunk), not O(resamples x rows). A comparison
uses the same multiplicities for candidate and baseline: the interval of the difference is paired.
DM's interval with q held fixed ignores q's own error (it covered the truth in 45% of seeds);
refit_dm_replicates refits q on a few bootstrap resamples of a bounded sample and compare()
then gives DM a normal interval with their spread (BENCHMARKS.md: about 90%).

Trust: intervals are computed only when there are at least `min_records` rows of positive weight
and the importance weights' effective sample size ESS = (sum s w)^2 / sum (s w)^2 is at least
`min_ess` (and the bootstrap is valid). Otherwise every interval is NaN and `Estimate.reason`
says why, so no caller can bless on one lucky row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

ESTIMATORS = ("ips", "snips", "dm", "dr", "sndr", "switch_dr", "dr_os")
MODEL_FREE = ("ips", "snips")
REWARD_MODELS = ("ridge", "logistic")      # the fitted kinds
# Every name a reward model is chosen by, everywhere (config, CLI, Python API): "auto" is
# logistic when every reward is 0 or 1, else ridge; "network" is the candidate's own predicted
# rewards (resolved by the Evaluator, which holds the SavedModel).
AUTO, NETWORK = "auto", "network"
REWARD_MODEL_CHOICES = (AUTO,) + REWARD_MODELS + (NETWORK,)
LOGGING_POLICY = "logging"
# OBP's default hyperparameter grid for Switch-DR's tau and DR-os's lambda.
DEFAULT_GRID = (10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0, math.inf)
DEFAULT_MIN_RECORDS = 100
DEFAULT_MIN_ESS = 30.0
DEFAULT_REWARD_MODEL = AUTO     # chosen by measurement: BENCHMARKS.md, "Off-policy evaluation"
DEFAULT_BALANCE = True           # fit the reward model on 1/propensity-balanced rows (see balancing_weights)
DEFAULT_DM_REFITS = 30           # reward-model refits behind DM's interval (see refit_dm_replicates)
DEFAULT_DM_REFIT_RECORDS = 20_000

RewardModelFn = Callable[[np.ndarray], np.ndarray]  # contexts [N, D] -> q [N, K]


@dataclass(frozen=True)
class LoggedFeedback:
    contexts: np.ndarray            # [N, D]
    actions: np.ndarray             # [N] int
    rewards: np.ndarray             # [N]
    propensities: np.ndarray        # [N] in (0, 1]
    weights: np.ndarray | None = None      # [N] >= 0, per-record weights (None: all 1)
    action_mask: np.ndarray | None = None  # [N, K] 1 = allowed; the target policy gives masked actions 0
    features: dict | None = None  # raw named context features (policies exported with preprocessing act on them)
    # Per-arm records with varying candidates: item index of each candidate slot [N, K] (-1 =
    # padding) and the items' dense arm features [M, Da] (what the shared reward model fits on).
    items: np.ndarray | None = None
    item_features: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.actions)
        for name in ("contexts", "rewards", "propensities", "weights", "action_mask"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"LoggedFeedback.{name} has {len(value)} rows, actions has {n}")
        if n == 0:
            raise ValueError("LoggedFeedback is empty: no eval records to estimate from")
        _first_bad("propensity must be in (0, 1]", self.propensities,
                   ~((self.propensities > 0) & (self.propensities <= 1)))
        _first_bad("reward must be finite", self.rewards, ~np.isfinite(self.rewards))
        if (self.actions < 0).any():
            _first_bad("action must be >= 0", self.actions, self.actions < 0)
        if self.weights is not None:
            _first_bad("weight must be finite and >= 0", self.weights,
                       ~(np.isfinite(self.weights) & (self.weights >= 0)))
            if not (self.weights > 0).any():
                raise ValueError("weight: every record has weight 0; nothing to estimate from")
        if self.action_mask is not None:
            mask = self.action_mask
            if mask.ndim != 2 or (self.actions >= mask.shape[1]).any():
                raise ValueError(f"action_mask must be [N, K] covering every logged action; got shape {mask.shape}")
            _first_bad("action_mask excludes the logged action", self.actions,
                       mask[np.arange(n), self.actions] == 0)
        if self.items is not None:
            items, feats = self.items, self.item_features
            if items.ndim != 2 or len(items) != n or (self.actions >= items.shape[1]).any():
                raise ValueError(f"items must be [N, K] covering every logged action; got shape {items.shape}")
            _first_bad("the logged action is a padding slot (beyond the record's candidates)", self.actions,
                       items[np.arange(n), self.actions] < 0)
            if feats is None or feats.ndim != 2 or len(feats) <= items.max():
                raise ValueError(f"item_features must be [M, Da] with a row for every item index in items "
                                 f"(max {items.max()}); got {None if feats is None else feats.shape}")
            if self.action_mask is not None and ((self.action_mask > 0) != (items >= 0)).any():
                raise ValueError("action_mask and items disagree on which slots are candidates")

    @property
    def record_weights(self) -> np.ndarray:
        return np.ones(len(self.actions)) if self.weights is None else np.asarray(self.weights, float)


def _first_bad(message: str, values: np.ndarray, bad: np.ndarray) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{message}; row {i} has {values[i]}")


@dataclass(frozen=True)
class Estimate:
    value: float
    lower: float
    upper: float
    reason: str | None = None   # why there is no interval (NaN bounds), None when trusted

    @property
    def trusted(self) -> bool:
        return self.reason is None and math.isfinite(self.lower) and math.isfinite(self.upper)

    def as_dict(self) -> dict:
        out = {"value": self.value, "lower": self.lower, "upper": self.upper}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Diagnostics:
    """What the trust decision looked at, reported beside the estimates."""
    num_records: int
    ess: dict[str, float]                   # per policy ("candidate", "baseline")
    hyperparameters: dict[str, dict[str, float]]  # per policy: switch_tau, dr_os_lambda used
    valid_resamples: int
    reason: str | None

    def as_dict(self) -> dict:
        return {"num_records": self.num_records, "ess": self.ess, "hyperparameters": self.hyperparameters,
                "valid_resamples": self.valid_resamples, "trusted": self.reason is None, "reason": self.reason}


# ---- policies and importance weights -----------------------------------------------------------

def greedy_probs(actions: np.ndarray, num_actions: int) -> np.ndarray:
    """One-hot action probabilities of a deterministic policy."""
    probs = np.zeros((len(actions), num_actions))
    probs[np.arange(len(actions)), actions] = 1.0
    return probs


def epsilon_greedy_probs(greedy: np.ndarray, num_actions: int, epsilon: float,
                         allowed: np.ndarray | None = None) -> np.ndarray:
    """The served policy's exact action probabilities [N, K] (rlops.features.export's
    epsilon_greedy_head, which serving_default reports as `propensity`): epsilon spread uniformly
    over each record's allowed actions plus 1 - epsilon on the greedy one; a record whose greedy
    action is not allowed is served uniformly over its allowed actions."""
    greedy = np.asarray(greedy, int)
    n = len(greedy)
    ok = np.ones((n, num_actions), bool) if allowed is None else np.asarray(allowed) > 0
    n_allowed = ok.sum(1)
    if (n_allowed == 0).any():
        _first_bad("a record allows no action", n_allowed, n_allowed == 0)
    uniform = ok / n_allowed[:, None]
    inside = (greedy >= 0) & (greedy < num_actions)
    greedy_ok = inside & ok[np.arange(n), np.clip(greedy, 0, num_actions - 1)]
    probs = np.where(greedy_ok[:, None], epsilon * uniform, uniform)
    rows = np.flatnonzero(greedy_ok)
    probs[rows, greedy[rows]] += 1.0 - epsilon
    return probs


def uniform_probs(num_records: int, num_actions: int, action_mask: np.ndarray | None = None) -> np.ndarray:
    """The uniform policy (over the allowed actions where there is a mask)."""
    probs = np.ones((num_records, num_actions)) if action_mask is None else np.asarray(action_mask, float)
    return probs / probs.sum(1, keepdims=True)


def apply_action_mask(probs: np.ndarray, action_mask: np.ndarray | None) -> np.ndarray:
    """Masked actions get probability 0; the rest is renormalized. A row whose policy puts all of
    its probability on masked actions is an error naming the row (the policy ignores the mask)."""
    if action_mask is None:
        return probs
    if action_mask.shape != probs.shape:
        raise ValueError(f"action_mask has shape {action_mask.shape}, policy probabilities {probs.shape}")
    masked = probs * (action_mask > 0)
    total = masked.sum(1, keepdims=True)
    _first_bad("the target policy puts all its probability on actions that action_mask excludes", total[:, 0],
               total[:, 0] <= 0)
    return masked / total


def importance_weights(data: LoggedFeedback, probs: np.ndarray) -> np.ndarray:
    return probs[np.arange(len(data.actions)), data.actions] / data.propensities


def effective_sample_size(importance: np.ndarray, record_weights: np.ndarray | None = None) -> float:
    """(sum v)^2 / sum v^2 with v = record weight x importance weight (n when all v are equal)."""
    v = importance if record_weights is None else importance * record_weights
    denom = float((v ** 2).sum())
    return float(v.sum()) ** 2 / denom if denom > 0 else 0.0


# ---- reward models ---------------------------------------------------------------------------------

def resolve_reward_model(kind: str, rewards: np.ndarray) -> str:
    """A fitted kind from any name in REWARD_MODEL_CHOICES but "network" ("auto": logistic for
    0/1 rewards, else ridge); an unknown name is an error listing every choice."""
    if kind == AUTO:
        return "logistic" if np.isin(rewards, (0.0, 1.0)).all() else "ridge"
    if kind == NETWORK:
        raise ValueError("reward_model: 'network' is the candidate SavedModel's own predicted rewards; pass them "
                         "as a callable (the Evaluator does), or choose auto, ridge or logistic")
    if kind not in REWARD_MODELS:
        raise ValueError(f"reward_model: unknown kind '{kind}'; choose one of {', '.join(REWARD_MODEL_CHOICES)} "
                         "(or pass a callable giving q(x, a) for all a)")
    return kind


def clip_to_observed(q: np.ndarray, rewards: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
    """Predictions clipped to [min, max] of the observed rewards (a ridge fit can predict a
    negative click rate; no reward outside the observed range is evidence-backed). Padding
    slots (`slots` False) stay 0."""
    clipped = np.clip(q, float(np.min(rewards)), float(np.max(rewards)))
    return clipped if slots is None else np.where(slots, clipped, 0.0)

def fit_reward_model(contexts: np.ndarray, actions: np.ndarray, rewards: np.ndarray, num_actions: int,
                     kind: str = "ridge", weights: np.ndarray | None = None, l2: float = 1.0, folds: int = 2,
                     seed: int = 0) -> np.ndarray:
    """Cross-fitted reward model q(x, a) -> [N, K] predictions.

    ridge: one ridge regression per action. logistic (rewards in {0, 1}): an L2-regularized
    logistic regression with an item effect plus a shared context effect (fits when clicks are
    rare), then per-action context interactions shrunk towards it (see _logistic). Each row's prediction comes
    from a model fitted on the other folds, so DM/DR do not reuse a row's own reward to predict
    it (that would shrink DR's correction term towards 0). Record weights weight the fit.
    """
    kind = resolve_reward_model(kind, rewards)
    contexts = np.asarray(contexts, float).reshape(len(actions), -1)
    if kind == "logistic" and not np.isin(rewards, (0.0, 1.0)).all():
        _first_bad("reward_model 'logistic' needs rewards in {0, 1}", rewards, ~np.isin(rewards, (0.0, 1.0)))
    s = np.ones(len(actions)) if weights is None else np.asarray(weights, float)
    fold = np.random.default_rng(seed).integers(0, folds, len(actions)) if folds > 1 else np.zeros(len(actions), int)
    q = np.zeros((len(actions), num_actions))
    for f in range(folds):
        train, test = (fold != f, fold == f) if folds > 1 else (fold == 0, fold == 0)
        if kind == "ridge":
            q[test] = _ridge(contexts, actions, rewards, s, num_actions, l2, train, contexts[test])
        else:
            q[test] = _logistic(contexts, actions, rewards, s, num_actions, l2, train, contexts[test])
    return q


def _ridge(x, actions, rewards, s, k, l2, train, x_test) -> np.ndarray:
    d = x.shape[1]
    x1, xt = np.concatenate([x, np.ones((len(x), 1))], 1), np.concatenate([x_test, np.ones((len(x_test), 1))], 1)
    out = np.zeros((len(x_test), k))
    for a in range(k):
        rows = train & (actions == a)
        xa, ra, sa = x1[rows], rewards[rows], s[rows]
        theta = np.linalg.solve((xa * sa[:, None]).T @ xa + l2 * np.eye(d + 1), (xa * sa[:, None]).T @ ra)
        out[:, a] = xt @ theta
    return out


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


def _logistic(x, actions, rewards, s, k, l2, train, x_test, interaction_l2: float = 10.0) -> np.ndarray:
    """Two stages. (1) logit = b + theta_a + x . beta over all rows (b unpenalized, so a rare
    click rate is no problem; shared beta, so it fits when clicks are rare). (2) per action, an
    interaction x . gamma_a on top of (1), shrunk towards 0 by `interaction_l2`: it only moves
    where an action's own rows carry enough signal."""
    xa, act, r, sw = x[train], actions[train], rewards[train], s[train]
    n, d = xa.shape
    features = np.concatenate([np.ones((n, 1)), np.eye(k)[act], xa], 1)           # [n, 1 + K + D]
    penalty = np.full(1 + k + d, l2)
    penalty[0] = 1e-6
    prior = min(max(float(r @ sw) / max(float(sw.sum()), 1e-12), 1e-6), 1 - 1e-6)
    theta = np.zeros(1 + k + d)
    theta[0] = math.log(prior / (1 - prior))
    theta = _newton_logistic(features, r, sw, penalty, np.zeros(n), theta)
    base_train = features @ theta
    logits = theta[0] + theta[1:1 + k][None, :] + (x_test @ theta[1 + k:])[:, None]   # [n_test, K]
    for a in range(k):
        rows = act == a
        if min(r[rows].sum(), (1 - r[rows]).sum()) < 5:  # too few clicks (or non-clicks) to move: skip
            continue
        x_rows = np.concatenate([np.ones((int(rows.sum()), 1)), xa[rows]], 1)   # own intercept and slopes
        gamma = _newton_logistic(x_rows, r[rows], sw[rows], np.full(d + 1, interaction_l2), base_train[rows],
                                 np.zeros(d + 1), iterations=10, tol=1e-4)
        logits[:, a] += gamma[0] + x_test @ gamma[1:]
    return 1 / (1 + np.exp(-np.clip(logits, -30, 30)))


def fit_arm_reward_model(contexts: np.ndarray, items: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                         item_features: np.ndarray, kind: str = "ridge", weights: np.ndarray | None = None,
                         l2: float = 1.0, folds: int = 2, seed: int = 0, interaction_l2: float = 10.0) -> np.ndarray:
    """Cross-fitted q(x, arm) -> [N, K] for candidate sets that vary (0 on padding slots).

    One model shared across arms, on [global x, the arm's features f(m), an item effect]:
        link(q) = b + theta_m + x . beta + f(m) . eta  +  (1, x) . gamma_m
    fitted in two stages as the fixed-candidate models are: (1) everything but gamma over all
    rows (ridge: least squares; logistic: Newton; item effects theta_m penalized by
    `interaction_l2`, the shared slopes by `l2`), (2) per item a (1, x) interaction on top,
    shrunk by `interaction_l2` (skipped for items with too few rows / clicks). An item never
    logged in the training folds gets theta_m = gamma_m = 0: its prediction comes from its
    features. Items are identities, not slots, so slot k of two records may be two items.
    """
    kind = resolve_reward_model(kind, rewards)
    n = len(actions)
    x = np.asarray(contexts, float).reshape(n, -1)
    f = np.asarray(item_features, float)
    if kind == "logistic" and not np.isin(rewards, (0.0, 1.0)).all():
        _first_bad("reward_model 'logistic' needs rewards in {0, 1}", rewards, ~np.isin(rewards, (0.0, 1.0)))
    s = np.ones(n) if weights is None else np.asarray(weights, float)
    logged = items[np.arange(n), actions]
    fold = np.random.default_rng(seed).integers(0, folds, n) if folds > 1 else np.zeros(n, int)
    q = np.zeros(items.shape)
    for j in range(folds):
        train, test = (fold != j, fold == j) if folds > 1 else (fold == 0, fold == 0)
        theta, gamma = _fit_arm_model(x[train], logged[train], rewards[train], s[train], f, kind, l2, interaction_l2)
        q[test] = _predict_arm_model(theta, gamma, x[test], items[test], f, kind)
    return q


def _arm_design(x: np.ndarray, item: np.ndarray, f: np.ndarray) -> np.ndarray:
    m = len(f)
    return np.concatenate([np.ones((len(x), 1)), np.eye(m)[item], x, f[item]], 1)   # [n, 1 + M + D + Da]


def _fit_arm_model(x, item, r, sw, f, kind, l2, interaction_l2):
    m, d = len(f), x.shape[1]
    features = _arm_design(x, item, f)
    penalty = np.full(features.shape[1], l2)
    penalty[0] = 1e-6
    # Item effects shrunk harder than the shared feature slopes: what the arm features explain
    # goes to eta (and so carries over to items rarely or never logged), the rest to theta_m.
    penalty[1:1 + m] = interaction_l2
    gamma = np.zeros((m, d + 1))
    if kind == "ridge":
        weighted = features * sw[:, None]
        theta = np.linalg.solve(weighted.T @ features + np.diag(penalty), weighted.T @ r)
        res = r - features @ theta
        for a in np.unique(item):
            rows = item == a
            xa = np.concatenate([np.ones((int(rows.sum()), 1)), x[rows]], 1)
            gamma[a] = np.linalg.solve((xa * sw[rows, None]).T @ xa + interaction_l2 * np.eye(d + 1),
                                       (xa * sw[rows, None]).T @ res[rows])
        return theta, gamma
    prior = min(max(float(r @ sw) / max(float(sw.sum()), 1e-12), 1e-6), 1 - 1e-6)
    theta = np.zeros(features.shape[1])
    theta[0] = math.log(prior / (1 - prior))
    theta = _newton_logistic(features, r, sw, penalty, np.zeros(len(r)), theta)
    base = features @ theta
    for a in np.unique(item):
        rows = item == a
        if min(r[rows].sum(), (1 - r[rows]).sum()) < 5:  # too few clicks (or non-clicks) to move: skip
            continue
        xa = np.concatenate([np.ones((int(rows.sum()), 1)), x[rows]], 1)
        gamma[a] = _newton_logistic(xa, r[rows], sw[rows], np.full(d + 1, interaction_l2), base[rows],
                                    np.zeros(d + 1), iterations=10, tol=1e-4)
    return theta, gamma


def _predict_arm_model(theta, gamma, x, items, f, kind) -> np.ndarray:
    m, d = len(f), x.shape[1]
    per_item = theta[1:1 + m] + f @ theta[1 + m + d:] + gamma[:, 0]          # [M]
    row = theta[0] + x @ theta[1 + m:1 + m + d]                              # [n]
    pad = items < 0
    it = np.maximum(items, 0)
    out = np.empty(items.shape)
    for k in range(items.shape[1]):  # slot by slot: memory O(n x D), whatever M is
        out[:, k] = row + per_item[it[:, k]] + np.einsum("nd,nd->n", x, gamma[it[:, k], 1:])
    if kind == "logistic":
        out = 1 / (1 + np.exp(-np.clip(out, -30, 30)))
    return np.where(pad, 0.0, out)


def balancing_weights(propensities: np.ndarray, cap: float = 50.0) -> np.ndarray:
    """1 / propensity, scaled to mean 1 and capped: rows reweighted as if every action had been
    logged equally often. A logging policy that rarely shows an action otherwise lets the reward
    model fill that action in from the popular ones (selection bias, which DM inherits in full)."""
    w = 1.0 / np.asarray(propensities, float)
    w /= w.mean()
    return np.minimum(w, cap)


def reward_predictions(model: str | RewardModelFn, data: LoggedFeedback, num_actions: int, seed: int = 0,
                       balance: bool = DEFAULT_BALANCE, clip: bool = True) -> np.ndarray:
    """q [N, K] from a reward model name (fitted, cross-fitted; record weights times balancing
    weights when `balance`) or a callable (e.g. the trained network), clipped to the observed
    reward range (`clip`)."""
    if callable(model):
        q = np.asarray(model(data.contexts), float)
        if q.shape != (len(data.actions), num_actions):
            raise ValueError(f"reward model returned shape {q.shape}; expected ({len(data.actions)}, {num_actions})")
    else:
        q = _fitted_predictions(resolve_reward_model(model, data.rewards), data, num_actions, seed, balance)
    slots = None if data.items is None else data.items >= 0
    return clip_to_observed(q, data.rewards, slots) if clip else q


def _fitted_predictions(kind: str, data: LoggedFeedback, num_actions: int, seed: int, balance: bool) -> np.ndarray:
    weights = data.record_weights * balancing_weights(data.propensities) if balance else data.weights
    if data.items is not None:
        if data.items.shape[1] != num_actions:
            raise ValueError(f"items have {data.items.shape[1]} candidate slots; expected {num_actions}")
        return fit_arm_reward_model(data.contexts, data.items, data.actions, data.rewards, data.item_features,
                                    kind=kind, weights=weights, seed=seed)
    return fit_reward_model(data.contexts, data.actions, data.rewards, num_actions, kind=kind,
                            weights=weights, seed=seed)


def subset(data: LoggedFeedback, rows: np.ndarray, weights: np.ndarray | None = None) -> LoggedFeedback:
    """The records `rows` of `data` (record weights replaced by `weights` when given)."""
    def take(value):
        return None if value is None else np.asarray(value)[rows]
    return LoggedFeedback(data.contexts[rows], data.actions[rows], data.rewards[rows], data.propensities[rows],
                          weights=take(data.weights) if weights is None else weights,
                          action_mask=take(data.action_mask),
                          features=None if data.features is None else {k: np.asarray(v)[rows]
                                                                       for k, v in data.features.items()},
                          items=take(data.items), item_features=data.item_features)


def refit_dm_replicates(data: LoggedFeedback, policies: list[np.ndarray | str], model: str, num_actions: int,
                        replicates: int = DEFAULT_DM_REFITS, max_records: int = DEFAULT_DM_REFIT_RECORDS,
                        seed: int = 0, balance: bool = DEFAULT_BALANCE, clip: bool = True) -> tuple[np.ndarray, float]:
    """DM's sampling spread with the reward model's own error in it: `replicates` Poisson(1)
    bootstrap resamples, the reward model refitted on each, DM of every policy recomputed.
    Affordable at any size: the resamples are drawn from a uniform sample of at most
    `max_records` rows (an m-out-of-n bootstrap); the returned scale sqrt(m / n) shrinks their
    spread to the full split's size. Returns ([replicates, len(policies)] DM values, scale).
    A policy is action probabilities [N, K] or LOGGING_POLICY (its DM is the observed mean)."""
    n = len(data.actions)
    rng = np.random.default_rng(seed + 7919)
    rows = np.sort(rng.choice(n, max_records, replace=False)) if n > max_records else np.arange(n)
    s = data.record_weights[rows]
    out = np.full((replicates, len(policies)), np.nan)
    for b in range(replicates):
        m = _POISSON[rng.integers(0, 65536, len(rows), dtype=np.uint16)].astype(float) * s
        if not (m > 0).any():
            continue
        keep = m > 0  # rows drawn at least once: the resample (Poisson multiplicity as weight)
        sample = subset(data, rows[keep], m[keep])
        try:
            q = reward_predictions(model, sample, num_actions, seed=seed + b, balance=balance, clip=clip)
        except (ValueError, np.linalg.LinAlgError):
            continue  # a degenerate resample (e.g. no clicks): left out, as an invalid bootstrap draw
        for j, policy in enumerate(policies):
            dm = sample.rewards if isinstance(policy, str) else (np.asarray(policy)[rows[keep]] * q).sum(1)
            out[b, j] = float((m[keep] * dm).sum() / m[keep].sum())
    return out, math.sqrt(len(rows) / n)


def refit_interval(point: float, replicates: np.ndarray, scale: float, confidence: float) -> tuple[float, float]:
    """A normal interval around `point` with the refit replicates' spread (times `scale`, the
    m-out-of-n correction): percentiles of a few dozen replicates would be too rough."""
    values = replicates[np.isfinite(replicates)]
    if len(values) < max(10, len(replicates) // 2):
        return math.nan, math.nan
    z = _normal_quantile(1 - (1 - confidence) / 2)
    half = z * scale * float(np.std(values, ddof=1))
    return point - half, point + half


def _normal_quantile(p: float) -> float:
    """Inverse standard normal CDF by bisection on erf (no scipy dependency)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ---- per-row terms ---------------------------------------------------------------------------------

# Columns whose (weighted) sums every estimator is a ratio of.
_TERMS = ("w", "wr", "dm", "wres", "switch", "os")


def _tuned(w: np.ndarray, w_hat_options: dict[float, np.ndarray], res: np.ndarray, dm: np.ndarray,
           s: np.ndarray, delta: float = 0.05) -> float:
    """OBP's MSE-based tuning: for each hyperparameter, (bias bound)^2 + variance / n, where the
    bias against DR is |E[(w - w_hat)(r - q)]| plus a high-probability bound on its deviation."""
    n = s.sum()

    def mean_var(x):
        mean = (s * x).sum() / n
        return mean, (s * (x - mean) ** 2).sum() / max(n - 1, 1)

    best, best_score = math.inf, math.inf
    for value, w_hat in sorted(w_hat_options.items()):
        _, var = mean_var(dm + w_hat * res)
        gap_mean, gap_var = mean_var((w - w_hat) * res)
        bias = abs(gap_mean) + math.sqrt(2 * math.log(2 / delta) * gap_var / n)
        score = bias ** 2 + var / n
        if score < best_score:
            best, best_score = value, score
    return best


def _policy_terms(data: LoggedFeedback, probs: np.ndarray, q: np.ndarray | None, switch_tau: float | None,
                  dr_os_lambda: float | None, grid: tuple[float, ...]) -> tuple[np.ndarray, dict[str, float]]:
    """[N, len(_TERMS)] per-row terms (not yet multiplied by record weights) and the hyperparameters."""
    n = len(data.actions)
    rows = np.arange(n)
    w = importance_weights(data, probs)
    r = np.asarray(data.rewards, float)
    out = np.zeros((n, len(_TERMS)))
    out[:, 0], out[:, 1] = w, w * r
    if q is None:
        return out, {}
    dm = (probs * q).sum(1)
    res = r - q[rows, data.actions]
    s = data.record_weights
    grid = tuple(sorted(set(grid) | {math.inf}))
    if switch_tau is None:
        switch_tau = _tuned(w, {t: w * (w <= t) for t in grid}, res, dm, s)
    if dr_os_lambda is None:
        dr_os_lambda = _tuned(w, {lam: (w if math.isinf(lam) else lam * w / (w ** 2 + lam)) for lam in grid},
                              res, dm, s)
    w_switch = w * (w <= switch_tau)
    w_os = w if math.isinf(dr_os_lambda) else dr_os_lambda * w / (w ** 2 + dr_os_lambda)
    out[:, 2], out[:, 3], out[:, 4], out[:, 5] = dm, w * res, w_switch * res, w_os * res
    return out, {"switch_tau": float(switch_tau), "dr_os_lambda": float(dr_os_lambda)}


def _logging_terms(data: LoggedFeedback, with_model: bool) -> np.ndarray:
    """The logging policy on its own data: w = 1 and no correction, so every estimator is the
    observed (weighted) mean reward."""
    r = np.asarray(data.rewards, float)
    out = np.zeros((len(r), len(_TERMS)))
    out[:, 0], out[:, 1] = 1.0, r
    if with_model:
        out[:, 2] = r
    return out


def _estimates_from_sums(total: np.ndarray, sums: np.ndarray, with_model: bool) -> dict[str, np.ndarray]:
    """total [...] = sum s; sums [..., len(_TERMS)] = sum s * term -> every estimator."""
    with np.errstate(divide="ignore", invalid="ignore"):
        w, wr, dm, wres, switch, os_ = (sums[..., j] for j in range(len(_TERMS)))
        out = {"ips": wr / total, "snips": wr / w}
        if with_model:
            out.update(dm=dm / total, dr=(dm + wres) / total, sndr=dm / total + wres / w,
                       switch_dr=(dm + switch) / total, dr_os=(dm + os_) / total)
    return out


# ---- streaming Poisson bootstrap -------------------------------------------------------------------

def _poisson_table() -> np.ndarray:
    """Poisson(1) as a 65,536-entry lookup table: a uint16 draw indexes it (probabilities exact to
    1/65,536, six times faster than rng.poisson; the bootstrap's Monte Carlo error is far larger)."""
    p = np.array([math.exp(-1) / math.factorial(k) for k in range(12)])
    counts = np.round(p * 65536).astype(int)
    counts[0] += 65536 - counts.sum()
    return np.repeat(np.arange(12), counts).astype(np.float32)


_POISSON = _poisson_table()


def poisson_bootstrap_sums(columns: np.ndarray, num_bootstrap: int, seed: int = 0,
                           chunk_elements: int = 1 << 23) -> np.ndarray:
    """[B, J] sums over rows of Poisson(1)-weighted columns [N, J], in chunks of rows so memory
    stays O(B x chunk) (about 48 MB at the default chunk) whatever N is."""
    n, j = columns.shape
    rng = np.random.default_rng(seed)
    chunk = max(1, chunk_elements // num_bootstrap)
    sums = np.zeros((num_bootstrap, j))
    for start in range(0, n, chunk):
        block = columns[start:start + chunk].astype(np.float32)
        multiplicity = _POISSON[rng.integers(0, 65536, (num_bootstrap, len(block)), dtype=np.uint16)]
        sums += multiplicity @ block
    return sums


def _check_bootstrap_args(num_bootstrap: int, confidence: float) -> None:
    if isinstance(num_bootstrap, bool) or not isinstance(num_bootstrap, (int, np.integer)) or num_bootstrap < 50:
        raise ValueError(f"num_bootstrap must be an integer >= 50 (percentile intervals need enough resamples), "
                         f"got {num_bootstrap!r}")
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence!r}")


def estimate(data: LoggedFeedback, target_probs: np.ndarray | str, q: np.ndarray | None = None,
             num_bootstrap: int = 500, confidence: float = 0.95, seed: int = 0, **trust) -> dict[str, Estimate]:
    """Point estimates with bootstrap intervals for every estimator available (all but IPS and
    SNIPS need the reward model predictions q). `trust`: min_records, min_ess, switch_tau, ..."""
    return compare(data, target_probs, None, q, num_bootstrap, confidence, seed, **trust)[0]


def compare(data: LoggedFeedback, candidate_probs: np.ndarray | str, baseline_probs: np.ndarray | str | None,
            q: np.ndarray | None = None, num_bootstrap: int = 500, confidence: float = 0.95, seed: int = 0,
            min_records: int = DEFAULT_MIN_RECORDS, min_ess: float = DEFAULT_MIN_ESS,
            switch_tau: float | None = None, dr_os_lambda: float | None = None,
            grid: tuple[float, ...] = DEFAULT_GRID, diagnostics: list | None = None,
            dm_refits: tuple[np.ndarray, float] | None = None,
            ) -> tuple[dict[str, Estimate], dict[str, Estimate] | None, dict[str, Estimate] | None]:
    """Estimates of candidate and baseline and of their difference (candidate - baseline), all
    from the same bootstrap resamples. LOGGING_POLICY as either policy stands for the policy that
    logged the data (its value is the observed mean reward). Where the data cannot
    support an interval (too few records, too small an ESS, invalid bootstrap) every interval is
    NaN and carries the reason; `diagnostics` (a list) receives a Diagnostics.
    `dm_refits`: refit_dm_replicates' output for (candidate[, baseline]); DM's intervals then
    come from those (the reward model's own error included), not from the fixed-q bootstrap."""
    _check_bootstrap_args(num_bootstrap, confidence)
    n, with_model = len(data.actions), q is not None
    s = data.record_weights
    if q is not None and (q.ndim != 2 or len(q) != n):
        raise ValueError(f"q has shape {q.shape}; expected ({n}, num_actions)")

    def policy_block(policy, who: str) -> tuple[np.ndarray, dict, float]:
        if isinstance(policy, str):
            if policy != LOGGING_POLICY:
                raise ValueError(f"{who} policy must be action probabilities or '{LOGGING_POLICY}', got '{policy}'")
            return _logging_terms(data, with_model), {}, effective_sample_size(np.ones(n), s)
        probs = apply_action_mask(_check_probs(policy, n, who), data.action_mask)
        if q is not None and q.shape != probs.shape:
            raise ValueError(f"q has shape {q.shape}; {who} action probabilities {probs.shape}")
        terms, hp = _policy_terms(data, probs, q, switch_tau, dr_os_lambda, grid)
        return terms, hp, effective_sample_size(terms[:, 0], s)

    blocks, hps, ess = [], {}, {}
    for who, policy in (("candidate", candidate_probs), ("baseline", baseline_probs)):
        if policy is not None:
            terms, hps[who], ess[who] = policy_block(policy, who)
            blocks.append(terms)

    # One [N, 1 + J * policies] matrix: sum s, then s * terms per policy; the bootstrap sums it.
    columns = np.concatenate([s[:, None]] + [b * s[:, None] for b in blocks], 1)
    del blocks
    point_sums = columns.sum(0)
    boot_sums = poisson_bootstrap_sums(columns, num_bootstrap, seed)
    del columns
    j = len(_TERMS)

    def split(sums):
        return [_estimates_from_sums(sums[..., 0], sums[..., 1 + i * j: 1 + (i + 1) * j], with_model)
                for i in range(len(hps))]

    points, boots = split(point_sums), split(boot_sums)
    finite = np.all([np.isfinite(v) for b in boots for v in b.values()], axis=0)
    valid = int(finite.sum())

    num_records = int((s > 0).sum())
    reason = None
    if num_records < min_records:
        reason = (f"only {num_records} eval records (with weight > 0); at least {min_records} are needed "
                  f"for an interval (min_eval_records)")
    else:
        low = [f"{who} {value:.1f}" for who, value in ess.items() if value < min_ess]
        if low:
            reason = (f"effective sample size of the importance weights too small: {', '.join(low)} "
                      f"< {min_ess:g} (min_ess); the logs rarely took the actions this policy takes")
        elif valid < 0.99 * num_bootstrap:
            reason = f"invalid bootstrap: only {valid} of {num_bootstrap} resamples give finite estimates"
    if diagnostics is not None:
        diagnostics.append(Diagnostics(num_records, ess, hps, valid, reason))

    alpha = (1.0 - confidence) / 2.0

    def summarize(point: dict[str, np.ndarray], boot: dict[str, np.ndarray],
                  refits: np.ndarray | None) -> dict[str, Estimate]:
        if reason is not None:
            return {name: Estimate(float(point[name]), math.nan, math.nan, reason) for name in point}
        out = {name: Estimate(float(point[name]), float(np.quantile(boot[name][finite], alpha)),
                              float(np.quantile(boot[name][finite], 1 - alpha))) for name in point}
        if refits is not None and "dm" in out:
            lower, upper = refit_interval(out["dm"].value, refits, dm_refits[1], confidence)
            out["dm"] = Estimate(out["dm"].value, lower, upper,
                                 None if math.isfinite(lower) else "too few valid reward-model refits")
        return out

    refit = [None, None, None] if dm_refits is None else [dm_refits[0][:, 0], None, None]
    if dm_refits is not None and len(points) == 2:
        refit[1:] = dm_refits[0][:, 1], dm_refits[0][:, 0] - dm_refits[0][:, 1]
    cand = summarize(points[0], boots[0], refit[0])
    if len(points) == 1:
        return cand, None, None
    diff_point = {name: points[0][name] - points[1][name] for name in points[0]}
    diff_boot = {name: boots[0][name] - boots[1][name] for name in boots[0]}
    return cand, summarize(points[1], boots[1], refit[1]), summarize(diff_point, diff_boot, refit[2])


def _check_probs(probs: np.ndarray, n: int, who: str) -> np.ndarray:
    probs = np.asarray(probs, float)
    if probs.ndim != 2 or len(probs) != n:
        raise ValueError(f"{who} action probabilities have shape {probs.shape}; expected ({n}, num_actions)")
    if not np.isfinite(probs).all() or (probs < 0).any():
        raise ValueError(f"{who} action probabilities must be finite and >= 0")
    _first_bad(f"{who} action probabilities must sum to 1", probs.sum(1), np.abs(probs.sum(1) - 1) > 1e-5)
    return probs


# ---- PPO: returns of episodes --------------------------------------------------------------------

def difference_interval(candidate: np.ndarray, baseline: np.ndarray, confidence: float = 0.95,
                        num_bootstrap: int = 1000, seed: int = 0, min_episodes: int = 2) -> Estimate:
    """mean(candidate) - mean(baseline) for two independent samples (e.g. episode returns)."""
    _check_bootstrap_args(num_bootstrap, confidence)
    rng = np.random.default_rng(seed)
    c, b = np.asarray(candidate, float), np.asarray(baseline, float)
    if min(len(c), len(b)) < min_episodes:
        return Estimate(float(c.mean() - b.mean()) if len(c) and len(b) else math.nan, math.nan, math.nan,
                        f"only {min(len(c), len(b))} episodes; at least {min_episodes} are needed for an interval")
    boot = (c[rng.integers(0, len(c), (num_bootstrap, len(c)))].mean(1)
            - b[rng.integers(0, len(b), (num_bootstrap, len(b)))].mean(1))
    alpha = (1.0 - confidence) / 2.0
    return Estimate(float(c.mean() - b.mean()), float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)))


def mean_confidence_interval(values: np.ndarray, confidence: float = 0.95, num_bootstrap: int = 1000,
                             seed: int = 0) -> Estimate:
    """Mean with a bootstrap interval (PPO: returns over evaluation episodes)."""
    _check_bootstrap_args(num_bootstrap, confidence)
    values = np.asarray(values, float)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(num_bootstrap, len(values)))
    boot = values[idx].mean(1)
    alpha = (1.0 - confidence) / 2.0
    return Estimate(float(values.mean()), float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)))
