"""Off-policy evaluation accuracy on production-shaped logs, and the bootstrap's memory.

Accuracy: the uniform policy's value estimated from Thompson-sampling-like logs of the
generator (rlops.envs.logged_feedback: 4 hashed user columns, 34 items, 3 positions, CTR ~0.8%),
the setting of OBP's Open Bandit benchmark (Random evaluated on Bernoulli-TS logs). Per
estimator: relative error |V_hat - V| / V, mean over seeds, and the share of seeds whose 95%
interval contains V. V is exact (the generator's click model). OBP 0.5.7's reference on the
real logs: DM 0.157, IPW 0.311, DR 0.292, Switch-DR 0.258, DR-os 0.160.

--varying-candidates K_MIN K_MAX: each decision shows K_MIN..K_MAX of the 34 items (random order,
from the generator's pool of candidate lists), Thompson among the shown items; the target is
uniform over each decision's candidates and the reward model the shared [global, arm features]
one (reward_models.fit_arm_reward_model).

Memory: in a separate process (its own peak RSS), the whole Evaluator computation on
--memory-rows eval rows (ridge reward model fit, then candidate vs logging policy over 34
actions, every estimator) with --memory-resamples bootstrap resamples.

    python benchmarks/ope_accuracy.py --n 10000 --seeds 20 --memory-rows 1000000 --memory-resamples 1000
    python benchmarks/ope_accuracy.py --n 10000 --seeds 20 --varying-candidates 4 20 --memory-rows 0
    python benchmarks/ope_accuracy.py --n 10000 --seeds 20 --table 0.1 0.02 --memory-rows 0
prints one JSON line (--table: also a markdown table of every reward model, on stderr, row by row).

DM's interval: the reward model refitted on --dm-refits bootstrap resamples (drawn from at most
--dm-refit-records rows, m-out-of-n), so it carries the model's own error; coverage is reported
for it (`dm`) and for the old fixed-model bootstrap (`dm_fixed_model`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import emit  # noqa: E402

MEMORY_CHILD = r"""
import json, resource, sys, time
import numpy as np
from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import estimators, reward_models
n, resamples, k, d = int(sys.argv[1]), int(sys.argv[2]), 34, 8
rng = np.random.default_rng(0)
x = rng.normal(size=(n, d))
logging = rng.dirichlet(np.ones(k) * 0.5)
actions = rng.choice(k, n, p=logging)
rewards = (rng.random(n) < 0.005 * (1 + (x[:, 0] > 0))).astype(float)
data = LoggedFeedback(x, actions, rewards, logging[actions])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
q = reward_models.reward_predictions("ridge", data, k)
cand, base, diff = estimators.compare(data, estimators.uniform_probs(n, k), estimators.LOGGING_POLICY, q, num_bootstrap=resamples)
print(json.dumps({"rows": n, "resamples": resamples, "actions": k, "seconds": time.perf_counter() - t,
                  "inputs_rss_mb": before, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "trusted": diff["dr"].trusted}))
"""


def accuracy(
    n: int,
    seeds: int,
    num_bootstrap: int,
    reward_model: str,
    balance: bool,
    varying: tuple[int, int] | None = None,
    exploration: float = 0.1,
    clip: bool = True,
    dm_refits: int = 20,
    dm_refit_records: int = 5_000,
) -> dict:
    """Relative error and 95% coverage of every estimator over `seeds` samples of `n` logs.
    DM's coverage twice: `dm_fixed_model` is the bootstrap with the reward model held fixed
    (what DM's interval was), `dm` the interval with `dm_refits` reward-model refits."""
    from rlops.components.common.feedback import LoggedFeedback
    from rlops.components.evaluator import estimators, reward_models
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    gen = LogGenerator(
        LogConfig(logging="thompson", seed=0, exploration=exploration, candidates=tuple(varying) if varying else None)
    )
    truth = gen.true_value(gen.uniform_policy)
    errors: dict[str, list] = {}
    widths: dict[str, list] = {}
    covered: dict[str, int] = {}
    ctr, max_weight, negative = [], [], 0
    t = time.perf_counter()
    for seed in range(seeds):
        logs = gen.sample(n, seed=seed)
        imp = logs.impressions
        ctr.append(imp["reward"].mean())
        arms = (
            {}
            if not varying
            else {
                "items": logs.candidates,
                "item_features": gen.item_feature_matrix(),
                "action_mask": (logs.candidates >= 0).astype(float),
            }
        )
        data = LoggedFeedback(
            gen.encode(logs.contexts()), imp["action"], imp["reward"].astype(float), imp["propensity"], **arms
        )
        target = estimators.uniform_probs(n, gen.num_slots, data.action_mask)
        max_weight.append(float(estimators.importance_weights(data, target).max()))
        q = reward_models.reward_predictions(reward_model, data, gen.num_slots, seed=seed, balance=balance, clip=clip)
        fixed = estimators.estimate(data, target, q, num_bootstrap=num_bootstrap, seed=seed)
        refits = reward_models.refit_dm_replicates(
            data,
            [target],
            reward_model,
            gen.num_slots,
            replicates=dm_refits,
            max_records=dm_refit_records,
            seed=seed,
            balance=balance,
            clip=clip,
        )
        est = estimators.estimate(data, target, q, num_bootstrap=num_bootstrap, seed=seed, dm_refits=refits)
        negative += int(min(e.value for e in est.values()) < 0)
        for name, e in list(est.items()) + [("dm_fixed_model", fixed["dm"])]:
            if name != "dm_fixed_model":
                errors.setdefault(name, []).append(abs(e.value - truth) / truth)
                widths.setdefault(name, []).append((e.upper - e.lower) / truth)
            covered[name] = covered.get(name, 0) + int(e.lower <= truth <= e.upper)
    rel = {name: round(float(np.mean(v)), 4) for name, v in errors.items()}
    dr_family = {k: rel[k] for k in ("dr", "sndr", "switch_dr", "dr_os")}
    return {
        "n": n,
        "seeds": seeds,
        "varying_candidates": list(varying) if varying else None,
        "exploration": exploration,
        "max_importance_weight": round(float(np.max(max_weight)), 1),
        "reward_model": reward_model,
        "balanced_reward_model": balance,
        "clipped_reward_model": clip,
        "dm_refits": dm_refits,
        "dm_refit_records": dm_refit_records,
        "true_value": truth,
        "seeds_with_a_negative_estimate": negative,
        "logging_ctr": round(float(np.mean(ctr)), 5),
        "relative_error": rel,
        "coverage": {name: c / seeds for name, c in covered.items()},
        # mean interval width / truth: what a lower-bound gate pays for the coverage
        "relative_width": {name: round(float(np.mean(v)), 4) for name, v in widths.items()},
        "best_dr_family": min(dr_family, key=dr_family.get),
        "best_dr_family_error": min(dr_family.values()),
        "seconds": round(time.perf_counter() - t, 1),
    }


# The reward models the default is chosen from (kind, propensity-balanced, clipped); the last
# row shows what clipping to the observed reward range does to ridge.
REWARD_MODEL_GRID = (
    ("logistic", True, True),
    ("logistic", False, True),
    ("ridge", True, True),
    ("ridge", False, True),
    ("ridge", False, False),
)


def table(
    n: int, seeds: int, num_bootstrap: int, explorations: list[float], dm_refits: int, dm_refit_records: int
) -> list[dict]:
    """accuracy() for every reward model of REWARD_MODEL_GRID at every exploration level."""
    rows = []
    for exploration in explorations:
        for kind, balance, clip in REWARD_MODEL_GRID:
            rows.append(
                accuracy(n, seeds, num_bootstrap, kind, balance, None, exploration, clip, dm_refits, dm_refit_records)
            )
            print(markdown_row(rows[-1]), file=sys.stderr, flush=True)
    return rows


MARKDOWN_HEADER = (
    "| exploration (max w) | n | reward model | IPS | SNIPS | DM | DR | SNDR | Switch-DR | DR-os "
    "| coverage DR / DM refit / DM fixed model |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def markdown_row(row: dict) -> str:
    e, c = row["relative_error"], row["coverage"]
    model = (
        f"{row['reward_model']}, {'balanced' if row['balanced_reward_model'] else 'unbalanced'}"
        f"{'' if row['clipped_reward_model'] else ', not clipped'}"
    )
    cells = [f"{row['exploration']:g} ({row['max_importance_weight']:g})", f"{row['n']:,}", model]
    cells += [f"{e[k]:.3f}" for k in ("ips", "snips", "dm", "dr", "sndr", "switch_dr", "dr_os")]
    cells.append(f"{c['dr']:.2f} / {c['dm']:.2f} / {c['dm_fixed_model']:.2f}")
    return "| " + " | ".join(cells) + " |"


def memory(rows: int, resamples: int) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(rows), str(resamples)], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"memory child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="logged impressions per seed")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--num-bootstrap", type=int, default=500)
    p.add_argument("--reward-model", default="logistic", choices=["logistic", "ridge"])
    p.add_argument("--no-balance", action="store_true", help="fit the reward model without balancing weights")
    p.add_argument("--no-clip", action="store_true", help="do not clip predictions to the observed reward range")
    p.add_argument(
        "--exploration",
        type=float,
        default=0.1,
        help="the Thompson logger's uniform share: propensities >= exploration / 34 (smaller: heavier tails)",
    )
    p.add_argument("--dm-refits", type=int, default=20, help="reward-model refits behind DM's interval")
    p.add_argument("--dm-refit-records", type=int, default=5_000, help="rows each refit draws from")
    p.add_argument(
        "--table",
        type=float,
        nargs="+",
        metavar="EXPLORATION",
        help="every reward model (logistic / ridge, balanced or not) at each of these exploration "
        "levels; prints a markdown table on stderr",
    )
    p.add_argument(
        "--varying-candidates",
        type=int,
        nargs=2,
        metavar=("K_MIN", "K_MAX"),
        default=None,
        help="each decision shows K_MIN..K_MAX items (per-arm OPE over varying candidate sets)",
    )
    p.add_argument("--memory-rows", type=int, default=1_000_000, help="0 skips the memory measurement")
    p.add_argument("--memory-resamples", type=int, default=1000)
    args = p.parse_args()
    if args.table:
        print(MARKDOWN_HEADER, file=sys.stderr, flush=True)
        out = {
            "table": table(args.n, args.seeds, args.num_bootstrap, args.table, args.dm_refits, args.dm_refit_records)
        }
    else:
        out = {
            "accuracy": accuracy(
                args.n,
                args.seeds,
                args.num_bootstrap,
                args.reward_model,
                not args.no_balance,
                args.varying_candidates,
                args.exploration,
                not args.no_clip,
                args.dm_refits,
                args.dm_refit_records,
            )
        }
    out["obp_reference"] = {"dm": 0.157, "ips": 0.311, "dr": 0.292, "switch_dr": 0.258, "dr_os": 0.160}
    if args.memory_rows:
        out["bootstrap_memory"] = memory(args.memory_rows, args.memory_resamples)
    emit("ope_accuracy", **out)


if __name__ == "__main__":
    main()
