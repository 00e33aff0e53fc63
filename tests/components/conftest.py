"""Small logged-experience fixtures for the ExperienceGen tests, written into tmp_path."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

D, K, OBS = 6, 4, 3  # context width, arms, observation width


def bandit_logs(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n logged decisions: context [n, D] float32, action, reward, propensity, user_id."""
    rng = np.random.default_rng(seed)
    return {
        "context": rng.normal(size=(n, D)).astype(np.float32),
        "action": rng.integers(0, K, n),
        "reward": rng.random(n).astype(np.float32),
        "propensity": rng.choice([0.25, 0.5, 1.0], n).astype(np.float32),
        "user_id": rng.integers(0, 50, n),
    }


def trajectory_logs(num_episodes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Step records of episodes with 1..6 steps; the last step is terminal for even episodes."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {
        k: [] for k in ("episode_id", "step", "observation", "action", "reward", "terminated", "log_probability")
    }
    for e in range(num_episodes):
        length = int(rng.integers(1, 7))
        for t in range(length):
            cols["episode_id"].append(f"ep-{seed}-{e}")
            cols["step"].append(t)
            cols["observation"].append(rng.normal(size=OBS).astype(np.float32))
            cols["action"].append(int(rng.integers(0, K)))
            cols["reward"].append(float(rng.random()))
            cols["terminated"].append(bool(t == length - 1 and e % 2 == 0))
            cols["log_probability"].append(float(np.log(1.0 / K)))
    out = {k: np.asarray(v) for k, v in cols.items()}
    out["observation"] = np.stack(cols["observation"])
    out["episode_id"] = np.asarray(cols["episode_id"], object)
    return out


def _flat_columns(cols: dict[str, np.ndarray], vector: str, prefix: str) -> dict[str, Any]:
    """Vector column -> one scalar column per value (prefix0, prefix1, ...), for CSV."""
    out = {k: v for k, v in cols.items() if k != vector}
    for j in range(cols[vector].shape[1]):
        out[f"{prefix}{j}"] = cols[vector][:, j]
    return out


def write_logs(path: str, fmt: str, cols: dict[str, np.ndarray], vector: str, prefix: str) -> str:
    """Write records in `fmt`. CSV gets the vector as prefixed columns, the others as a list."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    n = len(next(iter(cols.values())))
    if fmt == "csv":
        flat = _flat_columns(cols, vector, prefix)
        pcsv.write_csv(pa.table({k: pa.array(list(v) if v.dtype == object else v) for k, v in flat.items()}), path)
    elif fmt == "parquet":
        table = {k: pa.array(v.tolist()) for k, v in cols.items()}
        pq.write_table(pa.table(table), path, row_group_size=max(1, n // 3))
    elif fmt == "jsonl":
        with open(path, "w") as f:
            for i in range(n):
                f.write(json.dumps({k: _py(v[i]) for k, v in cols.items()}) + "\n")
    elif fmt == "tfrecord":
        import tensorflow as tf

        with tf.io.TFRecordWriter(path) as w:
            for i in range(n):
                ex = tf.train.Example()
                for k, v in cols.items():
                    value = np.atleast_1d(v[i])
                    feat = ex.features.feature[k]
                    if value.dtype == object or value.dtype.kind == "U":
                        feat.bytes_list.value.extend(s.encode() for s in value)
                    elif value.dtype.kind in "iub":
                        feat.int64_list.value.extend(int(x) for x in value)
                    else:
                        feat.float_list.value.extend(float(x) for x in value)
                w.write(ex.SerializeToString())
    else:
        raise ValueError(fmt)
    return path


def _py(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v.item() if hasattr(v, "item") else v


@pytest.fixture
def eg_uris(tmp_path):
    """(examples_uri, quarantine_uri) under tmp_path."""
    return str(tmp_path / "examples"), str(tmp_path / "quarantine")


@pytest.fixture
def eg_data():
    """The data helpers and sizes (test modules cannot import conftest by name)."""
    return SimpleNamespace(
        D=D, K=K, OBS=OBS, bandit_logs=bandit_logs, trajectory_logs=trajectory_logs, write_logs=write_logs
    )


@pytest.fixture(scope="session")
def digits_examples(tmp_path_factory) -> str:
    """3,000 simulated digits-bandit records through ExperienceGen (10 actions), once per session:
    the Trainer and warm-start tests share them."""
    from rlops.components.experience_gen import ExperienceGenConfig, SimulationSource, SpecConfig, run_experience_gen

    root = tmp_path_factory.mktemp("digits_gen")
    config = ExperienceGenConfig(
        source=SimulationSource(env="digits", num_records=3000), action_spec=SpecConfig.discrete(10)
    )
    run_experience_gen(config, str(root / "examples"), str(root / "quarantine"), ["--runner=DirectRunner"])
    return str(root / "examples")
