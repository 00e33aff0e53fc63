"""The logs' actions against a policy's action spec (both engines, `rlops evaluate` and the
baseline's fit): how many actions each side has, and the one-line errors when they disagree."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlops.components.common.feedback import LoggedFeedback

if TYPE_CHECKING:  # TensorFlow: the Beam engine imports this module before any worker needs TF
    from rlops.train.policy_saver import SavedPolicy


def policy_action_minimum(policy: SavedPolicy) -> int:
    """The first action id of an exported policy's action spec."""
    return int(policy.action_spec.minimum)


def spec_actions(policy: SavedPolicy) -> tuple[int, int]:
    """(number of actions, first id) of an exported policy's action spec."""
    spec = policy.action_spec
    return int(spec.maximum) - int(spec.minimum) + 1, int(spec.minimum)


def logs_num_actions(data: LoggedFeedback) -> int:
    """The logs' number of actions: their action mask's or per-arm features' width, else the
    largest logged action + 1."""
    width = data.action_mask.shape[1] if data.action_mask is not None else _per_arm_width(data)
    return int(width or int(data.actions.max()) + 1)


def _per_arm_width(data: LoggedFeedback) -> int | None:
    """K of per-arm records (the per_arm/<name> width), None for plain records."""
    from rlops.features.per_arm import PER_ARM_PREFIX

    width = [v.shape[1] for k, v in (data.features or {}).items() if k.startswith(PER_ARM_PREFIX)]
    return width[0] if width else None


def check_policy_fits_logs(
    num_actions: int, in_logs: int, actions: np.ndarray | None = None, action_minimum: int = 0
) -> None:
    """A policy of `num_actions` actions (its action spec) scores logs of `in_logs` actions only
    when every logged action is one of its own: else one line naming both numbers."""
    outside = None if actions is None else np.flatnonzero(actions >= num_actions)
    if in_logs <= num_actions or (outside is not None and not len(outside)):
        return
    example = ""
    if actions is not None and outside is not None:
        i = int(outside[0])
        example = f" (action {int(actions[i]) + action_minimum} in record {i} is not one of the policy's)"
    raise ValueError(
        f"the policy has {num_actions} actions (its action spec) but the logs have {in_logs}"
        f"{example}; evaluate it on logs of the actions it was trained on, or train one on these logs"
    )


def check_actions(actions: np.ndarray, num_actions: int, action_minimum: int, offset: int = 0) -> None:
    """Every logged action is one of the `num_actions` starting at `action_minimum`: else one line
    naming the first that is not (`offset`: the batch's first record number)."""
    if len(actions) and int(actions.max()) >= num_actions:
        i = int(np.argmax(actions >= num_actions))
        raise ValueError(
            f"examples: action {actions[i] + action_minimum} in record {i + offset} is outside the "
            f"{num_actions} actions starting at {action_minimum}"
        )
