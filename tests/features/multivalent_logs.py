"""Test helper (imported by name): per-arm logs with a multivalent user column (interest ids) and a
multivalent item feature (an item's category list), written as Parquet lists, JSON Lines arrays
or CSV cells joined by "|". Reward: 0.7 when the shown item's categories meet the user's
interests (interest i belongs to category i % NUM_CATEGORIES), else 0.1; so a policy that reads
both lists beats uniform."""

import json

import numpy as np

NUM_ITEMS, NUM_INTERESTS, NUM_CATEGORIES = 8, 12, 6
MAX_INTERESTS = 6  # lists hold 0..6 interests; tests configure dim 4 (longer ones are truncated)
SEP = "|"


def make_world(n, seed=0):
    rng = np.random.default_rng(seed)
    item_ids = np.array([f"item_{i}" for i in range(NUM_ITEMS)], object)
    cats = [sorted(rng.choice(NUM_CATEGORIES, rng.integers(1, 3), replace=False).tolist()) for _ in item_ids]
    items = {
        "item_id": item_ids,
        "item_cats": [[f"cat_{c}" for c in cs] for cs in cats],
        "item_price": np.round(rng.uniform(5, 50, NUM_ITEMS), 2),
    }
    interests = [
        rng.choice(NUM_INTERESTS, rng.integers(0, MAX_INTERESTS + 1), replace=False).tolist() for _ in range(n)
    ]
    action = rng.integers(0, NUM_ITEMS, n)
    match = np.array([bool({i % NUM_CATEGORIES for i in u} & set(cats[a])) for u, a in zip(interests, action)])
    logs = {
        "segment": np.array([f"seg_{s}" for s in rng.integers(0, 4, n)], object),
        "interests": [[f"int_{i:02d}" for i in u] for u in interests],
        "item_id": item_ids[action],
        "reward": (rng.random(n) < np.where(match, 0.7, 0.1)).astype(np.int64),
        "propensity": np.full(n, 1.0 / NUM_ITEMS),
    }
    return logs, items, cats


def true_value(cats, interests_ids, greedy):
    """Expected reward of the greedy actions for users with these interest ids."""
    match = [bool({i % NUM_CATEGORIES for i in u} & set(cats[a])) for u, a in zip(interests_ids, greedy)]
    return float(np.mean(np.where(match, 0.7, 0.1)))


def write(directory, logs, items, fmt):
    """logs.<fmt> and items.<fmt> under directory; returns their paths."""
    import pyarrow as pa

    paths = {"logs": f"{directory}/logs.{fmt}", "items": f"{directory}/items.{fmt}"}
    for name, cols in (("logs", logs), ("items", items)):
        table = pa.table({k: list(v) if isinstance(v, list) else v for k, v in cols.items()})
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, paths[name])
        elif fmt == "jsonl":
            with open(paths[name], "w") as fh:
                for row in table.to_pylist():
                    fh.write(json.dumps(row) + "\n")
        else:
            import pyarrow.csv as pcsv

            for k in ("interests", "item_cats"):
                if k in table.column_names:
                    i = table.column_names.index(k)
                    table = table.set_column(i, k, pa.array([SEP.join(v) for v in table.column(k).to_pylist()]))
            pcsv.write_csv(table, paths[name])
    return paths


def config(paths, fmt, dim=4):
    sep = {"separator": SEP} if fmt == "csv" else {}
    return {
        "source": {"kind": "file", "pattern": paths["logs"], "format": fmt},
        "item_source": {"kind": "file", "pattern": paths["items"], "format": fmt},
        "bandit_columns": {
            "features": ["segment", {"name": "interests", "dim": dim, **sep}],
            "item_id": "item_id",
            "item_features": [{"name": "item_cats", **sep}, "item_price"],
        },
    }
