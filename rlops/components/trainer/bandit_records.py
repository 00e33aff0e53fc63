"""Logged bandit records -> what a bandit agent trains on: the parse spec's extras (masks, per-arm
candidates, sized from the first record) and the per-batch checks and reshaping into trajectories."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from rlops.agents import trajectories
from rlops.components.common import records
from rlops.components.trainer import masks
from rlops.components.trainer.config import TrainerConfig
from rlops.features import FeatureSchema
from rlops.features.per_arm import PerArmPreprocessor, per_arm_key


def fit_info(info: Any, spec: Any) -> Any:
    """The logged policy info the agent's data spec has room for: LinTS logs no propensity (it has
    no closed form), so a logged one is dropped rather than failing the spec check."""
    if not isinstance(info, dict):
        return info
    kept = {k: v for k, v in info.items() if isinstance(spec, dict) and k in spec}
    return kept or ()


def checked_action(action: tf.Tensor, action_spec: Any) -> tf.Tensor:
    """Logged actions outside the agent's ids fail naming the settings, not as a gather index
    error deep in train (or, on a GPU, a gather that silently reads zeros)."""
    lo, hi = int(action_spec.minimum), int(action_spec.maximum)
    message = (
        f"examples: a logged action is outside [{lo}, {hi}], the ids the agent was built for "
        f"(trainer.action_minimum {lo}, trainer.num_actions {hi - lo + 1}; a pipeline takes both from "
        f"experience_gen.action_spec)"
    )  # no apostrophes: the Assert op escapes them
    checks = [
        tf.debugging.assert_greater_equal(action, tf.cast(lo, action.dtype), message=message),
        tf.debugging.assert_less_equal(action, tf.cast(hi, action.dtype), message=message),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(action)


def mask_parse_spec(first: tf.train.Example, num_actions: int) -> tf.io.FixedLenFeature:
    width = len(first.features.feature[masks.MASK].int64_list.value)
    if width != num_actions:
        raise ValueError(
            f"examples: '{masks.MASK}' has {width} entries per record, but trainer.num_actions is "
            f"{num_actions}; the mask needs one entry per action"
        )
    return tf.io.FixedLenFeature([num_actions], tf.int64)


def per_arm_preprocessor(schema: FeatureSchema, first: tf.train.Example, config: TrainerConfig) -> PerArmPreprocessor:
    """K (the candidates per record) from the first record; trainer.num_actions must agree."""
    for f in schema.per_arm:
        if per_arm_key(f.name) not in first.features.feature:
            raise ValueError(
                f"examples: the schema has per-arm feature '{f.name}' but the records have no '{per_arm_key(f.name)}'"
            )
    f = schema.per_arm[0]
    feat = first.features.feature[per_arm_key(f.name)]
    kind = feat.WhichOneof("kind")
    k = len(getattr(feat, kind).value) // (f.dim if f.multivalent else 1)  # a category list: K * dim values
    if config.num_actions != k:
        raise ValueError(
            f"trainer.num_actions: {config.num_actions}, but the per-arm records have {k} candidate "
            f"arms (K) each; set num_actions to {k}"
        )
    return PerArmPreprocessor(schema, k)


def per_arm_trajectory(
    parsed: dict[str, tf.Tensor], arm_pre: PerArmPreprocessor, action_spec: Any
) -> trajectories.Trajectory:
    """Parsed per-arm records -> the [B, 1] trajectory per-arm agents train on: observation
    {'global', 'num_actions'}, the chosen arm's features in policy_info (TF-Agents' layout)."""
    obs = arm_pre(parsed)
    action = tf.cast(parsed[records.ACTION], tf.int32)
    info = {"chosen_arm_features": tf.gather(obs["per_arm"], action, batch_dims=1)}
    if records.PROPENSITY in parsed:
        info["propensity"] = parsed[records.PROPENSITY]
    observation = {"global": obs["global"], "num_actions": obs["num_actions"]}
    return trajectories.single_step_trajectory(
        observation, tf.cast(action, action_spec.dtype), parsed[records.REWARD], info
    )
