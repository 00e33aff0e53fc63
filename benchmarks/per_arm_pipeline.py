"""Per-arm vs global-only through the pipeline on production-shaped generator logs.

ExperienceGen (impressions joined with the item table, or impressions alone) -> Trainer ->
the exported SavedModel's greedy action on every (user, position) context of the generator's
population -> the exact true value (CTR) of that greedy policy. Prints one JSON line.

    python benchmarks/per_arm_pipeline.py --records 20000 --ctr 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # an entry point that loads TFX and TFP: see rlops/quiet.py

ITEM_FEATURES = ["item_category", "item_brand", "item_price", "item_popularity"]


def ingest(logs, directory: str, per_arm: bool):
    from rlops.components.experience_gen.config import ExperienceGenConfig, SpecConfig
    from rlops.components.experience_gen.core import run_experience_gen

    paths = logs.to_files(directory, format="parquet")
    cfg = {
        "source": {"kind": "file", "pattern": paths["impressions"], "format": "parquet"},
        "bandit_columns": {"features": list(logs.context_columns)},
    }
    if per_arm:
        cfg["item_source"] = {"kind": "file", "pattern": paths["items"], "format": "parquet"}
        cfg["bandit_columns"].update(item_id="item_id", item_features=ITEM_FEATURES)
    else:
        cfg["action_spec"] = SpecConfig.discrete(len(logs.items["item_id"])).__dict__
    result = run_experience_gen(ExperienceGenConfig.from_json(cfg), f"{directory}/examples", f"{directory}/q")
    return f"{directory}/examples", result


def greedy_policy_fn(serving_dir: str, items: dict | None, num_items: int):
    """policy_fn for LogGenerator.true_value: the SavedModel's greedy action as one-hot probabilities."""
    import tensorflow as tf

    sig = tf.saved_model.load(serving_dir).signatures["serving_default"]

    def fn(contexts: dict) -> np.ndarray:
        n = len(contexts["position"])
        inputs = {k: tf.constant(v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in contexts.items()}
        if items is not None:
            for name in ITEM_FEATURES:
                v = np.asarray(items[name])
                inputs[f"per_arm/{name}"] = tf.constant(
                    np.broadcast_to(v, (n, len(v))).astype(object if v.dtype.kind in "OU" else np.float32)
                )
            inputs["num_actions"] = tf.fill([n], tf.constant(num_items, tf.int64))
        actions = np.concatenate(
            [sig(**{k: v[i : i + 4096] for k, v in inputs.items()})["greedy_action"].numpy() for i in range(0, n, 4096)]
        )
        probs = np.zeros((n, num_items))
        probs[np.arange(n), actions] = 1.0
        return probs

    return fn


def train(examples: str, directory: str, agent: str, num_items: int, steps: int, seed: int = 0) -> str:
    from rlops.components.common.model import serving_dir
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    cfg = TrainerConfig(
        agent=agent,
        num_actions=num_items,
        batch_size=128,
        train_steps=steps,
        steps_per_run=100,
        hidden_sizes=(64,),
        learning_rate=3e-3,
        alpha=0.1,
        seed=seed,
    )
    run_trainer(cfg, f"{directory}/model_{agent}", f"{directory}/run_{agent}", examples)
    return serving_dir(f"{directory}/model_{agent}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--ctr", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--agents", default="lin_ucb,neural_epsilon_greedy")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    gen = LogGenerator(LogConfig(logging="thompson", ctr=args.ctr, seed=args.seed))
    logs = gen.sample(args.records, seed=1)
    k = gen.num_items
    out = {
        "benchmark": "per_arm_pipeline",
        "records": args.records,
        "ctr": args.ctr,
        "num_items": k,
        "train_steps": args.steps,
        "uniform": gen.true_value(gen.uniform_policy),
        "logging": gen.true_value(gen.logging_policy),
        "optimal": gen.true_value(gen.optimal_policy),
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        for per_arm in (True, False):
            tag = "per_arm" if per_arm else "global_only"
            examples, result = ingest(logs, f"{d}/{tag}", per_arm)
            out[f"{tag}_quarantined"] = result.records_quarantined
            for agent in args.agents.split(","):
                saved = train(examples, f"{d}/{tag}", agent, k, args.steps, args.seed)
                v = gen.true_value(greedy_policy_fn(saved, gen.items if per_arm else None, k))
                out[f"{tag}_{agent}"] = v
                out[f"{tag}_{agent}_regret"] = out["optimal"] - v
    out = {key: round(v, 6) if isinstance(v, float) else v for key, v in out.items()}
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
