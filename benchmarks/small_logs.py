"""A usable answer from a modest log (issue 36): which gate gives a decision on 10k rows?

On production-shaped generator worlds (rlops.envs.logged_feedback: Thompson-like logging, an item
table of `K` items, CTR `--ctr`), each draw of `--rows` logged impressions goes through the real
components with the per-arm defaults (the config a user writes for these logs, as
benchmarks/defaults_vs_vw.py writes it: ExperienceGen -> Trainer -> Evaluator), once per eval
share in `--shares` (the train/eval hash split). Per run, two gates on the same eval split:

- `fixed`: the candidate served at its trained epsilon only (the Evaluator before issue 36: the
  first entry of what the shipped Evaluator tried);
- `certify`: the shipped Evaluator (`run_evaluator` with the default config): the least exploring
  epsilon of evaluator.serving_epsilons that clears the gate.

Each decision's served policy is valued EXACTLY over the generator's population (its greedy
action from the SavedModel's serving_default; epsilon-greedy value = (1 - eps) V(greedy) + eps
V(uniform)), as a fraction of the gap from the logging policy (0) to the optimum (1); NOT BLESSED
leaves the logging policy serving (0). Also per run: eval records, the ESS of the logging and the
uniform policy, and the candidate's DR comparison against the logging policy served at each
epsilon of `--epsilons` (one reward model and one set of sums, the Evaluator's functions).
`summary`: per (rows, share, gate) the runs, trusted comparisons, blessings, blessings worse than
the logger and the mean fraction served.

    python benchmarks/small_logs.py --worlds 3:34,4:46,5:80 --rows 10000 --sample-seeds 1000,1001,1002,1003

Prints one JSON line (per-run rows on stderr as they finish). docs/benchmarks.md, "Small logs".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # an entry point that loads TFX and TFP: see rlops/quiet.py

HERE = Path(__file__).resolve().parent
EPSILONS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


def world(seed: int, num_items: int, ctr: float):
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    return LogGenerator(LogConfig(logging="thompson", ctr=ctr, seed=seed, num_items=num_items))


def buckets(share: float) -> tuple[int, int]:
    """(train, eval) hash buckets for an eval share (tenths)."""
    eval_tenths = int(round(share * 10))
    if not 1 <= eval_tenths <= 9 or abs(eval_tenths / 10 - share) > 1e-9:
        raise ValueError(f"--shares: {share} is not a tenth in 0.1..0.9")
    return 10 - eval_tenths, eval_tenths


def pipeline_config(gen, directory: str, share: float, evaluator: dict | None = None):
    """The user's config for these logs (defaults_vs_vw.user_config) with the eval share set."""
    from defaults_vs_vw import user_config

    from rlops.pipelines.config import build_config

    raw = user_config(gen, directory, os.path.join(directory, "pipeline"))
    train, held = buckets(share)
    raw["experience_gen"]["splits"] = {
        "splits": [{"name": "train", "hash_buckets": train}, {"name": "eval", "hash_buckets": held}]
    }
    if evaluator:
        raw["evaluator"] = evaluator
    return build_config("bandit", raw)


def greedy_on_population(gen, model_dir: str) -> np.ndarray:
    """The SavedModel's greedy item for every (user, position) context of the population."""
    import tensorflow as tf
    from _serve_policy import serve
    from closed_loop import request

    population, _ = gen.population_contexts()
    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    response, _ = serve(signature, request(gen, population), -1)
    return response["greedy_action"].astype(int)


def exact_values(gen, greedy: np.ndarray) -> dict[str, float]:
    probs = np.zeros((len(greedy), gen.num_items))
    probs[np.arange(len(greedy)), greedy] = 1.0
    return {
        "logging": gen.true_value(gen.logging_policy),
        "uniform": gen.true_value(gen.uniform_policy),
        "optimal": gen.true_value(gen.optimal_policy),
        "greedy": gen.true_value(lambda _: probs),
    }


def grid_estimates(config, data, greedy: np.ndarray, num_actions: int, epsilons, trained: float) -> dict:
    """The Evaluator's DR comparison vs the logging policy of the candidate served at each ε,
    from one reward model and one set of sums (the Evaluator's own functions), plus ESS of the
    uniform and logging policies."""
    from rlops.components.evaluator import estimators, reward_models
    from rlops.components.evaluator.comparisons import trust_rule
    from rlops.components.evaluator.memory import memory_sums
    from rlops.components.evaluator.scoring import served_allowed

    allowed = served_allowed(data, num_actions)
    served = [estimators.epsilon_greedy_probs(greedy, num_actions, e, allowed) for e in epsilons]
    uniform = estimators.uniform_probs(len(greedy), num_actions, allowed.astype(float))
    policies = [estimators.LOGGING_POLICY, uniform, *served]
    at_trained = estimators.epsilon_greedy_probs(greedy, num_actions, round(trained, 6), allowed)
    kind = reward_models.resolve_reward_model(config.reward_model, data.rewards)
    q = reward_models.reward_predictions(
        kind,
        data,
        num_actions,
        seed=config.seed,
        balance=config.reward_model_balance,
        sample_size=config.reward_model_sample,
        target=reward_models.evaluated_probability([at_trained, estimators.LOGGING_POLICY], data.actions),
    )
    sums = memory_sums(config, data, policies, q)
    logging_flags = [isinstance(p, str) for p in policies]
    rule = trust_rule(config)
    alone = estimators.comparison_from_sums(sums, 1, None, logging_flags, True, rule)
    out = {
        "uniform_ess": round(alone.diagnostics.ess["candidate"], 1),
        "logging_ess": round(
            estimators.comparison_from_sums(sums, 0, None, logging_flags, True, rule).diagnostics.ess["candidate"], 1
        ),
        "grid": [],
    }
    for i, eps in enumerate(epsilons):
        c = estimators.comparison_from_sums(sums, 2 + i, 0, logging_flags, True, rule)
        assert c.difference is not None
        dr = c.difference[config.estimator]
        out["grid"].append(
            {
                "epsilon": eps,
                "ess": round(c.diagnostics.ess["candidate"], 1),
                "trusted": dr.trusted,
                "value": round(dr.value, 5),
                "lower": round(dr.lower, 5) if dr.trusted else None,
            }
        )
    return out


def one_run(gen, logs_dir: str, share: float, epsilons) -> dict:
    from rlops.components.common.feedback import load_logged_feedback
    from rlops.components.common.model import serving_dir
    from rlops.components.evaluator.core import run_evaluator
    from rlops.components.evaluator.scoring import policy_probs
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.components.trainer.core import run_trainer
    from rlops.train.policy_saver import SavedPolicy

    directory = os.path.join(logs_dir, f"share_{share:g}")
    shutil.rmtree(directory, ignore_errors=True)
    pc = pipeline_config(gen, logs_dir, share)
    examples, model = os.path.join(directory, "examples"), os.path.join(directory, "model")
    t0 = time.perf_counter()
    run_experience_gen(pc.experience_gen, examples, os.path.join(directory, "quarantine"))
    t1 = time.perf_counter()
    run_trainer(pc.trainer, model, os.path.join(directory, "model_run"), examples)
    t2 = time.perf_counter()
    k = gen.num_items
    data = load_logged_feedback(examples, "eval", action_minimum=0)
    probs = policy_probs(SavedPolicy(serving_dir(model)), data, k)
    trained = round(probs.epsilon, 6)
    row = {
        "share": share,
        "eval_records": len(data.actions),
        "trained_epsilon": trained,
        **grid_estimates(pc.evaluator, data, probs.greedy.argmax(1), k, epsilons, trained),
        "values": {n: round(v, 6) for n, v in exact_values(gen, greedy_on_population(gen, serving_dir(model))).items()},
        "ingest_s": round(t1 - t0, 1),
        "train_s": round(t2 - t1, 1),
    }
    t3 = time.perf_counter()
    result = run_evaluator(
        pc.evaluator,
        model,
        os.path.join(directory, "evaluation"),
        os.path.join(directory, "blessing"),
        examples,
        None,
        k,
    )
    served = result.metrics.get("served_policy", {})
    row["evaluator"] = {
        "blessed": result.blessed,
        "served_epsilon": round(served["candidate_epsilon"], 6) if result.blessed else None,
        "tried": [
            {"epsilon": round(t["epsilon"], 6), "ess": t["ess"], "clears_gate": t["clears_gate"], **t["improvement"]}
            for t in served.get("tried", [])
        ],
        "reason": result.reason,
        "wall_s": round(time.perf_counter() - t3, 1),
    }
    return row


def fraction(values: dict, epsilon: float | None) -> float:
    """The served policy's exact value as a fraction of the logging -> optimum gap (None: the
    logging policy stays)."""
    if epsilon is None:
        return 0.0
    served = (1 - epsilon) * values["greedy"] + epsilon * values["uniform"]
    return round((served - values["logging"]) / (values["optimal"] - values["logging"]), 4)


def decisions(row: dict) -> dict:
    """Per gate: the epsilon served (None: not blessed), its exact fraction of the gap, and whether
    the gate reached a trusted comparison at all. `fixed`: the Evaluator's comparison at the
    trained epsilon only (before issue 36); `certify`: the shipped Evaluator."""
    tried = row["evaluator"]["tried"]
    first = tried[0]
    out = {
        "fixed": (first["epsilon"] if first["clears_gate"] else None, first["lower"] is not None),
        "certify": (row["evaluator"]["served_epsilon"], any(t["lower"] is not None for t in tried)),
    }
    return {
        name: {"epsilon": eps, "fraction": fraction(row["values"], eps), "trusted": trusted}
        for name, (eps, trusted) in out.items()
    }


def summary(runs: list[dict]) -> list[dict]:
    """Per (rows, share, gate): runs, trusted comparisons, blessings, blessings whose served policy
    is truly worse than the logging policy, and the mean exact fraction of the gap served."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        for gate, d in r["decisions"].items():
            groups.setdefault((r["rows"], r["share"], gate), []).append(d)
    return [
        {
            "rows": rows,
            "share": share,
            "gate": gate,
            "runs": len(ds),
            "trusted": sum(d["trusted"] for d in ds),
            "blessed": sum(d["epsilon"] is not None for d in ds),
            "worse_than_logging": sum(d["epsilon"] is not None and d["fraction"] <= 0 for d in ds),
            "mean_fraction": round(float(np.mean([d["fraction"] for d in ds])), 4),
        }
        for (rows, share, gate), ds in sorted(groups.items())
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="3:34,4:46,5:80", help="seed:num_items, comma-separated")
    ap.add_argument("--rows", default="10000,100000", help="logged impressions per world, comma-separated")
    ap.add_argument("--shares", default="0.1,0.3", help="eval shares, tenths, comma-separated")
    ap.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS), help="the grid each run reports")
    ap.add_argument("--ctr", type=float, default=0.05, help="the uniform policy's click-through rate")
    ap.add_argument("--sample-seeds", default="1000", help="the logs' draws, comma-separated (one run each)")
    ap.add_argument("--workdir", default="", help="keep logs, examples and models here")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import emit

    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    work = args.workdir or tempfile.mkdtemp(prefix="small_logs_")
    t0 = time.perf_counter()
    runs = []
    try:
        for spec in args.worlds.split(","):
            seed, num_items = (int(v) for v in spec.split(":"))
            gen = world(seed, num_items, args.ctr)
            for rows in (int(r) for r in args.rows.split(",")):
                for draw in (int(d) for d in args.sample_seeds.split(",")):
                    logs_dir = os.path.join(work, f"world_{seed}_{num_items}_{rows}_{draw}")
                    shutil.rmtree(logs_dir, ignore_errors=True)
                    gen.sample(rows, seed=draw).to_files(logs_dir, format="parquet")
                    for share in (float(s) for s in args.shares.split(",")):
                        row = {"world": seed, "items": num_items, "rows": rows, "draw": draw}
                        row.update(one_run(gen, logs_dir, share, epsilons))
                        row["decisions"] = decisions(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
                        runs.append(row)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    emit(
        "small_logs",
        worlds=args.worlds,
        rows=args.rows,
        ctr=args.ctr,
        epsilons=list(epsilons),
        summary=summary(runs),
        runs=runs,
        wall_s=round(time.perf_counter() - t0, 1),
    )


if __name__ == "__main__":
    main()
