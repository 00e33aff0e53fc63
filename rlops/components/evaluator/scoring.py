"""An exported policy on logged records: the action probabilities of what it serves
(serving_default's epsilon-greedy, the serving head's rule) and of its greedy choice, and the
rewards its network predicts. Both engines score policies through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator.action_ids import policy_action_minimum
from rlops.components.evaluator.estimators import epsilon_greedy_probs
from rlops.heads import epsilon_greedy

if TYPE_CHECKING:  # TensorFlow: the Beam engine imports this module before any worker needs TF
    from rlops.train.policy_saver import SavedPolicy


@dataclass(frozen=True)
class PolicyProbs:
    """A policy's action probabilities on every logged record [N, K]: what it serves
    (serving_default's epsilon-greedy) and its greedy choice; `allowed` [N, K] the actions it
    explores among (None: all)."""

    served: np.ndarray
    greedy: np.ndarray
    epsilon: float
    allowed: np.ndarray | None = None

    def served_at(self, epsilon: float) -> np.ndarray:
        """What the same policy would serve at another epsilon: the serving head's rule, (1 - eps)
        on the greedy action plus eps spread over the allowed actions (a row whose greedy action is
        not allowed is served uniformly at any epsilon, as `greedy` already says)."""
        return epsilon_greedy.mix(self.greedy, epsilon, self.allowed)


def epsilons_above(grid: Sequence[float], epsilon: float) -> list[float]:
    """The grid's epsilons above a model's own (`epsilon`, float32 in its metadata), ascending:
    the more exploring policies the Evaluator may certify instead of the one the model serves."""
    return sorted({float(e) for e in grid if e > epsilon + EPSILON_TOLERANCE})


EPSILON_TOLERANCE = 1e-6  # a float32 epsilon read back (0.1 -> 0.10000000149) equals the grid's 0.1


def serving_epsilon(policy: SavedPolicy) -> float:
    """serving_default's exploration rate (the SavedModel's metadata); 0 for a policy exported
    without serving_default (it serves its greedy action)."""
    from rlops.train.policy_saver import SERVING_EPSILON

    if "serving_default" not in policy.loaded.signatures:
        return 0.0
    meta = policy.loaded.signatures["get_metadata"]()
    return float(meta[SERVING_EPSILON].numpy()) if SERVING_EPSILON in meta else 0.0


def served_allowed(data: LoggedFeedback, num_actions: int) -> np.ndarray:
    """[N, K] the actions serving_default explores among: the record's action mask and, for
    per-arm records, its candidates (slots below num_actions) -- the serving head's rule."""
    from rlops.features.per_arm import NUM_ACTIONS

    count = data.features.get(NUM_ACTIONS) if data.features is not None else None
    return epsilon_greedy.allowed_mask(len(data.actions), num_actions, data.action_mask, count)


def policy_probs(policy: SavedPolicy, data: LoggedFeedback, num_actions: int) -> PolicyProbs:
    """The served (epsilon-greedy) and greedy action probabilities of an exported policy on the
    logged records, over action indices (its ids less its spec's minimum, as the logged actions
    are): exactly the `propensity` its serving_default reports for each action."""
    inputs = data.contexts if data.features is None else data.features  # raw features: each model encodes its own
    greedy = policy.actions(inputs, action_mask=data.action_mask) - policy_action_minimum(policy)
    epsilon, allowed = serving_epsilon(policy), served_allowed(data, num_actions)
    # greedy: the same head at epsilon 0 (a greedy action the record does not allow is served uniformly)
    return PolicyProbs(
        epsilon_greedy_probs(greedy, num_actions, epsilon, allowed),
        epsilon_greedy_probs(greedy, num_actions, 0.0, allowed),
        epsilon,
        allowed,
    )


def network_predicted_rewards(
    policy: SavedPolicy, inputs: np.ndarray | dict[str, np.ndarray], batch_size: int = 4096
) -> np.ndarray:
    """[N, K] predicted rewards from an exported policy's `action` signature output
    info/predicted_rewards_mean (present when the agent emits that policy info). `inputs`: dense
    contexts [N, D], or {feature name: raw values} for a policy exported with its features."""
    from rlops.agents.trajectories import restart

    key = next(
        (k for k in policy.loaded.signatures["action"].structured_outputs if k.endswith("predicted_rewards_mean")), None
    )
    if key is None:
        raise ValueError(
            f"evaluator.reward_model: 'network' needs predicted rewards, and {policy.path} does not "
            "emit them; train with emit_policy_info=('predicted_rewards_mean',) or use ridge/logistic"
        )
    out = []
    if isinstance(inputs, dict):
        n = len(next(iter(inputs.values())))
        for i in range(0, n, batch_size):
            chunk = {k: v[i : i + batch_size] for k, v in inputs.items()}
            out.append(policy.signature_outputs(restart(chunk, min(batch_size, n - i)))[key].numpy())
    else:
        n = len(inputs)
        for i in range(0, n, batch_size):
            out.append(
                policy.signature_outputs(restart(inputs[i : i + batch_size], min(batch_size, n - i)))[key].numpy()
            )
    return np.concatenate(out).astype(float)
