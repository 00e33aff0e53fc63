"""Test helper (imported by name, so not called conftest): a tiny production-shaped log fixture:
hashed 32-hex user columns, floats, a position, a uniform logging policy with propensities, and a
reward that depends on the user's segment."""

import hashlib

import numpy as np

NUM_ACTIONS = 4
USER_COLUMNS = {"user_a": 6, "user_b": 12, "user_c": 5, "user_d": 30}


def hashed(column, i):
    return hashlib.md5(f"{column}:{i}".encode()).hexdigest()


def make_logs(n, seed=0):
    """Columns of n logged decisions. The best action is user_a's segment mod NUM_ACTIONS (reward
    prob. 0.6 vs 0.1), so a policy that reads the strings learns it."""
    rng = np.random.default_rng(seed)
    ids = {c: rng.integers(0, k, n) for c, k in USER_COLUMNS.items()}
    cols = {c: np.array([hashed(c, i) for i in v], object) for c, v in ids.items()}
    cols["price"] = np.round(rng.normal(20.0, 5.0, n), 3)
    cols["recency"] = np.round(rng.exponential(3.0, n), 3)
    cols["position"] = rng.integers(0, 3, n)
    action = rng.integers(0, NUM_ACTIONS, n)
    best = ids["user_a"] % NUM_ACTIONS
    cols["action"] = action
    cols["reward"] = (rng.random(n) < np.where(action == best, 0.6, 0.1)).astype(np.int64)
    cols["propensity"] = np.full(n, 1.0 / NUM_ACTIONS)
    return cols, best


def write_csv(path, cols, order=None):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    order = order or list(cols)
    pcsv.write_csv(pa.table({k: cols[k] for k in order}), str(path))


FEATURES = ["user_a", "user_b", "user_c", "user_d", "price", "recency", "position"]


def pipeline_config(root, csv, agent, action_minimum=0):
    """The bandit pipeline on these logs written as CSV (actions action_minimum..+K-1)."""
    from rlops.pipelines.config import build_config

    raw = {
        "name": f"rlops-features-{agent}",
        "root": str(root),
        "warm_start": False,
        "beam_args": ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"],
        "experience_gen": {
            "record_kind": "bandit",
            "source": {"kind": "file", "pattern": str(csv), "format": "csv"},
            "bandit_columns": {"features": [{"name": f} for f in FEATURES]},
            "action_spec": {
                "shape": [],
                "dtype": "int32",
                "minimum": action_minimum,
                "maximum": action_minimum + NUM_ACTIONS - 1,
            },
        },
        "trainer": {
            "agent": agent,
            "train_steps": 400,
            "steps_per_run": 100,
            "batch_size": 64,
            "learning_rate": 0.01,
            "serving_epsilon": 0.2,
        },
        "evaluator": {"kind": "bandit", "estimator": "dr", "min_improvement": 0.0, "num_bootstrap": 200},
    }
    return build_config("bandit", raw)
