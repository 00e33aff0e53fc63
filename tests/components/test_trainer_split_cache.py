"""A neural agent's train split decoded once (issue 49): held in memory while it fits in
trainer.in_memory_bytes, cached on local disk past it; both give the same records in the same order
for the same seed, every pass sees every record once, a preempted run resumes with its cache intact
(or rebuilt when it is not whole) and trains what an uninterrupted run trains."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.trainer import block_passes, loop, passes, split_cache
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer

D, K = 5, 4
SIZES = (700, 301, 1000)  # uneven shards
SPEC = {"record_id": tf.io.FixedLenFeature([1], tf.int64), "context": tf.io.FixedLenFeature([D], tf.float32)}


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> str:
    """Gzipped TFRecord shards in TFX's layout: dense `context` bandit records with a record_id."""
    uri = str(tmp_path_factory.mktemp("split") / "examples")
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(uri, "Split-train"))
    start = 0
    for i, size in enumerate(SIZES):
        path = os.path.join(uri, "Split-train", f"data_tfrecord-{i:05d}-of-{len(SIZES):05d}.gz")
        with tf.io.TFRecordWriter(path, options="GZIP") as w:
            for j in range(start, start + size):
                ex = tf.train.Example()
                f = ex.features.feature
                f["context"].float_list.value.extend(rng.normal(size=D).astype(np.float32))
                f["action"].int64_list.value.append(int(rng.integers(0, K)))
                f["reward"].float_list.value.append(float(rng.random() < 0.3))
                f["propensity"].float_list.value.append(1.0 / K)
                f["record_id"].int64_list.value.append(j)
                w.write(ex.SerializeToString())
        start += size
    return uri


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 128 rows mixed 4 at a time: the 2,001 records make 16 blocks in 4 windows."""
    monkeypatch.setattr(split_cache, "BLOCK_ROWS", 128)
    monkeypatch.setattr(block_passes, "WINDOW_BLOCKS", 4)


def _decode(examples: str, limit: int, directory: str | None):
    pattern = os.path.join(examples, "Split-train", "*")
    return passes.decoded_split(pattern, SPEC, lambda p: p, tf.distribute.InputContext(), limit, directory)


def _ids(ds: tf.data.Dataset) -> np.ndarray:
    return np.concatenate([b["record_id"].numpy()[:, 0] for b in ds])


def test_held_and_cached_splits_give_the_same_records_in_the_same_order(examples, tmp_path, small_blocks):
    n = sum(SIZES)
    held = _decode(examples, 1 << 20, str(tmp_path / "unused"))
    assert isinstance(held, split_cache.MemoryBlocks) and held.rows == n
    assert not os.path.exists(tmp_path / "unused")  # it fits: nothing written
    cached = _decode(examples, 40 * 128, str(tmp_path / "cache"))  # 40 bytes a row: 1 block fits
    assert isinstance(cached, split_cache.DiskBlocks) and cached.rows == n
    assert sorted(os.listdir(tmp_path / "cache")) == ["c0.bin", "c1.bin", split_cache.META]
    assert _decode(examples, 40 * 128, None) is None  # no disk cache: the passes stream

    batches = list(block_passes.block_passes(held, 100, 3, seed=0))
    assert [len(b["record_id"]) for b in batches] == [100] * (3 * n // 100) + [3 * n % 100]  # across passes
    ids = _ids(batches)
    np.testing.assert_array_equal(ids, _ids(block_passes.block_passes(cached, 100, 3, seed=0)))
    for b_held, b_cached in zip(batches[:3], block_passes.block_passes(cached, 100, 3, seed=0)):
        np.testing.assert_array_equal(b_held["context"].numpy(), b_cached["context"].numpy())
    per_pass = [ids[p * n : (p + 1) * n] for p in range(3)]
    for one in per_pass:
        np.testing.assert_array_equal(np.sort(one), np.arange(n))  # every record once per pass
    assert not np.array_equal(per_pass[0], per_pass[1]) and not np.array_equal(per_pass[0], np.arange(n))
    # Records from every window's 4 blocks mix within a batch (not block by block).
    block_of = np.zeros(n, int)
    for b, (_, ids_b) in enumerate(held.blocks):  # flat: context, record_id
        block_of[ids_b[:, 0]] = b
    assert len(np.unique(block_of[per_pass[0][:100]])) == 4
    # Seeded; a resumed job skipping 25 batches (whole windows included) sees the rest of it.
    for blocks in (held, cached):
        np.testing.assert_array_equal(
            _ids(block_passes.block_passes(blocks, 100, 3, seed=0, skip_batches=25)), ids[2500:]
        )
    assert not np.array_equal(_ids(block_passes.block_passes(held, 100, 1, seed=1)), per_pass[0])
    forever = _ids(block_passes.block_passes(cached, 100, None, seed=0).take(4 * n // 100))
    np.testing.assert_array_equal(forever[: 3 * n - 3 * n % 100], ids[: 3 * n - 3 * n % 100])
    cached.remove()
    assert not os.path.exists(tmp_path / "cache")


def _config(tmp_path, in_memory_bytes: int, **kw) -> TrainerConfig:
    return TrainerConfig(
        agent="neural_epsilon_greedy",
        num_actions=K,
        num_epochs=3,
        batch_size=64,
        hidden_sizes=(8,),
        steps_per_run=10,
        checkpoint_interval=10,
        in_memory_bytes=in_memory_bytes,
        cache_dir=str(tmp_path / "caches"),
        **kw,
    )


def _weights(model: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(os.path.join(model, "train", "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "/.ATTRIBUTES/" in k}


def test_held_and_cached_splits_train_the_same_model(examples, tmp_path, small_blocks):
    n = sum(SIZES)
    held = run_trainer(_config(tmp_path, 1 << 30), str(tmp_path / "held"), str(tmp_path / "r1"), examples)
    cached = run_trainer(_config(tmp_path, 1000), str(tmp_path / "cached"), str(tmp_path / "r2"), examples)
    assert held.extra["train_records"] == cached.extra["train_records"] == 3 * n
    assert held.curve == cached.curve
    want, got = _weights(str(tmp_path / "held")), _weights(str(tmp_path / "cached"))
    for key in want:
        if "save_counter" not in key:
            np.testing.assert_array_equal(want[key], got[key], err_msg=key)
    assert os.listdir(tmp_path / "caches" / "rlops-train-cache") == []  # a finished run removes its cache


class Preempted(Exception):
    pass


@pytest.mark.parametrize("whole", [True, False])
def test_a_preempted_run_resumes_with_its_cache_intact_or_rebuilt(examples, tmp_path, monkeypatch, small_blocks, whole):
    """Preempted after 40 steps (checkpointed at 40): the restarted job reads the cache it left when
    it is whole, rebuilds it when it is not, and ends where an uninterrupted run ends."""
    n = sum(SIZES)
    uninterrupted = run_trainer(_config(tmp_path, 1000), str(tmp_path / "once"), str(tmp_path / "r0"), examples)

    real_loop, builds = loop.train_loop, []
    real_build = split_cache.build
    monkeypatch.setattr(split_cache, "build", lambda *a: builds.append(1) or real_build(*a))

    def preempted_loop(learner, done, cap, *args, **kw):
        real_loop(learner, done, 40, *args, **kw)
        raise Preempted

    monkeypatch.setattr(loop, "train_loop", preempted_loop)
    model = str(tmp_path / "model")
    with pytest.raises(Preempted):
        run_trainer(_config(tmp_path, 1000), model, str(tmp_path / "r1"), examples)
    caches = tmp_path / "caches" / "rlops-train-cache"
    (cache,) = [os.path.join(caches, d) for d in os.listdir(caches)]
    assert os.path.exists(os.path.join(cache, split_cache.META)) and builds == [1]
    if not whole:  # preempted while it was written: no meta.json, a partial cache
        os.remove(os.path.join(cache, split_cache.META))

    monkeypatch.setattr(loop, "train_loop", real_loop)
    resumed = run_trainer(_config(tmp_path, 1000), model, str(tmp_path / "r2"), examples)
    assert resumed.extra["resumed_from_step"] == 40
    assert builds == ([1] if whole else [1, 1])  # read again, or rebuilt
    assert resumed.extra["train_records"] == uninterrupted.extra["train_records"] == 3 * n
    assert resumed.curve == [c for c in uninterrupted.curve if c[0] > 40]
    want, got = _weights(str(tmp_path / "once")), _weights(model)
    for key in want:
        if "save_counter" not in key:
            np.testing.assert_array_equal(want[key], got[key], err_msg=key)
    assert not os.path.exists(cache)
