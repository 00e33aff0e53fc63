"""LinUCB and linear Thompson sampling: per-arm ridge regression with closed-form updates.

Per model k the agent keeps A_k = sum x x^T and b_k = sum r x over the rows where arm k was
taken (with a forgetting factor gamma: A_k <- gamma A_k + X_k^T X_k). With tikhonov weight
lambda, the estimate is theta_k = (A_k + lambda I)^-1 b_k and the uncertainty of x's reward is
sqrt(x^T (A_k + lambda I)^-1 x). Same formulas, defaults and variables as TF-Agents'
LinearBanditAgent. With per-arm features (`accepts_per_arm_features=True`) there is one model
over x = concat(global, arm features) shared by all arms, as in TF-Agents.

Replicas: under MirroredStrategy / MultiWorkerMirroredStrategy each replica sums its rows' x x^T
and r x, one all-reduce adds them up, and every replica applies the same global update, so R
replicas on a global batch end exactly where one replica on that batch would.

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
SAMPLING = "sampling"  # Thompson: Normal(mean, alpha * std) per arm
GREEDY = "greedy"  # mean only (exploit; what to serve once exploration is over)

_INFO_FIELDS = (utils.PREDICTED_REWARDS_MEAN, utils.PREDICTED_REWARDS_OPTIMISTIC, utils.PREDICTED_REWARDS_SAMPLED)


class LinearBanditVariables(tf.Module):
    """The per-model statistics (A, b, counts), the cached solve (Cholesky factor, theta) and,
    with `use_eigendecomp`, the eigendecomposition of A (TF-Agents' eig_vals / eig_matrix).

    Pass one instance as `variable_collection` to several agents to share their statistics."""

    def __init__(
        self,
        context_dim: int,
        num_models: int,
        tikhonov_weight: float = 1.0,
        use_eigendecomp: bool = False,
        dtype: tf.DType = tf.float32,
        name: str = "linear_bandit_variables",
    ):
        super().__init__(name=name)
        k, d = num_models, context_dim
        self.context_dim, self.num_models, self.tikhonov_weight = d, k, tikhonov_weight
        self.use_eigendecomp = use_eigendecomp
        self.cov_matrix = tf.Variable(tf.zeros([k, d, d], dtype), trainable=False, name="cov_matrix")
        self.data_vector = tf.Variable(tf.zeros([k, d], dtype), trainable=False, name="data_vector")
        self.num_samples = tf.Variable(tf.zeros([k], dtype), trainable=False, name="num_samples")
        # Cholesky factor of A + lambda I (starts at sqrt(lambda) I) and theta = (A + lambda I)^-1 b.
        chol0 = tf.eye(d, batch_shape=[k], dtype=dtype) * tf.sqrt(tf.cast(tikhonov_weight, dtype))
        self.cholesky = tf.Variable(chol0, trainable=False, name="cholesky")
        self.theta = tf.Variable(tf.zeros([k, d], dtype), trainable=False, name="theta")
        if use_eigendecomp:  # A = Q diag(e) Q^T; A starts at 0, TF-Agents starts at (1, I)
            self.eig_vals = tf.Variable(tf.ones([k, d], dtype), trainable=False, name="eig_vals")
            self.eig_matrix = tf.Variable(tf.eye(d, batch_shape=[k], dtype=dtype), trainable=False, name="eig_matrix")


class LinearBanditPolicy(Policy):
    """Scores every arm with the linear model (mean, + bonus or sampled), argmax over allowed arms."""

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        variables: LinearBanditVariables,
        exploration_strategy: str = OPTIMISTIC,
        alpha: float = 1.0,
        add_bias: bool = False,
        emit_policy_info: Sequence[str] = (),
        observation_and_action_constraint_splitter: utils.Splitter | None = None,
        emit_log_probability: bool = False,
        accepts_per_arm_features: bool = False,
        name: str | None = None,
    ):
        info = utils.check_action_spec(action_spec)
        num_actions = info.num_actions
        if exploration_strategy not in (OPTIMISTIC, SAMPLING, GREEDY):
            raise ValueError(f"unknown exploration_strategy {exploration_strategy!r}")
        emit = utils.check_emit_policy_info(
            emit_policy_info, _INFO_FIELDS + (utils.LOG_PROBABILITY, utils.CHOSEN_ARM_FEATURES)
        )
        if exploration_strategy == SAMPLING and (emit_log_probability or utils.LOG_PROBABILITY in emit):
            raise ValueError(
                "emit_log_probability: linear Thompson sampling has no closed-form probability of "
                "its action (TF-Agents would log 0, i.e. probability 1, which misleads off-policy "
                "evaluation); use LinUCB or the greedy policy to log propensities"
            )
        emit_log_probability = emit_log_probability or utils.LOG_PROBABILITY in emit
        emit = tuple(k for k in emit if k not in (utils.LOG_PROBABILITY, utils.CHOSEN_ARM_FEATURES))
        dtype = variables.theta.dtype
        info_spec: dict[str, tf.TensorSpec] = {key: tf.TensorSpec([num_actions], dtype, key) for key in emit}
        if exploration_strategy != SAMPLING:
            # Deterministic: the chosen action had probability 1 (what logged data needs for OPE).
            # Thompson sampling has no closed-form propensity, so it logs none.
            info_spec[utils.PROPENSITY] = tf.TensorSpec((), tf.float32, utils.PROPENSITY)
        if emit_log_probability:
            info_spec[utils.LOG_PROBABILITY] = tf.TensorSpec((), tf.float32, utils.LOG_PROBABILITY)
        obs_spec = time_step_spec.observation
        if observation_and_action_constraint_splitter is not None:
            obs_spec, _ = observation_and_action_constraint_splitter(obs_spec)
        if accepts_per_arm_features:
            arm_spec = obs_spec[utils.PER_ARM_FEATURE_KEY]
            info_spec[utils.CHOSEN_ARM_FEATURES] = tf.TensorSpec(
                arm_spec.shape[1:], arm_spec.dtype, utils.CHOSEN_ARM_FEATURES
            )
        super().__init__(
            time_step_spec, action_spec, info_spec or (), observation_and_action_constraint_splitter, name=name
        )
        self._vars = variables
        self._strategy = exploration_strategy
        self._alpha = alpha
        self._add_bias = add_bias
        self._emit = emit
        self._emit_log_probability = emit_log_probability
        self._per_arm = accepts_per_arm_features
        self._num_actions = num_actions
        self._action_min = info.minimum
        self._dtype = dtype

    def features(self, observation: Any) -> tuple[tf.Tensor, tf.Tensor | None]:
        """[B, d] contexts (or [B, K, d] per-arm contexts) and the [B, K] mask (or None)."""
        obs, mask = self._split(observation)
        if self._per_arm:
            mask = utils.combine_masks(mask, utils.num_actions_mask(obs, self._num_actions))
            return per_arm_features(obs, self._add_bias, self._dtype), mask
        return context_features(obs, self._add_bias, self._dtype), mask

    def scores(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        """Mean and (unless greedy) standard deviation of each arm's reward, [B, K] each."""
        want_std = self._strategy != GREEDY or bool(
            {utils.PREDICTED_REWARDS_OPTIMISTIC, utils.PREDICTED_REWARDS_SAMPLED} & set(self._emit)
        )
        if self._per_arm:  # one model: x [B, K, d]
            mean = tf.einsum("bkd,d->bk", x, self._vars.theta[0])
            if not want_std:
                return {"mean": mean}
            d = tf.shape(x)[-1]
            flat = tf.reshape(x, [-1, d])  # [B*K, d]
            z = tf.linalg.triangular_solve(self._vars.cholesky[0], tf.transpose(flat), lower=True)
            std = tf.reshape(tf.sqrt(tf.reduce_sum(tf.square(z), axis=0)), tf.shape(mean))
            return {"mean": mean, "std": std}
        mean = tf.matmul(x, self._vars.theta, transpose_b=True)
        if not want_std:
            return {"mean": mean}
        # x^T (L L^T)^-1 x = |L^-1 x|^2: one batched triangular solve for all arms.
        k = tf.shape(self._vars.cholesky)[0]
        rhs = tf.broadcast_to(tf.transpose(x)[None], [k, tf.shape(x)[1], tf.shape(x)[0]])
        z = tf.linalg.triangular_solve(self._vars.cholesky, rhs, lower=True)  # [K, d, B]
        std = tf.sqrt(tf.transpose(tf.reduce_sum(tf.square(z), axis=1)))  # [B, K]
        return {"mean": mean, "std": std}

    def arm_scores(self, observation: Any) -> tf.Tensor:
        """Per-arm: [B, C] the scores this policy's choice maximizes, for {'global', 'per_arm' [B, C, Da]}
        with any number C of arms (rlops.train.by_id); deterministic strategies only."""
        if not self._per_arm or self._strategy == SAMPLING:
            raise ValueError("arm_scores: needs a per-arm policy with a deterministic strategy (greedy or optimistic)")
        obs = {k: v for k, v in observation.items() if k != utils.NUM_ACTIONS_FEATURE_KEY}
        s = self.scores(per_arm_features(obs, self._add_bias, self._dtype))
        if self._strategy == OPTIMISTIC:
            return s["mean"] + tf.cast(self._alpha, self._dtype) * s["std"]
        return s["mean"]

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        x, mask = self.features(time_step.observation)
        s = self.scores(x)
        mean = s["mean"]
        optimistic = sampled = None
        if "std" in s:
            alpha = tf.cast(self._alpha, self._dtype)
            optimistic = mean + alpha * s["std"]
            if self._strategy == SAMPLING or utils.PREDICTED_REWARDS_SAMPLED in self._emit:
                noise = (
                    tf.random.normal(tf.shape(mean), dtype=self._dtype)
                    if seed is None
                    else tf.random.stateless_normal(tf.shape(mean), seed, dtype=self._dtype)
                )
                sampled = mean + alpha * s["std"] * noise
        target = {OPTIMISTIC: optimistic, SAMPLING: sampled, GREEDY: mean}[self._strategy]
        index = utils.masked_argmax(target, mask, tf.int32)
        action = utils.index_to_action(index, self.action_spec)
        values = {
            utils.PREDICTED_REWARDS_MEAN: mean,
            utils.PREDICTED_REWARDS_OPTIMISTIC: optimistic,
            utils.PREDICTED_REWARDS_SAMPLED: sampled,
        }
        info: dict[str, tf.Tensor] = {key: values[key] for key in self._emit}
        if self._strategy != SAMPLING:
            info[utils.PROPENSITY] = tf.ones(tf.shape(index), tf.float32)
        if self._emit_log_probability:
            info[utils.LOG_PROBABILITY] = tf.zeros(tf.shape(index), tf.float32)
        if self._per_arm:
            obs, _ = self._split(time_step.observation)
            info[utils.CHOSEN_ARM_FEATURES] = utils.gather_arm_features(obs[utils.PER_ARM_FEATURE_KEY], index)
        return PolicyStep(action, (), info or ())


def context_features(observation: tf.Tensor, add_bias: bool, dtype: tf.DType) -> tf.Tensor:
    """[B, *obs] -> [B, d] in the agent's dtype, with a trailing constant-1 column for the bias."""
    x = tf.cast(observation, dtype)
    x = tf.reshape(x, [tf.shape(x)[0], -1]) if x.shape.rank != 2 else x
    if add_bias:
        x = tf.concat([x, tf.ones([tf.shape(x)[0], 1], dtype)], axis=1)
    return x


def per_arm_features(observation: dict[str, Any], add_bias: bool, dtype: tf.DType) -> tf.Tensor:
    """{'global': [B, Dg], 'per_arm': [B, K, Da]} -> [B, K, Dg (+1) + Da]: concat(global, arm)."""
    g = context_features(observation[utils.GLOBAL_FEATURE_KEY], add_bias, dtype)
    arms = tf.cast(observation[utils.PER_ARM_FEATURE_KEY], dtype)
    g = tf.broadcast_to(g[:, None, :], tf.concat([tf.shape(arms)[:2], tf.shape(g)[1:]], 0))
    return tf.concat([g, arms], axis=-1)


def _context_dims(context_spec: Any, per_arm: bool) -> tuple[int, int]:
    """(global dim, arm dim) of the observation spec (arm dim 0 without per-arm features)."""

    def size(spec: tf.TensorSpec) -> int:
        return int(np.prod(spec.shape.as_list())) if spec.shape.rank else 1

    if per_arm:
        if not isinstance(context_spec, dict) or not {utils.GLOBAL_FEATURE_KEY, utils.PER_ARM_FEATURE_KEY} <= set(
            context_spec
        ):
            raise ValueError(
                "accepts_per_arm_features=True needs an observation spec dict with "
                f"'{utils.GLOBAL_FEATURE_KEY}' [Dg] and '{utils.PER_ARM_FEATURE_KEY}' [K, Da]; "
                f"got {context_spec}"
            )
        arm = context_spec[utils.PER_ARM_FEATURE_KEY]
        if arm.shape.rank != 2:
            raise ValueError(
                f"observation '{utils.PER_ARM_FEATURE_KEY}' spec must be [num_actions, arm_dim], got {arm.shape}"
            )
        return size(context_spec[utils.GLOBAL_FEATURE_KEY]), int(arm.shape[1])
    if tf.nest.is_nested(context_spec):
        raise ValueError(
            f"Linear bandit agents need one context tensor, got {context_spec} (per-arm "
            "observations need accepts_per_arm_features=True)"
        )
    return size(context_spec), 0


class LinearBanditAgent(BanditAgent):
    """Base of LinUCBAgent and LinearThompsonSamplingAgent (they differ only in the policy).

    As in TF-Agents: `train_step_counter` grows by the number of examples per train call,
    `policy` and `collect_policy` are the same exploring policy, `weights` ([B] or [B, T])
    weight each row's x x^T and r x, and `train` returns the weighted mean squared error of the
    estimates *before* the update; `greedy_policy` exploits only. Unlike TF-Agents, actions are
    offset by the action spec's minimum, and under several replicas the counter grows by the
    global batch and each replica returns its share of the global-batch loss (the Learner sums
    them), so R replicas report what one replica on the global batch would.
    """

    _EXPLORATION_STRATEGY = OPTIMISTIC
    train_step_counts_examples = True  # the counter grows by the (global) batch size per train call

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        variable_collection: LinearBanditVariables | None = None,
        alpha: float = 1.0,
        gamma: float = 1.0,
        use_eigendecomp: bool = False,
        tikhonov_weight: float = 1.0,
        add_bias: bool = False,
        emit_policy_info: Sequence[str] = (),
        emit_log_probability: bool = False,
        observation_and_action_constraint_splitter: utils.Splitter | None = None,
        accepts_per_arm_features: bool = False,
        debug_summaries: bool = False,
        summarize_grads_and_vars: bool = False,
        enable_summaries: bool = True,
        train_step_counter: tf.Variable | None = None,
        dtype: tf.DType = tf.float32,
        name: str | None = None,
        exploration_strategy: str | None = None,
    ):
        tf.Module.__init__(self, name=name)
        exploration_strategy = exploration_strategy or self._EXPLORATION_STRATEGY
        action_info = utils.check_action_spec(action_spec)
        self._num_actions = action_info.num_actions
        self._action_min = action_info.minimum
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"Forgetting factor gamma must be in [0, 1], got {gamma}")
        if tikhonov_weight <= 0.0:
            raise ValueError(
                f"tikhonov_weight must be positive (it keeps A + lambda I invertible), got {tikhonov_weight}"
            )
        if dtype not in (tf.float32, tf.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self._splitter = observation_and_action_constraint_splitter
        self._per_arm = accepts_per_arm_features
        context_spec = time_step_spec.observation
        if self._splitter is not None:
            context_spec, _ = self._splitter(context_spec)
        global_dim, arm_dim = _context_dims(context_spec, accepts_per_arm_features)
        self._global_context_dim = global_dim + int(add_bias)
        self._context_dim = self._global_context_dim + arm_dim
        self._num_models = 1 if accepts_per_arm_features else self._num_actions
        self._alpha = alpha
        self._gamma = gamma
        self._tikhonov_weight = tikhonov_weight
        self._add_bias = add_bias
        self._dtype = dtype
        self._use_eigendecomp = use_eigendecomp
        self._ridge = tf.constant(tikhonov_weight * np.eye(self._context_dim), dtype)
        if variable_collection is None:
            variable_collection = LinearBanditVariables(
                self._context_dim, self._num_models, tikhonov_weight, use_eigendecomp, dtype
            )
        elif not isinstance(variable_collection, LinearBanditVariables):
            raise TypeError(
                "variable_collection must be a rlops LinearBanditVariables (TF-Agents' "
                f"LinearBanditVariableCollection holds per-arm lists), got {type(variable_collection)}"
            )
        else:
            expected = (self._context_dim, self._num_models, tikhonov_weight, use_eigendecomp, dtype)
            got = (
                variable_collection.context_dim,
                variable_collection.num_models,
                variable_collection.tikhonov_weight,
                variable_collection.use_eigendecomp,
                variable_collection.theta.dtype,
            )
            if expected != got:
                raise ValueError(
                    "variable_collection does not fit this agent: (context_dim, num_models, "
                    f"tikhonov_weight, use_eigendecomp, dtype) are {got}, the agent needs {expected}"
                )
        self._vars = variable_collection

        def make_policy(strategy: str, name: str, log_prob: bool) -> LinearBanditPolicy:
            return LinearBanditPolicy(
                time_step_spec,
                action_spec,
                self._vars,
                strategy,
                alpha,
                add_bias,
                emit_policy_info,
                observation_and_action_constraint_splitter,
                emit_log_probability=log_prob,
                accepts_per_arm_features=accepts_per_arm_features,
                name=name,
            )

        policy = make_policy(exploration_strategy, f"{exploration_strategy}_policy", emit_log_probability)
        greedy_log_prob = emit_log_probability or utils.LOG_PROBABILITY in tuple(emit_policy_info)
        self._greedy_policy = make_policy(GREEDY, "greedy_policy", greedy_log_prob)
        super().__init__(
            time_step_spec,
            action_spec,
            policy,
            policy,
            train_step_counter,
            debug_summaries,
            summarize_grads_and_vars,
            enable_summaries,
        )

    # --- state, TF-Agents names -------------------------------------------------------------
    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def variable_collection(self) -> LinearBanditVariables:
        return self._vars

    @property
    def cov_matrix(self) -> tf.Variable:
        """[K, d, d] sum of x x^T per arm (without the tikhonov term); [1, d, d] per-arm."""
        return self._vars.cov_matrix

    @property
    def data_vector(self) -> tf.Variable:
        """[K, d] sum of r x per arm."""
        return self._vars.data_vector

    @property
    def num_samples(self) -> tf.Variable:
        return self._vars.num_samples

    @property
    def eig_vals(self) -> tf.Variable:
        if not self._use_eigendecomp:
            raise AttributeError("eig_vals exist only with use_eigendecomp=True")
        return self._vars.eig_vals

    @property
    def eig_matrix(self) -> tf.Variable:
        if not self._use_eigendecomp:
            raise AttributeError("eig_matrix exists only with use_eigendecomp=True")
        return self._vars.eig_matrix

    @property
    def theta(self) -> tf.Variable:
        """[K, d] ridge estimates (A_k + lambda I)^-1 b_k, refreshed by every train call."""
        return self._vars.theta

    @property
    def greedy_policy(self) -> LinearBanditPolicy:
        return self._greedy_policy

    @property
    def training_data_spec(self) -> Trajectory:
        """Per-arm: as TF-Agents, training data carries no 'per_arm' observation (the chosen arm's
        features come in policy_info['chosen_arm_features'])."""
        return drop_arm_observation(self.collect_data_spec, self._per_arm)

    # --- training -------------------------------------------------------------------------
    def _process(
        self, experience: Trajectory, weights: Any
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor | None]:
        observations, actions, rewards, outer = utils.process_experience(experience, self._action_min)
        if self._splitter is not None:
            observations, _ = self._splitter(observations)
        if self._per_arm:
            g = context_features(observations[utils.GLOBAL_FEATURE_KEY], self._add_bias, self._dtype)
            arm = tf.cast(utils.chosen_arm_features(experience, outer), self._dtype)
            x = tf.concat([g, tf.reshape(arm, [tf.shape(arm)[0], -1])], axis=1)
            actions = tf.zeros_like(actions)  # one model for all arms
        else:
            x = context_features(observations, self._add_bias, self._dtype)
        w = utils.flatten_weights(weights, outer)
        return x, actions, tf.cast(rewards, self._dtype), (None if w is None else tf.cast(w, self._dtype))

    def loss(self, experience: Trajectory, weights: Any = None, training: bool = False) -> LossInfo:
        """TF-Agents' linear-bandit loss: the (weighted) mean squared error of the current
        estimates on the taken actions, mean_b(w_b (r_b - x_b . theta_{a_b})^2)."""
        del training
        x, actions, rewards, w = self._process(experience, weights)
        return LossInfo(tf.reduce_mean(self._squared_errors(x, actions, rewards, w)), ())

    def _squared_errors(self, x: tf.Tensor, actions: tf.Tensor, rewards: tf.Tensor, w: tf.Tensor | None) -> tf.Tensor:
        predicted = tf.reduce_sum(x * tf.gather(self._vars.theta, actions), axis=-1)
        error = tf.square(rewards - predicted)
        return error if w is None else error * w

    def train(self, experience: Trajectory, weights: Any = None) -> LossInfo:
        """One closed-form update from a batch; returns the loss *before* the update (TF-Agents)."""
        x, actions, rewards, w = self._process(experience, weights)
        squared_errors = self._squared_errors(x, actions, rewards, w)
        # [B, M] one-hot (times the per-example weight) selects each row's model for the sums.
        m, d = self._num_models, self._context_dim
        counts = tf.one_hot(actions, m, dtype=self._dtype)
        onehot = counts if w is None else counts * (w[:, None] if w.shape.rank else w)
        cov_update = _per_model_gram(x, actions, onehot, w, m, d)
        # sum_b w r x per arm as one [M, B] x [B, d] matmul.
        data_update = tf.matmul(onehot * rewards[:, None], x, transpose_a=True)
        count_update = tf.reduce_sum(counts, 0)
        batch_size = tf.cast(tf.shape(actions)[0], self._dtype)  # one dtype: one fused all-reduce
        # Every replica's rows count: one all-reduce of the local sums, then every replica applies
        # the same global update to its copy (TF-Agents sums A and b only; here all of them).
        cov_update, data_update, count_update, batch_size = utils.all_reduce_sum(
            [cov_update, data_update, count_update, batch_size]
        )
        gamma = tf.cast(self._gamma, self._dtype)
        # gamma * A for arms never seen is still 0, so forgetting needs no per-arm condition.
        cov = self._vars.cov_matrix.assign(gamma * self._vars.cov_matrix + cov_update)
        data = self._vars.data_vector.assign(gamma * self._vars.data_vector + data_update)
        self._vars.num_samples.assign_add(count_update)
        chol = tf.linalg.cholesky(cov + self._ridge)
        self._vars.cholesky.assign(chol)
        self._vars.theta.assign(tf.linalg.cholesky_solve(chol, data[:, :, None])[:, :, 0])
        if self._use_eigendecomp:
            eig_vals, eig_matrix = tf.linalg.eigh(cov)
            self._vars.eig_vals.assign(eig_vals)
            self._vars.eig_matrix.assign(eig_matrix)
        self._train_step_counter.assign_add(tf.cast(tf.round(batch_size), tf.int64))
        # Per replica: its share of the global-batch loss (the Learner sums the replicas' shares).
        share = LossInfo(tf.reduce_sum(squared_errors) / batch_size, ())
        self._write_summaries(LossInfo(utils.all_reduce_sum([share.loss])[0], ()))
        return share

    def forget(self, factor: float) -> None:
        """Scales A and b by `factor` (the Trainer's forgetting of older days at a warm start: the
        new day's sums then add to the discounted ones) and refreshes the cached solve. Counts
        (num_samples) stay: they count the records seen."""
        factor = tf.cast(factor, self._dtype)
        cov = self._vars.cov_matrix.assign(factor * self._vars.cov_matrix)
        data = self._vars.data_vector.assign(factor * self._vars.data_vector)
        chol = tf.linalg.cholesky(cov + self._ridge)
        self._vars.cholesky.assign(chol)
        self._vars.theta.assign(tf.linalg.cholesky_solve(chol, data[:, :, None])[:, :, 0])
        if self._use_eigendecomp:
            eig_vals, eig_matrix = tf.linalg.eigh(cov)
            self._vars.eig_vals.assign(eig_vals)
            self._vars.eig_matrix.assign(eig_matrix)

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
        if self.debug_summaries and self._add_bias and not self._per_arm:
            for k in range(self._num_actions):
                tf.summary.scalar(f"bias/action_{k}", self._vars.theta[k, self._global_context_dim - 1], step=step)


def _per_model_gram(
    x: tf.Tensor, actions: tf.Tensor, onehot: tf.Tensor, w: tf.Tensor | None, m: int, d: int
) -> tf.Tensor:
    """[M, d, d]: sum of w x x^T over each model's rows (rows whose action is outside [0, M) add
    nothing, as with one-hot weights).

    Outside XLA the rows are partitioned by model and each model does one [d, B_k] x [B_k, d]
    matmul: B d^2 multiply-adds in all (a 4096 x 64 batch over 10 arms: ~1 ms on one CPU core).
    XLA (TPU, jit_compile) needs static shapes, so there it is one [M*d, B] x [B, d] matmul of
    one-hot-weighted rows: M times the work, which a TPU's matrix unit absorbs."""
    if m == 1 or _in_xla_context():
        xw = tf.reshape(onehot[:, :, None] * x[:, None, :], [-1, m * d])
        return tf.reshape(tf.matmul(xw, x, transpose_a=True), [m, d, d])
    valid = tf.logical_and(actions >= 0, actions < m)
    partitions = tf.where(valid, tf.cast(actions, tf.int32), m)  # out-of-range rows: partition m, unused
    xs = tf.dynamic_partition(x, partitions, m + 1)[:m]
    xws = xs if w is None else tf.dynamic_partition(x * (w[:, None] if w.shape.rank else w), partitions, m + 1)[:m]
    return tf.stack([tf.matmul(a, b, transpose_a=True) for a, b in zip(xws, xs)])


def _in_xla_context() -> bool:
    """True while tracing for XLA (jit_compile=True, TPUs): no dynamically shaped ops there."""
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util

        return bool(control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()))
    except (ImportError, AttributeError):  # private API moved: the static-shape path is always right
        return True


def drop_arm_observation(spec: Trajectory, per_arm: bool) -> Trajectory:
    """The trajectory spec without observation['per_arm'] (TF-Agents' drop_arm_observation)."""
    if not per_arm:
        return spec
    observation = {k: v for k, v in spec.observation.items() if k != utils.PER_ARM_FEATURE_KEY}
    return spec._replace(observation=observation)


class LinUCBAgent(LinearBanditAgent):
    """LinUCB (Li et al. 2010): act on argmax_k x.theta_k + alpha * sqrt(x^T (A_k + lambda I)^-1 x)."""

    _EXPLORATION_STRATEGY = OPTIMISTIC


LinearUCBAgent = LinUCBAgent  # TF-Agents' module name is lin_ucb_agent.LinearUCBAgent


class LinearThompsonSamplingAgent(LinearBanditAgent):
    """Linear Thompson sampling: act on argmax_k of a draw from Normal(x.theta_k, alpha * std_k(x))
    (per-arm reward draws, as TF-Agents' LinearBanditPolicy samples)."""

    _EXPLORATION_STRATEGY = SAMPLING
