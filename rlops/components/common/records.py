"""The record layout every component shares, and how to read records back through the agents' specs.

ExperienceGen writes these records (rlops.components.experience_gen.records: the encoders); the
Trainer, Evaluator and Pusher read them with the readers here. The names below are the reserved
feature names: a user's context feature cannot take them (per-arm names: rlops.features.per_arm).

Bandit feedback: one tf.Example per decision with features
    context [D] float, action int64, reward float, propensity float (if logged),
    action_mask [K] int64, weight float, timestamp int64 (if mapped), and the int64 hash that
    drew the record's split: split_unit under `splits.key` (a unit's records, e.g. a user's, go
    to one split together) or split_content under the default hash of the decision (the copies
    of a decision, whatever their rewards, go together); absent under a split by time. The
    Evaluator's bootstrap resamples them as the split drew them (rlops.components.common.record_keys).
Trajectories: one tf.SequenceExample per episode, steps in order. Context features
    episode_id bytes, length int64; feature lists (one entry per step)
    observation [D] float, action (int64, or [A] float), reward, discount float,
    step_type, next_step_type int64, policy_info/<path> float (e.g. policy_info/log_probability,
    policy_info/dist_params/logits). Row t follows the Trajectory contract: reward and discount
    are those of the transition t -> t+1.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

# The per-arm keys (an item feature is `per_arm/<name>` [K] in records, beside `num_actions`) and
# the reserved names are defined beside the feature schema, which checks them; re-exported so a
# component finds the whole record layout here.
from rlops.features.schema import RESERVED as RESERVED
from rlops.features.serving_names import (
    NUM_ACTIONS as NUM_ACTIONS,
    PER_ARM_PREFIX as PER_ARM_PREFIX,
    record_key as record_key,
)

if TYPE_CHECKING:  # TensorFlow is imported inside the readers that use it
    import tensorflow as tf

    from rlops.agents.trajectories import Trajectory

# Bandit features.
CONTEXT, ACTION, REWARD, PROPENSITY = "context", "action", "reward", "propensity"
ACTION_MASK, WEIGHT, TIMESTAMP = "action_mask", "weight", "timestamp"
BANDIT_ORDER = (CONTEXT, ACTION, REWARD, PROPENSITY, ACTION_MASK, WEIGHT, TIMESTAMP)
# Beside the splits when every written reward is the same ({"reward", "records"}): the Evaluator
# will not bless on such Examples.
CONSTANT_REWARD_FILE = "constant_reward.json"
# The decision's id (bandit_columns.decision_id), written as bytes; its time is read, not written.
DECISION_ID, DECISION_TIME = "decision_id", "decision_time"
# Written after the fields above (never part of the content they hash): one of the two.
SPLIT_UNIT, SPLIT_CONTENT = "split_unit", "split_content"
SPLIT_HASHES = (SPLIT_UNIT, SPLIT_CONTENT)
# Trajectory features.
EPISODE_ID, LENGTH, STEP, OBSERVATION = "episode_id", "length", "step", "observation"
DISCOUNT, TERMINAL, STEP_TYPE, NEXT_STEP_TYPE = "discount", "terminal", "step_type", "next_step_type"
POLICY_INFO_PREFIX = "policy_info/"
LOG_PROBABILITY = POLICY_INFO_PREFIX + "log_probability"
VALUE_PREDICTION = POLICY_INFO_PREFIX + "value_prediction"
DIST_PARAMS_PREFIX = POLICY_INFO_PREFIX + "dist_params/"

TFRECORD_SUFFIX = ".gz"


def split_dir(examples_uri: str, split: str) -> str:
    """TFX's layout: <uri>/Split-<name>/ holding gzipped TFRecord shards."""
    return os.path.join(examples_uri, f"Split-{split}")


def split_file_pattern(examples_uri: str, split: str) -> str:
    return os.path.join(split_dir(examples_uri, split), "*")


# --- bandit: read back ------------------------------------------------------------------------


def first_example(file_pattern: str) -> tf.train.Example:
    """The first bandit record of a split: readers size their feature specs from it."""
    import tensorflow as tf

    for path in sorted(tf.io.gfile.glob(file_pattern)):
        for record in tf.data.TFRecordDataset(path, compression_type="GZIP").take(1):
            return tf.train.Example.FromString(record.numpy())
    raise ValueError(f"examples: no records in {file_pattern}; the split is empty")


def bandit_feature_spec(
    context_dim: int,
    num_actions: int | None = None,
    propensity: bool = True,
    weight: bool = False,
    timestamp: bool = False,
) -> dict[str, tf.io.FixedLenFeature]:
    import tensorflow as tf

    spec = {
        CONTEXT: tf.io.FixedLenFeature([context_dim], tf.float32),
        ACTION: tf.io.FixedLenFeature([], tf.int64),
        REWARD: tf.io.FixedLenFeature([], tf.float32),
    }
    if propensity:
        spec[PROPENSITY] = tf.io.FixedLenFeature([], tf.float32)
    if num_actions is not None:
        spec[ACTION_MASK] = tf.io.FixedLenFeature([num_actions], tf.int64)
    if weight:
        spec[WEIGHT] = tf.io.FixedLenFeature([], tf.float32)
    if timestamp:
        spec[TIMESTAMP] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def feature_parse_spec(schema: Any) -> dict[str, Any]:
    """tf.io parse spec of a FeatureSchema's raw context features, each under its own name;
    multivalent ones parse as RaggedTensors [B, None] (bandit_dataset pads them)."""
    import tensorflow as tf

    from rlops.features import input_spec

    out: dict[str, Any] = {}
    for f in schema.features:
        spec = input_spec(f)
        if f.multivalent:
            out[f.name] = tf.io.RaggedFeature(spec.dtype, row_splits_dtype=tf.int64)
            continue
        out[f.name] = tf.io.FixedLenFeature(spec.shape[1:], spec.dtype)
    return out


def per_arm_parse_spec(schema: Any, num_arms: int) -> dict[str, tf.io.FixedLenFeature]:
    """tf.io parse spec of per-arm records: per_arm/<name> [K] per item feature, num_actions."""
    import tensorflow as tf

    from rlops.features.per_arm import NUM_ACTIONS, arm_input_spec, per_arm_key

    out = {
        per_arm_key(f.name): tf.io.FixedLenFeature(
            [num_arms] + ([f.dim] if f.multivalent else []), arm_input_spec(f, num_arms).dtype
        )
        for f in schema.per_arm
    }  # a multivalent item feature: [K, dim] padded
    out[NUM_ACTIONS] = tf.io.FixedLenFeature([], tf.int64)
    return out


def bandit_trajectory(
    parsed: Mapping[str, tf.Tensor], action_spec: tf.TensorSpec, observation: tf.Tensor | None = None
) -> Trajectory:
    """Parsed bandit examples [B] -> the [B, 1] single-step Trajectory bandit agents train on;
    policy_info holds the logged propensity. `observation`: the dense model input (default: the
    legacy `context` feature)."""
    import tensorflow as tf

    from rlops.agents import trajectories

    info = {"propensity": parsed[PROPENSITY]} if PROPENSITY in parsed else ()
    action = tf.cast(parsed[ACTION], action_spec.dtype)
    observation = parsed[CONTEXT] if observation is None else observation
    return trajectories.single_step_trajectory(observation, action, parsed[REWARD], info)


def bandit_dataset(
    file_pattern: str, feature_spec: Mapping[str, Any], batch_size: int, shuffle: bool = False, seed: int | None = None
) -> tf.data.Dataset:
    """Batches of parsed bandit examples from gzipped TFRecord shards."""
    import tensorflow as tf

    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if shuffle:
        ds = ds.shuffle(10 * batch_size, seed=seed)

    return ds.batch(batch_size).map(batch_parser(feature_spec), num_parallel_calls=tf.data.AUTOTUNE)


def batch_parser(feature_spec: Mapping[str, Any]) -> Callable[[tf.Tensor], dict[str, Any]]:
    """Serialized examples [B] -> parsed features; multivalent lists become [B, longest in the
    batch] padded with "" / -1 (what serving takes)."""
    import tensorflow as tf

    def parse(serialized: tf.Tensor) -> dict[str, Any]:
        parsed = tf.io.parse_example(serialized, feature_spec)
        return {
            k: v.to_tensor(tf.constant("" if v.dtype == tf.string else -1, v.dtype))
            if isinstance(v, tf.RaggedTensor)
            else v
            for k, v in parsed.items()
        }

    return parse


# --- trajectories: read back ------------------------------------------------------------------


def _flatten_info_spec(info_spec: Any, path: str = "") -> dict[str, tf.TensorSpec]:
    """{"policy_info/<path>": spec} in tf.nest's flattening order (dict keys sorted)."""
    if isinstance(info_spec, dict):
        out: dict[str, Any] = {}
        for k in sorted(info_spec):
            out.update(_flatten_info_spec(info_spec[k], f"{path}{k}/"))
        return out
    if isinstance(info_spec, (list, tuple)):
        out = {}
        for i, v in enumerate(info_spec):
            out.update(_flatten_info_spec(v, f"{path}{i}/"))
        return out
    return {POLICY_INFO_PREFIX + path.rstrip("/"): info_spec}


def parse_episode(
    serialized: tf.Tensor, observation_spec: tf.TensorSpec, action_spec: tf.TensorSpec, policy_info_spec: Any = ()
) -> Trajectory:
    """A serialized SequenceExample -> Trajectory with a leading [T] time axis, typed by the specs."""
    import tensorflow as tf

    from rlops.agents.trajectories import Trajectory

    def feature(spec: tf.TensorSpec) -> tf.io.FixedLenSequenceFeature:
        dtype = tf.int64 if spec.dtype.is_integer else tf.float32
        return tf.io.FixedLenSequenceFeature(spec.shape, dtype)

    info = _flatten_info_spec(policy_info_spec)
    seq_features = {
        OBSERVATION: feature(observation_spec),
        ACTION: feature(action_spec),
        REWARD: tf.io.FixedLenSequenceFeature([], tf.float32),
        DISCOUNT: tf.io.FixedLenSequenceFeature([], tf.float32),
        STEP_TYPE: tf.io.FixedLenSequenceFeature([], tf.int64),
        NEXT_STEP_TYPE: tf.io.FixedLenSequenceFeature([], tf.int64),
    }
    seq_features.update({k: feature(s) for k, s in info.items()})
    _, seq = tf.io.parse_single_sequence_example(
        serialized, context_features={EPISODE_ID: tf.io.FixedLenFeature([], tf.string)}, sequence_features=seq_features
    )
    policy_info = ()
    if info:
        values = [tf.cast(seq[k], s.dtype) for k, s in info.items()]
        policy_info = tf.nest.pack_sequence_as(policy_info_spec, values)
    return Trajectory(
        step_type=tf.cast(seq[STEP_TYPE], tf.int32),
        observation=tf.cast(seq[OBSERVATION], observation_spec.dtype),
        action=tf.cast(seq[ACTION], action_spec.dtype),
        policy_info=policy_info,
        next_step_type=tf.cast(seq[NEXT_STEP_TYPE], tf.int32),
        reward=seq[REWARD],
        discount=seq[DISCOUNT],
    )


def episode_dataset(
    file_pattern: str, observation_spec: tf.TensorSpec, action_spec: tf.TensorSpec, policy_info_spec: Any = ()
) -> tf.data.Dataset:
    """One Trajectory per episode, [T, ...] each, from gzipped TFRecord shards."""
    import tensorflow as tf

    files = tf.data.Dataset.list_files(file_pattern, shuffle=False)
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return ds.map(lambda s: parse_episode(s, observation_spec, action_spec, policy_info_spec))


# --- bandit: the logged feedback as numpy (Evaluator, Pusher, `rlops evaluate`) -----------------

FEATURES = "features"


def split_hash_name(example: tf.train.Example) -> str | None:
    """Which split hash a split's records carry (its first record tells): SPLIT_UNIT,
    SPLIT_CONTENT, or None (a split by time, or Examples written elsewhere)."""
    return next((name for name in SPLIT_HASHES if name in example.features.feature), None)


def read_split_hashes(serialized: list[bytes], name: str) -> np.ndarray[Any, Any]:
    """[N] int64 split hash `name` of serialized bandit records (each must carry it)."""
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([], tf.int64)}
    return tf.io.parse_example(tf.constant(serialized), spec)[name].numpy()


def read_logged_bandit(examples_uri: str, split: str = "eval", max_records: int | None = None) -> dict[str, Any]:
    """A split's records as numpy: `context` [N, D] (the dense legacy feature, or the named
    features through the Examples' own Preprocessor: what a reward model fits on), `action`,
    `reward`, `propensity` (when logged) and, for named features, `features` {name: raw values}
    (strings as bytes) -- what a policy exported with its preprocessing acts on -- and
    `split_unit` or `split_content` when the records carry it."""
    import tensorflow as tf

    from rlops.features import FeatureSchema, Preprocessor, load as load_schema

    pattern = split_file_pattern(examples_uri, split)
    if not tf.io.gfile.glob(pattern):
        raise FileNotFoundError(f"examples: no '{split}' split files at {pattern}")
    first = first_example(pattern)
    schema = load_schema(examples_uri)
    if schema is None:
        if CONTEXT not in first.features.feature:
            raise ValueError(f"examples: no feature schema and no dense '{CONTEXT}' feature in {examples_uri}")
        schema = FeatureSchema.legacy(len(first.features.feature[CONTEXT].float_list.value))
    present = first.features.feature
    mask_width = len(present[ACTION_MASK].int64_list.value) if ACTION_MASK in present else None
    spec = bandit_feature_spec(1, mask_width, propensity=PROPENSITY in present, weight=WEIGHT in present)
    del spec[CONTEXT]
    spec.update(feature_parse_spec(schema))
    for name in SPLIT_HASHES:
        if name in present:
            spec[name] = tf.io.FixedLenFeature([], tf.int64)
    per_arm_names: list[str] = []
    if schema.per_arm:  # per_arm/<name> [K] and num_actions travel with the raw features
        from rlops.features.per_arm import per_arm_key

        f0 = schema.per_arm[0]
        feat = present[per_arm_key(f0.name)]
        num_arms = len(getattr(feat, feat.WhichOneof("kind")).value) // (f0.dim if f0.multivalent else 1)
        arm_spec = per_arm_parse_spec(schema, num_arms)
        spec.update(arm_spec)
        per_arm_names = list(arm_spec)
    batch = min(max_records or 8192, 8192)
    dataset = bandit_dataset(pattern, spec, batch)
    if max_records:
        dataset = dataset.unbatch().take(max_records).batch(batch)
    parts: dict[str, list[Any]] = {k: [] for k in spec}
    widths = {f.name: f.dim for f in schema.features if f.multivalent}
    for b in dataset:
        for k in parts:
            v = b[k].numpy()
            if k in widths:  # pad every batch to the feature's dim: [N, dim]
                v = (
                    np.concatenate(
                        [v, np.full((len(v), widths[k] - v.shape[1]), b"" if v.dtype == object else -1, v.dtype)], 1
                    )
                    if v.shape[1] < widths[k]
                    else v[:, : widths[k]]
                )
            parts[k].append(v)
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    if schema.is_legacy:
        return cols
    raw_names = schema.names + per_arm_names
    out = {k: v for k, v in cols.items() if k not in raw_names}
    # Strings as fixed-width bytes ('S'): saved with np.savez and loaded without pickle.
    out[FEATURES] = {k: cols[k].astype(bytes) if cols[k].dtype == object else cols[k] for k in raw_names}
    pre = Preprocessor(schema)
    out[CONTEXT] = (
        np.concatenate(
            [
                pre({k: out[FEATURES][k][i : i + 8192] for k in schema.names}).numpy()
                for i in range(0, len(out[ACTION]), 8192)
            ]
        )
        if len(out[ACTION])
        else np.zeros((0, schema.observation_dim), np.float32)
    )
    return out
