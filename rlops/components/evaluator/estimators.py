"""Off-policy estimators as a table: each is (name, the per-record terms it sums, its estimate
from those sums). One definition, two engines: the in-memory `compare` below and the Beam
CombineFn (rlops.components.evaluator.beam) both reduce records to `Sums` and call
`comparison_from_sums`.

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

Switch-DR and DR-os carry their terms for every value of a grid (OBP's default, plus a value
the config fixes), with the sums of squares OBP's MSE-based tuning needs ((bias bound)^2 +
variance / n against DR): tau and lambda are picked from sums, so the tuning runs on any engine.
ESS = (sum s w)^2 / sum (s w)^2 also comes from sums.

Intervals: the hash-derived Poisson bootstrap (bootstrap.py) sums the same columns per
replicate; a comparison uses the same multiplicities for every policy, so the interval of a
difference is paired.

The reward-noise floor (0/1 rewards): where a policy's weight sits on a few records of actions
the logger rarely took, a night may hold two or three clicks there, or none, and a bootstrap of
no clicks says "no spread": its interval is far too narrow. So no interval is narrower than
value -/+ z sd, with sd^2 = sum (s c)^2
q (1 - q) / (sum s)^2: the Bernoulli noise the reward model q(x, a) gives each record, times
the record's coefficient c on its reward (w for IPS and DR, w / E_s[w] self-normalized, the
shrunk w of Switch-DR and DR-os). It counts the rare actions logged, not the clicks they got, so
it does not collapse with them; where clicks are plenty the bootstrap spreads at least as much and
stands. No floor for DM, without a reward model, or when any reward is not 0 or 1. A difference's
floor is |sd(candidate) - sd(baseline)|, the least spread a paired difference can have.

Switch-DR and DR-os trade DR's variance for a bias: the records whose weight they switch off or
shrink take the reward model's word, and a bootstrap of their terms spreads with the variance
alone: where a slightly wrong model carries a few records of large weight, their percentile
interval misses the truth far more often than its confidence says. So their interval is joined
with DR's: DR, unbiased whatever the model, keeps it honest where the model is wrong; the point
estimate is unchanged. (OBP's bias bound added to each side is honest too, but about twice DR's
width: a bound on heavy-tailed terms.)

Bounded rewards: a policy's value lies in the range of its rewards, so every interval is clipped
to the observed rewards' range widened to hold [0, 1] (0/1 clicks: exactly [0, 1], even on a night
without a click), and an interval of a difference to [lo - hi, hi - lo]. Only the bounds move: the
point is the estimator's own (IPS can leave the range on little data).

Trust: intervals only with at least `min_records` rows of positive weight,
ESS >= `min_ess` and a valid bootstrap; otherwise every interval is NaN and carries the reason.
Written out (Estimate.as_dict: metrics.json, the CLIs' JSON), an untrusted estimate has a null
value and bounds, its reason, and the estimator's raw output apart under `untrusted_value`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rlops.components.common.feedback import LoggedFeedback, first_bad
from rlops.components.evaluator import bootstrap
from rlops.components.evaluator.estimate import Estimate
from rlops.heads import epsilon_greedy

LOGGING_POLICY = "logging"
# OBP's default hyperparameter grid for Switch-DR's tau and DR-os's lambda.
DEFAULT_GRID = (10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0, math.inf)
DEFAULT_MIN_RECORDS = 100
DEFAULT_MIN_ESS = 30.0
TUNING_DELTA = 0.05  # OBP's confidence for the bias bound


# ---- results (the data, LoggedFeedback, is rlops.components.common.feedback's) ---------------------


@dataclass(frozen=True)
class Diagnostics:
    """What the trust decision looked at, reported beside the estimates."""

    num_records: int
    ess: dict[str, float]  # per policy ("candidate", "baseline")
    hyperparameters: dict[str, dict[str, float]]  # per policy: switch_tau, dr_os_lambda used
    valid_resamples: int
    reason: str | None
    # per policy the reward-noise floor's sd of DR (the module docstring): where it is above the
    # bootstrap's spread, it set the interval
    noise_sd: dict[str, float]

    def as_dict(self) -> dict:
        return {
            "num_records": self.num_records,
            "ess": self.ess,
            "hyperparameters": self.hyperparameters,
            "valid_resamples": self.valid_resamples,
            "trusted": self.reason is None,
            "reason": self.reason,
            "dr_noise_floor_sd": self.noise_sd,
        }


@dataclass(frozen=True)
class Comparison:
    """Estimates of the candidate, of the baseline and of their difference (candidate -
    baseline, paired), and what the trust decision looked at. Unpacks as (candidate, baseline,
    difference) for callers written against the old tuple."""

    candidate: dict[str, Estimate]
    baseline: dict[str, Estimate] | None
    difference: dict[str, Estimate] | None
    diagnostics: Diagnostics

    def __iter__(self):
        return iter((self.candidate, self.baseline, self.difference))

    def __getitem__(self, i: int):
        return (self.candidate, self.baseline, self.difference)[i]


# ---- policies and importance weights -----------------------------------------------------------


def greedy_probs(actions: np.ndarray, num_actions: int) -> np.ndarray:
    """One-hot action probabilities of a deterministic policy."""
    probs = np.zeros((len(actions), num_actions))
    probs[np.arange(len(actions)), actions] = 1.0
    return probs


def epsilon_greedy_probs(
    greedy: np.ndarray, num_actions: int, epsilon: float, allowed: np.ndarray | None = None
) -> np.ndarray:
    """The served policy's exact action probabilities [N, K]: the serving head's
    (rlops.heads.epsilon_greedy, whose propensity serving_default reports); a record that allows
    no action is an error naming it."""
    ok = np.ones((len(greedy), num_actions), bool) if allowed is None else np.asarray(allowed) > 0
    n_allowed = ok.sum(1)
    if (n_allowed == 0).any():
        first_bad("a record allows no action", n_allowed, n_allowed == 0)
    return epsilon_greedy.epsilon_greedy_probs(np.asarray(greedy, int), epsilon, ok)


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
    first_bad(
        "the target policy puts all its probability on actions that action_mask excludes", total[:, 0], total[:, 0] <= 0
    )
    return masked / total


def check_probs(probs: np.ndarray, n: int, who: str) -> np.ndarray:
    probs = np.asarray(probs, float)
    if probs.ndim != 2 or len(probs) != n:
        raise ValueError(f"{who} action probabilities have shape {probs.shape}; expected ({n}, num_actions)")
    if not np.isfinite(probs).all() or (probs < 0).any():
        raise ValueError(f"{who} action probabilities must be finite and >= 0")
    first_bad(f"{who} action probabilities must sum to 1", probs.sum(1), np.abs(probs.sum(1) - 1) > 1e-5)
    return probs


def importance_weights(data: LoggedFeedback, probs: np.ndarray) -> np.ndarray:
    return probs[np.arange(len(data.actions)), data.actions] / data.propensities


def effective_sample_size(importance: np.ndarray, record_weights: np.ndarray | None = None) -> float:
    """(sum v)^2 / sum v^2 with v = record weight x importance weight (n when all v are equal)."""
    v = importance if record_weights is None else importance * record_weights
    denom = float((v**2).sum())
    return float(v.sum()) ** 2 / denom if denom > 0 else 0.0


# ---- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordTerms:
    """What every per-record term is built from, for one policy on a batch of records."""

    w: np.ndarray  # importance weight pi(a|x) / p
    r: np.ndarray  # reward
    dm: np.ndarray  # sum_a pi(a|x) q(x, a)   (0 without a reward model)
    res: np.ndarray  # r - q(x, a)             (0 without a reward model)


@dataclass(frozen=True)
class PolicySums:
    """s-weighted sums of one policy's terms (scalars for the point, [B] per replicate), the grid
    terms at the chosen tau / lambda."""

    total: np.ndarray
    w: np.ndarray
    wr: np.ndarray
    dm: np.ndarray
    wres: np.ndarray
    switch: np.ndarray
    os: np.ndarray


@dataclass(frozen=True)
class CoefficientSums:
    """sum (s c)^2 q (1 - q) over records for each kind of reward coefficient c."""

    w: np.float64  # c = w (IPS, DR)
    switch: np.float64  # c = w 1{w <= tau} at the chosen tau
    os: np.float64  # c = DR-os's shrunk w at the chosen lambda
    mean_w: np.float64  # E_s[w]: the self-normalized divide by it (0 gives NaN, not an error)


@dataclass(frozen=True)
class Estimator:
    name: str
    terms: tuple[str, ...]  # the sums it reads (PolicySums fields)
    needs_model: bool
    from_sums: Callable[[PolicySums], np.ndarray]
    # sum (s c)^2 q (1 - q) of its coefficients c on the rewards; None: no observed reward (DM)
    noise: Callable[[CoefficientSums], np.float64] | None
    # biased toward the reward model by design (Switch-DR, DR-os): its interval is joined with DR's
    joins_dr_interval: bool = False


# Plain terms: name -> per-record value. Grid terms: name -> per-record value at grid value g.
TERMS: dict[str, Callable[[RecordTerms], np.ndarray]] = {
    "w": lambda t: t.w,
    "wr": lambda t: t.w * t.r,
    "dm": lambda t: t.dm,
    "wres": lambda t: t.w * t.res,
}


def _os_weight(w: np.ndarray, lam: float) -> np.ndarray:
    return w if math.isinf(lam) else lam * w / (w**2 + lam)


# Shrunk importance weights w_hat(w, g) of the tuned estimators: their term is w_hat * (r - q).
GRID_TERMS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "switch": lambda w, tau: w * (w <= tau),
    "os": _os_weight,
}
HYPERPARAMETER = {"switch": "switch_tau", "os": "dr_os_lambda"}


def bernoulli_variance(t: RecordTerms) -> np.ndarray:
    """q (1 - q) at the logged action, q = r - res the reward model's prediction (clipped to
    [0, 1]; 0 without a reward model, where res is 0 and q = r)."""
    q = np.clip(t.r - t.res, 0.0, 1.0)
    return q * (1.0 - q)


def non_binary(rewards: np.ndarray, s: np.ndarray) -> np.ndarray:
    """1 for a weighted record whose reward is not 0 or 1 (any one turns the floor off)."""
    return ((s > 0) & (rewards != 0) & (rewards != 1)).astype(float)


TABLE: tuple[Estimator, ...] = (
    Estimator("ips", ("total", "wr"), False, lambda t: t.wr / t.total, lambda c: c.w),
    Estimator("snips", ("w", "wr"), False, lambda t: t.wr / t.w, lambda c: c.w / c.mean_w**2),
    Estimator("dm", ("total", "dm"), True, lambda t: t.dm / t.total, None),
    Estimator("dr", ("total", "dm", "wres"), True, lambda t: (t.dm + t.wres) / t.total, lambda c: c.w),
    Estimator(
        "sndr",
        ("total", "w", "dm", "wres"),
        True,
        lambda t: t.dm / t.total + t.wres / t.w,
        lambda c: c.w / c.mean_w**2,
    ),
    Estimator(
        "switch_dr", ("total", "dm", "switch"), True, lambda t: (t.dm + t.switch) / t.total, lambda c: c.switch, True
    ),
    Estimator("dr_os", ("total", "dm", "os"), True, lambda t: (t.dm + t.os) / t.total, lambda c: c.os, True),
)
ESTIMATORS = tuple(e.name for e in TABLE)
MODEL_FREE = tuple(e.name for e in TABLE if not e.needs_model)


# ---- per-record columns and their layout -------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where each sum lives. Columns: [s] + per policy the bootstrapped block (plain terms, then
    each grid term at every grid value) | per policy the point-only block ((s w)^2 for ESS, then
    per grid term and value the tuning squares, then the reward-noise floor's (s w)^2 q (1 - q) and
    (s w_hat)^2 q (1 - q) per grid value) | [count of weighted rewards not 0 or 1, count of records
    with s > 0]."""

    num_policies: int
    grids: Grids  # one grid per GRID_TERMS entry

    @property
    def grid_columns(self) -> int:
        return sum(len(g) for g in self.grids)

    def grid_offset(self, term: str) -> int:
        """Position of `term`'s first grid value among the grid columns."""
        k = list(GRID_TERMS).index(term)
        return sum(len(g) for g in self.grids[:k])

    @property
    def boot_block(self) -> int:
        return len(TERMS) + self.grid_columns

    @property
    def extra_block(self) -> int:
        return self.noise_offset + 1 + self.grid_columns

    @property
    def noise_offset(self) -> int:
        """Within a policy's point-only block: where the reward-noise floor's sums start."""
        return 1 + 2 * self.grid_columns

    @property
    def boot_width(self) -> int:
        return 1 + self.num_policies * self.boot_block

    @property
    def width(self) -> int:
        return self.boot_width + self.num_policies * self.extra_block + 2

    def boot_slice(self, p: int) -> slice:
        start = 1 + p * self.boot_block
        return slice(start, start + self.boot_block)

    def extra_slice(self, p: int) -> slice:
        start = self.boot_width + p * self.extra_block
        return slice(start, start + self.extra_block)


Grids = tuple[tuple[float, ...], ...]


def make_grids(grid: Sequence[float], switch_tau: float | None = None, dr_os_lambda: float | None = None) -> Grids:
    """Per grid term the sorted grid with inf (plain DR) and the value the config fixes, if any."""

    def one(fixed):
        return tuple(sorted(set(map(float, grid)) | {math.inf} | ({float(fixed)} if fixed is not None else set())))

    return one(switch_tau), one(dr_os_lambda)


def record_terms(
    actions: np.ndarray, rewards: np.ndarray, propensities: np.ndarray, policy: np.ndarray | str, q: np.ndarray | None
) -> RecordTerms:
    """One policy's RecordTerms. LOGGING_POLICY: the policy that logged the data on its own data
    (w = 1, no correction: every estimator is the observed mean reward)."""
    r = np.asarray(rewards, float)
    zero = np.zeros(len(r))
    if isinstance(policy, str):
        return RecordTerms(np.ones(len(r)), r, r if q is not None else zero, zero)
    rows = np.arange(len(r))
    w = policy[rows, actions] / propensities
    if q is None:
        return RecordTerms(w, r, zero, zero)
    return RecordTerms(w, r, (policy * q).sum(1), r - q[rows, actions])


def policy_columns(t: RecordTerms, s: np.ndarray, grids: Grids) -> tuple[np.ndarray, np.ndarray]:
    """(s-weighted bootstrapped block [n, boot_block], point-only block [n, extra_block])."""
    boot = [s * fn(t) for fn in TERMS.values()]
    extra = [(s * t.w) ** 2]  # sums to ESS's denominator
    wres = t.w * t.res
    v = bernoulli_variance(t)
    noise = [(s * t.w) ** 2 * v]
    for shrink, values in zip(GRID_TERMS.values(), grids):
        for g in values:
            shrunk = shrink(t.w, g)
            a = shrunk * t.res
            boot.append(s * a)
            extra += [s * (t.dm + a) ** 2, s * (wres - a) ** 2]
            noise.append((s * shrunk) ** 2 * v)
    return np.stack(boot, 1), np.stack(extra + noise, 1)


def record_columns(
    actions: np.ndarray,
    rewards: np.ndarray,
    propensities: np.ndarray,
    weights: np.ndarray,
    policies: Sequence[np.ndarray | str],
    q: np.ndarray | None,
    grids: Grids,
) -> np.ndarray:
    """[n, Layout.width] the per-record columns of `policies` (already masked probabilities or
    LOGGING_POLICY): what both engines sum."""
    s = np.asarray(weights, float)
    blocks = [policy_columns(record_terms(actions, rewards, propensities, p, q), s, grids) for p in policies]
    return np.concatenate(
        [s[:, None]]
        + [b for b, _ in blocks]
        + [e for _, e in blocks]
        + [non_binary(np.asarray(rewards, float), s)[:, None], (s > 0).astype(float)[:, None]],
        1,
    )


RewardRange = tuple[float, float]


def observed_range(rewards: np.ndarray) -> RewardRange | None:
    """(min, max) of the rewards (None for no records)."""
    r = np.asarray(rewards, float)
    return (float(r.min()), float(r.max())) if len(r) else None


def merge_ranges(a: RewardRange | None, b: RewardRange | None) -> RewardRange | None:
    if a is None or b is None:
        return a if b is None else b
    return min(a[0], b[0]), max(a[1], b[1])


def value_bounds(observed: RewardRange | None) -> RewardRange | None:
    """The range a policy's value lies in: the observed rewards' range widened to hold [0, 1], so
    0/1 rewards (clicks) give exactly [0, 1] even on a night without a click. None: unknown."""
    if observed is None or not all(math.isfinite(v) for v in observed):
        return None
    return min(observed[0], 0.0), max(observed[1], 1.0)


@dataclass
class Sums:
    """The reduced data: point sums [width] and bootstrap sums [B, boot_width] of the columns,
    and the rewards' observed (min, max) (None: not tracked; the intervals are then not clipped)."""

    layout: Layout
    point: np.ndarray
    boot: np.ndarray
    reward_range: RewardRange | None = None

    @classmethod
    def of(
        cls,
        columns: np.ndarray,
        keys: np.ndarray,
        layout: Layout,
        num_bootstrap: int,
        seed: int,
        reward_range: RewardRange | None = None,
    ) -> "Sums":
        boot = bootstrap.bootstrap_sums(columns[:, : layout.boot_width], keys, num_bootstrap, seed)
        return cls(layout, columns.sum(0), boot, reward_range)

    def merge(self, other: "Sums") -> "Sums":
        # A part that did not track its rewards' range makes the whole range unknown.
        both = self.reward_range is not None and other.reward_range is not None
        rng = merge_ranges(self.reward_range, other.reward_range) if both else None
        return Sums(self.layout, self.point + other.point, self.boot + other.boot, rng)


# ---- from sums to estimates ------------------------------------------------------------------------


def tune(point: np.ndarray, layout: Layout, p: int, term: str, delta: float = TUNING_DELTA) -> int:
    """OBP's MSE-based tuning from sums: for each grid value, (bias bound)^2 + variance / n, where
    the bias against DR is |E[(w - w_hat)(r - q)]| plus a high-probability bound on its deviation.
    Returns the index of the best grid value (the smallest on ties)."""
    values = layout.grids[list(GRID_TERMS).index(term)]
    offset = layout.grid_offset(term)
    boot, extra = point[layout.boot_slice(p)], point[layout.extra_slice(p)]
    names = list(TERMS)
    n = point[0]
    sum_dm, sum_wres = boot[names.index("dm")], boot[names.index("wres")]
    best, best_score = len(values) - 1, math.inf
    for i in range(len(values)):
        a = boot[len(TERMS) + offset + i]
        sq, gap_sq = extra[1 + 2 * (offset + i)], extra[2 + 2 * (offset + i)]
        mean = (sum_dm + a) / n
        var = max(sq - n * mean**2, 0.0) / max(n - 1, 1)
        gap_mean = (sum_wres - a) / n
        gap_var = max(gap_sq - n * gap_mean**2, 0.0) / max(n - 1, 1)
        bias = abs(gap_mean) + math.sqrt(2 * math.log(2 / delta) * gap_var / n)
        score = bias**2 + var / n
        if score < best_score:
            best, best_score = i, score
    return best


def _policy_sums(sums: np.ndarray, layout: Layout, p: int, chosen: dict[str, int]) -> PolicySums:
    """PolicySums of policy p from point sums [width] or bootstrap sums [B, boot_width]."""
    block = sums[..., layout.boot_slice(p)]
    plain = {name: block[..., j] for j, name in enumerate(TERMS)}
    grid = {term: block[..., len(TERMS) + layout.grid_offset(term) + chosen[term]] for term in GRID_TERMS}
    return PolicySums(total=sums[..., 0], **plain, **grid)


def estimates_from_sums(t: PolicySums, with_model: bool) -> dict[str, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return {e.name: e.from_sums(t) for e in TABLE if with_model or not e.needs_model}


@dataclass(frozen=True)
class PolicyResult:
    point: dict[str, float]
    boot: dict[str, np.ndarray]
    ess: float
    hyperparameters: dict[str, float]
    noise_sd: dict[str, float]  # per estimator the reward-noise floor's standard deviation


def noise_floor(sums: Sums, p: int, chosen: dict[str, int]) -> dict[str, float]:
    """Per estimator the standard deviation of its point from the reward model's Bernoulli noise
    alone (the module docstring's floor; 0 for DM and where any reward is not 0 or 1)."""
    layout, point = sums.layout, sums.point
    extra = point[layout.extra_slice(p)]
    total = float(point[0])
    if total <= 0 or point[-2] > 0:  # no weighted records, or a reward that is not 0 or 1
        return {e.name: 0.0 for e in TABLE}
    grid = extra[layout.noise_offset + 1 :]
    coefficients = CoefficientSums(
        w=np.float64(extra[layout.noise_offset]),
        switch=np.float64(grid[layout.grid_offset("switch") + chosen["switch"]]),
        os=np.float64(grid[layout.grid_offset("os") + chosen["os"]]),
        mean_w=np.float64(point[layout.boot_slice(p)][list(TERMS).index("w")] / total),
    )
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for e in TABLE:
            scale = 0.0 if e.noise is None else float(e.noise(coefficients))
            out[e.name] = math.sqrt(scale) / total if math.isfinite(scale) and scale > 0 else 0.0
    return out


def policy_result(
    sums: Sums, p: int, with_model: bool, is_logging: bool, fixed: dict[str, float | None]
) -> PolicyResult:
    """Point and bootstrap estimates of policy p, its ESS and the tau / lambda used."""
    layout = sums.layout
    chosen, hps = {}, {}
    for (term, key), values in zip(HYPERPARAMETER.items(), layout.grids):
        if not with_model or is_logging:
            chosen[term] = len(values) - 1
        elif (value := fixed.get(key)) is not None:
            chosen[term] = values.index(float(value))
        else:
            chosen[term] = tune(sums.point, layout, p, term)
        if with_model and not is_logging:
            hps[key] = float(values[chosen[term]])
    sum_w = sums.point[layout.boot_slice(p)][list(TERMS).index("w")]
    sum_w2 = sums.point[layout.extra_slice(p)][0]
    ess = float(sum_w**2 / sum_w2) if sum_w2 > 0 else 0.0
    point = {
        k: float(v) for k, v in estimates_from_sums(_policy_sums(sums.point, layout, p, chosen), with_model).items()
    }
    boot = estimates_from_sums(_policy_sums(sums.boot, layout, p, chosen), with_model)
    floor = noise_floor(sums, p, chosen)
    return PolicyResult(point, boot, ess, hps, {name: floor[name] for name in point})


@dataclass(frozen=True)
class TrustRule:
    num_bootstrap: int = 500
    confidence: float = 0.95
    min_records: int = DEFAULT_MIN_RECORDS
    min_ess: float = DEFAULT_MIN_ESS
    switch_tau: float | None = None
    dr_os_lambda: float | None = None


def comparison_from_sums(
    sums: Sums,
    candidate: int,
    baseline: int | None,
    logging: Sequence[bool],
    with_model: bool,
    rule: TrustRule,
    dm_refits: tuple[np.ndarray, float] | None = None,
) -> Comparison:
    """The Comparison of policy `candidate` against policy `baseline` (indices into the policies
    the sums were taken over; None: the candidate alone). `dm_refits`: refit_dm_replicates'
    output for (candidate[, baseline]); DM's intervals then come from those."""
    fixed = {"switch_tau": rule.switch_tau, "dr_os_lambda": rule.dr_os_lambda}
    who = [("candidate", candidate)] + ([("baseline", baseline)] if baseline is not None else [])
    results = {name: policy_result(sums, p, with_model, logging[p], fixed) for name, p in who}
    finite = np.all([np.isfinite(v) for r in results.values() for v in r.boot.values()], axis=0)
    valid = int(finite.sum())
    num_records = int(round(sums.point[-1]))
    ess = {name: r.ess for name, r in results.items()}
    reason = trust_reason(num_records, ess, valid, rule)
    diagnostics = Diagnostics(
        num_records,
        ess,
        {name: r.hyperparameters for name, r in results.items()},
        valid,
        reason,
        {name: r.noise_sd["dr"] for name, r in results.items() if "dr" in r.noise_sd},
    )
    alpha = (1.0 - rule.confidence) / 2.0
    z = bootstrap.normal_quantile(1 - alpha)
    refit_scale = 1.0 if dm_refits is None else dm_refits[1]
    bounds = value_bounds(sums.reward_range)
    if bounds is not None:  # a difference of two values in [lo, hi] lies in [lo - hi, hi - lo]
        diff_bounds: RewardRange | None = (bounds[0] - bounds[1], bounds[1] - bounds[0])
    else:
        diff_bounds = None

    def interval(value: float, replicates: np.ndarray, floor_sd: float) -> Estimate:
        """The percentile interval, widened to value -/+ z floor_sd where the replicates spread less
        than the reward-noise floor."""
        lower, upper = float(np.quantile(replicates, alpha)), float(np.quantile(replicates, 1 - alpha))
        if len(replicates) > 1 and floor_sd > float(np.std(replicates, ddof=1)):
            lower, upper = min(lower, value - z * floor_sd), max(upper, value + z * floor_sd)
        return Estimate(value, lower, upper)

    def summarize(
        point: dict[str, float],
        boot: dict[str, np.ndarray],
        refits: np.ndarray | None,
        floor: dict[str, float],
        within: RewardRange | None,
    ):
        if reason is not None:
            return {name: Estimate(float(point[name]), math.nan, math.nan, reason) for name in point}
        out = {name: interval(float(point[name]), boot[name][finite], floor[name]) for name in point}
        for e in TABLE:
            if e.joins_dr_interval and e.name in out:
                own, dr = out[e.name], out["dr"]
                out[e.name] = Estimate(own.value, min(own.lower, dr.lower), max(own.upper, dr.upper))
        if refits is not None and "dm" in out:
            lower, upper = bootstrap.refit_interval(out["dm"].value, refits, refit_scale, rule.confidence)
            out["dm"] = Estimate(
                out["dm"].value, lower, upper, None if math.isfinite(lower) else "too few valid reward-model refits"
            )
        return out if within is None else {name: clip_interval(e, within) for name, e in out.items()}

    refit: list[np.ndarray | None] = [None, None, None] if dm_refits is None else [dm_refits[0][:, 0], None, None]
    if dm_refits is not None and baseline is not None:
        refit[1:] = dm_refits[0][:, 1], dm_refits[0][:, 0] - dm_refits[0][:, 1]
    c = results["candidate"]
    cand = summarize(c.point, c.boot, refit[0], c.noise_sd, bounds)
    if baseline is None:
        return Comparison(cand, None, None, diagnostics)
    b = results["baseline"]
    diff_point = {name: c.point[name] - b.point[name] for name in c.point}
    diff_boot = {name: c.boot[name] - b.boot[name] for name in c.boot}
    # sd(X - Y) >= |sd X - sd Y|: the least reward-noise spread the paired difference can have.
    diff_floor = {name: abs(c.noise_sd[name] - b.noise_sd[name]) for name in c.point}
    return Comparison(
        cand,
        summarize(b.point, b.boot, refit[1], b.noise_sd, bounds),
        summarize(diff_point, diff_boot, refit[2], diff_floor, diff_bounds),
        diagnostics,
    )


def clip_interval(e: Estimate, within: RewardRange) -> Estimate:
    """The interval's bounds moved into `within` (NaN bounds stay NaN); the point is the
    estimator's own and is left as it is."""
    lo, hi = within
    if not (math.isfinite(e.lower) and math.isfinite(e.upper)):
        return e
    return Estimate(e.value, min(max(e.lower, lo), hi), max(min(e.upper, hi), lo), e.reason)


def trust_reason(num_records: int, ess: dict[str, float], valid: int, rule: TrustRule) -> str | None:
    """Why the data cannot support an interval, or None."""
    if num_records < rule.min_records:
        return (
            f"only {num_records} eval records (with weight > 0); at least {rule.min_records} are needed "
            f"for an interval (min_eval_records); an estimate needs more eval records (a larger eval "
            f"share or more logs)"
        )
    low = [f"{who} {value:.1f}" for who, value in ess.items() if value < rule.min_ess]
    if low:
        return (
            f"effective sample size of the importance weights too small: {', '.join(low)} "
            f"< {rule.min_ess:g} (min_ess); the logs rarely took the actions this policy takes; an "
            f"estimate needs more eval records, more exploration in the logs, or a smaller candidate "
            f"step (a policy closer to the logging one, or a higher serving_epsilon)"
        )
    if valid < 0.99 * rule.num_bootstrap:
        return (
            f"invalid bootstrap: only {valid} of {rule.num_bootstrap} resamples give finite estimates; "
            f"an estimate needs more eval records"
        )
    return None


# ---- the in-memory engine --------------------------------------------------------------------------


def prepare_policy(policy: np.ndarray | str, data: LoggedFeedback, q: np.ndarray | None, who: str):
    """Checked, masked probabilities (or LOGGING_POLICY)."""
    if isinstance(policy, str):
        if policy != LOGGING_POLICY:
            raise ValueError(f"{who} policy must be action probabilities or '{LOGGING_POLICY}', got '{policy}'")
        return policy
    probs = apply_action_mask(check_probs(policy, len(data.actions), who), data.action_mask)
    if q is not None and q.shape != probs.shape:
        raise ValueError(f"q has shape {q.shape}; {who} action probabilities {probs.shape}")
    return probs


def data_sums(
    data: LoggedFeedback,
    policies: Sequence[np.ndarray | str],
    q: np.ndarray | None,
    num_bootstrap: int,
    seed: int,
    grids: Grids,
    chunk: int = 65536,
) -> Sums:
    """Sums of every policy's columns over `data`, in chunks of records (memory O(chunk))."""
    n = len(data.actions)
    if q is not None and (q.ndim != 2 or len(q) != n):
        raise ValueError(f"q has shape {q.shape}; expected ({n}, num_actions)")
    names = ("candidate", "baseline") + tuple(f"policy {i}" for i in range(2, len(policies)))
    prepared = [prepare_policy(p, data, q, names[i]) for i, p in enumerate(policies)]
    layout = Layout(len(policies), grids)
    s, keys = data.record_weights, data.bootstrap_keys
    total = None
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        cols = record_columns(
            data.actions[rows],
            data.rewards[rows],
            data.propensities[rows],
            s[rows],
            [p if isinstance(p, str) else p[rows] for p in prepared],
            None if q is None else q[rows],
            grids,
        )
        part = Sums.of(cols, keys[..., rows], layout, num_bootstrap, seed, observed_range(data.rewards[rows]))
        total = part if total is None else total.merge(part)
    assert total is not None  # LoggedFeedback has at least one record
    return total


def compare(
    data: LoggedFeedback,
    candidate_probs: np.ndarray | str,
    baseline_probs: np.ndarray | str | None,
    q: np.ndarray | None = None,
    num_bootstrap: int = 500,
    confidence: float = 0.95,
    seed: int = 0,
    min_records: int = DEFAULT_MIN_RECORDS,
    min_ess: float = DEFAULT_MIN_ESS,
    switch_tau: float | None = None,
    dr_os_lambda: float | None = None,
    grid: tuple[float, ...] = DEFAULT_GRID,
    dm_refits: tuple[np.ndarray, float] | None = None,
) -> Comparison:
    """Estimates of candidate and baseline and of their difference (candidate - baseline), all
    from the same bootstrap resamples. LOGGING_POLICY as either policy stands for the policy that
    logged the data (its value is the observed mean reward). Where the data cannot support an
    interval (too few records, too small an ESS, invalid bootstrap) every interval is NaN and
    carries the reason (Comparison.diagnostics says what was looked at)."""
    bootstrap.check_bootstrap_args(num_bootstrap, confidence)
    policies = [candidate_probs] + ([baseline_probs] if baseline_probs is not None else [])
    sums = data_sums(data, policies, q, num_bootstrap, seed, make_grids(grid, switch_tau, dr_os_lambda))
    rule = TrustRule(num_bootstrap, confidence, min_records, min_ess, switch_tau, dr_os_lambda)
    return comparison_from_sums(
        sums,
        0,
        1 if baseline_probs is not None else None,
        [isinstance(p, str) for p in policies],
        q is not None,
        rule,
        dm_refits,
    )


def estimate(
    data: LoggedFeedback,
    target_probs: np.ndarray | str,
    q: np.ndarray | None = None,
    num_bootstrap: int = 500,
    confidence: float = 0.95,
    seed: int = 0,
    **trust,
) -> dict[str, Estimate]:
    """Point estimates with bootstrap intervals for every estimator available (all but IPS and
    SNIPS need the reward model predictions q). `trust`: min_records, min_ess, switch_tau, ..."""
    return compare(data, target_probs, None, q, num_bootstrap, confidence, seed, **trust).candidate
