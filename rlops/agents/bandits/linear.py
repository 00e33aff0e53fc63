"""LinUCB and linear Thompson sampling: per-arm ridge regression with closed-form updates.

Per arm k the agent keeps A_k = sum x x^T and b_k = sum r x over the rows where arm k was taken
(with a forgetting factor gamma: A_k <- gamma A_k + X_k^T X_k). With tikhonov weight lambda,
the estimate is theta_k = (A_k + lambda I)^-1 b_k and the uncertainty of x's reward is
sqrt(x^T (A_k + lambda I)^-1 x). Same formulas and defaults as TF-Agents' LinearBanditAgent.

Speed: one batched update per train call (one-hot weights, no loop over rows or arms). The
Cholesky factors of A_k + lambda I and theta are refreshed once per train call and cached, so
acting needs only a matmul and one batched triangular solve.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.agents.bandits.base import BanditAgent
from rlops.agents.policies import Policy
from rlops.agents.trajectories import LossInfo, PolicyStep, TimeStep, Trajectory

OPTIMISTIC = "optimistic"  # LinUCB: mean + alpha * std
SAMPLING = "sampling"      # Thompson: Normal(mean, alpha * std) per arm
GREEDY = "greedy"          # mean only (exploit; what to serve once exploration is over)

_INFO_FIELDS = (utils.PREDICTED_REWARDS_MEAN, utils.PREDICTED_REWARDS_OPTIMISTIC,
                utils.PREDICTED_REWARDS_SAMPLED)


class LinearBanditVariables(tf.Module):
    """The per-arm statistics (A, b, counts) and the cached solve (Cholesky factor, theta)."""

    def __init__(self, context_dim: int, num_actions: int, tikhonov_weight: float,
                 dtype: tf.DType = tf.float32, name: str = "linear_bandit_variables"):
        super().__init__(name=name)
        k, d = num_actions, context_dim
        self.cov_matrix = tf.Variable(tf.zeros([k, d, d], dtype), trainable=False, name="cov_matrix")
        self.data_vector = tf.Variable(tf.zeros([k, d], dtype), trainable=False, name="data_vector")
        self.num_samples = tf.Variable(tf.zeros([k], dtype), trainable=False, name="num_samples")
        # Cholesky factor of A + lambda I (starts at sqrt(lambda) I) and theta = (A + lambda I)^-1 b.
        chol0 = tf.eye(d, batch_shape=[k], dtype=dtype) * tf.sqrt(tf.cast(tikhonov_weight, dtype))
        self.cholesky = tf.Variable(chol0, trainable=False, name="cholesky")
        self.theta = tf.Variable(tf.zeros([k, d], dtype), trainable=False, name="theta")


class LinearBanditPolicy(Policy):
    """Scores every arm with the linear model (mean, + bonus or sampled), argmax over allowed arms."""

    def __init__(self, time_step_spec: TimeStep, action_spec: tf.TensorSpec,
                 variables: LinearBanditVariables, exploration_strategy: str = OPTIMISTIC,
                 alpha: float = 1.0, add_bias: bool = False, emit_policy_info: Sequence[str] = (),
                 observation_and_action_constraint_splitter: utils.Splitter | None = None,
                 name: str | None = None):
        num_actions = utils.check_action_spec(action_spec)
        if exploration_strategy not in (OPTIMISTIC, SAMPLING, GREEDY):
            raise ValueError(f"unknown exploration_strategy {exploration_strategy!r}")
        emit = utils.check_emit_policy_info(emit_policy_info, _INFO_FIELDS)
        dtype = variables.theta.dtype
        info_spec: dict[str, tf.TensorSpec] = {
            key: tf.TensorSpec([num_actions], dtype, key) for key in emit}
        if exploration_strategy != SAMPLING:
            # Deterministic: the chosen action had probability 1 (what logged data needs for OPE).
            # Thompson sampling has no closed-form propensity, so it logs none.
            info_spec["propensity"] = tf.TensorSpec((), tf.float32, "propensity")
        super().__init__(time_step_spec, action_spec, info_spec or (),
                         observation_and_action_constraint_splitter, name=name)
        self._vars = variables
        self._strategy = exploration_strategy
        self._alpha = alpha
        self._add_bias = add_bias
        self._emit = emit
        self._dtype = dtype

    def features(self, observation: Any) -> tuple[tf.Tensor, tf.Tensor | None]:
        obs, mask = self._split(observation)
        return context_features(obs, self._add_bias, self._dtype), mask

    def scores(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        """Mean and (unless greedy) standard deviation of each arm's reward, [B, K] each."""
        mean = tf.matmul(x, self._vars.theta, transpose_b=True)
        if self._strategy == GREEDY and not ({utils.PREDICTED_REWARDS_OPTIMISTIC,
                                              utils.PREDICTED_REWARDS_SAMPLED} & set(self._emit)):
            return {"mean": mean}
        # x^T (L L^T)^-1 x = |L^-1 x|^2: one batched triangular solve for all arms.
        k = tf.shape(self._vars.cholesky)[0]
        rhs = tf.broadcast_to(tf.transpose(x)[None], [k, tf.shape(x)[1], tf.shape(x)[0]])
        z = tf.linalg.triangular_solve(self._vars.cholesky, rhs, lower=True)  # [K, d, B]
        std = tf.sqrt(tf.transpose(tf.reduce_sum(tf.square(z), axis=1)))     # [B, K]
        return {"mean": mean, "std": std}

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        x, mask = self.features(time_step.observation)
        s = self.scores(x)
        mean = s["mean"]
        optimistic = sampled = None
        if "std" in s:
            alpha = tf.cast(self._alpha, self._dtype)
            optimistic = mean + alpha * s["std"]
            if self._strategy == SAMPLING or utils.PREDICTED_REWARDS_SAMPLED in self._emit:
                noise = (tf.random.normal(tf.shape(mean), dtype=self._dtype) if seed is None else
                         tf.random.stateless_normal(tf.shape(mean), seed, dtype=self._dtype))
                sampled = mean + alpha * s["std"] * noise
        target = {OPTIMISTIC: optimistic, SAMPLING: sampled, GREEDY: mean}[self._strategy]
        action = utils.masked_argmax(target, mask, self.action_spec.dtype)
        values = {utils.PREDICTED_REWARDS_MEAN: mean, utils.PREDICTED_REWARDS_OPTIMISTIC: optimistic,
                  utils.PREDICTED_REWARDS_SAMPLED: sampled}
        info: dict[str, tf.Tensor] = {key: values[key] for key in self._emit}
        if self._strategy != SAMPLING:
            info["propensity"] = tf.ones(tf.shape(action), tf.float32)
        return PolicyStep(action, (), info or ())


def context_features(observation: tf.Tensor, add_bias: bool, dtype: tf.DType) -> tf.Tensor:
    """[B, *obs] -> [B, d] in the agent's dtype, with a trailing constant-1 column for the bias."""
    x = tf.cast(observation, dtype)
    x = tf.reshape(x, [tf.shape(x)[0], -1]) if x.shape.rank != 2 else x
    if add_bias:
        x = tf.concat([x, tf.ones([tf.shape(x)[0], 1], dtype)], axis=1)
    return x


class LinearBanditAgent(BanditAgent):
    """Base of LinUCBAgent and LinearThompsonSamplingAgent (they differ only in the policy).

    Note (as in TF-Agents): `train_step_counter` grows by the number of examples per train call,
    and `policy` and `collect_policy` are the same exploring policy; `greedy_policy` exploits only.
    """

    _EXPLORATION_STRATEGY = OPTIMISTIC

    def __init__(self, time_step_spec: TimeStep, action_spec: tf.TensorSpec,
                 alpha: float = 1.0, gamma: float = 1.0, tikhonov_weight: float = 1.0,
                 add_bias: bool = False, emit_policy_info: Sequence[str] = (),
                 observation_and_action_constraint_splitter: utils.Splitter | None = None,
                 debug_summaries: bool = False, summarize_grads_and_vars: bool = False,
                 enable_summaries: bool = True, train_step_counter: tf.Variable | None = None,
                 dtype: tf.DType = tf.float32, name: str | None = None,
                 exploration_strategy: str | None = None):
        tf.Module.__init__(self, name=name)
        exploration_strategy = exploration_strategy or self._EXPLORATION_STRATEGY
        self._num_actions = utils.check_action_spec(action_spec)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"Forgetting factor gamma must be in [0, 1], got {gamma}")
        if tikhonov_weight <= 0.0:
            raise ValueError(f"tikhonov_weight must be positive (it keeps A + lambda I invertible), "
                             f"got {tikhonov_weight}")
        if dtype not in (tf.float32, tf.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self._splitter = observation_and_action_constraint_splitter
        context_spec = time_step_spec.observation
        if self._splitter is not None:
            context_spec, _ = self._splitter(context_spec)
        if tf.nest.is_nested(context_spec):
            raise ValueError(f"Linear bandit agents need one context tensor, got {context_spec}")
        self._context_dim = int(np.prod(context_spec.shape.as_list())) if context_spec.shape.rank else 1
        self._context_dim += int(add_bias)
        self._alpha = alpha
        self._gamma = gamma
        self._tikhonov_weight = tikhonov_weight
        self._add_bias = add_bias
        self._dtype = dtype
        self._ridge = tf.constant(tikhonov_weight * np.eye(self._context_dim), dtype)
        self._vars = LinearBanditVariables(self._context_dim, self._num_actions, tikhonov_weight, dtype)

        def make_policy(strategy: str, name: str) -> LinearBanditPolicy:
            return LinearBanditPolicy(time_step_spec, action_spec, self._vars, strategy, alpha, add_bias,
                                      emit_policy_info, observation_and_action_constraint_splitter,
                                      name=name)

        policy = make_policy(exploration_strategy, f"{exploration_strategy}_policy")
        self._greedy_policy = make_policy(GREEDY, "greedy_policy")
        super().__init__(time_step_spec, action_spec, policy, policy, train_step_counter,
                         debug_summaries, summarize_grads_and_vars, enable_summaries)

    # --- state, TF-Agents names -------------------------------------------------------------
    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def cov_matrix(self) -> tf.Variable:
        """[K, d, d] sum of x x^T per arm (without the tikhonov term)."""
        return self._vars.cov_matrix

    @property
    def data_vector(self) -> tf.Variable:
        """[K, d] sum of r x per arm."""
        return self._vars.data_vector

    @property
    def num_samples(self) -> tf.Variable:
        return self._vars.num_samples

    @property
    def theta(self) -> tf.Variable:
        """[K, d] ridge estimates (A_k + lambda I)^-1 b_k, refreshed by every train call."""
        return self._vars.theta

    @property
    def greedy_policy(self) -> LinearBanditPolicy:
        return self._greedy_policy

    # --- training -------------------------------------------------------------------------
    def _process(self, experience: Trajectory, weights: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, Any]:
        observations, actions, rewards, outer = utils.process_experience(experience)
        if self._splitter is not None:
            observations, _ = self._splitter(observations)
        x = context_features(observations, self._add_bias, self._dtype)
        w = utils.flatten_weights(weights, outer)
        return x, actions, tf.cast(rewards, self._dtype), (None if w is None else tf.cast(w, self._dtype))

    def loss(self, observations: Any, actions: tf.Tensor, rewards: tf.Tensor, weights: Any = None,
             training: bool = False) -> LossInfo:
        """Weighted mean squared error of the current estimates on the taken actions."""
        del training
        if self._splitter is not None:
            observations, _ = self._splitter(observations)
        x = context_features(observations, self._add_bias, self._dtype)
        return self._loss(x, tf.cast(actions, tf.int32), tf.cast(rewards, self._dtype), weights)

    def _loss(self, x: tf.Tensor, actions: tf.Tensor, rewards: tf.Tensor, weights: Any) -> LossInfo:
        predicted = tf.reduce_sum(x * tf.gather(self._vars.theta, actions), axis=-1)
        error = tf.square(rewards - predicted)
        if weights is not None:
            error = error * tf.cast(weights, self._dtype)
        return LossInfo(tf.reduce_mean(error), ())

    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        """One closed-form update from a batch; returns the loss *before* the update."""
        x, actions, rewards, w = self._process(experience, weights)
        loss_info = self._loss(x, actions, rewards, w)
        # [B, K] one-hot (times the per-example weight) selects each row's arm for the sums.
        onehot = tf.one_hot(actions, self._num_actions, dtype=self._dtype)
        if w is not None:
            onehot = onehot * (w[:, None] if w.shape.rank else w)
        k, d = self._num_actions, self._context_dim
        # sum_b w x x^T per arm as one [K*d, B] x [B, d] matmul; sum_b w r x per arm as [K, B] x [B, d].
        xw = tf.reshape(onehot[:, :, None] * x[:, None, :], [-1, k * d])
        cov_update = tf.reshape(tf.matmul(xw, x, transpose_a=True), [k, d, d])
        data_update = tf.matmul(onehot * rewards[:, None], x, transpose_a=True)
        gamma = tf.cast(self._gamma, self._dtype)
        # gamma * A for arms never seen is still 0, so forgetting needs no per-arm condition.
        cov = self._vars.cov_matrix.assign(gamma * self._vars.cov_matrix + cov_update)
        data = self._vars.data_vector.assign(gamma * self._vars.data_vector + data_update)
        self._vars.num_samples.assign_add(tf.reduce_sum(tf.one_hot(actions, self._num_actions,
                                                                   dtype=self._dtype), 0))
        chol = tf.linalg.cholesky(cov + self._ridge)
        self._vars.cholesky.assign(chol)
        self._vars.theta.assign(tf.linalg.cholesky_solve(chol, data[:, :, None])[:, :, 0])
        self._train_step_counter.assign_add(tf.cast(tf.shape(actions)[0], tf.int64))
        self._write_summaries(loss_info)
        return loss_info

    def _write_summaries(self, loss_info: LossInfo) -> None:
        if not self.summaries_enabled:
            return
        step = self._train_step_counter
        tf.summary.scalar("Losses/loss", loss_info.loss, step=step)
        if self.summarize_grads_and_vars:
            for v in (self._vars.theta, self._vars.num_samples):
                name = v.name.replace(":", "_")
                tf.summary.histogram(f"Variables/{name}", v, step=step)
                tf.summary.scalar(f"Variables/{name}_value_norm", tf.norm(v), step=step)
        if self.debug_summaries and self._add_bias:
            for k in range(self._num_actions):
                tf.summary.scalar(f"bias/action_{k}", self._vars.theta[k, -1], step=step)


class LinUCBAgent(LinearBanditAgent):
    """LinUCB (Li et al. 2010): act on argmax_k x.theta_k + alpha * sqrt(x^T (A_k + lambda I)^-1 x)."""

    _EXPLORATION_STRATEGY = OPTIMISTIC


class LinearThompsonSamplingAgent(LinearBanditAgent):
    """Linear Thompson sampling: act on argmax_k of a draw from Normal(x.theta_k, alpha * std_k(x))
    (per-arm reward draws, as TF-Agents' LinearBanditPolicy samples)."""

    _EXPLORATION_STRATEGY = SAMPLING
