"""Which actions a serving request allows, read from its named inputs: the `action_mask` input
(1 = allowed) and, for per-arm inputs, the first `num_actions` candidate slots. The rule itself is
the bandit head's (rlops.heads.epsilon_greedy.allowed_mask); this module only finds its inputs
among the serving names (rlops.features.serving_names)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from rlops.features.serving_names import NUM_ACTIONS, PER_ARM_INPUT_PREFIX
from rlops.heads.epsilon_greedy import allowed_mask, allowed_mask_tf

if TYPE_CHECKING:
    import tensorflow as tf

Array = np.ndarray[Any, Any]
ACTION_MASK = "action_mask"


def is_per_arm(names: Sequence[str]) -> bool:
    """Inputs of a per-arm policy: item features (`per_arm_<name>`, or one dense `per_arm`) beside
    the candidate count."""
    return NUM_ACTIONS in names and any(n.startswith(PER_ARM_INPUT_PREFIX.rstrip("_")) for n in names)


def allowed_actions_tf(
    features: Mapping[str, tf.Tensor], num_actions: int, action_mask: tf.Tensor | None = None
) -> tf.Tensor | None:
    """[B, K] bool: `action_mask` (the argument, else the input of that name) and the per-arm
    candidates; None where every action is allowed."""
    if action_mask is None:
        action_mask = features.get(ACTION_MASK)
    count = features[NUM_ACTIONS] if is_per_arm(list(features)) else None
    return allowed_mask_tf(num_actions, action_mask, count)


def allowed_actions(inputs: Mapping[str, Array], num_actions: int) -> Array:
    """The numpy twin of `allowed_actions_tf` on serving inputs: [B, K] bool."""
    return allowed_mask(
        len(next(iter(inputs.values()))),
        num_actions,
        inputs.get(ACTION_MASK),
        inputs[NUM_ACTIONS] if is_per_arm(list(inputs)) else None,
    )
