"""Which engine evaluates a split: the config's, or by the split's size ("auto": the Beam engine
past beam_threshold_records, else in memory)."""

from __future__ import annotations

from rlops.components.common.feedback import split_files
from rlops.components.evaluator.config import EvaluatorConfig


def count_records(examples_uri: str, split: str, limit: int | None = None) -> int:
    """Records in the split (counting stops after `limit`: enough to pick an engine)."""
    import numpy as np
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(split_files(examples_uri, split), compression_type="GZIP")
    if limit is not None:
        ds = ds.take(limit + 1)
    return int(ds.reduce(np.int64(0), lambda c, _: c + 1).numpy())


def choose_engine(config: EvaluatorConfig, examples_uri: str, split: str = "eval") -> str:
    """ "memory" or "beam": the config's engine, or by the split's size ("auto")."""
    if config.engine != "auto":
        return config.engine
    big = count_records(examples_uri, split, config.beam_threshold_records) > config.beam_threshold_records
    return "beam" if big else "memory"
