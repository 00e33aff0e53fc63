"""Helpers shared by the bandit agents: spec checks, experience flattening, masks, replicas.

Per-arm observations follow TF-Agents' layout: a dict with 'global' [B, Dg], 'per_arm'
[B, K, Da] and optionally 'num_actions' [B] (arms at index >= num_actions are not candidates).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import Trajectory

Splitter = Callable[[Any], tuple[Any, tf.Tensor]]

# Policy-info field names, as TF-Agents spells them (tf_agents.policies.utils.InfoFields).
LOG_PROBABILITY = "log_probability"
PREDICTED_REWARDS_MEAN = "predicted_rewards_mean"
MULTIOBJECTIVE_SCALARIZED_PREDICTED_REWARDS_MEAN = "multiobjective_scalarized_predicted_rewards_mean"
PREDICTED_REWARDS_OPTIMISTIC = "predicted_rewards_optimistic"
PREDICTED_REWARDS_SAMPLED = "predicted_rewards_sampled"
BANDIT_POLICY_TYPE = "bandit_policy_type"
CHOSEN_ARM_FEATURES = "chosen_arm_features"
PROPENSITY = "propensity"  # rlops: probability of the chosen action (what OPE needs)
ALL_INFO_FIELDS = (
    LOG_PROBABILITY,
    PREDICTED_REWARDS_MEAN,
    MULTIOBJECTIVE_SCALARIZED_PREDICTED_REWARDS_MEAN,
    PREDICTED_REWARDS_OPTIMISTIC,
    PREDICTED_REWARDS_SAMPLED,
    BANDIT_POLICY_TYPE,
    CHOSEN_ARM_FEATURES,
)

# tf_agents.bandits.policies.policy_utilities.BanditPolicyType values.
BANDIT_POLICY_TYPE_GREEDY = 1
BANDIT_POLICY_TYPE_UNIFORM = 2

# Per-arm observation keys (tf_agents.bandits.specs.utils).
GLOBAL_FEATURE_KEY = "global"
PER_ARM_FEATURE_KEY = "per_arm"
NUM_ACTIONS_FEATURE_KEY = "num_actions"


class ActionInfo(NamedTuple):
    """What the agents need to know about a discrete action spec."""

    num_actions: int
    minimum: int
    spec: Any  # the single BoundedTensorSpec (unwrapped from a one-element nest)


def check_action_spec(action_spec: Any) -> ActionInfo:
    """ValueError unless the spec is one bounded scalar int32/int64 spec, possibly inside a
    one-element nest (as TF-Agents accepts). Any minimum works: actions are offset by it."""
    flat = tf.nest.flatten(action_spec)
    if len(flat) != 1:
        raise ValueError(f"Bandit agents need a single action spec, got a nest of {len(flat)}: {action_spec}")
    spec = flat[0]
    if not specs.is_bounded(spec):
        raise ValueError(f"Bandit action spec must be a BoundedTensorSpec, got {spec}")
    if spec.dtype not in (tf.int32, tf.int64):
        raise ValueError(f"Bandit action spec must have dtype int32 or int64, got {spec.dtype.name}")
    if spec.shape.rank != 0:
        raise ValueError(f"Bandit action spec must be a scalar, got shape {spec.shape}")
    minimum, maximum = int(spec.minimum), int(spec.maximum)
    if maximum < minimum:
        raise ValueError(f"Bandit action spec maximum {maximum} < minimum {minimum}")
    return ActionInfo(maximum - minimum + 1, minimum, spec)


def index_to_action(index: tf.Tensor, action_spec: Any) -> Any:
    """Arm indices [B] in [0, K) -> actions in the spec's range, dtype and (one-element) nest."""
    spec = tf.nest.flatten(action_spec)[0]
    action = tf.cast(index, spec.dtype) + tf.cast(int(spec.minimum), spec.dtype)
    return tf.nest.pack_sequence_as(action_spec, [action])


def check_emit_policy_info(emit_policy_info: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """TF-Agents' info field names; known-but-unsupported names get a reason, unknown ones the list."""
    emit_policy_info = tuple(emit_policy_info or ())
    for key in emit_policy_info:
        if key in allowed:
            continue
        if key in ALL_INFO_FIELDS:
            raise ValueError(f"emit_policy_info {key!r} is not available for this policy (it emits {list(allowed)})")
        raise ValueError(f"Unknown emit_policy_info {key!r}; allowed: {list(allowed)}")
    return emit_policy_info


def flatten_outer(nest: Any, num_outer_dims: int) -> Any:
    """Merge the first `num_outer_dims` dimensions of every tensor in `nest` into one."""
    if num_outer_dims == 1:
        return nest

    def _flatten(t: Any) -> Any:
        t = tf.convert_to_tensor(t)
        inner = t.shape[num_outer_dims:]
        if inner.is_fully_defined():
            return tf.reshape(t, [-1] + inner.as_list())
        return tf.reshape(t, tf.concat([[-1], tf.shape(t)[num_outer_dims:]], 0))

    return tf.nest.map_structure(_flatten, nest)


def process_experience(experience: Trajectory, action_minimum: int = 0) -> tuple[Any, tf.Tensor, tf.Tensor, int]:
    """(observations, action indices in [0, K), rewards) with one batch dimension, from a [B] or
    [B, 1] single-step Trajectory (the reward, a scalar per step, tells how many outer dims)."""
    reward = tf.convert_to_tensor(experience.reward)
    outer = reward.shape.rank
    if outer is None or outer not in (1, 2):
        raise ValueError(f"experience.reward must be [B] or [B, T], got shape {reward.shape}")
    observations = flatten_outer(experience.observation, outer)
    action = tf.nest.flatten(experience.action)[0]  # a one-element action nest is unwrapped
    actions = tf.cast(flatten_outer(action, outer), tf.int32) - action_minimum
    rewards = tf.cast(flatten_outer(reward, outer), tf.float32)
    return observations, actions, rewards, outer


def flatten_weights(weights: Any, num_outer_dims: int) -> tf.Tensor | None:
    """Per-example weights as [B] ([B] and [B, T] accepted; scalars stay scalars)."""
    if weights is None:
        return None
    weights = tf.cast(weights, tf.float32)
    if weights.shape.rank is None or weights.shape.rank == 0:
        return weights
    return tf.reshape(weights, [-1])


def chosen_arm_features(experience: Trajectory, num_outer_dims: int) -> tf.Tensor:
    """The chosen arm's features [B, Da] from policy_info (where per-arm policies put them)."""
    info = experience.policy_info
    if not isinstance(info, dict) or CHOSEN_ARM_FEATURES not in info:
        raise ValueError(
            f"Per-arm training needs experience.policy_info['{CHOSEN_ARM_FEATURES}'] (the "
            f"features of the arm that was chosen); got policy_info {info!r}"
        )
    return flatten_outer(info[CHOSEN_ARM_FEATURES], num_outer_dims)


def num_actions_mask(observation: Any, num_actions: int) -> tf.Tensor | None:
    """[B, K] mask of the candidate arms when the observation carries 'num_actions', else None."""
    if not isinstance(observation, dict) or NUM_ACTIONS_FEATURE_KEY not in observation:
        return None
    n = tf.cast(tf.reshape(observation[NUM_ACTIONS_FEATURE_KEY], [-1, 1]), tf.int32)
    return tf.range(num_actions)[None, :] < n


def combine_masks(a: tf.Tensor | None, b: tf.Tensor | None) -> tf.Tensor | None:
    if a is None:
        return b
    if b is None:
        return a
    return tf.logical_and(tf.cast(a, tf.bool), tf.cast(b, tf.bool))


def masked_argmax(values: tf.Tensor, mask: tf.Tensor | None, dtype: tf.DType = tf.int32) -> tf.Tensor:
    """argmax over the last axis among entries where mask is 1 (all entries when mask is None)."""
    if mask is not None:
        values = tf.where(tf.cast(mask, tf.bool), values, tf.constant(-float("inf"), values.dtype))
    return tf.argmax(values, axis=-1, output_type=dtype)


def index_with_actions(values: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """values[b, actions[b]] for [B, K] values (a gather, so only taken actions get gradients)."""
    return tf.gather(values, tf.cast(actions, tf.int32), axis=1, batch_dims=1)


def gather_arm_features(per_arm: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """per_arm[b, indices[b]] for [B, K, Da] features: the chosen arm's features [B, Da]."""
    return tf.gather(per_arm, tf.cast(indices, tf.int32), axis=1, batch_dims=1)


# --- replicas -----------------------------------------------------------------------------------


def replica_context() -> tf.distribute.ReplicaContext | None:
    """The replica context when several replicas are in sync, else None (one replica: no collectives)."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return None
    return ctx


def all_reduce_sum(values: list[tf.Tensor]) -> list[tf.Tensor]:
    """Sum each tensor over all replicas in sync (identity on one replica); one collective."""
    ctx = replica_context()
    if ctx is None:
        return values
    return list(ctx.all_reduce(tf.distribute.ReduceOp.SUM, values))


def num_replicas() -> int:
    ctx = tf.distribute.get_replica_context()
    return 1 if ctx is None else ctx.num_replicas_in_sync
