"""The bootstrap resamples what the split sampled: each record carries the hash its split was drawn
from (`split_content` under the default content hash, `split_unit` under a key), and the Evaluator
draws its bootstrap weights from it (bootstrap.py's docstring). Resampled one at a time, the
copies of a row the content hash sent to eval together passed for independent draws and the
intervals came out too narrow: the closed loop, whose logs repeat 47% of their rows, covered 10
of 15 nights."""

from __future__ import annotations

import glob
import os

import numpy as np
import tensorflow as tf

from rlops.components.common import feedback, records
from rlops.components.common.feedback import LoggedFeedback
from rlops.components.common.record_keys import file_record_keys, splitmix64, unit_record_keys
from rlops.components.evaluator import beam as evaluator_beam, bootstrap, estimators, reward_models
from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SpecConfig,
    Split,
    SplitConfig,
    run_experience_gen,
    splits,
)


def _ingest(tmp_path, eg_data, logs: dict, split_config: SplitConfig) -> str:
    eg_data.write_logs(str(tmp_path / "logs.parquet"), "parquet", logs, "context", "x")
    config = ExperienceGenConfig(
        source=FileSource(pattern=str(tmp_path / "logs.parquet"), format="parquet"),
        bandit_columns=BanditColumns(context=("context",)),
        action_spec=SpecConfig.discrete(eg_data.K),
        splits=split_config,
    )
    out = str(tmp_path / "examples")
    assert run_experience_gen(config, out, str(tmp_path / "quarantine")).records_quarantined == 0
    return out


def _records(examples: str, split: str) -> list[tf.train.Example]:
    files = sorted(glob.glob(records.split_file_pattern(examples, split)))
    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _content(ex: tf.train.Example) -> tuple:
    f = ex.features.feature
    return tuple(tuple(getattr(f[k], f[k].WhichOneof("kind")).value) for k in sorted(f) if k != records.SPLIT_UNIT)


def _unit(ex: tf.train.Example, name: str = records.SPLIT_CONTENT) -> int:
    return ex.features.feature[name].int64_list.value[0]


def test_each_record_carries_the_content_hash_its_split_was_drawn_from(tmp_path, eg_data):
    logs = eg_data.bandit_logs(200, seed=9)
    repeat = np.r_[np.arange(200), np.repeat(np.arange(40), 3)]  # 40 rows logged 4 times each
    logs = {k: v[repeat] for k, v in logs.items()}
    config = SplitConfig(splits=(Split("train", 1), Split("eval", 1)))
    examples = _ingest(tmp_path / "content", eg_data, logs, config)

    unit_of: dict[tuple, int] = {}
    for index, split in enumerate(config.names):
        for ex in _records(examples, split):
            assert records.SPLIT_UNIT not in ex.features.feature
            unit = np.array([_unit(ex)], np.int64)
            # The hash the split came from, and identical rows share one.
            assert splits.by_hash(unit.view(np.uint64), config.splits)[0] == index
            assert unit_of.setdefault(_content(ex), int(unit[0])) == int(unit[0])
    assert len(unit_of) == 200  # 240 records, 200 distinct rows

    # Both engines key the eval records by content, and each copy by its file and index.
    data = feedback.load_logged_feedback(examples, "eval")
    eval_records = _records(examples, "eval")
    content = unit_record_keys([_unit(ex) for ex in eval_records])
    files = feedback.split_files(examples, "eval")
    assert len(files) == 1
    copies = file_record_keys(os.path.basename(files[0]), 0, len(eval_records))
    assert np.array_equal(data.record_keys, content) and np.array_equal(data.copy_keys, copies)
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    got = evaluator_beam.batch_keys(serialized, os.path.basename(files[0]), 0, records.SPLIT_CONTENT)
    assert np.array_equal(got[0], content) and np.array_equal(got[1], copies)

    # A replicate weighs a record by its content's and its own Poisson draws, mixed.
    weights = bootstrap.poisson_weights(data.bootstrap_keys, 50, 0)
    draws = [bootstrap.poisson_weights(k, 50, 0) for k in (content, copies)]
    c = bootstrap.COPY_SCALE
    np.testing.assert_allclose(weights, c * (draws[0] + draws[1]) + 1 - 2 * c)
    counts = [sum(_content(e) == _content(ex) for e in eval_records) for ex in eval_records]
    assert max(counts) > 1, "some repeated rows landed in eval"


def test_a_key_split_records_the_keys_hash_and_a_time_split_none(tmp_path, eg_data):
    logs = eg_data.bandit_logs(120, seed=10)
    examples = _ingest(tmp_path / "key", eg_data, logs, SplitConfig(key="user_id"))
    users = {tuple(c.tolist()): str(u) for c, u in zip(logs["context"], logs["user_id"])}
    for split in ("train", "eval"):
        for ex in _records(examples, split):
            user = users[tuple(np.float32(ex.features.feature["context"].float_list.value).tolist())]
            assert records.SPLIT_CONTENT not in ex.features.feature
            assert _unit(ex, records.SPLIT_UNIT) == int(splits.key_hash(np.array([user], object)).view(np.int64)[0])
    data = feedback.load_logged_feedback(examples, "eval")  # a user's records: one key, resampled whole
    assert data.copy_keys is None and len(np.unique(data.record_keys)) < len(data.actions)

    logs["ts"] = np.arange(120)
    timed = _ingest(tmp_path / "time", eg_data, logs, SplitConfig(time_column="ts", time_boundaries=(90,)))
    assert all(records.split_hash_name(ex) is None for ex in _records(timed, "eval"))
    data = feedback.load_logged_feedback(timed, "eval")  # no split hash: keyed by file and index
    assert data.copy_keys is None and len(np.unique(data.record_keys)) == len(data.actions) == 30


def _choice_rows(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One draw per row of `probs` [n, k], the draws `rng.choice(k, p=row)` gives row by row (one
    uniform each, searched in the row's normalized CDF), without a Python loop."""
    cdf = np.cumsum(probs, 1)
    cdf /= cdf[:, -1:]
    return (cdf <= rng.random(len(probs))[:, None]).sum(1)


def _clustered_night(seed: int, users: int = 30, k: int = 4, n: int = 4000):
    """One night's eval half under a content split: decisions (user, item) of an epsilon-greedy
    logger with 0/1 rewards, every distinct (user, item, reward) sent to train or eval whole by a
    hash under the night's own salt. Returns (the eval records, their content ids, truth, target)."""
    rng = np.random.default_rng(seed)
    ctr = np.random.default_rng(99).uniform(0.05, 0.4, (users, k))  # the world; nights differ
    best_logged = np.argmax(ctr + np.random.default_rng(98).normal(0, 0.1, (users, k)), 1)
    logger = estimators.epsilon_greedy_probs(best_logged, k, 0.3)  # [users, k]
    target_item = np.argmax(ctr, 1)
    u = rng.integers(0, users, n)
    a = _choice_rows(rng, logger[u])
    r = (rng.random(n) < ctr[u, a]).astype(float)
    content = (u * k + a) * 2 + r.astype(int)
    eval_rows = splitmix64(content.astype(np.uint64) ^ np.uint64(seed)) % np.uint64(2) == 0
    data = LoggedFeedback(np.zeros((n, 1)), a, r, logger[u, a])
    target = np.eye(k)[target_item[u]]
    truth = float(ctr[np.arange(users), target_item].mean())
    rows = np.flatnonzero(eval_rows)
    return reward_models.subset(data, rows), content[rows], truth, target[rows]


def test_resampling_contents_and_copies_restores_coverage():
    """300 nights: IPS / SNIPS intervals resampling rows one at a time miss the truth far more
    often than 5% (copies sent to eval together pass for independent draws); resampling each
    content whole over-covers with wider intervals; contents and copies mixed cover as asked."""
    keyings = ("rows", "contents", "contents_and_copies")
    hits = {keying: {"ips": 0, "snips": 0} for keying in keyings}
    width = {keying: 0.0 for keying in keyings}
    nights = 300
    for seed in range(nights):
        data, content, truth, target = _clustered_night(seed)
        rows = np.arange(len(content), dtype=np.uint64)
        for keying, keys, copy_keys in (
            ("rows", None, None),
            ("contents", unit_record_keys(content), None),
            ("contents_and_copies", unit_record_keys(content), rows),
        ):
            night = LoggedFeedback(
                data.contexts, data.actions, data.rewards, data.propensities, keys=keys, copy_keys=copy_keys
            )
            est = estimators.estimate(night, target, None, num_bootstrap=200, seed=seed)
            for name in hits[keying]:
                hits[keying][name] += est[name].lower <= truth <= est[name].upper
            width[keying] += (est["ips"].upper - est["ips"].lower) / nights
    rate = {keying: {name: h / nights for name, h in counts.items()} for keying, counts in hits.items()}
    assert all(rate["rows"][name] < 0.8 for name in ("ips", "snips")), rate
    assert all(rate["contents"][name] >= 0.97 for name in ("ips", "snips")), rate
    assert all(0.91 <= rate["contents_and_copies"][name] <= 0.98 for name in ("ips", "snips")), rate
    assert width["contents_and_copies"] < 0.85 * width["contents"], width
