"""A split's records read in one pass over its files, and parsed into the LoggedFeedback that
feedback.load_logged_feedback gives for the same records (columns, record keys, per-arm items,
errors). load_logged_feedback opens a split up to three times (its first record for the parse
spec, the records, then, for records without a split unit, each file's count for the keys); an
evaluation reads its split here once (engine.open_split) and hands the one LoggedFeedback to every
consumer."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlops.components.common import feedback, records
from rlops.components.common.feedback import LoggedFeedback, split_files
from rlops.components.common.record_keys import file_record_keys, unit_record_keys
from rlops.components.evaluator.beam import Parser, logged_feedback

PARSE_BATCH = 8192  # read_logged_bandit's batch: the preprocessor sees the same chunks


@dataclass(frozen=True)
class SerializedSplit:
    """A split's records (all of them, or its first ones) as serialized bytes, per file in the
    order every reader takes them (files sorted, records in file order)."""

    examples_uri: str
    split: str
    files: tuple[tuple[str, list[bytes]], ...]  # (file basename, its records)

    @property
    def num_records(self) -> int:
        return sum(len(recs) for _, recs in self.files)

    @property
    def first_record(self) -> bytes | None:
        """The split's first record (None: none read)."""
        return self.files[0][1][0] if self.files else None

    def head(self, n: int) -> SerializedSplit:
        """The first `n` records."""
        files, left = [], n
        for base, recs in self.files:
            if left <= 0:
                break
            files.append((base, recs[:left]))
            left -= len(recs)
        return SerializedSplit(self.examples_uri, self.split, tuple(files))


def read_serialized(examples_uri: str, split: str, limit: int | None = None) -> SerializedSplit:
    """The split's records, the first `limit` only when given: one pass over its files."""
    import tensorflow as tf

    files: list[tuple[str, list[bytes]]] = []
    left = limit
    for path in split_files(examples_uri, split):
        if left is not None and left <= 0:
            break
        ds = tf.data.TFRecordDataset(path, compression_type="GZIP")
        if left is not None:
            ds = ds.take(left)
        recs = [r for batch in ds.batch(PARSE_BATCH).as_numpy_iterator() for r in batch]
        if recs:
            files.append((os.path.basename(path), recs))
            left = None if left is None else left - len(recs)
    return SerializedSplit(examples_uri, split, tuple(files))


def parse_feedback(serialized: SerializedSplit, action_minimum: int) -> LoggedFeedback:
    """The records as load_logged_feedback gives them (actions less `action_minimum`, the action
    spec's first id). No records: its errors (no split files; an empty split)."""
    uri, split = serialized.examples_uri, serialized.split
    recs = [r for _, file_recs in serialized.files for r in file_recs]
    if not recs:
        pattern = records.split_file_pattern(uri, split)
        if not split_files(uri, split):
            raise FileNotFoundError(f"examples: no '{split}' split files at {pattern}")
        raise ValueError(f"examples: no records in {pattern}; the split is empty")
    parser = Parser(uri, split, action_minimum)
    parser.setup(recs[0])
    chunks = [parser.columns(recs[i : i + PARSE_BATCH]) for i in range(0, len(recs), PARSE_BATCH)]
    del recs
    shared = set(parser.per_arm_names)
    cols = {k: _shared_rows([c.pop(k) for c in chunks]) if k in shared else _concat(chunks, k) for k in list(chunks[0])}
    features, contexts = _contexts(parser, cols)
    actions = cols[records.ACTION].astype(int) - action_minimum
    if actions.min() < 0:
        i = int(np.argmax(actions < 0))
        raise ValueError(
            f"examples: action {actions[i] + action_minimum} in record {i} of the {split} split is below "
            f"the action spec's minimum {action_minimum}"
        )
    arms = feedback.per_arm_candidates(features, uri)
    return logged_feedback(cols, contexts, actions, features, arms, **_keys(serialized, parser.split_hash, cols))


def _concat(chunks: list[dict[str, np.ndarray]], key: str) -> np.ndarray:
    """One column from the parse chunks, each chunk's part released as it is copied."""
    return np.concatenate([c.pop(key) for c in chunks])


def _shared_rows(parts: list[np.ndarray]) -> np.ndarray:
    """A per-arm column [N, K, ...] whose rows are all the first one (a fixed candidate set: every
    record lists the same items, ExperienceGen's default) as that row broadcast, read-only: the
    items' features are held once, not once per record (about 2 KB a record at K=34)."""
    first = parts[0][:1]
    if all(bool((p == first).all()) for p in parts):
        return np.broadcast_to(first[0], (sum(len(p) for p in parts), *first.shape[1:]))
    return np.concatenate(parts)


def _contexts(parser: Parser, cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray] | None, np.ndarray]:
    """(raw named features or None, dense contexts [N, D]) as read_logged_bandit gives them: the
    named features through the Examples' own Preprocessor, in its chunks."""
    if parser.pre is None:  # legacy records: the dense context feature
        return None, cols[records.CONTEXT]
    features = {k: cols[k] for k in parser.schema.names + parser.per_arm_names}
    n = len(cols[records.ACTION])
    dense = [
        parser.pre({k: features[k][i : i + PARSE_BATCH] for k in parser.schema.names}).numpy()
        for i in range(0, n, PARSE_BATCH)
    ]
    return features, np.concatenate(dense)


def _keys(serialized: SerializedSplit, split_hash: str | None, cols: dict[str, np.ndarray]) -> dict[str, Any]:
    """feedback.feedback_keys of the records: of the split hash they carry, else (and, for a
    content hash, as copy keys) of their file and index."""
    files = np.concatenate([file_record_keys(base, 0, len(recs)) for base, recs in serialized.files])
    if split_hash is None:
        return {"keys": files}
    keys = unit_record_keys(cols[split_hash])
    return {"keys": keys, "copy_keys": files} if split_hash == records.SPLIT_CONTENT else {"keys": keys}
