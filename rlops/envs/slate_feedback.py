"""Slate logs with exact ground truth (numpy only): which L of K items a logging policy showed, in
which order, the clicks on each slot, and the exact propensities an off-policy estimator needs.

    gen = SlateLogGenerator(SlateConfig(click_model="cascade", logging="plackett_luce", seed=0))
    logs = gen.sample(10_000, seed=1)                       # LoggedSlates
    logs.to_files("/tmp/slates", layout="item", format="csv")
    truth = gen.true_value(Greedy(), gen.relevance)          # SlateValue(value, standard_error, method)

The world (users, item table, hashed user columns) is `logged_feedback`'s: a finite population of
production-shaped users drawn with known frequencies, and a relevance rel(x, item) in (0, 1) (the
world's click probability, calibrated so its mean over users and items is `mean_relevance`).

Click models (`ClickModel`), one formula: the user scans the slots in order; at slot l, if still
browsing, they click with probability examine[l] * rel(x, a_l); after a click at l they leave with
probability stop[l]. So E[r_l | x, slate] = examine[l] * rel_l * prod_{j<l} (1 - stop[j] * examine[j] * rel_j):
  - `pbm`: examine[l] = 1 / (l+1)^eta (or given), stop = 0: slot clicks are independent;
  - `cascade`: examine = 1, stop = 1: rel_l * prod_{j<l} (1 - rel_j);
  - `dcm`: examine = 1, stop[l] = 1 - continuation[l]: rel_l * prod_{j<l} (1 - rel_j (1 - lambda_j)).
The slate-level reward is the sum of slot clicks; under `pbm` its expectation is additive over
(item, slot), the pseudo-inverse estimator's assumption.

Logging policies (scores: the world's logit(rel) plus fixed per-(user, item) Gaussian noise):
`uniform` (without replacement), `plackett_luce` (temperature), `epsilon_greedy` (per slot). Every
logged slate carries `propensity` [n, L] (the policy's exact marginal of each shown item at its
slot) and `propensity_cascade` [n, L] (the exact probability of the prefix through each slot).

`true_value(policy, scores)` is a slate policy's expected sum of slot rewards (optional position
weights) over the user population: `pbm` exactly through the policy's marginals; `cascade` and `dcm`
exactly by enumerating every slate prefix (weighted by its prefix probability) when K^L <=
`max_enumerated` (100,000), else by Monte Carlo over slates with exact per-slate expectations,
reporting the standard error.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rlops.envs.logged_feedback import LogConfig, LogGenerator
from rlops.heads.slate.probabilities import (
    EpsilonPerSlot,
    PlackettLuce,
    SlatePolicy,
    UniformWithoutReplacement,
)

Columns = dict[str, np.ndarray]
Scores = np.ndarray | Callable[[Columns], np.ndarray]

CLICK_MODELS = ("pbm", "cascade", "dcm")
SLATE_LOGGING_POLICIES = ("uniform", "plackett_luce", "epsilon_greedy")
LAYOUTS = ("slate", "item")
VALUE_METHODS = ("auto", "marginals", "enumeration", "monte_carlo")
_ENUMERATION_CHUNK = 2_000_000  # user rows * prefixes * items per enumeration step


@dataclass(frozen=True)
class ClickModel:
    """At slot l a still-browsing user clicks with probability examine[l] * rel; after a click at
    l they leave with probability stop[l] (see the module docstring)."""

    kind: str
    examine: tuple[float, ...]
    stop: tuple[float, ...]

    @classmethod
    def make(
        cls,
        kind: str,
        num_slots: int,
        position_decay: float = 1.0,
        examination: tuple[float, ...] | None = None,
        continuation: float | tuple[float, ...] = 0.5,
    ) -> ClickModel:
        """`pbm`: examination or 1/(l+1)^position_decay; `cascade`; `dcm` with continuation
        lambda_l (probability of going on after a click; one value or one per slot)."""
        if kind not in CLICK_MODELS:
            raise ValueError(f"click_model: unknown '{kind}'; choose one of {', '.join(CLICK_MODELS)}")
        if examination is not None:
            examine = tuple(float(v) for v in examination)
        elif kind == "pbm":
            examine = tuple(1.0 / (slot + 1) ** position_decay for slot in range(num_slots))
        else:
            examine = (1.0,) * num_slots
        lam = (float(continuation),) * num_slots if isinstance(continuation, (int, float)) else tuple(continuation)
        stop = {"pbm": (0.0,) * num_slots, "cascade": (1.0,) * num_slots, "dcm": tuple(1.0 - v for v in lam)}[kind]
        for name, values in (("examination", examine), ("continuation", lam)):
            if len(values) < num_slots or not all(0.0 <= v <= 1.0 for v in values):
                raise ValueError(f"click model {name}: needs {num_slots} values in [0, 1], got {values}")
        return cls(kind, examine[:num_slots], stop[:num_slots])

    def expected(self, relevance: np.ndarray) -> np.ndarray:
        """[n, L] exact click probability per slot, from the shown items' relevance [n, L]."""
        attract = relevance * np.asarray(self.examine)[: relevance.shape[1]]
        leave = attract * np.asarray(self.stop)[: relevance.shape[1]]
        browsing = np.cumprod(np.concatenate([np.ones((len(relevance), 1)), 1.0 - leave[:, :-1]], 1), 1)
        return attract * browsing

    def sample(self, rng: np.random.Generator, relevance: np.ndarray) -> np.ndarray:
        """[n, L] 0/1 clicks simulated slot by slot."""
        n, num_slots = relevance.shape
        browsing = np.ones(n, bool)
        clicks = np.zeros((n, num_slots), np.int64)
        for slot in range(num_slots):
            click = browsing & (rng.random(n) < self.examine[slot] * relevance[:, slot])
            clicks[:, slot] = click
            browsing &= ~(click & (rng.random(n) < self.stop[slot]))
        return clicks


@dataclass(frozen=True)
class SlateConfig:
    num_items: int = 12  # K candidates (every item is a candidate)
    num_slots: int = 4  # L; K^L <= 100,000 keeps cascade / DCM ground truth exact
    click_model: str = "pbm"  # "pbm", "cascade" or "dcm"
    position_decay: float = 1.0  # pbm: examination 1/(l+1)^eta
    examination: tuple[float, ...] | None = None  # per-slot examine[l] overriding the default (any model)
    continuation: float | tuple[float, ...] = 0.5  # dcm: P(go on after a click), one or per slot
    mean_relevance: float = 0.2  # mean rel(x, item) over the population and items
    logging: str = "plackett_luce"  # "uniform", "plackett_luce" or "epsilon_greedy"
    temperature: float = 1.0  # plackett_luce
    epsilon: float = 0.2  # epsilon_greedy: per-slot exploration
    logging_noise: float = 0.5  # sd of the logging scores' noise around logit(rel), per (user, item)
    num_users: int = 1_000
    user_cardinalities: tuple[int, ...] = (5, 11, 23, 47)
    num_user_floats: int = 3
    interaction_scale: float = 0.9
    seed: int = 0

    def __post_init__(self) -> None:
        if self.logging not in SLATE_LOGGING_POLICIES:
            raise ValueError(
                f"SlateConfig.logging: unknown '{self.logging}'; choose one of {', '.join(SLATE_LOGGING_POLICIES)}"
            )
        if self.click_model not in CLICK_MODELS:
            raise ValueError(
                f"SlateConfig.click_model: unknown '{self.click_model}'; choose one of {', '.join(CLICK_MODELS)}"
            )
        if not 1 <= self.num_slots <= self.num_items:
            raise ValueError(
                f"SlateConfig: slate length num_slots={self.num_slots} must be in [1, num_items={self.num_items}]"
            )
        if not 0.0 < self.mean_relevance < 0.5:
            raise ValueError(f"SlateConfig.mean_relevance must be in (0, 0.5), got {self.mean_relevance}")
        if self.logging_noise < 0:
            raise ValueError(f"SlateConfig.logging_noise must be >= 0, got {self.logging_noise}")


@dataclass(frozen=True)
class SlateValue:
    """A policy's expected sum of slot rewards; standard_error is 0 for the exact methods."""

    value: float
    standard_error: float
    method: str  # "marginals", "enumeration" or "monte_carlo"


@dataclass
class LoggedSlates:
    """n logged slates. Slot arrays are [n, L] in display order (slot 0 first); `slates` index
    `items["item_id"]`. `users`, `relevance`, `expected_rewards` and `logging_scores` are the ground
    truth behind each row (not in a production log; tests and benchmarks use them)."""

    slate_id: np.ndarray  # [n] int64
    contexts: Columns  # user columns (hashed strings) and user floats, [n] each
    slates: np.ndarray  # [n, L] int64 item indices
    rewards: np.ndarray  # [n, L] int64 clicks
    propensity: np.ndarray  # [n, L] P_logging(item at its slot)
    propensity_cascade: np.ndarray  # [n, L] P_logging(prefix through the slot); last = joint
    items: Columns  # item table: item_id + item features
    user_columns: tuple[str, ...]
    float_columns: tuple[str, ...]
    slate_reward: np.ndarray | None = None  # [n] sum of slot clicks
    users: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)  # population index
    relevance: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)  # [n, K]
    expected_rewards: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)  # [n, L]
    logging_scores: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)  # [n, K]

    def __len__(self) -> int:
        return len(self.slate_id)

    @property
    def num_slots(self) -> int:
        return int(self.slates.shape[1])

    @property
    def context_columns(self) -> tuple[str, ...]:
        return self.user_columns + self.float_columns

    def slate_rows(self) -> list[dict[str, object]]:
        """One record per slate with list columns: slate_id, user columns, `slate` (item ids),
        `reward`, `propensity`, `propensity_cascade` (and `slate_reward`)."""
        ids = self.items["item_id"][self.slates]
        rows = []
        for i in range(len(self)):
            row: dict[str, object] = {"slate_id": int(self.slate_id[i])}
            row.update({col: _scalar(self.contexts[col][i]) for col in self.context_columns})
            row["slate"] = [str(v) for v in ids[i]]
            row["reward"] = [int(v) for v in self.rewards[i]]
            row["propensity"] = [float(v) for v in self.propensity[i]]
            row["propensity_cascade"] = [float(v) for v in self.propensity_cascade[i]]
            if self.slate_reward is not None:
                row["slate_reward"] = float(self.slate_reward[i])
            rows.append(row)
        return rows

    def item_rows(self) -> Columns:
        """One row per shown item, as columns: slate_id, position (1-based, as public e-commerce
        logs count), item_id, reward, propensity, propensity_cascade, [slate_reward], user columns."""
        n, num_slots = self.slates.shape
        cols: Columns = {
            "slate_id": np.repeat(self.slate_id, num_slots),
            "position": np.tile(np.arange(1, num_slots + 1), n),
            "item_id": self.items["item_id"][self.slates].ravel(),
            "reward": self.rewards.ravel(),
            "propensity": self.propensity.ravel(),
            "propensity_cascade": self.propensity_cascade.ravel(),
        }
        if self.slate_reward is not None:
            cols["slate_reward"] = np.repeat(self.slate_reward, num_slots)
        for col in self.context_columns:
            cols[col] = np.repeat(self.contexts[col], num_slots)
        return cols

    def to_files(self, directory: str, layout: str = "item", format: str = "csv") -> dict[str, str]:
        """Writes the logs and `items.csv`; returns paths by table name. layout "slate": one JSONL
        record per slate (`slates.jsonl`); layout "item": one row per shown item
        (`impressions.csv` or `impressions.jsonl`)."""
        if layout not in LAYOUTS:
            raise ValueError(f"to_files: unknown layout '{layout}'; choose one of {', '.join(LAYOUTS)}")
        if format not in ("csv", "jsonl") or (layout == "slate" and format != "jsonl"):
            raise ValueError(f"to_files: layout '{layout}' writes {'jsonl' if layout == 'slate' else 'csv or jsonl'}")
        os.makedirs(directory, exist_ok=True)
        paths = {"items": os.path.join(directory, "items.csv")}
        _write_csv(paths["items"], self.items)
        if layout == "slate":
            paths["slates"] = os.path.join(directory, "slates.jsonl")
            with open(paths["slates"], "w") as f:
                f.writelines(json.dumps(row) + "\n" for row in self.slate_rows())
        else:
            paths["impressions"] = os.path.join(directory, f"impressions.{format}")
            (_write_csv if format == "csv" else _write_jsonl)(paths["impressions"], self.item_rows())
        return paths


def _scalar(value: object) -> object:
    """A numpy scalar as the Python value json writes exactly (floats by shortest repr)."""
    return value.item() if isinstance(value, np.generic) else value


def _write_csv(path: str, cols: Columns) -> None:
    names = list(cols)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(names)
        writer.writerows(zip(*(cols[name].tolist() for name in names)))  # tolist: repr floats round-trip


def _write_jsonl(path: str, cols: Columns) -> None:
    names = list(cols)
    with open(path, "w") as f:
        for values in zip(*(cols[name].tolist() for name in names)):
            f.write(json.dumps(dict(zip(names, values))) + "\n")


class SlateLogGenerator:
    """The world, click model and logging policy, fixed by `config.seed`."""

    def __init__(self, config: SlateConfig | None = None):
        self.config = c = config or SlateConfig()
        self.world = LogGenerator(
            LogConfig(
                num_items=c.num_items,
                num_positions=1,
                position_bias=(0.0,),
                user_cardinalities=c.user_cardinalities,
                num_user_floats=c.num_user_floats,
                num_users=c.num_users,
                ctr=c.mean_relevance,
                logging="uniform",
                interaction_scale=c.interaction_scale,
                seed=c.seed,
            )
        )
        self.num_items, self.num_slots = c.num_items, c.num_slots
        self.items = self.world.items
        self.user_columns, self.float_columns = self.world.user_columns, self.world.float_columns
        population, self.user_weights = self.world.population_contexts()  # one context per user
        self.relevance = self.world.expected_ctr(population)  # [U, K]
        self.population = {col: population[col] for col in self.user_columns + self.float_columns}
        self.click_model = ClickModel.make(c.click_model, c.num_slots, c.position_decay, c.examination, c.continuation)
        noise = np.random.default_rng([c.seed, 11]).normal(size=self.relevance.shape)
        self.logging_scores = np.log(self.relevance / (1.0 - self.relevance)) + c.logging_noise * noise  # [U, K]
        self.logging_policy: SlatePolicy = {
            "uniform": UniformWithoutReplacement,
            "plackett_luce": lambda: PlackettLuce(c.temperature),
            "epsilon_greedy": lambda: EpsilonPerSlot(c.epsilon),
        }[c.logging]()
        self._logging_marginals: np.ndarray | None = None

    def relevance_of(self, contexts: Columns) -> np.ndarray:
        """[N, K] rel(x, item) for context columns (user columns and floats)."""
        cols = dict(contexts)
        cols["position"] = np.zeros(len(np.asarray(contexts[self.user_columns[0]])), np.int64)
        return self.world.expected_ctr(cols)

    def logging_marginals(self) -> np.ndarray:
        """[U, K, L] the logging policy's exact marginals for every user (computed once)."""
        if self._logging_marginals is None:
            self._logging_marginals = self.logging_policy.marginals(self.logging_scores, self.num_slots)
        return self._logging_marginals

    def expected_rewards(self, relevance: np.ndarray, slates: np.ndarray) -> np.ndarray:
        """[n, L] exact E[r_l | x, slate] from rel(x, .) [n, K] and slates [n, L]."""
        return self.click_model.expected(np.take_along_axis(relevance, slates, axis=1))

    # ---- sampling ----------------------------------------------------------------------------
    def sample(self, n: int, seed: int = 0) -> LoggedSlates:
        """n slates logged by the logging policy, with clicks and exact propensities."""
        if n < 1:
            raise ValueError(f"sample: n must be >= 1, got {n}")
        rng = np.random.default_rng([self.config.seed, seed])
        users = rng.choice(self.config.num_users, n, p=self.user_weights)
        scores = self.logging_scores[users]
        slates = self.logging_policy.sample(rng, scores, self.num_slots)
        marginals = self.logging_marginals()[users]  # [n, K, L]
        propensity = np.take_along_axis(marginals, slates[:, None, :], axis=1)[:, 0, :]
        shown = np.take_along_axis(self.relevance[users], slates, axis=1)
        rewards = self.click_model.sample(rng, shown)
        return LoggedSlates(
            slate_id=np.arange(n, dtype=np.int64),
            contexts={col: v[users] for col, v in self.population.items()},
            slates=slates,
            rewards=rewards,
            propensity=propensity,
            propensity_cascade=self.logging_policy.prefix_probs(scores, slates),
            items=dict(self.items),
            user_columns=self.user_columns,
            float_columns=self.float_columns,
            slate_reward=rewards.sum(1).astype(np.float64),
            users=users,
            relevance=self.relevance[users],
            expected_rewards=self.click_model.expected(shown),
            logging_scores=scores,
        )

    # ---- ground truth ------------------------------------------------------------------------
    def population_scores(self, scores: Scores) -> np.ndarray:
        """[U, K] a policy's scores for every user: an array already, or a function of context
        columns (user columns and floats) evaluated on the population."""
        values = np.asarray(scores(self.population) if callable(scores) else scores, dtype=np.float64)
        if values.shape != self.relevance.shape:
            raise ValueError(f"scores: expected shape {self.relevance.shape} (users, items), got {values.shape}")
        return values

    def true_value(
        self,
        policy: SlatePolicy,
        scores: Scores,
        mask: np.ndarray | None = None,
        position_weights: tuple[float, ...] | np.ndarray | None = None,
        method: str = "auto",
        max_enumerated: int = 100_000,
        mc_samples: int = 200_000,
        seed: int = 0,
    ) -> SlateValue:
        """E_x E_{slate ~ policy(scores(x))} sum_l w_l r_l over the user population.

        method "auto": `pbm` by marginals; `cascade` / `dcm` by prefix enumeration when
        K^L <= max_enumerated, else Monte Carlo (mc_samples slates spread evenly over the users,
        each valued exactly; the standard error is reported)."""
        if method not in VALUE_METHODS:
            raise ValueError(f"true_value: unknown method '{method}'; choose one of {', '.join(VALUE_METHODS)}")
        values = self.population_scores(scores)
        allowed = None if mask is None else np.broadcast_to(np.asarray(mask, bool), values.shape)
        weights = np.ones(self.num_slots) if position_weights is None else np.asarray(position_weights, float)
        if weights.shape != (self.num_slots,):
            raise ValueError(f"position_weights: expected {self.num_slots} values, got {weights.shape}")
        if method == "auto":
            if self.click_model.kind == "pbm":
                method = "marginals"
            else:
                enumerable = self.num_items**self.num_slots <= max_enumerated
                method = "enumeration" if enumerable else "monte_carlo"
        if method == "marginals":
            if any(self.click_model.stop):
                raise ValueError(
                    "true_value: method 'marginals' is exact for pbm only (slot rewards of their own item)"
                )
            marg = policy.marginals(values, self.num_slots, allowed)  # [U, K, L]
            per_slot = np.einsum("ukl,uk->ul", marg, self.relevance) * np.asarray(self.click_model.examine)
            return SlateValue(float(self.user_weights @ (per_slot @ weights)), 0.0, method)
        if method == "enumeration":
            per_user = self._enumerated_values(policy, values, allowed, weights)
            return SlateValue(float(self.user_weights @ per_user), 0.0, method)
        return self._monte_carlo_value(policy, values, allowed, weights, mc_samples, seed)

    def _enumerated_values(
        self, policy: SlatePolicy, scores: np.ndarray, mask: np.ndarray | None, weights: np.ndarray
    ) -> np.ndarray:
        """[U] exact value per user: every ordered prefix, its probability from the policy's
        conditionals, and the click model's browsing probability carried along it."""
        num_users, k = scores.shape
        examine, stop = np.asarray(self.click_model.examine), np.asarray(self.click_model.stop)
        largest = k * int(np.prod(np.arange(k, k - self.num_slots + 1, -1), dtype=float))  # last level
        chunk = max(1, _ENUMERATION_CHUNK // max(largest, 1))
        out = np.zeros(num_users)
        for start in range(0, num_users, chunk):
            rows = slice(start, min(start + chunk, num_users))
            rel, sc = self.relevance[rows], scores[rows]
            c = len(rel)
            prefixes = np.zeros((1, 0), np.int64)
            prob, browsing = np.ones((c, 1)), np.ones((c, 1))
            for slot in range(self.num_slots):
                p = len(prefixes)
                cond = policy.next_item_probs(
                    np.repeat(sc, p, 0),
                    np.tile(prefixes, (c, 1)),
                    None if mask is None else np.repeat(mask[rows], p, 0),
                ).reshape(c, p, k)
                attract = np.einsum("cpk,ck->cp", cond, rel)
                out[rows] += weights[slot] * examine[slot] * (prob * browsing * attract).sum(1)
                if slot == self.num_slots - 1:
                    break
                taken = np.zeros((p, k), bool)
                np.put_along_axis(taken, prefixes, True, axis=1)
                parent, item = np.nonzero(~taken)
                prob = prob[:, parent] * cond[:, parent, item]
                browsing = browsing[:, parent] * (1.0 - stop[slot] * examine[slot] * rel[:, item])
                prefixes = np.concatenate([prefixes[parent], item[:, None]], 1)
        return out

    def _monte_carlo_value(
        self,
        policy: SlatePolicy,
        scores: np.ndarray,
        mask: np.ndarray | None,
        weights: np.ndarray,
        samples: int,
        seed: int,
    ) -> SlateValue:
        num_users = len(scores)
        draws = max(2, -(-samples // num_users))  # per user, so every user is represented
        rng = np.random.default_rng([self.config.seed, seed, 5])
        means, variances = np.zeros(num_users), np.zeros(num_users)
        chunk = max(1, 200_000 // draws)
        for start in range(0, num_users, chunk):
            rows = np.arange(start, min(start + chunk, num_users))
            rep = np.repeat(rows, draws)
            slates = policy.sample(rng, scores[rep], self.num_slots, None if mask is None else mask[rep])
            values = (self.expected_rewards(self.relevance[rep], slates) @ weights).reshape(len(rows), draws)
            means[rows], variances[rows] = values.mean(1), values.var(1, ddof=1)
        se = float(np.sqrt((self.user_weights**2 * variances).sum() / draws))
        return SlateValue(float(self.user_weights @ means), se, "monte_carlo")
