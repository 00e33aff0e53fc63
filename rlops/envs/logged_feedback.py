"""Production-shaped bandit logs with a known ground truth (numpy only, vectorized).

Shaped like public e-commerce recommendation logs (Open Bandit Dataset style): four hashed
32-hex-char categorical user columns, a few float user columns, 30-80 items whose features live in
a separate item table, 3 display positions and a click-through rate of 0.3-1%.

    gen = LogGenerator(LogConfig(logging="thompson", seed=0))
    logs = gen.sample(10_000, seed=1)      # LoggedBandit: impressions + items tables
    logs.to_files("/tmp/logs", format="parquet")
    v = gen.true_value(lambda ctx: np.full((len(ctx["position"]), gen.num_items), 1 / gen.num_items))

The decision is WHICH ITEM to show (K = number of items, `action` indexes `items["item_id"]`);
the display position is part of the context. Clicks follow a known logistic model

    logit(x, a, p) = b0 + pos_bias[p] + item_bias[a] + u(x) . v(a)

where u(x) sums embeddings of the user's categorical values plus a linear map of its floats and
v(a) comes mostly from the item's features (category embedding, log-price), so per-arm features
carry signal. b0 is calibrated so the uniform policy's CTR equals `LogConfig.ctr`.

Contexts come from a finite population of users (each with fixed features) drawn with known
frequencies and a uniform position, so the value of ANY policy is an exact finite sum:
`true_value(policy_fn)` = sum_x P(x) sum_a pi(a | x) CTR(x, a). A policy_fn maps context columns
(a dict of equal-length numpy arrays: user columns, floats, `position`) to [N, K] probabilities.

The logging policy is uniform or Thompson-sampling-like: per position, the probability that each
item wins a Beta-posterior draw (posterior from a simulated earlier period), mixed with a little
uniform exploration so every item keeps a positive propensity. Like OBD's, its propensities
depend on (item, position) only.

Varying candidate sets (`LogConfig(candidates=(k_min, k_max))`): each decision shows one of
`num_candidate_sets` candidate lists (k_min..k_max distinct items in random order, drawn once
per world, each equally likely), so the population stays finite and `true_value` exact. Then
the action is the chosen item's INDEX AMONG THE SHOWN CANDIDATES (as ExperienceGen writes it);
the logging policy runs over the shown items (Thompson: each shown item's probability of
winning the posterior draw among them, mixed with uniform exploration over them, so w =
pi / mu stays <= K / exploration for any pi); impressions carry a `candidates` column
('|'-joined item ids) and contexts carry `candidates` [N, k_max] (item indices, -1 = padding),
`num_actions` and `candidate_set` (which list); policy_fns return [N, k_max] probabilities over
the candidate slots (0 on padding).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

Columns = dict[str, np.ndarray]
PolicyFn = Callable[[Columns], np.ndarray]

LOGGING_POLICIES = ("uniform", "thompson")
FILE_FORMATS = ("csv", "jsonl", "parquet")
ITEM_CATEGORIES = ("apparel", "shoes", "bags", "accessories", "sport", "home")
CANDIDATE_SEPARATOR = "|"  # as ExperienceGen's bandit_columns.candidates reads them


def hashed_values(prefix: str, n: int) -> np.ndarray:
    """n distinct 32-hex-char strings, stable across runs (md5 of prefix and index)."""
    return np.array([hashlib.md5(f"{prefix}:{i}".encode()).hexdigest() for i in range(n)])


@dataclass(frozen=True)
class LogConfig:
    num_items: int = 34
    num_positions: int = 3
    user_cardinalities: tuple[int, ...] = (5, 11, 23, 47)  # one hashed categorical column each
    num_user_floats: int = 3
    num_users: int = 2_000  # size of the user population contexts are drawn from
    ctr: float = 0.005  # mean click rate of the uniform policy (calibrated exactly)
    logging: str = "thompson"  # "uniform" or "thompson"
    exploration: float = 0.1  # thompson: mixed-in uniform share, keeps propensities >= exploration / K
    prior_impressions: int = 20_000  # thompson: simulated earlier impressions the posterior is fitted on
    latent_dim: int = 4
    interaction_scale: float = 0.9  # spread of user x item effects on the logit
    position_bias: tuple[float, ...] = (0.0, -0.35, -0.7)
    seed: int = 0
    candidates: tuple[int, int] | None = None  # (k_min, k_max) shown items per decision; None: every item
    num_candidate_sets: int = 64  # distinct candidate lists decisions draw from

    def __post_init__(self):
        if self.logging not in LOGGING_POLICIES:
            raise ValueError(
                f"LogConfig.logging: unknown logging policy '{self.logging}'; "
                f"choose one of {', '.join(LOGGING_POLICIES)}"
            )
        if self.num_items < 2:
            raise ValueError(f"LogConfig.num_items must be >= 2, got {self.num_items}")
        if self.num_positions < 1 or len(self.position_bias) < self.num_positions:
            raise ValueError(
                f"LogConfig.position_bias needs one entry per position "
                f"({self.num_positions}), got {len(self.position_bias)}"
            )
        if not self.user_cardinalities or min(self.user_cardinalities) < 2:
            raise ValueError(f"LogConfig.user_cardinalities must be >= 2 each, got {self.user_cardinalities}")
        if not 0.0 < self.ctr < 0.5:
            raise ValueError(f"LogConfig.ctr must be in (0, 0.5), got {self.ctr}")
        if not 0.0 < self.exploration <= 1.0:
            raise ValueError(f"LogConfig.exploration must be in (0, 1], got {self.exploration}")
        if self.num_users < 1:
            raise ValueError(f"LogConfig.num_users must be >= 1, got {self.num_users}")
        if self.candidates is not None:
            lo, hi = self.candidates
            if not 1 <= lo <= hi <= self.num_items:
                raise ValueError(
                    f"LogConfig.candidates must be (k_min, k_max) with 1 <= k_min <= k_max <= "
                    f"num_items ({self.num_items}), got {self.candidates}"
                )
            if self.num_candidate_sets < 1:
                raise ValueError(f"LogConfig.num_candidate_sets must be >= 1, got {self.num_candidate_sets}")


@dataclass
class LoggedBandit:
    """One sample of logs: `impressions` (one row per shown item) and the `items` table.

    `expected_ctr` [N, K] and `logging_probs` [N, K] are the ground truth behind each row (not
    columns a production log would have; tests and benchmarks use them)."""

    impressions: Columns
    items: Columns
    user_columns: tuple[str, ...]
    float_columns: tuple[str, ...]
    expected_ctr: np.ndarray = field(repr=False)
    logging_probs: np.ndarray = field(repr=False)
    # Varying candidates: [N, k_max] item indices (-1 = padding); expected_ctr and logging_probs
    # are then over each record's candidate slots.
    candidates: np.ndarray | None = field(default=None, repr=False)
    candidate_set: np.ndarray | None = field(default=None, repr=False)  # [N] which candidate list

    def __len__(self) -> int:
        return len(self.impressions["action"])

    @property
    def context_columns(self) -> tuple[str, ...]:
        return self.user_columns + self.float_columns + ("position",)

    def contexts(self) -> Columns:
        """The columns a policy sees (user columns, floats, position; candidates and num_actions
        when they vary)."""
        out = {k: self.impressions[k] for k in self.context_columns}
        if self.candidates is not None:
            varying: dict[str, Any] = {
                "candidates": self.candidates,
                "candidate_set": self.candidate_set,
                "num_actions": (self.candidates >= 0).sum(1).astype(np.int64),
            }
            out.update(varying)
        return out

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.impressions), pd.DataFrame(self.items)

    def to_files(self, directory: str, format: str = "csv") -> dict[str, str]:
        """Writes impressions.<ext> and items.<ext>; returns their paths by table name."""
        if format not in FILE_FORMATS:
            raise ValueError(f"to_files: unknown format '{format}'; choose one of {', '.join(FILE_FORMATS)}")
        os.makedirs(directory, exist_ok=True)
        paths = {}
        for name, frame in zip(("impressions", "items"), self.to_pandas()):
            path = os.path.join(directory, f"{name}.{format}")
            if format == "csv":
                frame.to_csv(path, index=False)
            elif format == "jsonl":
                frame.to_json(path, orient="records", lines=True, double_precision=15)  # default 10 digits
            else:
                frame.to_parquet(path, index=False)
            paths[name] = path
        return paths


class LogGenerator:
    """The world: user population, items, click model and logging policy, fixed by `config.seed`."""

    def __init__(self, config: LogConfig | None = None):
        self.config = c = config or LogConfig()
        rng = np.random.default_rng(c.seed)
        k, d = c.num_items, c.latent_dim
        self.num_items, self.num_positions = k, c.num_positions
        self.user_columns = tuple(f"user_feature_{j}" for j in range(len(c.user_cardinalities)))
        self.float_columns = tuple(f"user_float_{j}" for j in range(c.num_user_floats))
        self.vocabularies = {
            col: hashed_values(f"{c.seed}:{col}", n) for col, n in zip(self.user_columns, c.user_cardinalities)
        }
        self._index_of = {col: {v: i for i, v in enumerate(vocab)} for col, vocab in self.vocabularies.items()}

        # User population: skewed category frequencies (a few dominant segments, a long tail).
        self.user_codes = np.stack(
            [rng.choice(n, c.num_users, p=rng.dirichlet(np.full(n, 0.7))) for n in c.user_cardinalities], 1
        )  # [U, C]
        # Rounded as written to files, so a context read back gives exactly the same click probabilities.
        self.user_floats = np.round(rng.normal(size=(c.num_users, c.num_user_floats)), 6)  # [U, F]
        self.user_weights = rng.dirichlet(np.full(c.num_users, 2.0))  # P(user)

        # Items: mixed numeric and categorical features; latent vector driven by them.
        category = rng.integers(0, len(ITEM_CATEGORIES), k)
        brands = hashed_values(f"{c.seed}:brand", 8)
        brand = rng.integers(0, len(brands), k)
        price = np.round(np.exp(rng.normal(3.5, 0.6, k)), 2)
        popularity = rng.beta(2, 5, k)
        cat_emb = rng.normal(size=(len(ITEM_CATEGORIES), d))
        price_dir = rng.normal(size=d)
        z = (np.log(price) - np.log(price).mean()) / max(np.log(price).std(), 1e-9)
        self.item_latent = cat_emb[category] + 0.5 * z[:, None] * price_dir + 0.3 * rng.normal(size=(k, d))
        self.item_bias = 0.8 * (popularity - popularity.mean()) + 0.15 * rng.normal(size=k)
        self.items: Columns = {
            "item_id": np.array([f"item_{i:03d}" for i in range(k)]),
            "item_category": np.array(ITEM_CATEGORIES)[category],
            "item_brand": brands[brand],
            "item_price": price,
            "item_popularity": np.round(popularity, 4),
        }

        # User side of the interaction: category embeddings + a linear map of the floats.
        self._cat_emb = [rng.normal(size=(n, d)) / np.sqrt(len(c.user_cardinalities)) for n in c.user_cardinalities]
        self._float_map = rng.normal(size=(c.num_user_floats, d)) * 0.4
        self._pos_bias = np.asarray(c.position_bias[: c.num_positions], float)
        self._b0 = 0.0
        self._b0 = self._calibrate_intercept(c.ctr)
        self.logging_table = self._logging_table(rng)  # [P, K]
        self.candidate_sets = self._candidate_sets() if c.candidates else None  # [S, k_max], -1 = pad

    @property
    def varying(self) -> bool:
        return self.candidate_sets is not None

    @property
    def _sets(self) -> np.ndarray:
        """candidate_sets, where they vary (every caller checks `varying` first)."""
        assert self.candidate_sets is not None, "fixed candidates: no candidate sets"
        return self.candidate_sets

    @property
    def num_slots(self) -> int:
        """Width of a policy's probabilities: k_max candidate slots, or every item."""
        return self._sets.shape[1] if self.varying else self.num_items

    def _candidate_sets(self) -> np.ndarray:
        c = self.config
        rng = np.random.default_rng([c.seed, 7])  # its own stream: the fixed-candidate world is unchanged
        assert c.candidates is not None  # called only when candidates vary
        lo, hi = c.candidates
        sets = np.full((c.num_candidate_sets, hi), -1, np.int64)
        for j in range(c.num_candidate_sets):
            k = int(rng.integers(lo, hi + 1))
            sets[j, :k] = rng.permutation(self.num_items)[:k]
        # The logging policy per (candidate list, position) over its slots: [S, P, k_max].
        self.set_logging = np.zeros((len(sets), self.num_positions, hi))
        for j, row in enumerate(sets):
            shown = row[row >= 0]
            if c.logging == "uniform":
                probs = np.full((self.num_positions, len(shown)), 1.0 / len(shown))
            else:
                draws = self._posterior_draws[:, :, shown]  # [D, P, k]
                wins = (draws.argmax(2)[..., None] == np.arange(len(shown))).mean(0)  # [P, k]
                probs = (1.0 - c.exploration) * wins + c.exploration / len(shown)
            self.set_logging[j, :, : len(shown)] = probs
        return sets

    # ---- click model -------------------------------------------------------------------------
    def _logits(self, codes: np.ndarray, floats: np.ndarray, positions: np.ndarray) -> np.ndarray:
        u = sum(emb[codes[:, j]] for j, emb in enumerate(self._cat_emb)) + floats @ self._float_map  # [N, d]
        scale = self.config.interaction_scale / np.sqrt(self.config.latent_dim)
        return self._b0 + self._pos_bias[positions][:, None] + self.item_bias[None, :] + scale * u @ self.item_latent.T

    def _population_ctr(self) -> np.ndarray:
        """[U * P, K] click probabilities of every (user, position) context."""
        u, p = self.config.num_users, self.num_positions
        users, positions = np.repeat(np.arange(u), p), np.tile(np.arange(p), u)
        return 1.0 / (1.0 + np.exp(-self._logits(self.user_codes[users], self.user_floats[users], positions)))

    def _population_weights(self) -> np.ndarray:
        return np.repeat(self.user_weights, self.num_positions) / self.num_positions

    def _calibrate_intercept(self, target: float) -> float:
        lo, hi = -20.0, 5.0
        self._b0 = 0.0
        base = self._logits(
            np.repeat(self.user_codes, self.num_positions, 0),
            np.repeat(self.user_floats, self.num_positions, 0),
            np.tile(np.arange(self.num_positions), self.config.num_users),
        )
        w = self._population_weights()
        for _ in range(60):  # bisection on the uniform policy's CTR, monotone in b0
            mid = (lo + hi) / 2
            ctr = (w[:, None] / (1 + np.exp(-(base + mid)))).sum() / self.num_items
            lo, hi = (mid, hi) if ctr < target else (lo, mid)
        return (lo + hi) / 2

    def expected_ctr(self, contexts: Columns) -> np.ndarray:
        """[N, K] click probabilities for context columns (hashed strings are looked up)."""
        codes = np.stack([self._codes(contexts, col) for col in self.user_columns], 1)
        floats = (
            np.stack([np.asarray(self._column(contexts, col), float) for col in self.float_columns], 1)
            if self.float_columns
            else np.zeros((len(codes), 0))
        )
        positions = np.asarray(self._column(contexts, "position")).astype(int)
        if positions.size and (positions.min() < 0 or positions.max() >= self.num_positions):
            raise ValueError(
                f"contexts['position'] must be in [0, {self.num_positions}); got {positions.min()}..{positions.max()}"
            )
        return 1.0 / (1.0 + np.exp(-self._logits(codes, floats, positions)))

    @staticmethod
    def _column(contexts: Columns, name: str) -> np.ndarray:
        if name not in contexts:
            raise KeyError(f"contexts: missing column '{name}'")
        return np.asarray(contexts[name])

    def _codes(self, contexts: Columns, col: str) -> np.ndarray:
        values = self._column(contexts, col)
        uniq, inverse = np.unique(values, return_inverse=True)
        lookup = self._index_of[col]
        unknown = [v for v in uniq if v not in lookup]
        if unknown:
            raise ValueError(f"contexts['{col}']: value '{unknown[0]}' is not in this generator's vocabulary")
        return np.array([lookup[v] for v in uniq], int)[inverse]

    # ---- logging policy ----------------------------------------------------------------------
    def _logging_table(self, rng: np.random.Generator) -> np.ndarray:
        c = self.config
        k, p = self.num_items, self.num_positions
        if c.logging == "uniform":
            return np.full((p, k), 1.0 / k)
        # Posterior from an earlier period logged uniformly: Beta(1 + clicks, 1 + non-clicks).
        ctr = self._population_ctr().reshape(c.num_users, p, k)
        item_pos_ctr = np.einsum("u,upk->pk", self.user_weights, ctr)
        shown = rng.multinomial(c.prior_impressions, np.full(p * k, 1.0 / (p * k))).reshape(p, k)
        clicks = rng.binomial(shown, item_pos_ctr)
        draws = rng.beta(1 + clicks[None], 1 + shown[None] - clicks[None], size=(4_000, p, k))
        self._posterior_draws = draws  # varying candidates: Thompson among each shown set
        wins = np.zeros((p, k))
        np.add.at(wins, (np.tile(np.arange(p), 4_000), draws.argmax(2).ravel()), 1.0)
        ts = wins / wins.sum(1, keepdims=True)
        return (1.0 - c.exploration) * ts + c.exploration / k

    def logging_policy(self, contexts: Columns) -> np.ndarray:
        """The logging policy as a policy_fn: probabilities depend on the position (and, with
        varying candidates, on the shown items: the table renormalized over them)."""
        positions = np.asarray(self._column(contexts, "position")).astype(int)
        if not self.varying:
            return self.logging_table[positions]
        return self.set_logging[np.asarray(self._column(contexts, "candidate_set")), positions]

    def uniform_policy(self, contexts: Columns) -> np.ndarray:
        n = len(self._column(contexts, "position"))
        if not self.varying:
            return np.full((n, self.num_items), 1.0 / self.num_items)
        return _normalize((self._column(contexts, "candidates") >= 0).astype(float))

    def optimal_policy(self, contexts: Columns) -> np.ndarray:
        """Greedy on the true click model (the best any policy can do)."""
        ctr = self.expected_ctr(contexts)
        if self.varying:
            ctr = np.where(self._column(contexts, "candidates") >= 0, self._slot_values(ctr, contexts), -1.0)
        probs = np.zeros_like(ctr)
        probs[np.arange(len(ctr)), ctr.argmax(1)] = 1.0
        return probs

    def _slot_values(self, per_item: np.ndarray, contexts: Columns) -> np.ndarray:
        """[N, num_items] -> [N, k_max] values of each record's candidate slots (0 on padding)."""
        cand = np.asarray(self._column(contexts, "candidates"))
        return np.where(cand >= 0, np.take_along_axis(per_item, np.maximum(cand, 0), 1), 0.0)

    def arm_columns(self, contexts: Columns) -> Columns:
        """per_arm/<item feature> [N, k_max] of each record's candidates (padding: '' or 0) and
        num_actions [N]: the per-arm inputs of an exported per-arm policy."""
        cand = (
            np.asarray(self._column(contexts, "candidates"))
            if self.varying
            else np.broadcast_to(np.arange(self.num_items), (len(self._column(contexts, "position")), self.num_items))
        )
        pad = cand < 0
        out = {}
        for name, v in self.items.items():
            if name == "item_id":
                continue
            vals = v[np.maximum(cand, 0)]
            out[f"per_arm/{name}"] = np.where(pad, "" if v.dtype.kind in "OU" else 0.0, vals)
        out["num_actions"] = (~pad).sum(1).astype(np.int64)
        return out

    # ---- ground truth ------------------------------------------------------------------------
    def population_contexts(self) -> tuple[Columns, np.ndarray]:
        """Every (user, position) context -- times every candidate set when they vary -- and its
        probability."""
        u, p = self.config.num_users, self.num_positions
        users = np.repeat(np.arange(u), p)
        if not self.varying:
            return self._context_columns(users, np.tile(np.arange(p), u)), self._population_weights()
        s = len(self._sets)
        sets = np.tile(np.arange(s), u * p)
        ctx = self._context_columns(np.repeat(users, s), np.repeat(np.tile(np.arange(p), u), s), sets)
        return ctx, np.repeat(self._population_weights(), s) / s

    def true_value(self, policy_fn: PolicyFn) -> float:
        """Exact expected reward (CTR) of a policy: sum_x P(x) sum_a pi(a | x) CTR(x, a) (x
        includes the candidate set when they vary; a indexes its candidate slots then)."""
        contexts, weights = self.population_contexts()
        probs = check_probs(policy_fn(contexts), len(weights), self.num_slots, "policy_fn")
        if not self.varying:
            return float(weights @ (probs * self._population_ctr()).sum(1))
        s = len(self._sets)
        ctr = np.repeat(self._population_ctr(), s, 0)
        cand = contexts["candidates"]
        if (probs * (cand < 0)).sum() > 1e-9:
            raise ValueError("policy_fn puts probability on padding slots (beyond a record's candidates)")
        return float(weights @ (probs * self._slot_values(ctr, contexts)).sum(1))

    # ---- sampling ----------------------------------------------------------------------------
    def _context_columns(self, users: np.ndarray, positions: np.ndarray, sets: np.ndarray | None = None) -> Columns:
        cols: Columns = {
            col: self.vocabularies[col][self.user_codes[users, j]] for j, col in enumerate(self.user_columns)
        }
        for j, col in enumerate(self.float_columns):
            cols[col] = self.user_floats[users, j]
        cols["position"] = positions.astype(np.int64)
        if sets is not None:
            cols["candidate_set"] = sets.astype(np.int64)
            cols["candidates"] = self._sets[sets]
            cols["num_actions"] = (cols["candidates"] >= 0).sum(1).astype(np.int64)
        return cols

    def sample(self, n: int, seed: int = 0) -> LoggedBandit:
        """n impressions logged by the logging policy: contexts, chosen item, click, propensity."""
        if n < 1:
            raise ValueError(f"sample: n must be >= 1, got {n}")
        rng = np.random.default_rng([self.config.seed, seed])
        users = rng.choice(self.config.num_users, n, p=self.user_weights)
        positions = rng.integers(0, self.num_positions, n)
        if self.varying:
            return self._sample_varying(rng, users, positions)
        probs = self.logging_table[positions]  # [N, K]
        cdf = np.cumsum(self.logging_table, 1)
        cdf[:, -1] = 1.0
        actions = np.minimum((rng.random(n)[:, None] > cdf[positions]).sum(1), self.num_items - 1)
        contexts = self._context_columns(users, positions)
        ctr = 1.0 / (1.0 + np.exp(-self._logits(self.user_codes[users], self.user_floats[users], positions)))
        rewards = (rng.random(n) < ctr[np.arange(n), actions]).astype(np.int64)
        impressions = dict(contexts)
        impressions.update(
            item_id=self.items["item_id"][actions],
            action=actions.astype(np.int64),
            reward=rewards,
            propensity=probs[np.arange(n), actions],
        )
        return LoggedBandit(impressions, dict(self.items), self.user_columns, self.float_columns, ctr, probs)

    def _sample_varying(self, rng: np.random.Generator, users: np.ndarray, positions: np.ndarray) -> LoggedBandit:
        n = len(users)
        sets = rng.integers(0, len(self._sets), n)
        contexts = self._context_columns(users, positions, sets)
        probs = self.logging_policy(contexts)  # [N, k_max]
        cdf = np.cumsum(probs, 1)
        last = contexts["num_actions"] - 1
        actions = np.minimum((rng.random(n)[:, None] > cdf).sum(1), last)
        item = contexts["candidates"][np.arange(n), actions]
        ctr = 1.0 / (1.0 + np.exp(-self._logits(self.user_codes[users], self.user_floats[users], positions)))
        rewards = (rng.random(n) < ctr[np.arange(n), item]).astype(np.int64)
        impressions = {k: v for k, v in contexts.items() if k not in ("candidates", "num_actions", "candidate_set")}
        ids = self.items["item_id"]
        impressions.update(
            item_id=ids[item],
            action=actions.astype(np.int64),
            reward=rewards,
            propensity=probs[np.arange(n), actions],
            candidates=np.array([CANDIDATE_SEPARATOR.join(ids[c[c >= 0]]) for c in self._sets])[sets],
        )
        return LoggedBandit(
            impressions,
            dict(self.items),
            self.user_columns,
            self.float_columns,
            self._slot_values(ctr, contexts),
            probs,
            candidates=contexts["candidates"],
            candidate_set=sets,
        )

    def sample_contexts(self, n: int, seed: int = 0) -> Columns:
        """n contexts from the population (no logging policy): for online simulation and regret,
        with `expected_ctr(contexts)` as the ground truth."""
        rng = np.random.default_rng([self.config.seed, seed, 1])
        users = rng.choice(self.config.num_users, n, p=self.user_weights)
        positions = rng.integers(0, self.num_positions, n)
        sets = rng.integers(0, len(self._sets), n) if self.varying else None
        return self._context_columns(users, positions, sets)

    # ---- features for reward models -----------------------------------------------------------
    def item_feature_matrix(self) -> np.ndarray:
        """Dense [K, F] per-arm features from the item table: one-hot category and brand,
        standardized log price, popularity."""
        items = self.items
        parts = [
            (items[col][:, None] == np.unique(items[col])[None, :]).astype(float)
            for col in ("item_category", "item_brand")
        ]
        log_price = np.log(items["item_price"])
        parts.append(((log_price - log_price.mean()) / max(log_price.std(), 1e-9))[:, None])
        parts.append(items["item_popularity"][:, None].astype(float))
        return np.concatenate(parts, 1)

    def encode(self, contexts: Columns) -> np.ndarray:
        """Dense [N, D] encoding of context columns: one-hot categories, floats, one-hot position
        (what a ridge / logistic reward model or a linear agent needs)."""
        parts = []
        for col in self.user_columns:
            codes = self._codes(contexts, col)
            parts.append(np.eye(len(self.vocabularies[col]))[codes])
        parts += [np.asarray(self._column(contexts, col), float)[:, None] for col in self.float_columns]
        parts.append(np.eye(self.num_positions)[np.asarray(self._column(contexts, "position")).astype(int)])
        return np.concatenate(parts, 1)


def _normalize(values: np.ndarray) -> np.ndarray:
    return values / values.sum(1, keepdims=True)


def check_probs(probs: np.ndarray, n: int, k: int, name: str) -> np.ndarray:
    """Validates [n, k] action probabilities (non-negative, rows sum to 1)."""
    probs = np.asarray(probs, float)
    if probs.shape != (n, k):
        raise ValueError(f"{name} returned shape {probs.shape}; expected ({n}, {k}) action probabilities")
    if not np.isfinite(probs).all() or (probs < 0).any():
        raise ValueError(f"{name} returned negative or non-finite probabilities")
    bad = np.abs(probs.sum(1) - 1.0) > 1e-6
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: probabilities of row {i} sum to {probs[i].sum():.6g}, not 1")
    return probs
