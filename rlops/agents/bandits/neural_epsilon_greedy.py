"""Neural epsilon-greedy bandit: a reward network trained by regression on the taken actions.

Same constructor and loss as TF-Agents' `NeuralEpsilonGreedyAgent` (itself a
`GreedyRewardPredictionAgent` wrapped in epsilon-greedy), except that here `policy` is the greedy
policy (what you serve) and `collect_policy` the epsilon-greedy one (what you explore with);
TF-Agents uses the epsilon-greedy policy for both.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from rlops.agents.bandits import utils
from rlops.agents.bandits.base import BanditAgent
from rlops.agents.policies import EpsilonGreedyPolicy, Policy
from rlops.agents.trajectories import LossInfo, PolicyStep, TimeStep, Trajectory

LossFn = Callable[..., tf.Tensor]


def mean_squared_error(labels: tf.Tensor, predictions: tf.Tensor, weights: Any = 1.0,
                       reduction: Any = None) -> tf.Tensor:
    """Elementwise squared error: `tf.compat.v1.losses.mean_squared_error` with reduction NONE.

    The agent calls `error_loss_fn(labels, predictions, reduction=NONE)` and reduces itself (as
    TF-Agents does), so any `tf.compat.v1.losses` function is a drop-in replacement.
    """
    del reduction  # always elementwise; the agent does the weighted mean
    return tf.square(labels - predictions) * weights


class GreedyRewardPredictionPolicy(Policy):
    """argmax over a reward network's predictions, masked actions excluded."""

    def __init__(self, time_step_spec: TimeStep, action_spec: tf.TensorSpec,
                 reward_network: Callable[[Any], tf.Tensor],
                 observation_and_action_constraint_splitter: utils.Splitter | None = None,
                 emit_policy_info: Sequence[str] = (), name: str | None = None):
        self._num_actions = utils.check_action_spec(action_spec)
        emit = utils.check_emit_policy_info(emit_policy_info, (utils.PREDICTED_REWARDS_MEAN,))
        info_spec: Any = ()
        if emit:
            info_spec = {utils.PREDICTED_REWARDS_MEAN: tf.TensorSpec(
                [self._num_actions], tf.float32, utils.PREDICTED_REWARDS_MEAN)}
        super().__init__(time_step_spec, action_spec, info_spec,
                         observation_and_action_constraint_splitter, name=name)
        self.reward_network = reward_network
        self._emit_policy_info = emit

    def predicted_rewards(self, observation: Any) -> tuple[tf.Tensor, tf.Tensor | None]:
        obs, mask = self._split(observation)
        return self.reward_network(obs), mask

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        predicted, mask = self.predicted_rewards(time_step.observation)
        action = utils.masked_argmax(predicted, mask, self.action_spec.dtype)
        info: Any = {utils.PREDICTED_REWARDS_MEAN: predicted} if self._emit_policy_info else ()
        return PolicyStep(action, (), info)


class NeuralEpsilonGreedyAgent(BanditAgent):
    """Trains `reward_network` ([B, *obs] -> [B, K]) on the rewards of the taken actions.

    loss = mean_b(w_b * error_loss_fn(r_b, f(x_b)[a_b]))
         + laplacian_smoothing_weight * mean_b(w_b * f(x_b)^T L f(x_b))   (when L is given)

    The Laplacian term (TF-Agents' definition) pulls predicted rewards of actions that are
    neighbours in a graph over actions towards each other.
    """

    def __init__(self, time_step_spec: TimeStep, action_spec: tf.TensorSpec,
                 reward_network: tf.Module, optimizer: Any, epsilon: float | Callable[[], float],
                 observation_and_action_constraint_splitter: utils.Splitter | None = None,
                 error_loss_fn: LossFn = mean_squared_error,
                 gradient_clipping: float | None = None,
                 debug_summaries: bool = False, summarize_grads_and_vars: bool = False,
                 enable_summaries: bool = True, emit_policy_info: Sequence[str] = (),
                 train_step_counter: tf.Variable | None = None,
                 laplacian_matrix: Any = None, laplacian_smoothing_weight: float = 0.001,
                 name: str | None = None):
        tf.Module.__init__(self, name=name)
        self._num_actions = utils.check_action_spec(action_spec)
        self._reward_network = reward_network
        self._optimizer = optimizer
        self._error_loss_fn = error_loss_fn
        self._gradient_clipping = gradient_clipping
        self._splitter = observation_and_action_constraint_splitter
        self._laplacian_matrix = None
        if laplacian_matrix is not None:
            lap = np.asarray(laplacian_matrix, np.float32)
            if lap.shape != (self._num_actions, self._num_actions):
                raise ValueError(f"laplacian_matrix must be [{self._num_actions}, {self._num_actions}], "
                                 f"got {lap.shape}")
            # A graph Laplacian's rows and columns sum to zero (TF-Agents checks the same).
            if not (np.allclose(lap.sum(0), 0.0, atol=1e-5) and np.allclose(lap.sum(1), 0.0, atol=1e-5)):
                raise ValueError("laplacian_matrix rows and columns must each sum to 0")
            self._laplacian_matrix = tf.constant(lap)
        self._laplacian_smoothing_weight = laplacian_smoothing_weight

        greedy = GreedyRewardPredictionPolicy(
            time_step_spec, action_spec, reward_network, observation_and_action_constraint_splitter,
            emit_policy_info, name="greedy_policy")
        collect = EpsilonGreedyPolicy(greedy, epsilon, name="epsilon_greedy_policy")
        super().__init__(time_step_spec, action_spec, greedy, collect, train_step_counter,
                         debug_summaries, summarize_grads_and_vars, enable_summaries)
        # Create optimizer slots now, outside any tf.function/XLA trace, so checkpoints see them.
        if isinstance(optimizer, tf_keras.optimizers.Optimizer):
            optimizer.build(self._variables_to_train())  # returns at once if already built

    @property
    def reward_network(self) -> tf.Module:
        return self._reward_network

    def _variables_to_train(self) -> list[tf.Variable]:
        return list(self._reward_network.trainable_variables)

    def loss(self, observations: Any, actions: tf.Tensor, rewards: tf.Tensor, weights: Any = None,
             training: bool = False) -> LossInfo:
        """Loss on a flat batch. `observations` are full observations (the splitter, if any, is
        applied here), `actions` and `rewards` are [B]; `weights` scalar or [B]."""
        del training  # the reward network has no train/eval modes
        if self._splitter is not None:
            observations, _ = self._splitter(observations)
        sample_weights = 1.0 if weights is None else tf.cast(weights, tf.float32)
        predicted = self._reward_network(observations)
        taken = utils.index_with_actions(predicted, actions)
        error = self._error_loss_fn(tf.cast(rewards, tf.float32), taken,
                                    reduction=tf.compat.v1.losses.Reduction.NONE)
        error_loss = tf.reduce_mean(error * sample_weights)
        loss = error_loss
        extra: dict[str, tf.Tensor] = {"error_loss": error_loss}
        if self._laplacian_matrix is not None:
            # diag(R L R^T) per example, computed without forming the [B, B] product.
            smoothness = tf.reduce_sum(tf.matmul(predicted, self._laplacian_matrix) * predicted, -1)
            lap_loss = self._laplacian_smoothing_weight * tf.reduce_mean(smoothness * sample_weights)
            loss = loss + lap_loss
            extra["laplacian_loss"] = lap_loss
        return LossInfo(loss, extra)

    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        observations, actions, rewards, outer = utils.process_experience(experience)
        weights = utils.flatten_weights(weights, outer)
        variables = self._variables_to_train()
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            loss_info = self.loss(observations, actions, rewards, weights, training=True)
            # Optimizers sum gradients across replicas: scale each replica's loss by 1/R
            # (tf.nn.compute_average_loss's convention) so R replicas update like one.
            ctx = tf.distribute.get_replica_context()
            scale = 1.0 / ctx.num_replicas_in_sync if ctx is not None else 1.0
            loss_info = tf.nest.map_structure(lambda t: t * scale, loss_info)
        grads = tape.gradient(loss_info.loss, variables)
        if self._gradient_clipping is not None:
            # Per-tensor norm clipping, like TF-Agents' eager_utils.clip_gradient_norms.
            grads = [tf.clip_by_norm(g, self._gradient_clipping) if g is not None else None for g in grads]
        self._optimizer.apply_gradients(zip(grads, variables))
        self._write_summaries(loss_info, grads, variables, rewards)
        self._train_step_counter.assign_add(1)
        return loss_info

    def _write_summaries(self, loss_info: LossInfo, grads: list, variables: list,
                         rewards: tf.Tensor) -> None:
        # tf.summary ops are no-ops without a default writer; skip building them when disabled.
        if not self.summaries_enabled:
            return
        step = self._train_step_counter
        with tf.name_scope("Losses/"):
            tf.summary.scalar("loss", loss_info.loss, step=step)
            for key, value in loss_info.extra.items():
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
