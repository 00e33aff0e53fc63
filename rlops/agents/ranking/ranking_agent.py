"""Ranking agent: a per-arm scoring network trained by weighted regression of per-slot scores.

TF-Agents' `tf_agents.bandits.agents.ranking_agent.RankingAgent`: the same constructor, feedback
models, sample weights and loss. Training experience holds, per slate, the L SHOWN items' features
in display order (`per_arm` [L, Da]; `order_items_from_action` builds it from the K candidates and
the logged slate), the global features, optionally `num_actions` (slots filled), and the feedback:

- SCORE_VECTOR: `reward` [L], the target of each slot (e.g. its clicks);
- CASCADING: `reward` {'chosen_index': k, 'chosen_value': v} (k = L: no click;
  `cascading_feedback` builds it from slot rewards): slots above k are negatives with target
  `non_click_score` (default -1), slot k has target v, slots below k weight 0.

loss = sum(w * error_loss_fn(target, score)) / sum(w) with w per (slate, slot) = example weight
x [slot < num_actions] x [cascade: slot <= k] x position multiplier (BASE (l+1)^s, EXPONENT s^l,
FIXED_BIAS_WEIGHTS weights[l]; slots 0-based). TF-Agents 0.19 spells the types 'base' and
'exponent'; both spellings work.

Documented differences from TF-Agents:
- `policy_type` defaults to NO_PENALTY (Plackett-Luce); COSINE_DISTANCE (TF-Agents' default)
  raises: its sequential diversity penalty has no tractable slate probabilities, so its logs could
  not be evaluated off-policy.
- `policy` serves the greedy slate (DESCENDING_SCORES); `collect_policy` explores (Plackett-Luce over
  scores / logits_temperature, or `collect_slate_policy`, e.g. EpsilonPerSlot(0.1)) and logs the
  exact propensities. TF-Agents uses the sampling policy for both.
- `positional_bias_positive_only`: non-positive targets keep their weight without the position
  multiplier (as documented by TF-Agents); TF-Agents' code sets it to 1, which also revives
  slots below the click and slots beyond num_actions. With no example weights, no num_actions
  and SCORE_VECTOR feedback the two agree.
- An all-zero weight batch has loss 0, not NaN.
- Replicas: each replica divides by the global sum of weights, so R replicas update like one replica
  on the global batch; `train` returns each replica's share (the Learner sums them).
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from rlops.agents import trajectories
from rlops.agents.bandits import utils
from rlops.agents.bandits.base import BanditAgent
from rlops.agents.bandits.neural_epsilon_greedy import mean_squared_error
from rlops.agents.ranking.ranking_policy import RankingPolicy, check_ranking_specs
from rlops.agents.replicas import apply_global_gradients
from rlops.agents.trajectories import LossInfo, TimeStep, Trajectory
from rlops.heads.slate.probabilities import Greedy, PlackettLuce, SlatePolicy

CHOSEN_INDEX = "chosen_index"
CHOSEN_VALUE = "chosen_value"

LossFn = Callable[..., tf.Tensor]


class RankingPolicyType(enum.Enum):
    UNKNOWN = 0
    COSINE_DISTANCE = 1
    NO_PENALTY = 2
    DESCENDING_SCORES = 3


class FeedbackModel(enum.Enum):
    UNKNOWN = 0
    CASCADING = 1
    SCORE_VECTOR = 2


class PositionalBiasType(enum.Enum):
    UNSET = 0
    BASE = 1  # (l + 1) ** severity
    EXPONENT = 2  # severity ** l
    FIXED_BIAS_WEIGHTS = 3  # weights[l]


def _bias_type(value: PositionalBiasType | str | None) -> PositionalBiasType:
    if value is None:
        return PositionalBiasType.UNSET
    if isinstance(value, PositionalBiasType):
        return value
    if isinstance(value, str) and value.upper() in PositionalBiasType.__members__:
        return PositionalBiasType[value.upper()]
    raise ValueError(f"positional_bias_type must be None, 'base', 'exponent' or a PositionalBiasType; got {value!r}")


def compute_score_tensor_for_cascading(
    chosen_index: tf.Tensor, chosen_value: tf.Tensor, num_slots: int, non_click_score: float = -1.0
) -> tf.Tensor:
    """[B, L] targets: non_click_score above the chosen slot, chosen_value at it, 0 below."""
    chosen_index = tf.cast(tf.reshape(chosen_index, [-1]), tf.int32)
    negatives = tf.sequence_mask(chosen_index, maxlen=num_slots, dtype=tf.float32)
    chosen = tf.one_hot(chosen_index, num_slots) * tf.cast(tf.reshape(chosen_value, [-1, 1]), tf.float32)
    return chosen + non_click_score * negatives


def cascading_feedback(slot_rewards: Any) -> dict[str, tf.Tensor]:
    """CASCADING feedback from slot rewards [..., L]: the first slot with a positive reward and its
    reward; index L (value 0) where nothing was clicked."""
    r = tf.cast(slot_rewards, tf.float32)
    num_slots = r.shape[-1]
    clicked = r > 0
    index = tf.where(
        tf.reduce_any(clicked, -1), tf.argmax(tf.cast(clicked, tf.int32), -1, output_type=tf.int32), num_slots
    )
    value = tf.gather(
        tf.pad(r, [[0, 0]] * (r.shape.rank - 1) + [[0, 1]]), index[..., None], batch_dims=r.shape.rank - 1
    )
    return {CHOSEN_INDEX: index, CHOSEN_VALUE: value[..., 0]}


def order_items_from_action(observation: dict[str, Any], slates: Any) -> dict[str, Any]:
    """The training observation of logged slates: 'per_arm' [..., K, Da] candidates -> the shown items
    [..., L, Da] in display order (TF-Agents' order_items_from_action_fn); 'num_actions' is dropped
    (every slot of a logged slate is filled)."""
    slates = tf.cast(slates, tf.int32)
    per_arm = tf.convert_to_tensor(observation[utils.PER_ARM_FEATURE_KEY])
    out = {k: v for k, v in observation.items() if k not in (utils.PER_ARM_FEATURE_KEY, utils.NUM_ACTIONS_FEATURE_KEY)}
    out[utils.PER_ARM_FEATURE_KEY] = tf.gather(
        per_arm, slates, axis=slates.shape.rank - 1, batch_dims=slates.shape.rank - 1
    )
    return out


class RankingAgent(BanditAgent):
    """Trains `scoring_network` ({'global': [B, Dg], 'per_arm': [B, N, Da]} -> [B, N], e.g.
    `PerArmRewardNetwork` or `GlobalAndArmDotProductNetwork`) on slate feedback (module docstring)."""

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        scoring_network: tf.Module,
        optimizer: Any,
        policy_type: RankingPolicyType = RankingPolicyType.NO_PENALTY,
        error_loss_fn: LossFn = mean_squared_error,
        feedback_model: FeedbackModel = FeedbackModel.CASCADING,
        non_click_score: float | None = None,
        positional_bias_type: PositionalBiasType | str | None = None,
        positional_bias_severity: float | None = None,
        positional_bias_positive_only: bool = False,
        logits_temperature: float = 1.0,
        summarize_grads_and_vars: bool = False,
        enable_summaries: bool = True,
        train_step_counter: tf.Variable | None = None,
        penalty_mixture_coefficient: float = 1.0,
        name: str | None = None,
        positional_bias_weights: Sequence[float] | None = None,
        collect_slate_policy: SlatePolicy | None = None,
        debug_summaries: bool = False,
    ):
        tf.Module.__init__(self, name=name)
        self._num_slots, self._num_items = check_ranking_specs(time_step_spec, action_spec)
        if policy_type in (RankingPolicyType.COSINE_DISTANCE, RankingPolicyType.UNKNOWN):
            raise NotImplementedError(
                "policy_type COSINE_DISTANCE (TF-Agents' default; UNKNOWN falls back to it) is not supported: its "
                "sequential diversity penalty has no tractable slate probabilities, so its logs cannot be evaluated "
                "off-policy. Use NO_PENALTY (Plackett-Luce with exact propensities) or DESCENDING_SCORES"
            )
        if policy_type not in (RankingPolicyType.NO_PENALTY, RankingPolicyType.DESCENDING_SCORES):
            raise ValueError(f"unknown policy_type {policy_type!r}")
        if not logits_temperature > 0:
            raise ValueError(f"logits_temperature must be positive; was {logits_temperature}")
        if feedback_model == FeedbackModel.UNKNOWN:
            feedback_model = FeedbackModel.CASCADING
        if feedback_model not in (FeedbackModel.CASCADING, FeedbackModel.SCORE_VECTOR):
            raise ValueError(f"unknown feedback_model {feedback_model!r}")
        if feedback_model == FeedbackModel.SCORE_VECTOR and non_click_score is not None:
            raise ValueError("Parameter `non_click_score` should only be used together with CASCADING feedback model.")
        self._feedback_model = feedback_model
        self._non_click_score = -1.0 if non_click_score is None else float(non_click_score)
        self._bias_type = _bias_type(positional_bias_type)
        if (
            self._bias_type in (PositionalBiasType.BASE, PositionalBiasType.EXPONENT)
            and positional_bias_severity is None
        ):
            raise ValueError(f"positional_bias_type {self._bias_type.name} needs positional_bias_severity")
        self._bias_severity = positional_bias_severity
        self._bias_weights = None
        if self._bias_type == PositionalBiasType.FIXED_BIAS_WEIGHTS:
            if positional_bias_weights is None or len(positional_bias_weights) != self._num_slots:
                raise ValueError(
                    f"FIXED_BIAS_WEIGHTS needs positional_bias_weights with one weight per slot ({self._num_slots}); "
                    f"got {positional_bias_weights}"
                )
            self._bias_weights = tf.constant(np.asarray(positional_bias_weights, np.float32))
        self._positive_only = positional_bias_positive_only
        self._scoring_network = scoring_network
        self._optimizer = optimizer
        self._error_loss_fn = error_loss_fn
        self._penalty_mixture_coefficient = penalty_mixture_coefficient
        self._use_num_actions = utils.NUM_ACTIONS_FEATURE_KEY in time_step_spec.observation
        if collect_slate_policy is None:
            sampling = policy_type == RankingPolicyType.NO_PENALTY
            collect_slate_policy = PlackettLuce(logits_temperature) if sampling else Greedy()
        greedy = RankingPolicy(time_step_spec, action_spec, scoring_network, Greedy(), name="greedy_ranking_policy")
        collect = RankingPolicy(
            time_step_spec, action_spec, scoring_network, collect_slate_policy, name="ranking_policy"
        )
        super().__init__(
            time_step_spec,
            action_spec,
            greedy,
            collect,
            train_step_counter,
            debug_summaries,
            summarize_grads_and_vars,
            enable_summaries,
        )
        obs = time_step_spec.observation
        arm = obs[utils.PER_ARM_FEATURE_KEY]
        train_obs = dict(obs)
        train_obs[utils.PER_ARM_FEATURE_KEY] = tf.TensorSpec([self._num_slots, *arm.shape[1:]], arm.dtype, arm.name)
        self._training_data_spec = trajectories.trajectory_spec(
            trajectories.time_step_spec(train_obs, time_step_spec.reward), action_spec, ()
        )
        if isinstance(optimizer, tf_keras.optimizers.Optimizer):  # slots now, outside any trace
            optimizer.build(self._variables_to_train())

    @property
    def scoring_network(self) -> tf.Module:
        return self._scoring_network

    @property
    def num_slots(self) -> int:
        return self._num_slots

    @property
    def training_data_spec(self) -> Trajectory:
        """Per slate: 'per_arm' holds the L shown items; reward the slot scores or the cascade pair."""
        return self._training_data_spec

    def _variables_to_train(self) -> list[tf.Variable]:
        return list(self._scoring_network.trainable_variables)

    def _flatten_experience(self, experience: Trajectory) -> tuple[dict[str, tf.Tensor], Any]:
        """(observation, reward) with one batch dimension, from a [B] or [B, T] Trajectory."""
        g = tf.convert_to_tensor(experience.observation[utils.GLOBAL_FEATURE_KEY])
        outer = g.shape.rank - 1
        if outer not in (1, 2):
            raise ValueError(f"experience.observation['global'] must be [B, Dg] or [B, T, Dg]; got {g.shape}")
        obs = utils.flatten_outer(dict(experience.observation), outer)
        per_arm = obs[utils.PER_ARM_FEATURE_KEY]
        if per_arm.shape[1] is not None and per_arm.shape[1] != self._num_slots:
            raise ValueError(
                f"training per_arm must hold the {self._num_slots} shown items of each slate in display order; got "
                f"{per_arm.shape[1]} items (map candidates to shown items with order_items_from_action)"
            )
        return obs, utils.flatten_outer(experience.reward, outer)

    def _targets_and_weights(self, reward: Any, obs: dict[str, tf.Tensor], weights: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """[B, L] targets and [B, L] sample weights (TF-Agents' _construct_sample_weights)."""
        num_slots = self._num_slots
        if self._feedback_model == FeedbackModel.CASCADING:
            if not isinstance(reward, dict) or CHOSEN_INDEX not in reward or CHOSEN_VALUE not in reward:
                raise ValueError(
                    f"CASCADING feedback needs reward {{'{CHOSEN_INDEX}', '{CHOSEN_VALUE}'}} (see cascading_feedback); got {reward!r}"
                )
            chosen = tf.cast(tf.reshape(reward[CHOSEN_INDEX], [-1]), tf.int32)
            score = compute_score_tensor_for_cascading(chosen, reward[CHOSEN_VALUE], num_slots, self._non_click_score)
        else:
            score = tf.cast(reward, tf.float32)
        batch = tf.shape(score)[0]
        if weights is None:
            base = tf.ones([batch, num_slots])
        else:
            weights = tf.cast(weights, tf.float32)
            if weights.shape.rank == 0:
                base = weights * tf.ones([batch, num_slots])
            else:
                base = tf.tile(tf.reshape(weights, [-1, 1]), [1, num_slots])
        if self._use_num_actions:
            filled = tf.cast(tf.reshape(obs[utils.NUM_ACTIONS_FEATURE_KEY], [-1]), tf.int32)
            base *= tf.sequence_mask(filled, num_slots, dtype=tf.float32)
        if self._feedback_model == FeedbackModel.CASCADING:
            base *= tf.sequence_mask(chosen + 1, num_slots, dtype=tf.float32)
        slots = tf.range(num_slots, dtype=tf.float32)
        if self._bias_type == PositionalBiasType.BASE:
            multiplier = tf.pow(slots + 1.0, float(self._bias_severity or 0.0))
        elif self._bias_type == PositionalBiasType.EXPONENT:
            multiplier = tf.pow(float(self._bias_severity or 0.0), slots)
        elif self._bias_type == PositionalBiasType.FIXED_BIAS_WEIGHTS:
            multiplier = tf.convert_to_tensor(self._bias_weights)
        else:
            return score, base
        biased = base * multiplier[None, :]
        return score, tf.where(score > 0, biased, base) if self._positive_only else biased

    def _sums(self, experience: Trajectory, weights: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """(sum of weighted errors, sum of weights) over the batch."""
        obs, reward = self._flatten_experience(experience)
        score, w = self._targets_and_weights(reward, obs, weights)
        net_obs = {k: v for k, v in obs.items() if k != utils.NUM_ACTIONS_FEATURE_KEY}
        estimate = tf.cast(self._scoring_network(net_obs), tf.float32)
        error = self._error_loss_fn(score, estimate, reduction=tf.compat.v1.losses.Reduction.NONE)
        if error.shape.rank == 1:  # a loss aggregated over slots: one weight per slate (TF-Agents)
            w = w[:, 0]
        return tf.reduce_sum(error * w), tf.reduce_sum(w)

    def loss(self, experience: Trajectory, weights: Any = None, training: bool = False) -> LossInfo:
        """TF-Agents' loss: LossInfo(weighted mean error) of a [B] or [B, 1] Trajectory; weights
        scalar or one per slate."""
        del training  # the scoring networks have no train/eval modes
        total, weight = self._sums(experience, weights)
        return LossInfo(tf.math.divide_no_nan(total, weight), ())

    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        variables = self._variables_to_train()
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            total, weight = self._sums(experience, weights)
            # the global batch's weighted mean: every replica divides by the sum of all weights
            share = tf.math.divide_no_nan(total, utils.all_reduce_sum([weight])[0])
        grads = tape.gradient(share, variables)
        grads = apply_global_gradients(self._optimizer, grads, variables)
        if self.summaries_enabled:
            loss = utils.all_reduce_sum([share])[0]
            with tf.name_scope("Losses/"):
                tf.summary.scalar("loss", loss, step=self._train_step_counter)
            if self.summarize_grads_and_vars:
                for g, v in zip(grads, variables):
                    name = v.name.replace(":", "_")
                    tf.summary.histogram(f"Variables/{name}", v, step=self._train_step_counter)
                    if g is not None:
                        tf.summary.histogram(f"Gradients/{name}", g, step=self._train_step_counter)
        self._train_step_counter.assign_add(1)
        return LossInfo(share, ())


__all__ = [
    "RankingAgent",
    "RankingPolicyType",
    "FeedbackModel",
    "PositionalBiasType",
    "CHOSEN_INDEX",
    "CHOSEN_VALUE",
    "compute_score_tensor_for_cascading",
    "cascading_feedback",
    "order_items_from_action",
]
