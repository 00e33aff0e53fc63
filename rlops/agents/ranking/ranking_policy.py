"""Ranking policies in TensorFlow: `RankingPolicy` wraps the slate head (rlops.heads.slate.head:
the draw, its exact per-position and prefix probabilities, the output names) as a
TF-Agents-style policy over per-arm observations."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.agents.policies import Policy, Splitter
from rlops.agents.trajectories import PolicyStep, TimeStep
from rlops.heads.slate.head import (
    PROPENSITY_CASCADE,
    PROPENSITY_ITEM_POSITION,
    SLATE,
    policy_kind,
    slate_head,
)
from rlops.heads.slate.probabilities import Greedy, SlatePolicy


class RankingPolicy(Policy):
    """Scores the K candidates of a per-arm observation ({'global': [B, Dg], 'per_arm': [B, K, Da],
    optional 'num_actions': [B]}) with `scoring_network` and serves a slate drawn by `slate_policy`.

    action: [B, L] item indices (the action spec's dtype; shape [L], bounds [0, K - 1]).
    info: `predicted_rewards_mean` [B, K] (the scores), `propensity_item_position` [B, L] and
    `propensity_cascade` [B, L]. Candidates at index >= num_actions and those masked by the
    splitter's mask are never shown. `action(time_step, seed=...)` takes a stateless seed [2]
    (replayable draws); without one draws are fresh on every call.
    """

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        scoring_network: Any,
        slate_policy: SlatePolicy | None = None,
        observation_and_action_constraint_splitter: Splitter | None = None,
        name: str | None = None,
    ):
        self.slate_policy = Greedy() if slate_policy is None else slate_policy
        policy_kind(self.slate_policy)
        self.num_slots, self.num_items = check_ranking_specs(
            time_step_spec, action_spec, observation_and_action_constraint_splitter
        )
        info_spec = {
            utils.PREDICTED_REWARDS_MEAN: tf.TensorSpec([self.num_items], tf.float32, utils.PREDICTED_REWARDS_MEAN),
            PROPENSITY_ITEM_POSITION: tf.TensorSpec([self.num_slots], tf.float32, PROPENSITY_ITEM_POSITION),
            PROPENSITY_CASCADE: tf.TensorSpec([self.num_slots], tf.float32, PROPENSITY_CASCADE),
        }
        super().__init__(time_step_spec, action_spec, info_spec, observation_and_action_constraint_splitter, name=name)
        self.scoring_network = scoring_network

    def scores(self, observation: Any) -> tuple[tf.Tensor, tf.Tensor | None]:
        """[B, K] scores and the [B, K] mask of allowed candidates (None: all)."""
        obs, mask = self._split(observation)
        mask = utils.combine_masks(mask, utils.num_actions_mask(obs, self.num_items))
        obs = {k: v for k, v in obs.items() if k != utils.NUM_ACTIONS_FEATURE_KEY}
        return tf.cast(self.scoring_network(obs), tf.float32), mask

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        scores, mask = self.scores(time_step.observation)
        out = slate_head(scores, self.num_slots, self.slate_policy, mask, seed=seed)
        info = {
            utils.PREDICTED_REWARDS_MEAN: scores,
            PROPENSITY_ITEM_POSITION: out[PROPENSITY_ITEM_POSITION],
            PROPENSITY_CASCADE: out[PROPENSITY_CASCADE],
        }
        return PolicyStep(tf.cast(out[SLATE], self.action_spec.dtype), (), info)


def check_ranking_specs(
    time_step_spec: TimeStep, action_spec: Any, splitter: Splitter | None = None
) -> tuple[int, int]:
    """(L, K) from a slate action spec (shape [L], integer, bounds [0, K - 1]) and a per-arm
    observation spec ('per_arm' [K, Da]); a one-line ValueError otherwise."""
    obs_spec = time_step_spec.observation
    if splitter is not None:
        obs_spec, _ = splitter(obs_spec)
    if (
        not isinstance(obs_spec, dict)
        or utils.PER_ARM_FEATURE_KEY not in obs_spec
        or utils.GLOBAL_FEATURE_KEY not in obs_spec
    ):
        raise ValueError(
            f"ranking needs a per-arm observation spec {{'{utils.GLOBAL_FEATURE_KEY}': [Dg], "
            f"'{utils.PER_ARM_FEATURE_KEY}': [K, Da]}}; got {obs_spec}"
        )
    num_items = obs_spec[utils.PER_ARM_FEATURE_KEY].shape[0]
    if action_spec.shape.rank != 1 or not action_spec.dtype.is_integer:
        raise ValueError(f"ranking action spec must be an integer vector of shape [num_slots]; got {action_spec}")
    num_slots = int(action_spec.shape[0])
    if num_items is None or num_slots > int(num_items):
        raise ValueError(f"slate length {num_slots} needs at least {num_slots} candidates; the spec has {num_items}")
    maximum = int(np.max(getattr(action_spec, "maximum", num_items - 1)))
    minimum = int(np.min(getattr(action_spec, "minimum", 0)))
    if minimum != 0 or maximum != int(num_items) - 1:
        raise ValueError(
            f"ranking action spec bounds must be [0, {int(num_items) - 1}] (item indices); got [{minimum}, {maximum}]"
        )
    return num_slots, int(num_items)
