"""PPO (Schulman et al. 2017) with TF-Agents' PPOAgent semantics, pinned by golden fixtures.

`train(experience)` takes a [B, T] Trajectory collected by the collect policy; the last time step
of each row only supplies the bootstrap value V(o_{T-1}). As in TF-Agents 0.19
(tests/golden/test_golden_ppo.py checks the numbers against TF-Agents itself):
- values come from the current value network; the value target is the Monte-Carlo return unless
  both `use_gae` and `use_td_lambda_return` (then GAE advantage + value); without `use_gae` the
  advantage is return - value;
- rows are masked when they are boundaries (step_type LAST) or the bootstrap row; losses are
  aggregated like `tf_agents.utils.common.aggregate_losses`: sum(loss * weight) over all B*T rows
  divided by B*T and by the number of replicas; advantages are normalized over all B*T entries;
- every gradient step (each epoch; each minibatch of it when `minibatch_size` is set, an rlops
  addition) advances `train_step_counter`; `train` returns the last gradient step's LossInfo;
- after the epochs: adaptive KL beta update, then observation and reward normalizer updates
  (over every row of the batch);
- `compute_value_and_advantage_in_train=False`: the collect policy stores `value_prediction`,
  `preprocess_sequence` adds `return` and `advantage` (`training_data_spec`), train reads them.
Documented choices that differ: episodes that end by truncation (discount 1 at a LAST step)
bootstrap V of their final observation (TF-Agents zeroes it); GAE bootstraps the final transition
from V(o_{T-1}) (TF-Agents uses V(o_{T-2}), an off-by-one); under several replicas advantage
moments, the KL mean and normalizer statistics are all-reduced, so R replicas equal one replica
on the global batch (TF-Agents uses per-replica statistics and does not scale the KL penalty).

Multi-replica training: call `train(experience)` in cross-replica context under
`strategy.scope()` (the rlops Learner does, for agents with `train_in_cross_replica_context`).
The epoch/minibatch loop is a tf.while_loop on the host side whose body is one
`strategy.run(gradient step)`, so the optimizer all-reduces gradients at every step
(MirroredStrategy, MultiWorkerMirroredStrategy, TPUStrategy). With one replica the whole update
is one XLA-compiled function.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork, ValueNetwork
from rlops.agents.normalizers import StreamingNormalizer
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.ppo import value_ops
from rlops.agents.ppo.ppo_policy import PPOCollectPolicy
from rlops.agents.replicas import apply_global_gradients
from rlops.agents.trajectories import LossInfo, StepType, TimeStep, Trajectory, trajectory_spec

_NUM_LOSSES = 7  # total, pg, value, l2, entropy, kl, clip_fraction


class PPOLossInfo(NamedTuple):
    policy_gradient_loss: tf.Tensor
    value_estimation_loss: tf.Tensor
    l2_regularization_loss: tf.Tensor
    entropy_regularization_loss: tf.Tensor
    kl_penalty_loss: tf.Tensor
    clip_fraction: tf.Tensor


def _replica_context() -> tuple[Any, int]:
    ctx = tf.distribute.get_replica_context()
    return ctx, (ctx.num_replicas_in_sync if ctx is not None else 1)


def _all_gather(tensors: dict[str, Any]) -> dict[str, Any]:
    """Each replica's rows concatenated along axis 0, inside a replica function."""
    ctx = tf.distribute.get_replica_context()
    return {k: ctx.all_gather(v, axis=0) for k, v in tensors.items()}


def _normalized(advantages: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor) -> tf.Tensor:
    return (advantages - mean) * tf.math.rsqrt(variance + 1e-8)


def _all_reduce_sum(x: Any) -> Any:
    """Sum over replicas inside a replica function; identity with one replica."""
    ctx, replicas = _replica_context()
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x) if replicas > 1 else x


class PPOAgent(tf.Module):
    """Proximal Policy Optimization for discrete or continuous actions.

    Argument names, order and meanings follow tf_agents.agents.ppo.ppo_agent.PPOAgent; rlops adds
    `minibatch_size` (None: every epoch is one step on the whole batch, as in TF-Agents),
    `normalize_advantages`, `observation_clip_value`, `observation_variance_epsilon`, `seed` and
    `jit_compile`.

    `normalize_advantages`: True or "batch" normalizes over each `train` call's batch (TF-Agents,
    whose agent normalizes what one `train` call receives); "minibatch" over each gradient step's
    minibatch, which is what TF-Agents does when its PPOLearner feeds the agent minibatches, and
    CleanRL's choice; False not at all. `observation_clip_value` / `observation_variance_epsilon`:
    the observation normalizer's (x - mean) / sqrt(var + epsilon) clipped to +-clip; TF-Agents'
    values 5 and 1e-3 by default (CleanRL / Gymnasium: 10 and 1e-8).
    """

    train_in_cross_replica_context = True  # see the module docstring and rlops.train.Learner

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        optimizer: Any = None,
        actor_net: ActorNetwork | None = None,
        value_net: ValueNetwork | None = None,
        greedy_eval: bool = True,
        importance_ratio_clipping: float = 0.0,
        lambda_value: float = 0.95,
        discount_factor: float = 0.99,
        entropy_regularization: float = 0.0,
        policy_l2_reg: float = 0.0,
        value_function_l2_reg: float = 0.0,
        shared_vars_l2_reg: float = 0.0,
        value_pred_loss_coef: float = 0.5,
        num_epochs: int = 25,
        use_gae: bool = False,
        use_td_lambda_return: bool = False,
        normalize_rewards: bool = True,
        reward_norm_clipping: float = 10.0,
        normalize_observations: bool = True,
        log_prob_clipping: float = 0.0,
        kl_cutoff_factor: float = 2.0,
        kl_cutoff_coef: float = 1000.0,
        initial_adaptive_kl_beta: float = 1.0,
        adaptive_kl_target: float = 0.01,
        adaptive_kl_tolerance: float = 0.3,
        gradient_clipping: float | None = None,
        value_clipping: float | None = None,
        check_numerics: bool = False,
        compute_value_and_advantage_in_train: bool = True,
        update_normalizers_in_train: bool = True,
        aggregate_losses_across_replicas: bool = True,
        debug_summaries: bool = False,
        summarize_grads_and_vars: bool = False,
        train_step_counter: tf.Variable | None = None,
        name: str | None = None,
        minibatch_size: int | None = None,
        normalize_advantages: bool | str = True,
        observation_clip_value: float = 5.0,
        observation_variance_epsilon: float = 1e-3,
        seed: int = 0,
        jit_compile: bool = True,
    ):
        super().__init__(name=name or "PPOAgent")
        if optimizer is None:
            raise ValueError("PPOAgent needs an optimizer (e.g. tf_keras.optimizers.Adam(3e-4)).")
        if len(tf.nest.flatten(action_spec)) != 1:
            raise ValueError(f"PPOAgent supports one action tensor, got action_spec={action_spec}")
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        if minibatch_size is not None and minibatch_size < 1:
            raise ValueError(f"minibatch_size must be >= 1 or None, got {minibatch_size}")
        if normalize_advantages not in (True, False, "batch", "minibatch"):
            raise ValueError(
                f"normalize_advantages must be True, False, 'batch' or 'minibatch', got {normalize_advantages!r}"
            )
        self.time_step_spec = self._no_dependency(time_step_spec)
        self.action_spec = self._no_dependency(action_spec)
        obs_spec = time_step_spec.observation
        self.actor_net = actor_net or ActorNetwork(obs_spec, action_spec, seed=seed)
        self.value_net = value_net or ValueNetwork(obs_spec, seed=seed + 1)
        self.optimizer = optimizer
        self.importance_ratio_clipping = importance_ratio_clipping
        self.use_gae = use_gae
        self.use_td_lambda_return = use_td_lambda_return
        self.lambda_value = lambda_value
        self.discount_factor = discount_factor
        self.entropy_regularization = entropy_regularization
        self.policy_l2_reg = policy_l2_reg
        self.value_function_l2_reg = value_function_l2_reg
        # Kernels in both networks (a shared torso) get this coefficient instead of the two above,
        # as in TF-Agents; rlops' own actor and value networks share none, so there it adds 0.
        self.shared_vars_l2_reg = shared_vars_l2_reg
        self.value_pred_loss_coef = value_pred_loss_coef
        self.num_epochs = num_epochs
        self.minibatch_size = minibatch_size
        self.normalize_advantages = "batch" if normalize_advantages is True else normalize_advantages
        self.log_prob_clipping = log_prob_clipping
        self.kl_cutoff_factor = kl_cutoff_factor
        self.kl_cutoff_coef = kl_cutoff_coef
        self.initial_adaptive_kl_beta = initial_adaptive_kl_beta
        self.adaptive_kl_target = adaptive_kl_target
        self.adaptive_kl_tolerance = adaptive_kl_tolerance
        self.gradient_clipping = gradient_clipping or 0.0
        self.value_clipping = value_clipping or 0.0
        self.check_numerics = check_numerics
        self.compute_value_and_advantage_in_train = compute_value_and_advantage_in_train
        self.update_normalizers_in_train = update_normalizers_in_train
        self.aggregate_losses_across_replicas = aggregate_losses_across_replicas
        self.debug_summaries = debug_summaries
        self.summarize_grads_and_vars = summarize_grads_and_vars
        self.seed = seed
        self.reward_norm_clipping = reward_norm_clipping

        self.adaptive_kl_beta = (
            tf.Variable(
                initial_adaptive_kl_beta,
                dtype=tf.float32,
                trainable=False,
                name="adaptive_kl_beta",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            if initial_adaptive_kl_beta > 0
            else None
        )
        # TF-Agents' normalizers: observations clipped at 5, rewards at reward_norm_clipping (not centered).
        self.observation_normalizer = (
            StreamingNormalizer(
                obs_spec.shape,
                center_mean=True,
                clip_value=observation_clip_value,
                epsilon=observation_variance_epsilon,
                name="observation_normalizer",
            )
            if normalize_observations
            else None
        )
        self.reward_normalizer = (
            StreamingNormalizer((), center_mean=False, clip_value=reward_norm_clipping, name="reward_normalizer")
            if normalize_rewards
            else None
        )
        # ONLY_FIRST_REPLICA: incremented inside strategy.run without cross-replica conflicts.
        self.train_step_counter = (
            train_step_counter
            if train_step_counter is not None
            else tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="train_step_counter",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        )

        # TF-Agents' PPO policies do not clip actions (environments clip what they receive).
        if compute_value_and_advantage_in_train:
            self.collect_policy = ActorPolicy(
                time_step_spec,
                action_spec,
                self.actor_net,
                observation_normalizer=self.observation_normalizer,
                clip_actions=False,
                name="collect_policy",
            )
        else:  # values are stored while acting, returns/advantages added by preprocess_sequence
            self.collect_policy = PPOCollectPolicy(
                time_step_spec,
                action_spec,
                self.actor_net,
                self.value_net,
                observation_normalizer=self.observation_normalizer,
                clip_actions=False,
                name="collect_policy",
            )
        self.greedy_eval = greedy_eval
        self.policy = (
            GreedyPolicy(self.collect_policy, name="greedy_policy")
            if greedy_eval
            else ActorPolicy(
                time_step_spec,
                action_spec,
                self.actor_net,
                observation_normalizer=self.observation_normalizer,
                clip_actions=False,
                name="policy",
            )
        )
        self.collect_data_spec = self._no_dependency(
            trajectory_spec(time_step_spec, action_spec, self.collect_policy.info_spec)
        )
        # TF-Agents: training data carries return and advantage iff preprocess_sequence adds them.
        self.training_data_spec = (
            None
            if compute_value_and_advantage_in_train
            else self._no_dependency(
                self.collect_data_spec._replace(
                    policy_info={
                        **self.collect_data_spec.policy_info,
                        "return": tf.TensorSpec((), tf.float32, "return"),
                        "advantage": tf.TensorSpec((), tf.float32, "advantage"),
                    }
                )
            )
        )
        self.train_sequence_length = None  # any T >= 2
        # Deterministic order: actor first, then value network, each in creation order.
        self._trainable = list(self.actor_net.trainable_variables) + list(self.value_net.trainable_variables)
        # Loops are explicit tf.while_loops: autograph would otherwise re-convert TFP's Python
        # on every trace (seconds). XLA fuses the many tiny ops of a small-MLP update: ~2x here.
        self._core_fn = tf.function(self._core, autograph=False, jit_compile=jit_compile)
        self._train_fn = tf.function(self._train_single, autograph=False)
        self._distributed_train_fn = tf.function(self._train_distributed, autograph=False)
        self._preprocess_fn = tf.function(self._preprocess, autograph=False)

    @property
    def _train_data_spec(self) -> Trajectory:
        return self.training_data_spec or self.collect_data_spec

    @property
    def trainable_weights(self) -> list[tf.Variable]:
        return list(self._trainable)

    def initialize(self) -> None:
        """TF-Agents' agent.initialize(): nothing to set up here (variables exist at construction)."""

    # ---- public API ---------------------------------------------------------------------------
    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        """One PPO update (all epochs) on a [B, T] batch; returns the last gradient step's LossInfo.

        `weights`: [B, T] or [B] per-row weights (multiplied into the validity mask).
        Under a multi-replica strategy, call it in cross-replica context: `experience` is either
        a global batch (split over the replicas along B) or distributed values.
        """
        ctx, replicas = _replica_context()
        strategy = tf.distribute.get_strategy()
        if replicas > 1 or (tf.distribute.in_cross_replica_context() and strategy.num_replicas_in_sync > 1):
            if not tf.distribute.in_cross_replica_context():
                raise RuntimeError(
                    f"PPOAgent.train was called inside strategy.run with {replicas} replicas: its epoch loop "
                    "must all-reduce gradients every step, which it does from cross-replica context. Call "
                    "agent.train(experience) under strategy.scope() outside strategy.run (rlops' Learner "
                    "does this for agents with train_in_cross_replica_context)."
                )
            return self._train_multi_replica(strategy, experience, weights)
        specs.check_nest_matches_spec(experience, self._train_data_spec, "experience", num_outer_dims=2)
        return self._train_fn(experience, self._weights(experience, weights))

    def _weights(self, experience: Trajectory, weights: Any) -> tf.Tensor:
        reward = tf.convert_to_tensor(experience.reward)
        if weights is None:
            return tf.ones_like(reward, tf.float32)
        weights = tf.cast(weights, tf.float32)
        if weights.shape.rank == 1:  # one weight per batch row
            weights = weights[:, None]
        return tf.broadcast_to(weights, tf.shape(reward))

    # ---- pieces (public so tests can check them against numpy) --------------------------------
    def compute_advantages_and_returns(
        self, experience: Trajectory, values: tf.Tensor, rewards: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """values, rewards [B, T]; returns (advantages, returns) for rows 0..T-2, [B, T-1]."""
        trace_continues = 1.0 - tf.cast(tf.equal(experience.next_step_type[:, :-1], StepType.LAST), tf.float32)
        discounts = tf.cast(experience.discount[:, :-1], tf.float32)
        rewards = rewards[:, :-1]
        returns = value_ops.discounted_return(values[:, 1:], rewards, discounts, trace_continues, self.discount_factor)
        if self.use_gae:
            advantages = value_ops.generalized_advantage_estimation(
                values[:, :-1],
                values[:, 1:],
                rewards,
                discounts,
                trace_continues,
                self.discount_factor,
                self.lambda_value,
            )
            if self.use_td_lambda_return:
                returns = value_ops.td_lambda_return(values[:, :-1], advantages)
        else:
            advantages = returns - values[:, :-1]
        return advantages, returns

    def _padded_advantages_and_returns(self, experience: Trajectory, values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """[B, T] advantages and returns with the bootstrap row's entries 0 (TF-Agents' padding)."""
        rewards = tf.cast(experience.reward, tf.float32)
        if self.reward_normalizer is not None:
            rewards = self.reward_normalizer.normalize(rewards)
        advantages, returns = self.compute_advantages_and_returns(experience, values, rewards)
        pad = tf.zeros_like(values[:, :1])
        return tf.concat([advantages, pad], 1), tf.concat([returns, pad], 1)

    def preprocess_sequence(self, experience: Trajectory) -> Trajectory:
        """TF-Agents' agent.preprocess_sequence: identity unless compute_value_and_advantage_in_train
        is False; then returns `experience` with `return` and `advantage` ([B, T], 0 in the bootstrap
        row) added to its policy_info, computed from the stored `value_prediction` and the reward
        normalizer's current statistics. The result matches `training_data_spec`."""
        if self.compute_value_and_advantage_in_train:
            return experience
        specs.check_nest_matches_spec(experience, self.collect_data_spec, "experience", num_outer_dims=2)
        return self._preprocess_fn(experience)

    def _preprocess(self, experience: Trajectory) -> Trajectory:
        info = experience.policy_info
        advantages, returns = self._padded_advantages_and_returns(
            experience, tf.cast(info["value_prediction"], tf.float32)
        )
        return experience._replace(policy_info={**info, "return": returns, "advantage": advantages})

    def aggregate(self, per_row: tf.Tensor, weights: tf.Tensor, rows: tf.Tensor | None = None) -> tf.Tensor:
        """TF-Agents' aggregate_losses: sum(loss * w) / rows / replicas (or a plain local mean).
        `rows`: the minibatch's real row count when it is padded to a fixed size."""
        _, replicas = _replica_context()
        # multiply_no_nan: a masked row may hold NaN (e.g. a bootstrap row's zero scale), never its weight.
        weighted = tf.math.multiply_no_nan(per_row, weights)
        rows = tf.cast(tf.size(per_row), tf.float32) if rows is None else rows
        if self.aggregate_losses_across_replicas:
            return tf.reduce_sum(weighted) / (rows * replicas)
        return tf.reduce_sum(weighted) / rows

    def policy_gradient_loss(
        self,
        log_prob: tf.Tensor,
        old_log_prob: tf.Tensor,
        advantages: tf.Tensor,
        weights: tf.Tensor,
        in_range: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns (loss, clip_fraction)."""
        if self.log_prob_clipping > 0:
            log_prob = tf.clip_by_value(log_prob, -self.log_prob_clipping, self.log_prob_clipping)
        ratio = tf.exp(log_prob - old_log_prob)
        objective = ratio * advantages
        clip_fraction = tf.zeros([])
        if self.importance_ratio_clipping > 0:
            eps = self.importance_ratio_clipping
            objective = tf.minimum(objective, tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps) * advantages)
            _, replicas = _replica_context()
            clipped_rows = tf.cast(tf.abs(ratio - 1.0) > eps, tf.float32)
            if in_range is None:
                clip_fraction = tf.reduce_mean(clipped_rows) / replicas
            else:
                clip_fraction = tf.reduce_sum(clipped_rows * in_range) / tf.reduce_sum(in_range) / replicas
        rows = None if in_range is None else tf.reduce_sum(in_range)
        return self.aggregate(-objective, weights, rows), clip_fraction

    def value_estimation_loss(
        self,
        value_preds: tf.Tensor,
        returns: tf.Tensor,
        old_value_preds: tf.Tensor,
        weights: tf.Tensor,
        rows: tf.Tensor | None = None,
    ) -> tf.Tensor:
        error = tf.math.squared_difference(returns, value_preds)
        if self.value_clipping > 0:
            clipped_preds = old_value_preds + tf.clip_by_value(
                value_preds - old_value_preds, -self.value_clipping, self.value_clipping
            )
            error = tf.maximum(error, tf.math.squared_difference(returns, clipped_preds))
        return self.aggregate(error, weights, rows) * self.value_pred_loss_coef

    def entropy_loss(self, entropy: tf.Tensor, weights: tf.Tensor, rows: tf.Tensor | None = None) -> tf.Tensor:
        if self.entropy_regularization <= 0:
            return tf.zeros([])
        return self.aggregate(-entropy, weights, rows) * self.entropy_regularization

    def l2_loss(self) -> tf.Tensor:
        """TF-Agents' l2_regularization_loss: sums of squared kernels, those of the actor only,
        the value network only, and of both (shared), each with its coefficient."""
        _, replicas = _replica_context()
        actor, value = self.actor_net.l2_weights, self.value_net.l2_weights
        shared_refs = {w.ref() for w in actor} & {w.ref() for w in value}
        groups = (
            (self.policy_l2_reg, [w for w in actor if w.ref() not in shared_refs]),
            (self.value_function_l2_reg, [w for w in value if w.ref() not in shared_refs]),
            (self.shared_vars_l2_reg, [w for w in actor if w.ref() in shared_refs]),
        )
        loss = tf.zeros([])
        for coef, weights in groups:
            if coef > 0 and weights:
                loss += coef * tf.add_n([tf.reduce_sum(tf.square(w)) for w in weights])
        return loss / replicas  # tf.nn.scale_regularization_loss

    def kl_penalty_loss(self, weighted_kl: tf.Tensor, rows: tf.Tensor | None = None) -> tf.Tensor:
        """Cutoff + adaptive penalty on the mean of KL * weight over all rows.

        The mean is taken over the global batch: each replica returns its share of the value
        and a term whose gradient is its share of the global gradient (value + (x - stop(x)) * d).
        """
        if self.adaptive_kl_beta is None and self.kl_cutoff_factor <= 0:
            return tf.zeros([])
        _, replicas = _replica_context()
        local_mean = tf.reduce_mean(weighted_kl) if rows is None else tf.reduce_sum(weighted_kl) / rows
        mean_kl = tf.stop_gradient(_all_reduce_sum(local_mean) / replicas)
        delta = local_mean - tf.stop_gradient(local_mean)  # value 0, gradient d(local mean)
        loss = tf.zeros([])
        if self.kl_cutoff_factor > 0:
            over = tf.maximum(mean_kl - self.kl_cutoff_factor * self.adaptive_kl_target, 0.0)
            loss += self.kl_cutoff_coef * (tf.square(over) + 2.0 * over * delta) / replicas
        if self.adaptive_kl_beta is not None:
            loss += self.adaptive_kl_beta * (mean_kl + delta) / replicas
        return loss

    def update_adaptive_kl_beta(self, mean_kl: tf.Tensor) -> tf.Tensor | None:
        """beta *= 1.5 above target*(1+tol), /= 1.5 below target*(1-tol), clipped to [1e-15, 1e17]."""
        if self.adaptive_kl_beta is None:
            return None
        high = self.adaptive_kl_target * (1.0 + self.adaptive_kl_tolerance)
        low = self.adaptive_kl_target * (1.0 - self.adaptive_kl_tolerance)
        factor = tf.where(mean_kl < low, 1.0 / 1.5, tf.where(mean_kl > high, 1.5, 1.0))
        new_beta = tf.clip_by_value(self.adaptive_kl_beta * factor, 10e-16, 10e16)
        self.adaptive_kl_beta.assign(new_beta)
        return new_beta

    # ---- the update, per replica --------------------------------------------------------------
    def _normalized_obs(self, obs: tf.Tensor) -> tf.Tensor:
        return (
            self.observation_normalizer.normalize(obs)
            if self.observation_normalizer is not None
            else tf.cast(obs, tf.float32)
        )

    def _prepare(
        self, experience: Trajectory, weights: tf.Tensor, debug: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Values, returns, advantages and masks of a [B, T] batch, flattened to B*T rows.
        `debug`: filled with per-row tensors for debug summaries (kept out of the minibatches)."""
        obs = experience.observation
        batch_size, horizon = tf.shape(experience.reward)[0], tf.shape(experience.reward)[1]
        norm_obs = self._normalized_obs(tf.reshape(obs, tf.concat([[-1], tf.shape(obs)[2:]], 0)))
        if self.compute_value_and_advantage_in_train:
            values = tf.reshape(self.value_net(norm_obs), [batch_size, horizon])
            advantages, returns = self._padded_advantages_and_returns(experience, values)
        else:  # stored by the collect policy and preprocess_sequence (TF-Agents)
            info = experience.policy_info
            values = tf.cast(info["value_prediction"], tf.float32)
            advantages, returns = tf.cast(info["advantage"], tf.float32), tf.cast(info["return"], tf.float32)
        # TF-Agents' make_trajectory_mask: not a boundary, and a return/advantage exists.
        valid = tf.logical_and(
            tf.not_equal(experience.step_type, StepType.LAST),
            tf.logical_not(tf.logical_and(tf.equal(returns, 0.0), tf.equal(advantages, 0.0))),
        )
        flat = lambda x: tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))  # noqa: E731
        data = {
            "obs": norm_obs,
            "action": flat(experience.action),
            "old_params": _valid_params(tf.nest.map_structure(flat, experience.policy_info["dist_params"])),
            "advantages": flat(advantages),
            "returns": flat(returns),
            "old_values": flat(values),
            "weights": flat(tf.cast(valid, tf.float32) * weights),
        }
        if debug is not None:
            rewards = tf.cast(experience.reward, tf.float32)
            debug.update(
                advantages=data["advantages"],
                rewards=flat(rewards),
                returns=data["returns"],
                observations=flat(tf.cast(obs, tf.float32)),
                actions=data["action"],
            )
            if self.reward_normalizer is not None:
                debug["rewards_normalized"] = flat(self.reward_normalizer.normalize(rewards))
        if self.normalize_advantages == "batch":
            # Moments over every entry (bootstrap and boundary rows included), as TF-Agents; summed
            # over replicas so that R replicas normalize like one replica on the global batch.
            adv = data["advantages"]
            n = _all_reduce_sum(tf.cast(tf.size(adv), tf.float32))
            mean = _all_reduce_sum(tf.reduce_sum(adv)) / n
            var = _all_reduce_sum(tf.reduce_sum(tf.square(adv - mean))) / n
            data["advantages"] = _normalized(adv, mean, var)
        data["old_log_prob"] = self._log_prob(self.actor_net.distribution(data["old_params"]), data["action"])
        return tf.nest.map_structure(tf.stop_gradient, data)

    def _log_prob(self, dist: Any, action: tf.Tensor) -> tf.Tensor:
        return tf.cast(dist.log_prob(self._action_index(action)), tf.float32)

    def _action_index(self, action: tf.Tensor) -> tf.Tensor:
        """Discrete actions as 0-based indices: specs may start at minimum != 0 (Gym Discrete(start))."""
        if specs.is_discrete(self.action_spec):
            minimum = int(np.min(self.action_spec.minimum))
            if minimum:
                return action - tf.cast(minimum, action.dtype)
        return action

    def _local_minibatch_size(self) -> int | None:
        if self.minibatch_size is None:
            return None
        _, replicas = _replica_context()
        if self.minibatch_size % replicas:
            raise ValueError(f"minibatch_size={self.minibatch_size} is not divisible by the {replicas} replicas")
        return self.minibatch_size // replicas

    def _num_steps(self, data: dict[str, Any]) -> tf.Tensor:
        mb_size = self._local_minibatch_size()
        if mb_size is None:
            return tf.constant(self.num_epochs)
        num_rows = tf.shape(data["weights"])[0]
        return self.num_epochs * ((num_rows + mb_size - 1) // mb_size)

    def _orders(self, data: dict[str, Any], base_step: tf.Tensor) -> tf.Tensor:
        """One row permutation per epoch, [num_epochs, rows], a function of (train step, seed) only:
        any replica or re-run reproduces it, compiled or not. argsort of integer hashes (murmur3's
        finalizer): TF's stateless RNG draws other numbers under XLA than without it (measured:
        other permutations for the same seed, philox included), so the XLA-compiled update and
        the same update without XLA (several replicas, jit_compile=False) would disagree."""
        if self.minibatch_size is None:
            return tf.zeros([0, 0], tf.int32)
        u32 = lambda x: tf.cast(x, tf.uint32)  # noqa: E731
        key = _fmix32(u32(self.seed) * u32(0x9E3779B9) + u32(base_step))
        epochs = u32(tf.range(self.num_epochs))[:, None]
        rows = u32(tf.range(tf.shape(data["weights"])[0]))[None, :]
        hashes = _fmix32(_fmix32(tf.bitwise.bitwise_xor(key, epochs * u32(0x27D4EB2F))) + rows)
        return tf.argsort(tf.cast(hashes, tf.int64), axis=-1, stable=True)

    def _minibatch(self, data: dict[str, Any], orders: tf.Tensor, step: tf.Tensor) -> dict[str, Any]:
        """Rows of gradient step `step` (0-based within this train call), always `minibatch_size`
        rows (static shapes for XLA/TPU): the last minibatch of an epoch is padded with weight-0
        rows that do not count in the averages."""
        mb_size = self._local_minibatch_size()
        if mb_size is None:
            return data
        num_rows = tf.shape(data["weights"])[0]
        num_mb = (num_rows + mb_size - 1) // mb_size
        epoch, i = step // num_mb, step % num_mb
        positions = i * mb_size + tf.range(mb_size)
        in_range = tf.cast(positions < num_rows, tf.float32)
        idx = tf.gather(orders[epoch], tf.minimum(positions, num_rows - 1))
        mb = tf.nest.map_structure(lambda x: tf.gather(x, idx), data)
        mb["weights"] = mb["weights"] * in_range
        mb["in_range"] = in_range
        return mb

    def _gradient_step(self, mb: dict[str, Any], return_grads: bool = False) -> tf.Tensor | tuple[tf.Tensor, list[Any]]:
        """One optimizer step on a minibatch; returns [total, pg, value, l2, entropy, kl, clip_fraction]
        (and the applied gradients when `return_grads`)."""
        with tf.GradientTape() as tape:
            params = self.actor_net.distribution_params(mb["obs"])
            dist = self.actor_net.distribution(params)
            log_prob = self._log_prob(dist, mb["action"])
            in_range = mb.get("in_range")
            rows = None if in_range is None else tf.reduce_sum(in_range)
            advantages = mb["advantages"]
            if self.normalize_advantages == "minibatch":
                advantages = self._minibatch_normalized(advantages, in_range)
            pg, clip_fraction = self.policy_gradient_loss(
                log_prob, mb["old_log_prob"], advantages, mb["weights"], in_range
            )
            vf = self.value_estimation_loss(
                self.value_net(mb["obs"]), mb["returns"], mb["old_values"], mb["weights"], rows
            )
            l2 = self.l2_loss()
            ent = self.entropy_loss(tf.cast(dist.entropy(), tf.float32), mb["weights"], rows)
            kl = tf.zeros([])
            if self.adaptive_kl_beta is not None or self.kl_cutoff_factor > 0:
                old_dist = self.actor_net.distribution(mb["old_params"])
                kl = self.kl_penalty_loss(tf.math.multiply_no_nan(old_dist.kl_divergence(dist), mb["weights"]), rows)
            total = pg + vf + l2 + ent + kl
        if self.check_numerics:
            total = tf.debugging.check_numerics(total, "PPO total loss is inf or nan")
        grads = tape.gradient(total, self._trainable)
        clip = (lambda g: tf.clip_by_global_norm(g, self.gradient_clipping)[0]) if self.gradient_clipping > 0 else None
        grads = apply_global_gradients(self.optimizer, grads, self._trainable, clip)
        self.train_step_counter.assign_add(1)
        losses = tf.stack([total, pg, vf, l2, ent, kl, clip_fraction])
        return (losses, grads) if return_grads else losses

    @staticmethod
    def _minibatch_normalized(advantages: tf.Tensor, in_range: tf.Tensor | None) -> tf.Tensor:
        """Advantages normalized by the moments of this gradient step's rows (padding rows of a
        short last minibatch excluded), summed over replicas: R replicas normalize like one
        replica on the global minibatch."""
        rows = tf.ones_like(advantages) if in_range is None else in_range
        n = _all_reduce_sum(tf.reduce_sum(rows))
        mean = _all_reduce_sum(tf.reduce_sum(advantages * rows)) / n
        var = _all_reduce_sum(tf.reduce_sum(tf.square(advantages - mean) * rows)) / n
        return _normalized(advantages, mean, var)

    def _finish(self, experience: Trajectory, data: dict[str, Any]) -> tf.Tensor:
        """After the epochs: adaptive beta from the KL of the updated policy, then normalizers."""
        _, replicas = _replica_context()
        old = self.actor_net.distribution(data["old_params"])
        new = self.actor_net.distribution(self.actor_net.distribution_params(data["obs"]))
        weighted_kl = tf.math.multiply_no_nan(old.kl_divergence(new), data["weights"])
        mean_kl = _all_reduce_sum(tf.reduce_mean(weighted_kl)) / replicas
        self.update_adaptive_kl_beta(mean_kl)
        if self.update_normalizers_in_train:
            if self.observation_normalizer is not None:
                self.observation_normalizer.update(experience.observation, all_reduce=_all_reduce_sum)
            if self.reward_normalizer is not None:
                self.reward_normalizer.update(experience.reward, all_reduce=_all_reduce_sum)
        return mean_kl

    # ---- one replica: everything in one XLA-compiled function -----------------------------------
    def _core(
        self, experience: Trajectory, weights: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, dict[str, Any], list[Any]]:
        """The whole update, XLA-compiled, free of summary ops: it returns what the summaries need
        (debug tensors over the batch, the last step's gradients) only when they are asked for, so
        the default path carries nothing extra through the loop."""
        base_step = tf.identity(self.train_step_counter)
        debug: dict[str, tf.Tensor] | None = {} if self.debug_summaries else None
        data = self._prepare(experience, weights, debug)
        orders = self._orders(data, base_step)
        with_grads = self.summarize_grads_and_vars

        def body(step: Any, _: Any, grads: Any) -> Any:
            out = self._gradient_step(self._minibatch(data, orders, step), return_grads=with_grads)
            return (step + 1, *out) if with_grads else (step + 1, out, grads)

        grads = [tf.zeros_like(v) for v in self._trainable] if with_grads else []
        _, last, grads = tf.while_loop(
            lambda step, *_: step < self._num_steps(data), body, (tf.constant(0), tf.zeros([_NUM_LOSSES]), grads)
        )
        if debug is not None:
            debug.update(self._debug_tensors(data))
        mean_kl = self._finish(experience, data)
        return last, mean_kl, debug or {}, grads

    def _debug_tensors(self, data: dict[str, Any]) -> dict[str, Any]:
        """Per-row quantities of TF-Agents' debug summaries, on the whole batch with the updated
        networks (TF-Agents writes them at the first and last epoch; here once per train call)."""
        dist = self.actor_net.distribution(self.actor_net.distribution_params(data["obs"]))
        log_prob = self._log_prob(dist, data["action"])
        ratio = tf.exp(log_prob - data["old_log_prob"])
        value_preds = self.value_net(data["obs"])
        old_dist = self.actor_net.distribution(data["old_params"])
        out = {
            "action_log_prob": log_prob,
            "action_log_prob_sample": data["old_log_prob"],
            "importance_ratio": ratio,
            "per_timestep_objective": ratio * data["advantages"],
            "policy_entropy": tf.cast(dist.entropy(), tf.float32),
            "value_preds": value_preds,
            "value_estimation_error": tf.math.squared_difference(data["returns"], value_preds),
            "kl_divergence": tf.cast(old_dist.kl_divergence(dist), tf.float32),
            "weights": data["weights"],
        }
        if self.normalize_advantages != "minibatch":  # per minibatch there is no one batch-wide value to show
            out["advantages_normalized"] = data["advantages"]
        if self.importance_ratio_clipping > 0:
            eps = self.importance_ratio_clipping
            out["importance_ratio_clipped"] = tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps)
        if not specs.is_discrete(self.action_spec):
            out["actions_distribution_mean"] = tf.cast(dist.mean(), tf.float32)
            out["actions_distribution_stddev"] = tf.cast(dist.stddev(), tf.float32)
        return out

    def _train_single(self, experience: Trajectory, weights: tf.Tensor) -> LossInfo:
        last, mean_kl, debug, grads = self._core_fn(experience, weights)
        loss_info = self._loss_info(last)
        self._write_summaries(loss_info, mean_kl, debug, grads)
        return loss_info

    # ---- several replicas: a host-side loop of strategy.run steps ---------------------------------
    def _train_multi_replica(self, strategy: tf.distribute.Strategy, experience: Any, weights: Any) -> LossInfo:
        if not isinstance(experience, tf.distribute.DistributedValues) and not _is_distributed_nest(experience):
            specs.check_nest_matches_spec(experience, self._train_data_spec, "experience", num_outer_dims=2)
            weights = self._weights(experience, weights)
            experience, weights = _split_over_replicas(strategy, (experience, weights))
        elif weights is None:
            weights = strategy.run(lambda e: tf.ones_like(e.reward, tf.float32), args=(experience,))
        return self._distributed_train_fn(experience, weights)

    def _train_distributed(self, experience: Any, weights: Any) -> LossInfo:
        strategy = tf.distribute.get_strategy()
        first = lambda x: strategy.experimental_local_results(x)[0]  # noqa: E731
        base_step = tf.identity(self.train_step_counter)
        with_debug, with_grads = self.debug_summaries, self.summarize_grads_and_vars

        def prepare(e: Any, w: Any) -> Any:
            debug: dict[str, tf.Tensor] | None = {} if with_debug else None
            return self._prepare(e, tf.cast(w, tf.float32), debug), debug or {}

        data, debug = strategy.run(prepare, args=(experience, weights))
        num_steps = first(strategy.run(self._num_steps, args=(data,)))
        orders = strategy.run(lambda d: self._orders(d, base_step), args=(data,))
        # Loop variables start as per-replica zeros: tracing the gradient step once, in the body.
        zeros = strategy.run(
            lambda: (tf.zeros([_NUM_LOSSES]), [tf.zeros_like(v) for v in self._trainable] if with_grads else [])
        )

        def body(step: Any, _: Any, grads: Any) -> Any:
            out = strategy.run(
                lambda d, o: self._gradient_step(self._minibatch(d, o, step), return_grads=with_grads),
                args=(data, orders),
            )
            return (step + 1, *out) if with_grads else (step + 1, out, grads)

        _, last, grads = tf.while_loop(lambda step, *_: step < num_steps, body, (tf.constant(0), *zeros))
        if with_debug:  # every replica's rows, gathered: the histograms describe the global batch
            debug = first(
                strategy.run(lambda d, extra: _all_gather({**extra, **self._debug_tensors(d)}), args=(data, debug))
            )
        mean_kl = strategy.run(self._finish, args=(experience, data))
        loss_info = strategy.run(self._loss_info, args=(last,))
        reduced = tf.nest.map_structure(lambda x: strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None), loss_info)
        # The applied gradients are the replicas' sum (rlops.agents.replicas): any replica's copy.
        self._write_summaries(
            reduced, first(mean_kl), debug if with_debug else {}, [first(g) for g in grads] if with_grads else []
        )
        return loss_info

    # ---- outputs --------------------------------------------------------------------------------
    @staticmethod
    def _loss_info(last: tf.Tensor) -> LossInfo:
        return LossInfo(
            loss=last[0],
            extra=PPOLossInfo(
                policy_gradient_loss=last[1],
                value_estimation_loss=last[2],
                l2_regularization_loss=last[3],
                entropy_regularization_loss=last[4],
                kl_penalty_loss=last[5],
                clip_fraction=last[6],
            ),
        )

    def _write_summaries(self, loss_info: LossInfo, kl: tf.Tensor, debug: dict[str, Any], grads: list[Any]) -> None:
        """Once per train call, outside the compiled update (TensorBoard ops are host ops).

        Loss scalars always; with `debug_summaries` TF-Agents' debug histograms and means over the
        rows that count (weight > 0, every replica's rows), tags TF-Agents' names under Debug/;
        with `summarize_grads_and_vars` a histogram per variable and the last gradient step's
        applied gradients and their norms (TF-Agents: every first and last epoch, inside the
        update). Variables are named by their path in the agent, so tags are unique.

        The recording condition is decided once for all of them: every tf.summary op would
        otherwise build its own tf.cond graph on it, the bulk of a summarizing train trace."""
        should = tf.summary.should_record_summaries()
        static = tf.get_static_value(should)
        if static is not None:
            if static:
                self._write_all_summaries(loss_info, kl, debug, grads)
            return

        scope = tf.get_current_name_scope()

        def record() -> tf.Tensor:
            # The tags keep the caller's name scope, not the cond's.
            with tf.name_scope(scope + "/" if scope else ""), tf.summary.record_if(True):
                self._write_all_summaries(loss_info, kl, debug, grads)
            return tf.constant(True)

        tf.cond(should, record, lambda: tf.constant(False))

    def _write_all_summaries(self, loss_info: LossInfo, kl: tf.Tensor, debug: dict[str, Any], grads: list[Any]) -> None:
        step = self.train_step_counter
        extra = loss_info.extra
        with tf.name_scope("Losses/"):
            for name, value in extra._asdict().items():
                tf.summary.scalar(name, value, step=step)
            terms = [
                extra.policy_gradient_loss,
                extra.value_estimation_loss,
                extra.l2_regularization_loss,
                extra.entropy_regularization_loss,
                extra.kl_penalty_loss,
            ]
            tf.summary.scalar("total_abs_loss", tf.add_n([tf.abs(v) for v in terms]), step=step)
            tf.summary.scalar("loss", loss_info.loss, step=step)
        tf.summary.scalar("Metrics/policy_kl", kl, step=step)
        if self.adaptive_kl_beta is not None:
            tf.summary.scalar("Metrics/adaptive_kl_beta", self.adaptive_kl_beta, step=step)
        lr = getattr(self.optimizer, "learning_rate", None)
        if lr is not None:
            lr = lr(self.optimizer.iterations) if callable(lr) else lr
            tf.summary.scalar("Metrics/learning_rate", tf.cast(lr, tf.float32), step=step)
        if self.debug_summaries and debug:
            self._write_debug_summaries(debug, step)
        if self.summarize_grads_and_vars:
            names = self._variable_paths()
            with tf.name_scope("Variables/"):
                for name, var in zip(names, self._trainable):
                    _histogram(name, var, step)
            with tf.name_scope("Gradients/"):
                for name, grad in zip(names, grads):
                    _histogram(name + "_gradient", grad, step)
                    tf.summary.scalar(name + "_gradient_norm", tf.norm(grad), step=step)

    def _write_debug_summaries(self, debug: dict[str, Any], step: tf.Variable) -> None:
        valid = debug["weights"] > 0  # boundary, bootstrap and weight-0 rows are not data
        rows = {k: tf.boolean_mask(v, valid) for k, v in debug.items() if k != "weights"}
        with tf.name_scope("Debug/"):
            for name, value in rows.items():
                _histogram(name, value, step)
            for name, key in (
                ("rewards_mean", "rewards"),
                ("rewards_normalized_mean", "rewards_normalized"),
                ("value_pred_avg", "value_preds"),
                ("value_actual_avg", "returns"),
                ("importance_ratio_mean", "importance_ratio"),
                ("policy_entropy_mean", "policy_entropy"),
                ("mean_kl_divergence", "kl_divergence"),
            ):
                if key in rows:
                    tf.summary.scalar(name, tf.reduce_mean(rows[key]), step=step)

    def _variable_paths(self) -> list[str]:
        """'actor_net/mlp/layers/0/kernel'-style names of the trainable variables, in order."""
        paths: dict[int, str] = {}  # id(variable) -> path
        for attr in ("actor_net", "value_net"):
            module = getattr(self, attr)
            for path, var in module._flatten(predicate=lambda v: isinstance(v, tf.Variable), with_path=True):
                paths.setdefault(id(var), "/".join([attr, *map(str, path)]))
        return [paths.get(id(v), v.name.replace(":", "_")) for v in self._trainable]


_HISTOGRAM_BUCKETS = 30  # tf.summary.histogram's default
_HISTOGRAM_METADATA = histogram_metadata.create_summary_metadata(display_name=None, description=None)


def _histogram(name: str, data: tf.Tensor, step: tf.Variable) -> None:
    """tf.summary.histogram, the same tag, metadata and buckets bit for bit, without its two
    nested tf.conds (empty data; one distinct value): each case's buckets are computed and one is
    picked by tf.where, a handful of ops where the conds build three function graphs."""
    with tf.summary.experimental.summary_scope(name, "histogram_summary", values=[data, step]) as (tag, _):
        tf.summary.write(tag, lambda: _histogram_buckets(data), step=step, metadata=_HISTOGRAM_METADATA)


def _histogram_buckets(data: tf.Tensor) -> tf.Tensor:
    """[30, 3] rows of (left edge, right edge, count): tensorboard's histogram summary_v2._buckets,
    op for op. The bucket count is a placeholder with a default, as opaque to grappler as it is
    inside tensorboard's cond branch: a constant there lets grappler fold the edges' arithmetic
    into other roundings."""
    k = tf.compat.v1.placeholder_with_default(_HISTOGRAM_BUCKETS, [])
    data = tf.cast(tf.reshape(tf.stop_gradient(data), [-1]), tf.float64)
    size = tf.size(data)
    low, high = tf.reduce_min(data), tf.reduce_max(data)
    spread = high - low
    # Several distinct values: k equal-width buckets from min to max, the last one closed.
    index = tf.minimum(tf.cast(tf.floor((data - low) / (spread / tf.cast(k, tf.float64))), tf.int32), k - 1)
    counts = tf.cast(tf.reduce_sum(tf.one_hot(index, depth=k, dtype=tf.float64), axis=0), tf.float64)
    edges = tf.linspace(low, high, k + 1)
    edges = tf.concat([edges[:-1], [high]], 0)
    several = tf.transpose(tf.stack([edges[:-1], edges[1:], counts]))
    # One distinct value: zero-width buckets at it, every count in the last one.
    at = tf.fill([k], high)
    last = tf.cast(tf.concat([tf.fill([k], 0)[:-1], [size]], 0)[:k], tf.float64)
    one = tf.transpose(tf.stack([at, at, last]))
    return tf.where(size == 0, tf.zeros((k, 3), tf.float64), tf.where(spread == 0, one, several))


def _fmix32(h: tf.Tensor) -> tf.Tensor:
    """murmur3's 32-bit finalizer: a bijective integer hash with good avalanche (uint32 wraps)."""
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 16)) * tf.constant(0x85EBCA6B, tf.uint32)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 13)) * tf.constant(0xC2B2AE35, tf.uint32)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 16))


def _valid_params(params: dict[str, Any]) -> dict[str, Any]:
    """Collection-time distribution parameters with placeholders made harmless: a bootstrap row
    never acted, and drivers may store zeros there (scale 0 gives a -inf log-probability whose
    gradient is NaN even at weight 0). Real parameters pass unchanged."""
    out = {}
    for key, value in params.items():
        if key == "scale":
            out[key] = tf.where(value > 0, value, tf.ones_like(value))
        else:
            out[key] = tf.where(tf.math.is_finite(value), value, tf.zeros_like(value))
    return out


def _is_distributed_nest(nest: Any) -> bool:
    return any(isinstance(x, tf.distribute.DistributedValues) for x in tf.nest.flatten(nest))


def _split_over_replicas(strategy: tf.distribute.Strategy, nest: Any) -> Any:
    """Replica r of R gets rows [r*B/R, (r+1)*B/R) of a global [B, ...] batch."""
    batch = int(tf.nest.flatten(nest)[0].shape[0])
    replicas = strategy.num_replicas_in_sync
    if batch % replicas:
        raise ValueError(f"experience batch size {batch} is not divisible by the {replicas} replicas in sync")
    rows = batch // replicas

    def replica_slice(ctx: tf.distribute.ValueContext) -> Any:
        start = ctx.replica_id_in_sync_group * rows
        return tf.nest.map_structure(lambda x: tf.convert_to_tensor(x)[start : start + rows], nest)

    return strategy.experimental_distribute_values_from_function(replica_slice)


class PPOClipAgent(PPOAgent):
    """PPO-Clip preset (TF-Agents' PPOClipAgent): no KL penalty, no log-prob clipping.

    Defaults are TF-Agents' own (importance_ratio_clipping 0.0, use_gae False): set
    `importance_ratio_clipping=0.2` for the clipped objective of the paper.
    """

    def __init__(
        self,
        time_step_spec: Any,
        action_spec: Any,
        optimizer: Any = None,
        actor_net: Any = None,
        value_net: Any = None,
        greedy_eval: bool = True,
        importance_ratio_clipping: float = 0.0,
        lambda_value: float = 0.95,
        discount_factor: float = 0.99,
        entropy_regularization: float = 0.0,
        policy_l2_reg: float = 0.0,
        value_function_l2_reg: float = 0.0,
        shared_vars_l2_reg: float = 0.0,
        value_pred_loss_coef: float = 0.5,
        num_epochs: int = 25,
        use_gae: bool = False,
        use_td_lambda_return: bool = False,
        normalize_rewards: bool = True,
        reward_norm_clipping: float = 10.0,
        normalize_observations: bool = True,
        log_prob_clipping: float = 0.0,
        gradient_clipping: float | None = None,
        value_clipping: float | None = None,
        check_numerics: bool = False,
        compute_value_and_advantage_in_train: bool = True,
        update_normalizers_in_train: bool = True,
        aggregate_losses_across_replicas: bool = True,
        debug_summaries: bool = False,
        summarize_grads_and_vars: bool = False,
        train_step_counter: tf.Variable | None = None,
        name: str | None = "PPOClipAgent",
        **kwargs: Any,
    ):
        del log_prob_clipping  # TF-Agents' PPOClipAgent accepts it and passes 0.0
        super().__init__(
            time_step_spec,
            action_spec,
            optimizer,
            actor_net,
            value_net,
            greedy_eval=greedy_eval,
            importance_ratio_clipping=importance_ratio_clipping,
            lambda_value=lambda_value,
            discount_factor=discount_factor,
            entropy_regularization=entropy_regularization,
            policy_l2_reg=policy_l2_reg,
            value_function_l2_reg=value_function_l2_reg,
            shared_vars_l2_reg=shared_vars_l2_reg,
            value_pred_loss_coef=value_pred_loss_coef,
            num_epochs=num_epochs,
            use_gae=use_gae,
            use_td_lambda_return=use_td_lambda_return,
            normalize_rewards=normalize_rewards,
            reward_norm_clipping=reward_norm_clipping,
            normalize_observations=normalize_observations,
            log_prob_clipping=0.0,
            kl_cutoff_factor=0.0,
            kl_cutoff_coef=0.0,
            initial_adaptive_kl_beta=0.0,
            adaptive_kl_target=0.0,
            adaptive_kl_tolerance=0.0,
            gradient_clipping=gradient_clipping,
            value_clipping=value_clipping,
            check_numerics=check_numerics,
            compute_value_and_advantage_in_train=compute_value_and_advantage_in_train,
            update_normalizers_in_train=update_normalizers_in_train,
            aggregate_losses_across_replicas=aggregate_losses_across_replicas,
            debug_summaries=debug_summaries,
            summarize_grads_and_vars=summarize_grads_and_vars,
            train_step_counter=train_step_counter,
            name=name,
            **kwargs,
        )


class PPOKLPenaltyAgent(PPOAgent):
    """PPO-KL-penalty preset (TF-Agents' PPOKLPenaltyAgent): no ratio clipping, adaptive KL beta.

    TF-Agents' defaults: use_gae and use_td_lambda_return True, normalize_observations False,
    reward_norm_clipping 0.0 (no clipping), kl_cutoff_coef 0.0 and kl_cutoff_factor None (no cutoff).
    """

    def __init__(
        self,
        time_step_spec: Any,
        action_spec: Any,
        actor_net: Any = None,
        value_net: Any = None,
        num_epochs: int = 25,
        initial_adaptive_kl_beta: float = 1.0,
        adaptive_kl_target: float = 0.01,
        adaptive_kl_tolerance: float = 0.3,
        optimizer: Any = None,
        use_gae: bool = True,
        use_td_lambda_return: bool = True,
        lambda_value: float = 0.95,
        discount_factor: float = 0.99,
        value_pred_loss_coef: float = 0.5,
        entropy_regularization: float = 0.0,
        policy_l2_reg: float = 0.0,
        value_function_l2_reg: float = 0.0,
        shared_vars_l2_reg: float = 0.0,
        normalize_observations: bool = False,
        normalize_rewards: bool = True,
        reward_norm_clipping: float = 0.0,
        log_prob_clipping: float = 0.0,
        gradient_clipping: float | None = None,
        value_clipping: float | None = None,
        kl_cutoff_coef: float = 0.0,
        kl_cutoff_factor: float | None = None,
        check_numerics: bool = False,
        debug_summaries: bool = False,
        compute_value_and_advantage_in_train: bool = True,
        update_normalizers_in_train: bool = True,
        aggregate_losses_across_replicas: bool = True,
        summarize_grads_and_vars: bool = False,
        train_step_counter: tf.Variable | None = None,
        name: str | None = "PPOKLPenaltyAgent",
        **kwargs: Any,
    ):
        if optimizer is None:
            raise ValueError("PPOKLPenaltyAgent needs an optimizer (the 8th positional argument, as in TF-Agents).")
        super().__init__(
            time_step_spec,
            action_spec,
            optimizer,
            actor_net,
            value_net,
            importance_ratio_clipping=0.0,
            lambda_value=lambda_value,
            discount_factor=discount_factor,
            entropy_regularization=entropy_regularization,
            policy_l2_reg=policy_l2_reg,
            value_function_l2_reg=value_function_l2_reg,
            shared_vars_l2_reg=shared_vars_l2_reg,
            value_pred_loss_coef=value_pred_loss_coef,
            num_epochs=num_epochs,
            use_gae=use_gae,
            use_td_lambda_return=use_td_lambda_return,
            normalize_rewards=normalize_rewards,
            reward_norm_clipping=reward_norm_clipping,
            normalize_observations=normalize_observations,
            log_prob_clipping=log_prob_clipping,
            kl_cutoff_factor=kl_cutoff_factor or 0.0,
            kl_cutoff_coef=kl_cutoff_coef,
            initial_adaptive_kl_beta=initial_adaptive_kl_beta,
            adaptive_kl_target=adaptive_kl_target,
            adaptive_kl_tolerance=adaptive_kl_tolerance,
            gradient_clipping=gradient_clipping,
            value_clipping=value_clipping,
            check_numerics=check_numerics,
            compute_value_and_advantage_in_train=compute_value_and_advantage_in_train,
            update_normalizers_in_train=update_normalizers_in_train,
            aggregate_losses_across_replicas=aggregate_losses_across_replicas,
            debug_summaries=debug_summaries,
            summarize_grads_and_vars=summarize_grads_and_vars,
            train_step_counter=train_step_counter,
            name=name,
            **kwargs,
        )
