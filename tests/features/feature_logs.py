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
