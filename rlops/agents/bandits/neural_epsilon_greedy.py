"""Neural epsilon-greedy bandit: a reward network trained by regression on the taken actions.

Same constructor, `loss(experience, weights)` and `reward_loss(observations, actions, rewards,
weights)` as TF-Agents' `NeuralEpsilonGreedyAgent` (a `GreedyRewardPredictionAgent` wrapped in
epsilon-greedy). Documented differences:
- `policy` is the greedy policy (what you serve) and `collect_policy` the epsilon-greedy one
  (what you explore with); TF-Agents uses the epsilon-greedy policy for both.
- The collect policy always logs `propensity`, the marginal probability of the chosen action
  (eps / allowed + (1 - eps) [greedy]); an emitted `log_probability` is its log. TF-Agents logs
  the log-probability of (branch, action), which undercounts when exploration hits the greedy arm.
- Predicted rewards in the info always come from the network (TF-Agents fills exploring rows
  with random values unless the field is in `info_fields_to_inherit_from_greedy`).
- `loss` also reports its terms in `extra` ({'error_loss', 'laplacian_loss'}; TF-Agents: ()).
- Actions are offset by the action spec's minimum (TF-Agents indexes the network with raw actions).
- Replicas: each replica's loss enters the gradient scaled by 1/R (optimizers sum gradients
  across replicas), so R replicas update like one replica on the global batch. The LossInfo
  `train` returns per replica is that share (the Learner sums it to the global-batch loss);
  the agent's own summaries report the full global-batch loss.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from rlops.agents.bandits import utils
from rlops.agents.bandits.base import BanditAgent
from rlops.agents.bandits.linear import drop_arm_observation
from rlops.agents.policies import Policy
from rlops.agents.replicas import apply_global_gradients
from rlops.agents.trajectories import LossInfo, PolicyStep, TimeStep, Trajectory
from rlops.heads.epsilon_greedy import collect_draw

LossFn = Callable[..., tf.Tensor]

_GREEDY_INFO_FIELDS = (
    utils.PREDICTED_REWARDS_MEAN,
    utils.LOG_PROBABILITY,
    utils.BANDIT_POLICY_TYPE,
    utils.CHOSEN_ARM_FEATURES,
)


def mean_squared_error(
    labels: tf.Tensor, predictions: tf.Tensor, weights: Any = 1.0, reduction: Any = None
) -> tf.Tensor:
    """Elementwise squared error: `tf.compat.v1.losses.mean_squared_error` with reduction NONE.

    The agent calls `error_loss_fn(labels, predictions, reduction=NONE)` and reduces itself (as
    TF-Agents does), so any `tf.compat.v1.losses` function is a drop-in replacement.
    """
    del reduction  # always elementwise; the agent does the weighted mean
    return tf.square(labels - predictions) * weights


class GreedyRewardPredictionPolicy(Policy):
    """argmax over a reward network's predictions, masked actions excluded.

    With per-arm features the network maps {'global': [B, Dg], 'per_arm': [B, K, Da]} to [B, K]
    and arms at index >= observation['num_actions'] (when given) are never chosen.
    """

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        reward_network: Callable[[Any], tf.Tensor],
        observation_and_action_constraint_splitter: utils.Splitter | None = None,
        emit_policy_info: Sequence[str] = (),
        accepts_per_arm_features: bool = False,
        name: str | None = None,
    ):
        info = utils.check_action_spec(action_spec)
        self._num_actions = info.num_actions
        self._action_min = info.minimum
        emit = utils.check_emit_policy_info(emit_policy_info, _GREEDY_INFO_FIELDS)
        self._per_arm = accepts_per_arm_features
        obs_spec = time_step_spec.observation
        if observation_and_action_constraint_splitter is not None:
            obs_spec, _ = observation_and_action_constraint_splitter(obs_spec)
        if accepts_per_arm_features:
            if not isinstance(obs_spec, dict) or utils.PER_ARM_FEATURE_KEY not in obs_spec:
                raise ValueError(
                    "accepts_per_arm_features=True needs an observation spec dict with "
                    f"'{utils.GLOBAL_FEATURE_KEY}' and '{utils.PER_ARM_FEATURE_KEY}'; got {obs_spec}"
                )
            emit = tuple(k for k in emit if k != utils.CHOSEN_ARM_FEATURES) + (utils.CHOSEN_ARM_FEATURES,)
        elif utils.CHOSEN_ARM_FEATURES in emit:
            raise ValueError("emit_policy_info 'chosen_arm_features' needs accepts_per_arm_features=True")
        specs_by_key = {
            utils.PREDICTED_REWARDS_MEAN: tf.TensorSpec([self._num_actions], tf.float32, utils.PREDICTED_REWARDS_MEAN),
            utils.LOG_PROBABILITY: tf.TensorSpec((), tf.float32, utils.LOG_PROBABILITY),
            utils.BANDIT_POLICY_TYPE: tf.TensorSpec((), tf.int32, utils.BANDIT_POLICY_TYPE),
        }
        if accepts_per_arm_features:
            arm = obs_spec[utils.PER_ARM_FEATURE_KEY]
            specs_by_key[utils.CHOSEN_ARM_FEATURES] = tf.TensorSpec(arm.shape[1:], arm.dtype, utils.CHOSEN_ARM_FEATURES)
        info_spec: Any = {k: specs_by_key[k] for k in emit} or ()
        super().__init__(time_step_spec, action_spec, info_spec, observation_and_action_constraint_splitter, name=name)
        self.reward_network = reward_network
        self._emit_policy_info = emit

    @property
    def accepts_per_arm_features(self) -> bool:
        return self._per_arm

    def predicted_rewards(self, observation: Any) -> tuple[tf.Tensor, tf.Tensor | None]:
        """[B, K] predictions and the [B, K] mask of allowed arms (None: all)."""
        obs, mask = self._split(observation)
        if self._per_arm:
            mask = utils.combine_masks(mask, utils.num_actions_mask(obs, self._num_actions))
            obs = {k: v for k, v in obs.items() if k != utils.NUM_ACTIONS_FEATURE_KEY}
        return self.reward_network(obs), mask

    def arm_scores(self, observation: Any) -> tf.Tensor:
        """Per-arm: [B, C] the scores the greedy choice maximizes, for {'global', 'per_arm' [B, C, Da]}
        with any number C of arms (a catalog served by id, rlops.train.by_id)."""
        return self.reward_network({k: v for k, v in observation.items() if k != utils.NUM_ACTIONS_FEATURE_KEY})

    def info_for(
        self,
        time_step: TimeStep,
        index: tf.Tensor,
        predicted: tf.Tensor,
        policy_type: tf.Tensor,
        log_probability: tf.Tensor,
    ) -> dict[str, tf.Tensor]:
        """The emitted info for chosen arm indices (shared with the epsilon-greedy policy)."""
        info: dict[str, tf.Tensor] = {}
        for key in self._emit_policy_info:
            if key == utils.PREDICTED_REWARDS_MEAN:
                info[key] = predicted
            elif key == utils.LOG_PROBABILITY:
                info[key] = log_probability
            elif key == utils.BANDIT_POLICY_TYPE:
                info[key] = policy_type
            elif key == utils.CHOSEN_ARM_FEATURES:
                obs, _ = self._split(time_step.observation)
                info[key] = utils.gather_arm_features(obs[utils.PER_ARM_FEATURE_KEY], index)
        return info

    def greedy_index(self, time_step: TimeStep) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor | None]:
        predicted, mask = self.predicted_rewards(time_step.observation)
        return utils.masked_argmax(predicted, mask, tf.int32), predicted, mask

    def to_action(self, index: tf.Tensor) -> tf.Tensor:
        return utils.index_to_action(index, self.action_spec)

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        index, predicted, _ = self.greedy_index(time_step)
        batch = tf.shape(index)
        info = self.info_for(
            time_step, index, predicted, tf.fill(batch, utils.BANDIT_POLICY_TYPE_GREEDY), tf.zeros(batch, tf.float32)
        )
        return PolicyStep(self.to_action(index), (), info or ())


class BanditEpsilonGreedyPolicy(Policy):
    """With probability epsilon a uniform allowed arm, otherwise the greedy arm.

    `info['propensity']` is the probability this policy gave the chosen action (what logged data
    needs for off-policy evaluation); emitted TF-Agents fields follow the chosen action
    (`chosen_arm_features`, `bandit_policy_type` 1 greedy / 2 uniform, `log_probability` =
    log propensity). Fields in `info_fields_to_inherit_from_greedy` always carry the greedy
    action's value, as in TF-Agents.
    """

    def __init__(
        self,
        greedy_policy: GreedyRewardPredictionPolicy,
        epsilon: float | Callable[[], float],
        info_fields_to_inherit_from_greedy: Sequence[str] = (),
        name: str | None = None,
    ):
        greedy_spec = greedy_policy.info_spec or {}
        inherit = tuple(info_fields_to_inherit_from_greedy or ())
        missing = [f for f in inherit if f not in greedy_spec]
        if missing:
            raise ValueError(
                f"info_fields_to_inherit_from_greedy {missing} are not emitted by the greedy policy "
                f"(emit_policy_info gives {sorted(greedy_spec)})"
            )
        info_spec = {utils.PROPENSITY: tf.TensorSpec((), tf.float32, utils.PROPENSITY), **greedy_spec}
        super().__init__(
            greedy_policy.time_step_spec,
            greedy_policy.action_spec,
            info_spec,
            greedy_policy.observation_and_action_constraint_splitter,
            name=name,
        )
        self.greedy_policy = greedy_policy
        self.epsilon = epsilon
        self.info_fields_to_inherit_from_greedy = inherit

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        greedy = self.greedy_policy
        greedy_index, predicted, mask = greedy.greedy_index(time_step)
        batch = tf.shape(greedy_index)[0]
        epsilon = self.epsilon() if callable(self.epsilon) else self.epsilon
        # the bandit head's rule (rlops.heads.epsilon_greedy), drawn from TF's seeded stream
        index, propensity, explore = collect_draw(greedy_index, greedy._num_actions, epsilon, mask, tf.int32)
        policy_type = tf.where(explore, utils.BANDIT_POLICY_TYPE_UNIFORM, utils.BANDIT_POLICY_TYPE_GREEDY)
        info = greedy.info_for(time_step, index, predicted, policy_type, tf.math.log(propensity))
        if self.info_fields_to_inherit_from_greedy:
            greedy_info = greedy.info_for(
                time_step,
                greedy_index,
                predicted,
                tf.fill([batch], utils.BANDIT_POLICY_TYPE_GREEDY),
                tf.zeros([batch], tf.float32),
            )
            info.update({f: greedy_info[f] for f in self.info_fields_to_inherit_from_greedy})
        info[utils.PROPENSITY] = propensity
        return PolicyStep(greedy.to_action(index), (), info)


class NeuralEpsilonGreedyAgent(BanditAgent):
    """Trains `reward_network` ([B, *obs] -> [B, K]) on the rewards of the taken actions.

    loss = mean_b(w_b * error_loss_fn(r_b, f(x_b)[a_b]))
         + laplacian_smoothing_weight * mean_b(w_b * f(x_b)^T L f(x_b))   (when L is given)

    The Laplacian term (TF-Agents' definition) pulls predicted rewards of actions that are
    neighbours in a graph over actions towards each other. With `accepts_per_arm_features` the
    network scores {'global', 'per_arm'} observations (e.g. `PerArmRewardNetwork`) and training
    uses the chosen arm's features from policy_info['chosen_arm_features'].
    """

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        reward_network: tf.Module,
        optimizer: Any,
        epsilon: float | Callable[[], float],
        observation_and_action_constraint_splitter: utils.Splitter | None = None,
        accepts_per_arm_features: bool = False,
        constraints: Sequence[Any] = (),
        error_loss_fn: LossFn = mean_squared_error,
        gradient_clipping: float | None = None,
        debug_summaries: bool = False,
        summarize_grads_and_vars: bool = False,
        enable_summaries: bool = True,
        emit_policy_info: Sequence[str] = (),
        train_step_counter: tf.Variable | None = None,
        laplacian_matrix: Any = None,
        laplacian_smoothing_weight: float = 0.001,
        info_fields_to_inherit_from_greedy: Sequence[str] = (),
        name: str | None = None,
    ):
        tf.Module.__init__(self, name=name)
        if constraints:
            raise NotImplementedError(
                "constraints: rlops has no constrained bandits yet (TF-Agents' NeuralConstraint trains extra "
                "networks on a reward nest with a 'constraint' key, which rlops' feedback records do not carry); "
                "pass constraints=()"
            )
        action_info = utils.check_action_spec(action_spec)
        self._num_actions = action_info.num_actions
        self._action_min = action_info.minimum
        self._per_arm = accepts_per_arm_features
        self._reward_network = reward_network
        self._optimizer = optimizer
        self._error_loss_fn = error_loss_fn
        self._gradient_clipping = gradient_clipping
        self._splitter = observation_and_action_constraint_splitter
        self._laplacian_matrix = None
        if laplacian_matrix is not None:
            lap = np.asarray(laplacian_matrix, np.float32)
            if lap.shape != (self._num_actions, self._num_actions):
                raise ValueError(
                    f"laplacian_matrix must be [{self._num_actions}, {self._num_actions}], got {lap.shape}"
                )
            # A graph Laplacian's rows and columns sum to zero (TF-Agents checks the same).
            if not (np.allclose(lap.sum(0), 0.0, atol=1e-5) and np.allclose(lap.sum(1), 0.0, atol=1e-5)):
                raise ValueError("laplacian_matrix rows and columns must each sum to 0")
            if accepts_per_arm_features:
                raise ValueError(
                    "laplacian_matrix needs a fixed set of arms; it cannot be used with accepts_per_arm_features=True"
                )
            self._laplacian_matrix = tf.constant(lap)
        self._laplacian_smoothing_weight = laplacian_smoothing_weight

        greedy = GreedyRewardPredictionPolicy(
            time_step_spec,
            action_spec,
            reward_network,
            observation_and_action_constraint_splitter,
            emit_policy_info,
            accepts_per_arm_features,
            name="greedy_policy",
        )
        collect = BanditEpsilonGreedyPolicy(
            greedy, epsilon, info_fields_to_inherit_from_greedy, name="epsilon_greedy_policy"
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
        # Create optimizer slots now, outside any tf.function/XLA trace, so checkpoints see them.
        if isinstance(optimizer, tf_keras.optimizers.Optimizer):
            optimizer.build(self._variables_to_train())  # returns at once if already built

    @property
    def reward_network(self) -> tf.Module:
        return self._reward_network

    @property
    def training_data_spec(self) -> Trajectory:
        return drop_arm_observation(self.collect_data_spec, self._per_arm)

    def _variables_to_train(self) -> list[tf.Variable]:
        return list(self._reward_network.trainable_variables)

    def _network_inputs(self, experience: Trajectory) -> tuple[Any, tf.Tensor, tf.Tensor, int]:
        """(network observations, action indices, rewards, outer dims) as TF-Agents'
        process_experience_for_neural_agents: per-arm rows score only the chosen arm."""
        observations, actions, rewards, outer = utils.process_experience(experience, self._action_min)
        if self._splitter is not None:
            observations, _ = self._splitter(observations)
        if self._per_arm:
            arm = utils.chosen_arm_features(experience, outer)
            observations = {
                k: v
                for k, v in observations.items()
                if k not in (utils.PER_ARM_FEATURE_KEY, utils.NUM_ACTIONS_FEATURE_KEY)
            }
            observations[utils.PER_ARM_FEATURE_KEY] = arm[:, None]
            actions = tf.zeros_like(actions)
        return observations, actions, rewards, outer

    def reward_loss(
        self, observations: Any, actions: tf.Tensor, rewards: tf.Tensor, weights: Any = None, training: bool = False
    ) -> tf.Tensor:
        """TF-Agents' reward_loss: the scalar loss on network inputs (after the splitter), [B]
        action indices (offset by the spec minimum already) and [B] rewards; weights scalar or [B]."""
        return self._loss_terms(observations, actions, rewards, weights, training).loss

    def _loss_terms(
        self, observations: Any, actions: tf.Tensor, rewards: tf.Tensor, weights: Any, training: bool
    ) -> LossInfo:
        del training  # the reward network has no train/eval modes
        sample_weights = 1.0 if weights is None else tf.cast(weights, tf.float32)
        predicted = self._reward_network(observations)
        taken = utils.index_with_actions(predicted, actions)
        error = self._error_loss_fn(tf.cast(rewards, tf.float32), taken, reduction=tf.compat.v1.losses.Reduction.NONE)
        error_loss = _mean(error * sample_weights)
        loss = error_loss
        extra: dict[str, tf.Tensor] = {"error_loss": error_loss}
        if self._laplacian_matrix is not None:
            # diag(R L R^T) per example, computed without forming the [B, B] product.
            smoothness = tf.reduce_sum(tf.matmul(predicted, self._laplacian_matrix) * predicted, -1)
            lap_loss = self._laplacian_smoothing_weight * _mean(smoothness * sample_weights)
            loss = loss + lap_loss
            extra["laplacian_loss"] = lap_loss
        return LossInfo(loss, extra)

    def loss(self, experience: Trajectory, weights: Any = None, training: bool = False) -> LossInfo:
        """TF-Agents' loss(experience, weights): LossInfo of a [B] or [B, 1] Trajectory (not
        scaled for replicas); weights scalar, [B] or [B, 1]."""
        observations, actions, rewards, outer = self._network_inputs(experience)
        return self._loss_terms(observations, actions, rewards, utils.flatten_weights(weights, outer), training)

    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        observations, actions, rewards, outer = self._network_inputs(experience)
        weights = utils.flatten_weights(weights, outer)
        variables = self._variables_to_train()
        # Optimizers sum gradients across replicas: each replica's loss enters the gradient
        # scaled by 1/R (tf.nn.compute_average_loss's convention) so R replicas update like one.
        scale = 1.0 / utils.num_replicas()
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            loss_info = self._loss_terms(observations, actions, rewards, weights, training=True)
            share = tf.nest.map_structure(lambda t: t * scale, loss_info)
        grads = tape.gradient(share.loss, variables)
        clip = None
        if self._gradient_clipping is not None:
            # Per-tensor norm clipping, like TF-Agents' eager_utils.clip_gradient_norms (of the
            # replicas' summed gradient: rlops.agents.replicas).
            clip = lambda gs: [
                tf.clip_by_norm(g, self._gradient_clipping) if g is not None else None  # noqa: E731
                for g in gs
            ]
        grads = apply_global_gradients(self._optimizer, grads, variables, clip)
        self._write_summaries(share, grads, variables, rewards)
        self._train_step_counter.assign_add(1)
        return share

    def _write_summaries(self, share: LossInfo, grads: list[Any], variables: list[Any], rewards: tf.Tensor) -> None:
        # tf.summary ops are no-ops without a default writer; skip building them when disabled.
        if not self.summaries_enabled:
            return
        step = self._train_step_counter
        # The global-batch loss: the replicas' shares summed (no collective on one replica).
        fields = [share.loss] + list(share.extra.values())
        reduced = utils.all_reduce_sum(fields)
        with tf.name_scope("Losses/"):
            tf.summary.scalar("loss", reduced[0], step=step)
            for key, value in zip(share.extra, reduced[1:]):
                tf.summary.scalar(key, value, step=step)
        if self.debug_summaries:
            tf.summary.scalar("Rewards/mean", tf.reduce_mean(rewards), step=step)
            tf.summary.scalar("Gradients/global_norm", tf.linalg.global_norm(grads), step=step)
        if self.summarize_grads_and_vars:
            for g, v in zip(grads, variables):
                name = v.name.replace(":", "_")
                tf.summary.histogram(f"Variables/{name}", v, step=step)
                if g is not None:
                    tf.summary.histogram(f"Gradients/{name}", g, step=step)


def _mean(values: tf.Tensor) -> tf.Tensor:
    """reduce_mean, but 0 for an empty batch: under MultiWorkerMirrored a worker whose file shard
    ended first steps on empty batches until every shard ends (a NaN there would fail the run)."""
    return tf.math.divide_no_nan(tf.reduce_sum(values), tf.cast(tf.size(values), values.dtype))
