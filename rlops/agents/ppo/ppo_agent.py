"""PPO (Schulman et al. 2017) with the options of TF-Agents' PPOAgent.

`train(experience)` takes a [B, T+1] Trajectory collected by the collect policy. Row T only
supplies the bootstrap value V(o_T); rows 0..T-1 are trained on, except boundary (LAST) rows
and rows with weight 0. Everything from value prediction to the last epoch runs in one
tf.function: values and advantages are computed in train from the current value network,
old action distributions are rebuilt from the distribution parameters the collect policy
stored, and observation/reward normalizers are updated after the epochs.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from rlops.agents import specs
from rlops.agents.networks import ActorNetwork, ValueNetwork
from rlops.agents.normalizers import StreamingNormalizer
from rlops.agents.policies import ActorPolicy, GreedyPolicy
from rlops.agents.ppo import value_ops
from rlops.agents.trajectories import LossInfo, StepType, TimeStep, Trajectory, trajectory_spec


class PPOLossInfo(NamedTuple):
    policy_gradient_loss: tf.Tensor
    value_estimation_loss: tf.Tensor
    l2_regularization_loss: tf.Tensor
    entropy_regularization_loss: tf.Tensor
    kl_penalty_loss: tf.Tensor


def _weighted_mean(x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    # Normalize by the number of valid steps, not by the batch size: masked rows don't dilute.
    return tf.reduce_sum(x * w) / tf.maximum(tf.reduce_sum(w), 1e-8)


def _replica_loss_scale() -> float:
    """1/R inside a replica of an R-replica strategy; 1 outside any strategy."""
    ctx = tf.distribute.get_replica_context()
    return 1.0 / ctx.num_replicas_in_sync if ctx is not None else 1.0


class PPOAgent(tf.Module):
    """Proximal Policy Optimization for discrete or continuous actions.

    Argument names and meanings follow tf_agents.agents.ppo.ppo_agent.PPOAgent; the additions
    are `minibatch_size` (None: full batch per epoch), `normalize_advantages`, `seed` and
    `jit_compile` (XLA for the update; summaries stay outside the compiled part).
    """

    def __init__(self, time_step_spec: TimeStep, action_spec: tf.TensorSpec, optimizer,
                 actor_net: ActorNetwork | None = None, value_net: ValueNetwork | None = None,
                 importance_ratio_clipping: float = 0.0, lambda_value: float = 0.95,
                 discount_factor: float = 0.99, entropy_regularization: float = 0.0,
                 policy_l2_reg: float = 0.0, value_function_l2_reg: float = 0.0,
                 value_pred_loss_coef: float = 0.5, num_epochs: int = 25,
                 minibatch_size: int | None = None, use_gae: bool = False,
                 use_td_lambda_return: bool = False, normalize_advantages: bool = True,
                 normalize_rewards: bool = True, reward_norm_clipping: float = 10.0,
                 normalize_observations: bool = True, log_prob_clipping: float = 0.0,
                 kl_cutoff_factor: float = 2.0, kl_cutoff_coef: float = 1000.0,
                 initial_adaptive_kl_beta: float = 1.0, adaptive_kl_target: float = 0.01,
                 adaptive_kl_tolerance: float = 0.3, gradient_clipping: float | None = None,
                 value_clipping: float | None = None, check_numerics: bool = False,
                 update_normalizers_in_train: bool = True, debug_summaries: bool = False,
                 summarize_grads_and_vars: bool = False,
                 train_step_counter: tf.Variable | None = None, seed: int = 0,
                 jit_compile: bool = True, name: str | None = None):
        super().__init__(name=name or "PPOAgent")
        if len(tf.nest.flatten(action_spec)) != 1:
            raise ValueError(f"PPOAgent supports one action tensor, got action_spec={action_spec}")
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        self.time_step_spec = self._no_dependency(time_step_spec)
        self.action_spec = self._no_dependency(action_spec)
        obs_spec = time_step_spec.observation
        self.actor_net = actor_net or ActorNetwork(obs_spec, action_spec, seed=seed)
        self.value_net = value_net or ValueNetwork(obs_spec, seed=seed + 1)
        self.optimizer = optimizer
        self.importance_ratio_clipping = importance_ratio_clipping
        self.lambda_value = lambda_value if use_gae or use_td_lambda_return else 1.0
        self.discount_factor = discount_factor
        self.entropy_regularization = entropy_regularization
        self.policy_l2_reg = policy_l2_reg
        self.value_function_l2_reg = value_function_l2_reg
        self.value_pred_loss_coef = value_pred_loss_coef
        self.num_epochs = num_epochs
        self.minibatch_size = minibatch_size
        self.use_td_lambda_return = use_td_lambda_return
        self.normalize_advantages = normalize_advantages
        self.log_prob_clipping = log_prob_clipping
        self.kl_cutoff_factor = kl_cutoff_factor
        self.kl_cutoff_coef = kl_cutoff_coef
        self.adaptive_kl_target = adaptive_kl_target
        self.adaptive_kl_tolerance = adaptive_kl_tolerance
        self.gradient_clipping = gradient_clipping
        self.value_clipping = value_clipping
        self.check_numerics = check_numerics
        self.update_normalizers_in_train = update_normalizers_in_train
        self.debug_summaries = debug_summaries
        self.summarize_grads_and_vars = summarize_grads_and_vars
        self.seed = seed
        self.reward_norm_clipping = reward_norm_clipping

        self.adaptive_kl_beta = (tf.Variable(initial_adaptive_kl_beta, dtype=tf.float32, trainable=False,
                                             name="adaptive_kl_beta",
                                             aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                                 if initial_adaptive_kl_beta > 0 else None)
        self.observation_normalizer = (StreamingNormalizer(obs_spec.shape, center_mean=True, clip_value=10.0,
                                                           name="observation_normalizer")
                                       if normalize_observations else None)
        self.reward_normalizer = (StreamingNormalizer((), center_mean=False, clip_value=reward_norm_clipping,
                                                      name="reward_normalizer")
                                  if normalize_rewards else None)
        # ONLY_FIRST_REPLICA: incremented inside strategy.run without cross-replica conflicts.
        self.train_step_counter = (train_step_counter if train_step_counter is not None else
                                   tf.Variable(0, dtype=tf.int64, trainable=False, name="train_step_counter",
                                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA))

        self.collect_policy = ActorPolicy(time_step_spec, action_spec, self.actor_net,
                                          observation_normalizer=self.observation_normalizer,
                                          name="collect_policy")
        self.policy = GreedyPolicy(self.collect_policy, name="greedy_policy")
        self.collect_data_spec = self._no_dependency(
            trajectory_spec(time_step_spec, action_spec, self.collect_policy.info_spec))
        self.train_sequence_length = None  # any T >= 2
        # Deterministic order: actor first, then value network, each in creation order.
        self._trainable = list(self.actor_net.trainable_variables) + list(self.value_net.trainable_variables)
        # Loops are explicit tf.while_loops: autograph would otherwise re-convert TFP's Python
        # on every trace (seconds). XLA fuses the many tiny ops of a small-MLP update: ~2x here.
        self._core_fn = tf.function(self._core, autograph=False,
                                    jit_compile=jit_compile and not summarize_grads_and_vars)
        self._train_fn = tf.function(self._train, autograph=False)

    @property
    def trainable_weights(self) -> list[tf.Variable]:
        return list(self._trainable)

    # ---- public API ---------------------------------------------------------------------------
    def train(self, experience: Trajectory, weights: tf.Tensor | None = None) -> LossInfo:
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            # The epoch/minibatch loop applies gradients inside a tf.while_loop; MirroredStrategy
            # cannot synchronize gradients there (merge_call in control flow). One replica per
            # job (a GPU, or the CPU) trains PPO; collection, not the update, is its bottleneck.
            raise NotImplementedError(
                f"PPOAgent.train runs on one replica; got {ctx.num_replicas_in_sync} replicas in sync. "
                "Use strategy='default' (or one_device) for PPO.")
        specs.check_nest_matches_spec(experience, self.collect_data_spec, "experience", num_outer_dims=2)
        if weights is None:
            weights = tf.ones_like(experience.reward, tf.float32)
        return self._train_fn(experience, tf.cast(weights, tf.float32))

    # ---- pieces (public so tests can check them against numpy) --------------------------------
    def compute_advantages_and_returns(self, experience: Trajectory, values: tf.Tensor,
                                       rewards: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """values [B, T+1] for all rows; returns advantages and returns for rows 0..T-1."""
        next_step_is_boundary = tf.equal(experience.step_type[:, 1:], StepType.LAST)
        trace_continues = 1.0 - tf.cast(next_step_is_boundary, tf.float32)
        advantages = value_ops.generalized_advantage_estimation(
            values[:, :-1], values[:, 1:], rewards[:, :-1], experience.discount[:, :-1],
            trace_continues, self.discount_factor, self.lambda_value)
        returns = value_ops.td_lambda_return(values[:, :-1], advantages)
        return advantages, returns

    def policy_gradient_loss(self, log_prob: tf.Tensor, old_log_prob: tf.Tensor, advantages: tf.Tensor,
                             weights: tf.Tensor) -> tf.Tensor:
        if self.log_prob_clipping > 0:
            log_prob = tf.clip_by_value(log_prob, -self.log_prob_clipping, self.log_prob_clipping)
        ratio = tf.exp(log_prob - old_log_prob)
        surrogate = ratio * advantages
        if self.importance_ratio_clipping > 0:
            eps = self.importance_ratio_clipping
            clipped = tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps) * advantages
            surrogate = tf.minimum(surrogate, clipped)
        return -_weighted_mean(surrogate, weights)

    def value_estimation_loss(self, value_preds: tf.Tensor, returns: tf.Tensor, old_value_preds: tf.Tensor,
                              weights: tf.Tensor) -> tf.Tensor:
        error = tf.math.squared_difference(returns, value_preds)
        if self.value_clipping:
            clipped_preds = old_value_preds + tf.clip_by_value(
                value_preds - old_value_preds, -self.value_clipping, self.value_clipping)
            error = tf.maximum(error, tf.math.squared_difference(returns, clipped_preds))
        return self.value_pred_loss_coef * _weighted_mean(error, weights)

    def entropy_loss(self, entropy: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        if self.entropy_regularization <= 0:
            return tf.zeros([])
        return -self.entropy_regularization * _weighted_mean(entropy, weights)

    def l2_loss(self) -> tf.Tensor:
        loss = tf.zeros([])
        if self.policy_l2_reg > 0:
            loss += self.policy_l2_reg * tf.add_n([tf.reduce_sum(tf.square(w)) for w in self.actor_net.l2_weights])
        if self.value_function_l2_reg > 0:
            loss += self.value_function_l2_reg * tf.add_n(
                [tf.reduce_sum(tf.square(w)) for w in self.value_net.l2_weights])
        return loss

    def kl_penalty_loss(self, kl: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        mean_kl = _weighted_mean(kl, weights)
        loss = tf.zeros([])
        if self.kl_cutoff_factor > 0:
            cutoff = self.kl_cutoff_factor * self.adaptive_kl_target
            loss += self.kl_cutoff_coef * tf.square(tf.nn.relu(mean_kl - cutoff))
        if self.adaptive_kl_beta is not None:
            loss += self.adaptive_kl_beta * mean_kl
        return loss

    def update_adaptive_kl_beta(self, mean_kl: tf.Tensor) -> tf.Tensor | None:
        """beta *= 1.5 above target*(1+tol), /= 1.5 below target*(1-tol) (Schulman et al.)."""
        if self.adaptive_kl_beta is None:
            return None
        high = self.adaptive_kl_target * (1.0 + self.adaptive_kl_tolerance)
        low = self.adaptive_kl_target * (1.0 - self.adaptive_kl_tolerance)
        factor = tf.where(mean_kl > high, 1.5, tf.where(mean_kl < low, 1.0 / 1.5, 1.0))
        new_beta = tf.maximum(self.adaptive_kl_beta * factor, 1e-16)
        self.adaptive_kl_beta.assign(new_beta)
        return new_beta

    # ---- the train step ----------------------------------------------------------------------
    def _normalized_obs(self, obs: tf.Tensor) -> tf.Tensor:
        return self.observation_normalizer.normalize(obs) if self.observation_normalizer is not None \
            else tf.cast(obs, tf.float32)

    def _train(self, experience: Trajectory, weights: tf.Tensor) -> LossInfo:
        means, final_kl, advantages = self._core_fn(experience, weights)
        extra = PPOLossInfo(policy_gradient_loss=means[1], value_estimation_loss=means[2],
                            l2_regularization_loss=means[3], entropy_regularization_loss=means[4],
                            kl_penalty_loss=means[5])
        self._write_summaries(means[0], extra, final_kl, advantages)
        return LossInfo(loss=means[0], extra=extra)

    def _core(self, experience: Trajectory, weights: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Everything but summaries (which XLA cannot compile): returns the per-loss means over
        all gradient steps [total, pg, value, l2, entropy, kl], the final KL and advantages."""
        obs = experience.observation
        batch_size, horizon = tf.shape(experience.reward)[0], tf.shape(experience.reward)[1]
        norm_obs = self._normalized_obs(tf.reshape(obs, tf.concat([[-1], tf.shape(obs)[2:]], 0)))
        values = tf.reshape(self.value_net(norm_obs), [batch_size, horizon])
        rewards = tf.cast(experience.reward, tf.float32)
        if self.reward_normalizer is not None:
            rewards = self.reward_normalizer.normalize(rewards)
        advantages, returns = self.compute_advantages_and_returns(experience, values, rewards)

        # Valid rows: not the bootstrap row T, not boundary (LAST) rows, user weight > 0.
        valid = tf.cast(tf.not_equal(experience.step_type[:, :-1], StepType.LAST), tf.float32)
        drop_last = lambda x: tf.reshape(x[:, :-1], tf.concat([[-1], tf.shape(x)[2:]], 0))  # noqa: E731
        obs_bt = tf.reshape(norm_obs, tf.concat([[batch_size, horizon], tf.shape(norm_obs)[1:]], 0))
        data = {
            "obs": drop_last(obs_bt),
            "action": drop_last(experience.action),
            "old_params": tf.nest.map_structure(drop_last, experience.policy_info["dist_params"]),
            "advantages": tf.reshape(advantages, [-1]),
            "returns": tf.reshape(returns, [-1]),
            "old_values": tf.reshape(values[:, :-1], [-1]),
            "weights": tf.reshape(valid * weights[:, :-1], [-1]),
        }
        if self.normalize_advantages:
            w = data["weights"]
            mean = _weighted_mean(data["advantages"], w)
            var = _weighted_mean(tf.square(data["advantages"] - mean), w)
            data["advantages"] = (data["advantages"] - mean) / (tf.sqrt(var) + 1e-8)
        data = tf.nest.map_structure(tf.stop_gradient, data)

        num_rows = tf.shape(data["weights"])[0]
        mb_size = num_rows if self.minibatch_size is None else tf.minimum(self.minibatch_size, num_rows)
        num_minibatches = (num_rows + mb_size - 1) // mb_size

        def epoch(e, totals):
            order = (tf.random.shuffle(tf.range(num_rows)) if self.minibatch_size is not None
                     else tf.range(num_rows))

            def minibatch(i, totals):
                idx = order[i * mb_size: tf.minimum((i + 1) * mb_size, num_rows)]
                return i + 1, totals + self._gradient_step(tf.nest.map_structure(lambda x: tf.gather(x, idx), data))

            _, totals = tf.while_loop(lambda i, _: i < num_minibatches, minibatch, (0, totals))
            return e + 1, totals

        _, totals = tf.while_loop(lambda e, _: e < self.num_epochs, epoch, (0, tf.zeros([6])))
        means = totals / tf.cast(self.num_epochs * num_minibatches, tf.float32)

        # KL of the final policy from the collecting one drives the adaptive beta.
        final_kl = _weighted_mean(self._kl(data["obs"], data["old_params"]), data["weights"])
        self.update_adaptive_kl_beta(final_kl)
        if self.update_normalizers_in_train:
            self._update_normalizers(experience, weights)
        self.train_step_counter.assign_add(1)
        return means, final_kl, advantages

    def _kl(self, norm_obs: tf.Tensor, old_params: dict) -> tf.Tensor:
        old_dist = self.actor_net.distribution(old_params)
        new_dist = self.actor_net.distribution(self.actor_net.distribution_params(norm_obs))
        return old_dist.kl_divergence(new_dist)

    def _gradient_step(self, mb: dict) -> tf.Tensor:
        with tf.GradientTape() as tape:
            params = self.actor_net.distribution_params(mb["obs"])
            dist = self.actor_net.distribution(params)
            old_dist = self.actor_net.distribution(mb["old_params"])
            log_prob = dist.log_prob(mb["action"])
            old_log_prob = old_dist.log_prob(mb["action"])
            pg = self.policy_gradient_loss(log_prob, old_log_prob, mb["advantages"], mb["weights"])
            value_preds = self.value_net(mb["obs"])
            vf = self.value_estimation_loss(value_preds, mb["returns"], mb["old_values"], mb["weights"])
            ent = self.entropy_loss(dist.entropy(), mb["weights"])
            l2 = self.l2_loss()
            kl = (self.kl_penalty_loss(old_dist.kl_divergence(dist), mb["weights"])
                  if self.adaptive_kl_beta is not None or self.kl_cutoff_factor > 0 else tf.zeros([]))
            total = pg + vf + ent + l2 + kl
            # Under a multi-replica strategy optimizers sum gradients across replicas: scale
            # each replica's loss by 1/R (tf.nn.compute_average_loss's convention), so the
            # update equals the single-replica one and summed losses read as averages.
            scale = _replica_loss_scale()
            scaled_total = total * scale
        if self.check_numerics:
            scaled_total = tf.debugging.check_numerics(scaled_total, "PPO total loss is inf or nan")
        grads = tape.gradient(scaled_total, self._trainable)
        if self.gradient_clipping:
            grads, _ = tf.clip_by_global_norm(grads, self.gradient_clipping)
        self.optimizer.apply_gradients(zip(grads, self._trainable))
        if self.summarize_grads_and_vars:
            step = self.train_step_counter
            for g, v in zip(grads, self._trainable):
                tf.summary.histogram(v.name.replace(":", "_") + "/gradient", g, step=step)
                tf.summary.histogram(v.name.replace(":", "_") + "/value", v, step=step)
        return tf.stack([total, pg, vf, l2, ent, kl]) * scale

    def _update_normalizers(self, experience: Trajectory, weights: tf.Tensor) -> None:
        valid = tf.cast(tf.not_equal(experience.step_type, StepType.LAST), tf.float32) * weights
        if self.observation_normalizer is not None:
            self.observation_normalizer.update(experience.observation, valid)
        if self.reward_normalizer is not None:
            self.reward_normalizer.update(experience.reward[:, :-1], valid[:, :-1])

    def _write_summaries(self, total: tf.Tensor, extra: PPOLossInfo, kl: tf.Tensor, advantages: tf.Tensor) -> None:
        step = self.train_step_counter
        with tf.name_scope("Losses/"):
            for name, value in extra._asdict().items():
                tf.summary.scalar(name, value, step=step)
            tf.summary.scalar("total_abs_loss", tf.add_n([tf.abs(v) for v in extra]), step=step)
            tf.summary.scalar("loss", total, step=step)
        tf.summary.scalar("Metrics/policy_kl", kl, step=step)
        if self.adaptive_kl_beta is not None:
            tf.summary.scalar("Metrics/adaptive_kl_beta", self.adaptive_kl_beta, step=step)
        lr = getattr(self.optimizer, "learning_rate", None)
        if lr is not None:
            lr = lr(self.optimizer.iterations) if callable(lr) else lr
            tf.summary.scalar("Metrics/learning_rate", tf.cast(lr, tf.float32), step=step)
        if self.debug_summaries:
            tf.summary.histogram("advantages", advantages, step=step)


class PPOClipAgent(PPOAgent):
    """PPO-Clip preset: ratio clipping 0.2, no KL penalty (TF-Agents' PPOClipAgent)."""

    def __init__(self, time_step_spec, action_spec, optimizer, actor_net=None, value_net=None,
                 importance_ratio_clipping: float = 0.2, **kwargs):
        kwargs.setdefault("kl_cutoff_factor", 0.0)
        kwargs.setdefault("initial_adaptive_kl_beta", 0.0)
        kwargs.setdefault("use_gae", True)
        super().__init__(time_step_spec, action_spec, optimizer, actor_net, value_net,
                         importance_ratio_clipping=importance_ratio_clipping, **kwargs)


class PPOKLPenaltyAgent(PPOAgent):
    """PPO-KL-penalty preset: no ratio clipping, adaptive KL beta and KL cutoff."""

    def __init__(self, time_step_spec, action_spec, optimizer, actor_net=None, value_net=None,
                 initial_adaptive_kl_beta: float = 1.0, adaptive_kl_target: float = 0.01,
                 adaptive_kl_tolerance: float = 0.3, kl_cutoff_factor: float = 2.0,
                 kl_cutoff_coef: float = 1000.0, **kwargs):
        kwargs.setdefault("use_gae", True)
        super().__init__(time_step_spec, action_spec, optimizer, actor_net, value_net,
                         importance_ratio_clipping=0.0, initial_adaptive_kl_beta=initial_adaptive_kl_beta,
                         adaptive_kl_target=adaptive_kl_target, adaptive_kl_tolerance=adaptive_kl_tolerance,
                         kl_cutoff_factor=kl_cutoff_factor, kl_cutoff_coef=kl_cutoff_coef, **kwargs)
