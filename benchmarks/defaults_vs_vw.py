"""The default bandit config on production-shaped per-arm click logs, against Vowpal Wabbit, in one run.

On each world of the generator (rlops.envs.logged_feedback.LogGenerator: Thompson-like logging,
34 items with an item table, the closed loop's worlds at `--ctr 0.05`), `--rows` logged
impressions are written as Parquet files (impressions and the item table), and:

1. rlops: `rlops run bandit --config logs.yaml` (ingest, train, evaluate, push) with the config a
   user writes for these logs: the columns only (source, item table, features, item features),
   no trainer section, so the TRAINER IS THE DEFAULT one (`--set key=value` changes it, e.g.
   the defaults before per-arm logs had their own: `--set trainer.network=common_tower ...`).
   The wall time is the whole run's.
2. Vowpal Wabbit, when `--vw-python` names an interpreter that imports `vowpalwabbit` (a separate
   venv: `python3.10 -m venv /tmp/vw-venv && /tmp/vw-venv/bin/pip install vowpalwabbit numpy`):
   `--cb_adf` on the same rows (namespaces U: the user's categorical columns, F: its floats, P: the
   position, A: the item's id and features; cost = -click), `--vw-args` (default: the best of the
   16 settings issue 36 measured, `--cb_type mtr -q UA -q FA -q PA -l 0.001 --power_t 0`) with
   `--vw-passes` passes over a cache. The time is its training only (parsing the text included).
   Without `--vw-python` (or when it cannot import vowpalwabbit) the peer is skipped and says why.

3. With `--reference-l2 10,30` (a comma-separated L2 grid), a yardstick that is not a product: the
   well-specified model (closed_loop's `lowrank` reference: one logistic factorization model of the
   click model's own shape, rank 4, the item's id and features, fitted to convergence by L-BFGS)
   fitted on a seeded 90% of the same rows for each L2, and the L2 whose held-out log loss on the
   other 10% is lowest. What the logs allow a learner that contains the truth and picks its own
   regularization; the grid's best fraction is what it reaches only when told the answer.
   `--reference-rank 4,8` fits each rank too and chooses the (rank, L2) pair the same way: rank 4
   is the click model's own, which a product is not told (the default embedding is 8 wide).

Each learner's GREEDY policy is valued exactly over the generator's whole finite user population
(benchmarks/closed_loop.py's machinery: the trained SavedModel's serving_default in a fresh process,
its greedy_action; VW's lowest predicted cost), as a fraction of the way from the logging policy's
value (0) to the optimum's (1).

    python benchmarks/defaults_vs_vw.py --worlds 3,4,5 --rows 100000 --vw-python /tmp/vw-venv/bin/python
    python benchmarks/defaults_vs_vw.py --worlds 0 --set trainer.network=common_tower \
        --set trainer.reward_loss=squared_error --set trainer.weight_decay=0 \
        --set trainer.hidden_sizes=[64] --set trainer.learning_rate=0.001 --set trainer.batch_size=32 \
        --set trainer.train_steps=2000   # the defaults before per-arm logs had their own (2,000 x 32)
    python benchmarks/defaults_vs_vw.py --worlds 3,4,5,6,7,8 --skip-rlops --reference-l2 10,30,100
    python benchmarks/defaults_vs_vw.py --worlds 3 --sample-seed 1001 --skip-rlops \
        --reference-l2 10,30,100 --reference-rank 4,8   # another draw of world 3's logs

Prints one JSON line: per world, each learner's fraction of the gap, its wall times, rlops'
records trained and the ratio of rlops' whole run to VW's training.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
VW_ARGS = "--cb_type mtr -q UA -q FA -q PA -l 0.001 --power_t 0"  # issue 36's best of 16 settings
VW_PASSES = 5


# ---- the world's logs ----------------------------------------------------------------------------


def world(seed: int, ctr: float):
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    return LogGenerator(LogConfig(logging="thompson", ctr=ctr, seed=seed))


def user_config(gen, directory: str, root: str) -> dict:
    """What a user writes for these logs: where they are and which columns are which; no trainer
    section (the per-arm default adds the item table's id as an item feature itself)."""
    from closed_loop import ITEM_FEATURES

    features = [{"name": c} for c in gen.user_columns + gen.float_columns] + [
        {"name": "position", "kind": "categorical"}
    ]
    item_features = list(ITEM_FEATURES)
    return {
        "name": "defaults-vs-vw",
        "root": root,
        "warm_start": False,
        "experience_gen": {
            "source": {"kind": "file", "format": "parquet", "pattern": os.path.join(directory, "impressions.parquet")},
            "item_source": {"kind": "file", "format": "parquet", "pattern": os.path.join(directory, "items.parquet")},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": gen.num_items - 1},
            "bandit_columns": {"features": features, "item_id": "item_id", "item_features": item_features},
        },
    }


# ---- rlops ---------------------------------------------------------------------------------------


def run_rlops(gen, directory: str, overrides: list[str]) -> dict:
    """`rlops run bandit` on the logs in `directory`; the trained candidate's greedy fraction."""
    import yaml
    from closed_loop import candidate_model_dir, request, serve

    root = os.path.join(directory, "pipeline")
    config_path, summary_path = os.path.join(directory, "logs.yaml"), os.path.join(directory, "summary.json")
    with open(config_path, "w") as f:
        yaml.safe_dump(user_config(gen, directory, root), f, sort_keys=False)
    rlops = os.path.join(os.path.dirname(sys.executable), "rlops")
    command = [rlops, "run", "bandit", "--config", config_path, "--summary-json", summary_path]
    for assignment in overrides:
        command += ["--set", assignment]
    t0 = time.perf_counter()
    proc = subprocess.run(
        command, capture_output=True, text=True, cwd=directory, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"rlops run bandit exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    with open(summary_path) as f:
        summary = json.load(f)
    model = candidate_model_dir(root)
    metrics = _trainer_metrics(root)
    staging = os.path.join(directory, "candidate")
    shutil.copytree(model, os.path.join(staging, "1"))
    with open(os.path.join(staging, "1", "rlops_version.json"), "w") as f:
        json.dump({"candidate": True}, f)
    population, _ = gen.population_contexts()
    (response,), _ = serve(staging, [request(gen, population)], os.path.join(directory, "serve"))
    greedy = response["greedy_action"].astype(int)
    return {
        "fraction": fraction_of_gap(gen, greedy),
        "run_wall_s": round(wall, 1),
        "train_wall_s": round(float(metrics.get("wall_s", float("nan"))), 1),
        "train_records": metrics.get("train_records"),
        "train_steps": metrics.get("train_steps"),
        "blessed": summary.get("blessed"),
    }


def _trainer_metrics(root: str) -> dict:
    from closed_loop import _latest

    path = os.path.join(_latest(os.path.join(root, "artifacts", "Trainer", "model_run")), "metrics.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        metrics = json.load(f)
    return {**metrics.get("extra", {}), **{k: v for k, v in metrics.items() if k != "extra"}}


def fraction_of_gap(gen, greedy: np.ndarray) -> float:
    """The greedy policy's exact value over the population, 0 at the logging policy, 1 at the optimum."""
    probs = np.zeros((len(greedy), gen.num_items))
    probs[np.arange(len(greedy)), greedy] = 1.0
    logging, optimal = gen.true_value(gen.logging_policy), gen.true_value(gen.optimal_policy)
    return round((gen.true_value(lambda _: probs) - logging) / (optimal - logging), 4)


# ---- the well-specified yardstick ----------------------------------------------------------------


def run_reference(gen, logs, l2_grid: list[float], ranks: tuple[int, ...] = (4,)) -> dict:
    """The lowrank reference at each (rank, L2) on a seeded 90% of the rows: its greedy fraction
    and its held-out log loss on the rest; `chosen` is the setting with the lowest held-out loss."""
    from rlops.components.evaluator.reward_models import fit_low_rank

    x, a = gen.encode(logs.contexts()), np.asarray(logs.impressions["action"])
    r = np.asarray(logs.impressions["reward"], float)
    held = np.random.default_rng(7).random(len(r)) < 0.1
    population = gen.encode(gen.population_contexts()[0])
    items = gen.item_feature_matrix()
    per_setting = {}
    for rank in ranks:
        for l2 in l2_grid:
            fit = x[~held], a[~held], r[~held], np.ones(int((~held).sum()))
            model = fit_low_rank(*fit, len(items), "logistic", items, rank, l2)
            p = np.clip(model.predict(x[held])[np.arange(int(held.sum())), a[held]], 1e-9, 1 - 1e-9)
            loss = float(-np.mean(r[held] * np.log(p) + (1 - r[held]) * np.log(1 - p)))
            fraction = fraction_of_gap(gen, model.predict(population).argmax(1))
            per_setting[(rank, l2)] = {"fraction": fraction, "heldout_log_loss": loss}
    chosen_rank, chosen_l2 = min(per_setting, key=lambda k: per_setting[k]["heldout_log_loss"])
    return {
        "chosen_rank": chosen_rank,
        "chosen_l2": chosen_l2,
        "fraction": per_setting[(chosen_rank, chosen_l2)]["fraction"],
        "best_fraction": max(v["fraction"] for v in per_setting.values()),
        "per_setting": {
            f"rank {k[0]}, l2 {k[1]:g}": {**v, "heldout_log_loss": round(v["heldout_log_loss"], 6)}
            for k, v in per_setting.items()
        },
    }


# ---- Vowpal Wabbit -------------------------------------------------------------------------------


def _vw_shared(gen, contexts: dict, i: int) -> str:
    users = " ".join(f"{c}={contexts[c][i]}" for c in gen.user_columns)
    floats = " ".join(f"{c}:{float(contexts[c][i]):.6g}" for c in gen.float_columns)
    return f"shared |U {users} |F {floats} |P position={int(contexts['position'][i])}"


def vw_item_lines(gen) -> list[str]:
    items = gen.items
    return [
        f"|A item_id={items['item_id'][a]} category={items['item_category'][a]} brand={items['item_brand'][a]} "
        f"log_price:{np.log(items['item_price'][a]):.6g} popularity:{items['item_popularity'][a]:.6g}"
        for a in range(gen.num_items)
    ]


def write_vw(gen, logs, train_path: str, population_path: str) -> None:
    """cb_adf text: a shared line per decision, one line per item (the logged one labelled
    `0:cost:propensity`, cost = -click), a blank line between decisions."""
    items = vw_item_lines(gen)
    contexts, imp = logs.contexts(), logs.impressions
    with open(train_path, "w") as f:
        for i in range(len(logs)):
            lines = list(items)
            a = int(imp["action"][i])
            lines[a] = f"0:{-float(imp['reward'][i]):g}:{float(imp['propensity'][i]):.6g} {lines[a]}"
            f.write(_vw_shared(gen, contexts, i) + "\n" + "\n".join(lines) + "\n\n")
    population, _ = gen.population_contexts()
    with open(population_path, "w") as f:
        for i in range(len(population["position"])):
            f.write(_vw_shared(gen, population, i) + "\n" + "\n".join(items) + "\n\n")


def vw_worker(train: str, population: str, args: str, passes: int, out: str) -> None:
    """Runs inside --vw-python (vowpalwabbit + numpy only): trains on `train`, writes the
    population's predicted costs [N, K] to `out` (.npy) and prints the training seconds."""
    import vowpalwabbit

    model = out + ".model"
    cache = out + ".cache"
    t0 = time.perf_counter()
    vw = vowpalwabbit.Workspace(
        f"--cb_adf {args} --passes {passes} -k --cache_file {cache} -d {train} -f {model} --quiet"
    )
    vw.run_parser()
    vw.finish()
    train_s = time.perf_counter() - t0
    vw = vowpalwabbit.Workspace(f"-i {model} -t --quiet")
    costs = []
    with open(population) as f:
        block: list[str] = []
        for line in f:
            line = line.rstrip("\n")
            if line:
                block.append(line)
                continue
            scores = vw.predict(block)  # cb_adf: one predicted cost per action line, in their order
            costs.append(scores)
            block = []
    vw.finish()
    np.save(out, np.asarray(costs, float))
    print(json.dumps({"train_s": train_s, "version": getattr(vowpalwabbit, "__version__", None)}))


def run_vw(gen, logs, directory: str, vw_python: str, args: str, passes: int) -> dict:
    train, population = os.path.join(directory, "train.vw"), os.path.join(directory, "population.vw")
    write_vw(gen, logs, train, population)
    out = os.path.join(directory, "vw_costs.npy")
    proc = subprocess.run(
        [vw_python, str(Path(__file__).resolve()), "--vw-worker", train, population, args, str(passes), out],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"VW worker exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    costs = np.load(out)
    return {
        "fraction": fraction_of_gap(gen, costs.argmin(1)),
        "train_wall_s": round(info["train_s"], 1),
        "version": info.get("version"),
    }


def vw_available(vw_python: str | None) -> str | None:
    """None when --vw-python imports vowpalwabbit, else why the peer is skipped."""
    if not vw_python:
        return "no --vw-python given"
    try:
        proc = subprocess.run([vw_python, "-c", "import vowpalwabbit"], capture_output=True, text=True)
    except OSError as e:
        return f"--vw-python {vw_python}: {e}"
    return None if proc.returncode == 0 else f"--vw-python {vw_python} cannot import vowpalwabbit"


# ---- the run -------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--vw-worker":
        train, population, vw_args, passes, out = sys.argv[2:7]
        vw_worker(train, population, vw_args, int(passes), out)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="3,4,5", help="generator seeds, comma-separated (0-2: the closed loop's)")
    ap.add_argument("--rows", type=int, default=100_000, help="logged impressions per world")
    ap.add_argument("--ctr", type=float, default=0.05, help="the uniform policy's click-through rate")
    ap.add_argument("--sample-seed", type=int, default=1000, help="the logs' draw (closed_loop's night 0: 1000)")
    ap.add_argument("--set", action="append", default=[], dest="overrides", help="an rlops --set, repeatable")
    ap.add_argument("--vw-python", default=None, help="an interpreter with vowpalwabbit (absent: the peer is skipped)")
    ap.add_argument("--vw-args", default=VW_ARGS)
    ap.add_argument("--vw-passes", type=int, default=VW_PASSES)
    ap.add_argument("--skip-rlops", action="store_true")
    ap.add_argument("--reference-l2", default="", help="L2 grid of the well-specified yardstick, e.g. 10,30")
    ap.add_argument("--reference-rank", default="4", help="its rank grid, e.g. 4,8 (the click model's own: 4)")
    ap.add_argument("--workdir", default="", help="keep logs, configs and pipeline roots here")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import emit

    skipped = vw_available(args.vw_python)
    work = args.workdir or tempfile.mkdtemp(prefix="defaults_vs_vw_")
    t0 = time.perf_counter()
    per_world = []
    try:
        for seed in [int(s) for s in args.worlds.split(",") if s.strip()]:
            gen = world(seed, args.ctr)
            directory = os.path.join(work, f"world_{seed}")
            shutil.rmtree(directory, ignore_errors=True)
            logs = gen.sample(args.rows, seed=args.sample_seed)
            logs.to_files(directory, format="parquet")
            row: dict = {"world": seed}
            if not args.skip_rlops:
                row["rlops"] = run_rlops(gen, directory, args.overrides)
            if args.reference_l2:
                l2_grid = [float(v) for v in args.reference_l2.split(",")]
                ranks = tuple(int(v) for v in args.reference_rank.split(","))
                row["reference"] = run_reference(gen, logs, l2_grid, ranks)
            if skipped is None:
                row["vw"] = run_vw(gen, logs, directory, args.vw_python, args.vw_args, args.vw_passes)
            if "rlops" in row and "vw" in row:
                row["run_over_vw_train"] = round(row["rlops"]["run_wall_s"] / max(row["vw"]["train_wall_s"], 1e-9), 2)
            print(json.dumps(row), file=sys.stderr, flush=True)
            per_world.append(row)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    def mean(learner: str, key: str) -> float | None:
        values = [r[learner][key] for r in per_world if learner in r]
        return round(float(np.mean(values)), 4) if values else None

    emit(
        "defaults_vs_vw",
        worlds=args.worlds,
        rows=args.rows,
        ctr=args.ctr,
        overrides=args.overrides,
        vw_args=f"--cb_adf {args.vw_args} --passes {args.vw_passes}",
        **({"vw_skipped": skipped} if skipped else {}),
        per_world=per_world,
        rlops_mean_fraction=mean("rlops", "fraction"),
        vw_mean_fraction=mean("vw", "fraction"),
        reference_mean_fraction=mean("reference", "fraction"),
        rlops_mean_run_wall_s=mean("rlops", "run_wall_s"),
        vw_mean_train_wall_s=mean("vw", "train_wall_s"),
        wall_s=round(time.perf_counter() - t0, 1),
    )


if __name__ == "__main__":
    main()
