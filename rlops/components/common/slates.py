"""The slate record layout (decision kind `slate`) and its reader.

One tf.Example per slate (a page of up to L items shown to one request), written by ExperienceGen:

    slate_id            bytes       the request's id (or the source row's, for list-shaped logs)
    slate               int64 [L]   item indices in display order; -1 pads a shorter page
    slate_length        int64       filled slots (the page's own length, <= L)
    reward              float [L]   each slot's reward (0 on padding)
    propensity          float [L]   the logging policy's marginal P(item at its position); 1 on padding
    propensity_cascade  float [L]   P(the slate's prefix up to that slot) (when logged); padding
                                    repeats the last filled slot's
    num_actions         int64       K, the number of items
    the request's context features, under their own names, as for bandit records
    split_unit          int64       the hash of the slate id that drew its split

The Evaluator reads the slots as `SlateLogs`: numpy arrays, one row per slate. A slate policy's
value is the expected sum of its slot rewards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from rlops.components.common.record_keys import string_key, unit_record_keys
from rlops.components.common.records import (
    NUM_ACTIONS,
    PROPENSITY,
    REWARD,
    SPLIT_CONTENT,
    SPLIT_UNIT,
    TFRECORD_SUFFIX,
    split_file_pattern,
)

SLATE_ID, SLATE, SLATE_LENGTH = "slate_id", "slate", "slate_length"
PROPENSITY_CASCADE = "propensity_cascade"
# Row fields of logs with one row per shown item (ExperienceGen groups them into slates).
POSITION, SLATE_ITEM = "position", "slate_item"
# What a slate record holds besides its context features, in the order ExperienceGen writes it.
SLATE_ORDER = (SLATE_ID, SLATE, SLATE_LENGTH, REWARD, PROPENSITY, PROPENSITY_CASCADE, NUM_ACTIONS)
PADDING_ITEM = -1
Array = np.ndarray[Any, Any]

__all__ = [
    "PADDING_ITEM",
    "POSITION",
    "PROPENSITY_CASCADE",
    "SLATE",
    "SLATE_ID",
    "SLATE_ITEM",
    "SLATE_LENGTH",
    "SLATE_ORDER",
    "SlateLogs",
    "SlateRecordSpec",
    "TFRECORD_SUFFIX",
    "parse_slates",
    "slate_record_spec",
    "read_slate_contexts",
    "read_slate_logs",
]


@dataclass(frozen=True)
class SlateLogs:
    """n logged slates of up to L slots over K items, as numpy arrays (one row per slate)."""

    keys: Array  # [n] uint64: the hash each slate's split was drawn from (the bootstrap's key)
    slate_ids: Array  # [n] str
    slates: Array  # [n, L] int64 item indices, PADDING_ITEM past a page's end
    rewards: Array  # [n, L] float64
    propensity: Array  # [n, L] float64 marginal of the shown item at its position
    propensity_cascade: Array | None  # [n, L] float64 prefix probabilities, when logged
    num_items: int  # K

    @property
    def slot_mask(self) -> Array:
        return np.asarray(self.slates != PADDING_ITEM)

    @property
    def slate_length(self) -> int:
        return int(self.slates.shape[1])

    def __len__(self) -> int:
        return int(self.slates.shape[0])

    def head(self, n: int) -> "SlateLogs":
        """The first n slates."""
        cascade = None if self.propensity_cascade is None else self.propensity_cascade[:n]
        return SlateLogs(
            self.keys[:n],
            self.slate_ids[:n],
            self.slates[:n],
            self.rewards[:n],
            self.propensity[:n],
            cascade,
            self.num_items,
        )


@dataclass(frozen=True)
class SlateRecordSpec:
    """How a split's slate records are parsed (read once from its first record)."""

    slate_length: int
    has_cascade: bool
    hash_name: str | None  # the split hash each record carries (None under a split by time)

    def parse_spec(self) -> dict[str, Any]:
        import tensorflow as tf

        length = self.slate_length
        spec: dict[str, Any] = {
            SLATE_ID: tf.io.FixedLenFeature([], tf.string),
            SLATE: tf.io.FixedLenFeature([length], tf.int64),
            REWARD: tf.io.FixedLenFeature([length], tf.float32),
            PROPENSITY: tf.io.FixedLenFeature([length], tf.float32),
            NUM_ACTIONS: tf.io.FixedLenFeature([], tf.int64),
        }
        if self.has_cascade:
            spec[PROPENSITY_CASCADE] = tf.io.FixedLenFeature([length], tf.float32)
        if self.hash_name:
            spec[self.hash_name] = tf.io.FixedLenFeature([], tf.int64)
        return spec


def slate_record_spec(examples_uri: str, split: str) -> SlateRecordSpec:
    """The parse spec of a split's slate records; one error when it holds none, or no slates."""
    import tensorflow as tf

    from rlops.components.common.records import first_example

    pattern = split_file_pattern(examples_uri, split)
    if not tf.io.gfile.glob(pattern):
        raise FileNotFoundError(f"no records in split {split!r} of {examples_uri}")
    example = first_example(pattern)
    if example is None:
        raise ValueError(f"split {split!r} of {examples_uri} holds no slates")
    first = example.features.feature
    if SLATE not in first:  # kind branch: the record field `slate`, checked to name Examples written as another kind
        raise ValueError(
            f"{examples_uri} holds no slate records (no '{SLATE}' feature): "
            f"was it written with experience_gen.record_kind: slate?"
        )
    hash_name = SPLIT_UNIT if SPLIT_UNIT in first else SPLIT_CONTENT if SPLIT_CONTENT in first else None
    return SlateRecordSpec(len(first[SLATE].int64_list.value), PROPENSITY_CASCADE in first, hash_name)


def parse_slates(serialized: Sequence[bytes], spec: SlateRecordSpec) -> SlateLogs:
    """Serialized slate records -> SlateLogs (their context features are not read)."""
    import tensorflow as tf

    parsed = {k: v.numpy() for k, v in tf.io.parse_example(tf.constant(list(serialized)), spec.parse_spec()).items()}
    ids = np.array([s.decode("utf-8") for s in parsed[SLATE_ID]], object)
    if spec.hash_name:  # a slate is one draw: keyed by the hash its split was drawn from
        keys = unit_record_keys(parsed[spec.hash_name])
    else:  # a split by time: by its id
        keys = np.array([string_key(i) for i in ids], np.uint64)
    return SlateLogs(
        keys=keys,
        slate_ids=ids,
        slates=parsed[SLATE].astype(np.int64),
        rewards=parsed[REWARD].astype(np.float64),
        propensity=parsed[PROPENSITY].astype(np.float64),
        propensity_cascade=parsed[PROPENSITY_CASCADE].astype(np.float64) if spec.has_cascade else None,
        num_items=int(parsed[NUM_ACTIONS].max()),
    )


def read_slate_logs(examples_uri: str, split: str = "eval", max_records: int | None = None) -> SlateLogs:
    """A split of slate Examples as `SlateLogs` (the first `max_records`, when given)."""
    import tensorflow as tf

    spec = slate_record_spec(examples_uri, split)
    files = sorted(tf.io.gfile.glob(split_file_pattern(examples_uri, split)))
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if max_records is not None:
        ds = ds.take(max_records)
    return parse_slates([r.numpy() for r in ds], spec)


def read_slate_contexts(examples_uri: str, split: str = "eval", max_records: int | None = None) -> dict[str, Array]:
    """The raw context features of a split's first pages, by record key (the Examples' feature
    schema says which), and `num_actions` (K): what a ranking policy is asked to rank for them."""
    import tensorflow as tf

    from rlops.components.common.records import batch_parser, feature_parse_spec
    from rlops.features import load as load_feature_schema

    schema = load_feature_schema(examples_uri)
    if schema is None:
        raise ValueError(f"{examples_uri}: the slates have no feature schema (no context features)")
    files = sorted(tf.io.gfile.glob(split_file_pattern(examples_uri, split)))
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    serialized = [r.numpy() for r in (ds if max_records is None else ds.take(max_records))]
    if not serialized:
        raise ValueError(f"split {split!r} of {examples_uri} holds no slates")
    spec = {**feature_parse_spec(schema), NUM_ACTIONS: tf.io.FixedLenFeature([], tf.int64)}
    return {k: v.numpy() for k, v in batch_parser(spec)(tf.constant(serialized)).items()}
