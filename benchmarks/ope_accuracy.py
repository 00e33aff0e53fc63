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
one (ope.fit_arm_reward_model).

Memory: in a separate process (its own peak RSS), the whole Evaluator computation on
--memory-rows eval rows (ridge reward model fit, then candidate vs logging policy over 34
actions, every estimator) with --memory-resamples bootstrap resamples.

    python benchmarks/ope_accuracy.py --n 10000 --seeds 20 --memory-rows 1000000 --memory-resamples 1000
    python benchmarks/ope_accuracy.py --n 10000 --seeds 20 --varying-candidates 4 20 --memory-rows 0
prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import emit  # noqa: E402

MEMORY_CHILD = r"""
import json, resource, sys, time
import numpy as np
from rlops.components.evaluator import ope
n, resamples, k, d = int(sys.argv[1]), int(sys.argv[2]), 34, 8
rng = np.random.default_rng(0)
x = rng.normal(size=(n, d))
logging = rng.dirichlet(np.ones(k) * 0.5)
actions = rng.choice(k, n, p=logging)
rewards = (rng.random(n) < 0.005 * (1 + (x[:, 0] > 0))).astype(float)
data = ope.LoggedFeedback(x, actions, rewards, logging[actions])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
q = ope.reward_predictions("ridge", data, k)
cand, base, diff = ope.compare(data, ope.uniform_probs(n, k), ope.LOGGING_POLICY, q, num_bootstrap=resamples)
print(json.dumps({"rows": n, "resamples": resamples, "actions": k, "seconds": time.perf_counter() - t,
                  "inputs_rss_mb": before, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "trusted": diff["dr"].trusted}))
"""


def accuracy(n: int, seeds: int, num_bootstrap: int, reward_model: str, balance: bool,
             varying: tuple[int, int] | None = None) -> dict:
    from rlops.components.evaluator import ope
    from rlops.envs.logged_feedback import LogConfig, LogGenerator
    gen = LogGenerator(LogConfig(logging="thompson", seed=0, candidates=tuple(varying) if varying else None))
    truth = gen.true_value(gen.uniform_policy)
    errors: dict[str, list] = {}
    covered: dict[str, int] = {}
    ctr = []
    t = time.perf_counter()
    for seed in range(seeds):
        logs = gen.sample(n, seed=seed)
        imp = logs.impressions
        ctr.append(imp["reward"].mean())
        arms = {} if not varying else {"items": logs.candidates, "item_features": gen.item_feature_matrix(),
                                       "action_mask": (logs.candidates >= 0).astype(float)}
        data = ope.LoggedFeedback(gen.encode(logs.contexts()), imp["action"], imp["reward"].astype(float),
                                  imp["propensity"], **arms)
        q = ope.reward_predictions(reward_model, data, gen.num_slots, seed=seed, balance=balance)
        est = ope.estimate(data, ope.uniform_probs(n, gen.num_slots, data.action_mask), q,
                           num_bootstrap=num_bootstrap, seed=seed)
        for name, e in est.items():
            errors.setdefault(name, []).append(abs(e.value - truth) / truth)
            covered[name] = covered.get(name, 0) + int(e.lower <= truth <= e.upper)
    rel = {name: round(float(np.mean(v)), 4) for name, v in errors.items()}
    dr_family = {k: rel[k] for k in ("dr", "sndr", "switch_dr", "dr_os")}
    return {"n": n, "seeds": seeds, "varying_candidates": list(varying) if varying else None,
            "reward_model": reward_model, "balanced_reward_model": balance,
            "true_value": truth,
            "logging_ctr": round(float(np.mean(ctr)), 5), "relative_error": rel,
            "coverage": {name: c / seeds for name, c in covered.items()},
            "best_dr_family": min(dr_family, key=dr_family.get), "best_dr_family_error": min(dr_family.values()),
            "seconds": round(time.perf_counter() - t, 1)}


def memory(rows: int, resamples: int) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(rows), str(resamples)], capture_output=True,
                          text=True, env=env)
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
    p.add_argument("--varying-candidates", type=int, nargs=2, metavar=("K_MIN", "K_MAX"), default=None,
                   help="each decision shows K_MIN..K_MAX items (per-arm OPE over varying candidate sets)")
    p.add_argument("--memory-rows", type=int, default=1_000_000, help="0 skips the memory measurement")
    p.add_argument("--memory-resamples", type=int, default=1000)
    args = p.parse_args()
    out = {"accuracy": accuracy(args.n, args.seeds, args.num_bootstrap, args.reward_model, not args.no_balance,
                                args.varying_candidates),
           "obp_reference": {"dm": 0.157, "ips": 0.311, "dr": 0.292, "switch_dr": 0.258, "dr_os": 0.160}}
    if args.memory_rows:
        out["bootstrap_memory"] = memory(args.memory_rows, args.memory_resamples)
    emit("ope_accuracy", **out)


if __name__ == "__main__":
    main()
