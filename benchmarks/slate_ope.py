"""Slate off-policy estimators' accuracy against exact truth (rlops.components.evaluator.slate_estimators).

Per click model (pbm, cascade, dcm: rlops.envs.slate_feedback), `--seeds` logs of `--n` slates
(K items, L slots) from the generator's Plackett-Luce logging policy (temperature 1 over noisy
scores); the target is Plackett-Luce at temperature `--target-temperature` over the world's true
logit(rel). Its value, the expected sum of slot clicks, is exact (pbm through marginals, cascade
and dcm by enumerating prefixes). Per estimator: bias (mean of estimate - truth over seeds) and
its standard error, RMSE, and the coverage of the 95% interval over the seeds where it is trusted
(with the share trusted).

Inputs as an evaluator has them: exact logging propensities (the log's), the target's exact
marginals, prefix probabilities and per-slot conditionals (rlops.heads.slate.probabilities).
Cascade-DR's q_hat: per (item, slot) click rates, cross-fitted over two halves of the log, as a
reward-to-go q_l(a) = m(a, l) + sum_{l' > l} sum_b pi(b at l') m(b, l') (a rough model on
purpose: Cascade-DR stays unbiased with it). PI: slate reward = sum of clicks, w_PI by
enumerating the logger's slates per user (Gamma^+, exact for rankings); unbiased under pbm only.

    python benchmarks/slate_ope.py --seeds 200
prints one JSON line (and with --table a markdown table on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import emit  # noqa: E402
from rlops.components.evaluator.slate_estimators import (  # noqa: E402
    ESTIMATORS,
    SlateLog,
    SlateTarget,
    estimate_slates,
    pseudo_inverse_weights_enumerated,
)
from rlops.envs.slate_feedback import CLICK_MODELS, SlateConfig, SlateLogGenerator  # noqa: E402
from rlops.heads.slate.probabilities import PlackettLuce, enumerate_slates  # noqa: E402


class World:
    """One click model's generator, the target policy and what does not change across seeds."""

    def __init__(self, click_model: str, num_items: int, num_slots: int, temperature: float, seed: int):
        self.gen = SlateLogGenerator(
            SlateConfig(num_items=num_items, num_slots=num_slots, click_model=click_model, seed=seed)
        )
        self.policy = PlackettLuce(temperature)
        rel = self.gen.relevance
        self.scores = np.log(rel / (1.0 - rel))  # [U, K]
        self.truth = self.gen.true_value(self.policy, self.scores)
        self.marginals = self.policy.marginals(self.scores, num_slots)  # [U, K, L]
        self.pi_table = self._pseudo_inverse_table()

    def _pseudo_inverse_table(self) -> tuple[np.ndarray, np.ndarray]:
        """(every slate [S, L], w_PI [U, S] of each slate for each user)."""
        gen, num_slots = self.gen, self.gen.num_slots
        slates = enumerate_slates(gen.num_items, num_slots)
        table = np.empty((len(gen.logging_scores), len(slates)))
        for u, scores in enumerate(gen.logging_scores):
            joint = gen.logging_policy.prefix_probs(np.repeat(scores[None], len(slates), 0), slates)[:, -1]
            table[u] = pseudo_inverse_weights_enumerated(slates, self.marginals[u], slates, joint)
        return slates, table

    def slate_index(self, slates: np.ndarray) -> np.ndarray:
        all_slates = self.pi_table[0]
        k = self.gen.num_items
        code = (slates * k ** np.arange(slates.shape[1])[::-1]).sum(1)
        codes = (all_slates * k ** np.arange(slates.shape[1])[::-1]).sum(1)
        order = np.argsort(codes)
        return order[np.searchsorted(codes[order], code)]

    def q_hat(self, logs, users: np.ndarray) -> np.ndarray:
        """[n, L, K] cross-fitted per-(item, slot) click rates as a reward-to-go under the target."""
        n, num_slots = logs.slates.shape
        k = self.gen.num_items
        fold = np.arange(n) % 2
        out = np.zeros((n, num_slots, k))
        for f in (0, 1):
            train = fold != f
            clicks = np.zeros((k, num_slots))
            shown = np.zeros((k, num_slots))
            for slot in range(num_slots):
                np.add.at(clicks[:, slot], logs.slates[train, slot], logs.rewards[train, slot])
                np.add.at(shown[:, slot], logs.slates[train, slot], 1.0)
            prior = clicks.sum(0) / shown.sum(0)
            rate = (clicks + 5.0 * prior) / (shown + 5.0)  # [K, L], shrunk toward the slot's mean
            rows = fold == f
            marg = self.marginals[users[rows]]  # [m, K, L]
            expected_later = np.einsum("mkl,kl->ml", marg, rate)  # [m, L] the target's click rate per slot
            togo_after = np.cumsum(expected_later[:, ::-1], 1)[:, ::-1] - expected_later
            out[rows] = rate.T[None] + togo_after[:, :, None]
        return out


def one_seed(world: World, n: int, seed: int, num_bootstrap: int) -> dict:
    logs = world.gen.sample(n, seed=seed)
    users = logs.users
    scores = world.scores[users]
    marginal = np.take_along_axis(world.marginals[users], logs.slates[:, None, :], axis=1)[:, 0, :]
    pi_weight = world.pi_table[1][users, world.slate_index(logs.slates)]
    log = SlateLog(
        keys=np.arange(n, dtype=np.uint64),
        slates=logs.slates,
        rewards=logs.rewards,
        propensity=logs.propensity,
        propensity_cascade=logs.propensity_cascade,
        slate_reward=logs.slate_reward,
    )
    target = SlateTarget(
        marginal=marginal,
        cascade=world.policy.prefix_probs(scores, logs.slates),
        action_dist=world.policy.conditionals(scores, logs.slates),
        q_hat=world.q_hat(logs, users),
        pseudo_inverse=pi_weight,
    )
    return estimate_slates(log, target, num_bootstrap=num_bootstrap, seed=seed)


def summarize(truth: float, runs: list[dict]) -> dict:
    out = {}
    for name in ESTIMATORS:
        values = np.array([r[name].value for r in runs])
        errors = values - truth
        trusted = [r[name] for r in runs if r[name].trusted]
        covered = [e.lower <= truth <= e.upper for e in trusted]
        out[name] = {
            "bias": float(errors.mean()),
            "bias_se": float(errors.std(ddof=1) / np.sqrt(len(errors))) if len(errors) > 1 else float("nan"),
            "rmse": float(np.sqrt((errors**2).mean())),
            "coverage": float(np.mean(covered)) if covered else None,
            "trusted": len(trusted) / len(runs),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="logged slates per seed")
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--num-items", type=int, default=10)
    p.add_argument("--num-slots", type=int, default=3)
    p.add_argument("--num-bootstrap", type=int, default=500)
    p.add_argument("--target-temperature", type=float, default=0.5)
    p.add_argument("--click-models", nargs="+", default=list(CLICK_MODELS), choices=CLICK_MODELS)
    p.add_argument("--world-seed", type=int, default=0)
    p.add_argument("--table", action="store_true", help="also a markdown table on stderr")
    args = p.parse_args()
    start = time.perf_counter()
    results = {}
    for click_model in args.click_models:
        world = World(click_model, args.num_items, args.num_slots, args.target_temperature, args.world_seed)
        runs = [one_seed(world, args.n, seed, args.num_bootstrap) for seed in range(args.seeds)]
        results[click_model] = {"truth": world.truth.value, "estimators": summarize(world.truth.value, runs)}
        if args.table:
            print(f"\n{click_model}: truth {world.truth.value:.5f} ({args.seeds} seeds)", file=sys.stderr)
            print(
                "| estimator | bias | bias SE | RMSE | coverage | trusted |\n|---|---|---|---|---|---|", file=sys.stderr
            )
            for name, m in results[click_model]["estimators"].items():
                cov = "-" if m["coverage"] is None else f"{m['coverage']:.3f}"
                print(
                    f"| {name} | {m['bias']:+.5f} | {m['bias_se']:.5f} | {m['rmse']:.5f} | {cov} | {m['trusted']:.2f} |",
                    file=sys.stderr,
                )
    emit(
        "slate_ope",
        n=args.n,
        seeds=args.seeds,
        num_items=args.num_items,
        num_slots=args.num_slots,
        num_bootstrap=args.num_bootstrap,
        target_temperature=args.target_temperature,
        results=results,
        seconds=round(time.perf_counter() - start, 1),
    )


if __name__ == "__main__":
    main()
