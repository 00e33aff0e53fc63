"""Splits are a function of each record alone: identical across re-runs, input order and sharding."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SpecConfig,
    Split,
    SplitConfig,
    TrajectoryColumns,
    run_experience_gen,
    splits,
)


def split_contents(examples_uri: str, proto: type = tf.train.Example) -> dict[str, list[bytes]]:
    """Split name -> its records in a canonical form (protobuf map order varies by process), sorted
    (order within a split is not a contract)."""
    out = {}
    for d in sorted(glob.glob(os.path.join(examples_uri, "Split-*"))):
        files = sorted(glob.glob(os.path.join(d, "*.gz")))
        out[os.path.basename(d)[len("Split-") :]] = sorted(
            proto.FromString(r.numpy()).SerializeToString(deterministic=True)
            for r in tf.data.TFRecordDataset(files, compression_type="GZIP")
        )
    return out


def _ingest(
    tmp_path, name: str, logs: dict, eg_data, fmt: str, parts: int, splits_config: SplitConfig, kind: str = "bandit"
) -> dict[str, list[bytes]]:
    n = len(next(iter(logs.values())))
    chunks = np.array_split(np.arange(n), parts)
    vector, prefix = ("context", "x") if kind == "bandit" else ("observation", "o")
    for i, idx in enumerate(chunks):
        eg_data.write_logs(
            str(tmp_path / name / f"part-{i}.{fmt}"), fmt, {k: v[idx] for k, v in logs.items()}, vector, prefix
        )
    src = FileSource(pattern=str(tmp_path / name / f"*.{fmt}"), format=fmt)
    flat = fmt == "csv"  # CSV holds vectors as prefixed columns, the other formats as lists
    if kind == "bandit":
        cols = BanditColumns(context_prefix="x") if flat else BanditColumns(context=("context",))
        config = ExperienceGenConfig(
            source=src, bandit_columns=cols, action_spec=SpecConfig.discrete(eg_data.K), splits=splits_config
        )
    else:
        cols = TrajectoryColumns(observation_prefix="o") if flat else TrajectoryColumns()
        config = ExperienceGenConfig(
            record_kind="trajectory",
            source=src,
            action_spec=SpecConfig.discrete(eg_data.K),
            trajectory_columns=cols,
            splits=splits_config,
        )
    out = str(tmp_path / name / "examples")
    result = run_experience_gen(config, out, str(tmp_path / name / "quarantine"))
    assert result.records_quarantined == 0
    return split_contents(out, tf.train.Example if kind == "bandit" else tf.train.SequenceExample)


@pytest.mark.parametrize("key", [None, "user_id"])
def test_bandit_splits_stable_across_reruns_order_and_sharding(tmp_path, eg_data, key):
    logs = eg_data.bandit_logs(400, seed=5)
    cfg = SplitConfig(key=key)
    first = _ingest(tmp_path, "a", logs, eg_data, "csv", 1, cfg)
    again = _ingest(tmp_path, "b", logs, eg_data, "csv", 1, cfg)
    perm = np.random.default_rng(1).permutation(400)
    shuffled = _ingest(tmp_path, "c", {k: v[perm] for k, v in logs.items()}, eg_data, "csv", 3, cfg)
    assert first == again == shuffled
    assert 0.75 < len(first["train"]) / 400 < 0.97 and len(first["eval"]) > 0


def test_same_key_same_split(tmp_path, eg_data):
    logs = eg_data.bandit_logs(300, seed=6)
    out = _ingest(tmp_path, "k", logs, eg_data, "parquet", 2, SplitConfig(key="user_id"))
    which = {}
    for split, recs in out.items():
        for r in recs:
            ex = tf.train.Example.FromString(r)
            ctx = tuple(ex.features.feature["context"].float_list.value)
            which[ctx] = split
    users = {}
    for i in range(300):
        users.setdefault(int(logs["user_id"][i]), set()).add(which[tuple(logs["context"][i].tolist())])
    assert all(len(s) == 1 for s in users.values())  # a user never straddles train and eval


def test_time_split(tmp_path, eg_data):
    logs = eg_data.bandit_logs(200, seed=7)
    logs["ts"] = np.arange(200) * 10
    cfg = SplitConfig(
        splits=(Split("train"), Split("eval"), Split("test")), time_column="ts", time_boundaries=(1000, 1500)
    )
    out = _ingest(tmp_path, "t", logs, eg_data, "jsonl", 1, cfg)
    assert [len(out[s]) for s in ("train", "eval", "test")] == [100, 50, 50]


def test_trajectory_splits_by_episode_and_stable(tmp_path, eg_data):
    logs = eg_data.trajectory_logs(30, seed=8)
    perm = np.random.default_rng(2).permutation(len(logs["step"]))
    a = _ingest(tmp_path, "ta", logs, eg_data, "csv", 1, SplitConfig(), kind="trajectory")
    b = _ingest(
        tmp_path, "tb", {k: v[perm] for k, v in logs.items()}, eg_data, "csv", 2, SplitConfig(), kind="trajectory"
    )
    assert a == b and sum(len(v) for v in a.values()) == 30


def test_hash_functions_are_fixed():
    """Pinned values: a change here would silently reshuffle every user's train/eval split."""
    keys = np.array(["user-1", "user-2", "42"], object)
    assert splits.key_hash(keys).tolist() == splits.key_hash(keys.copy()).tolist()
    cols = {"context": np.arange(6, dtype=np.float32).reshape(3, 2), "action": np.array([0, 1, 2])}
    assert splits.content_hash(cols, ["context", "action"]).tolist() == [
        279672728936466863,
        456736380408495078,
        774780940786096801,
    ]
    assert splits.key_hash(keys).tolist() == [12932663740265653707, 1283169591648971085, 10491732025632701279]
    h = np.array([0, 8, 9, 19], np.uint64)
    assert splits.by_hash(h, [Split("train", 9), Split("eval", 1)]).tolist() == [0, 0, 1, 1]
    assert splits.by_time(np.array([0, 10, 20]), [10]).tolist() == [0, 1, 1]


def _eval_split(tmp_path, name: str, features: tuple[str, ...], decision_id: str | None) -> list[tf.train.Example]:
    """The eval split's records when the config selects `features` (docs/ingestion.md, "Comparing configs")."""
    from rlops.components.experience_gen.config import FeatureColumn

    config = ExperienceGenConfig(
        source=FileSource(pattern=str(tmp_path / "logs.csv"), format="csv"),
        bandit_columns=BanditColumns(
            features=tuple(FeatureColumn(name=f) for f in features), decision_id=decision_id, propensity="propensity"
        ),
        action_spec=SpecConfig.discrete(4),
    )
    out = str(tmp_path / name)
    run_experience_gen(config, out, str(tmp_path / f"{name}_quarantine"))
    files = glob.glob(os.path.join(out, "Split-eval", "*.gz"))
    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _ids(examples: list[tf.train.Example]) -> set[bytes]:
    return {e.features.feature["decision_id"].bytes_list.value[0] for e in examples}


def test_configs_that_select_other_features_split_the_same_decisions_by_their_id(tmp_path):
    """With bandit_columns.decision_id mapped, two configs that select other features put the same
    decisions in eval; without it, the hash covers the mapped columns and rows move."""
    rng = np.random.default_rng(3)
    n = 3000
    import pandas as pd

    pd.DataFrame(
        {
            "impression": [f"imp-{i}" for i in range(n)],
            "age": rng.integers(18, 70, n),
            "city": rng.choice(["a", "b", "c"], n),
            "action": rng.integers(0, 4, n),
            "reward": rng.integers(0, 2, n),
            "propensity": np.full(n, 0.25),
        }
    ).to_csv(tmp_path / "logs.csv", index=False)
    narrow = _ids(_eval_split(tmp_path, "narrow", ("age",), "impression"))
    wide = _ids(_eval_split(tmp_path, "wide", ("age", "city"), "impression"))
    assert narrow == wide and 0.05 * n < len(narrow) < 0.15 * n
    no_id = [len(_eval_split(tmp_path, name, feats, None)) for name, feats in (("a", ("age",)), ("b", ("age", "city")))]
    assert no_id[0] != no_id[1]  # the hash of the mapped columns: map decision_id to compare configs
