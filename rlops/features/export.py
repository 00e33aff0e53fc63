"""Preprocessing inside the exported policy, and the exploring serving head.

`FeaturePolicy` wraps any policy over the dense observation so that it acts on raw named
features: its observation spec is {serving input name: raw spec} (serving_names.py: the feature
name, or `per_arm_<name>` for an item feature), and `action` runs the Preprocessor first.
Exported with rlops.train.policy_saver, the SavedModel then takes raw features (strings included)
in every signature. Duck-typed (time_step_spec, action_spec, action, ...) so this
bottom layer does not import the agents.

`epsilon_greedy_head` turns greedy actions into what a server logs: an action sampled from the
epsilon-greedy exploring policy and its propensity (so tomorrow's logs can be evaluated
off-policy), honouring an action mask when given.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class FeaturePolicy(tf.Module):
    """`policy` acting on raw named features through `preprocessor` (a Preprocessor, or a
    PerArmPreprocessor: raw global features, `per_arm_<name>` [K] and `num_actions`), each input
    named by serving_names.serving_input_name."""

    def __init__(self, policy: Any, preprocessor: Any, name: str = "feature_policy"):
        super().__init__(name=name)
        self.wrapped_policy = policy
        self.preprocessor = preprocessor
        raw = {k: _unbatched(s) for k, s in preprocessor.raw_specs().items()}
        self.time_step_spec = self._no_dependency(policy.time_step_spec._replace(observation=raw))
        self.action_spec = self._no_dependency(policy.action_spec)
        self.info_spec = self._no_dependency(getattr(policy, "info_spec", ()))
        self.policy_state_spec = self._no_dependency(getattr(policy, "policy_state_spec", ()))

    def action(self, time_step: Any, policy_state: Any = (), seed: Any = None) -> Any:
        observation = self.preprocessor(time_step.observation)
        return self.wrapped_policy.action(time_step._replace(observation=observation), policy_state)

    def get_initial_state(self, batch_size: Any = None) -> Any:
        return self.wrapped_policy.get_initial_state(batch_size)


class PerArmFeaturePolicy(FeaturePolicy):
    """A per-arm policy acting on raw global features, `per_arm_<name>` [K] and `num_actions`."""

    def __init__(self, policy: Any, preprocessor: Any, name: str = "per_arm_feature_policy"):
        super().__init__(policy, preprocessor, name=name)


def _unbatched(spec: tf.TensorSpec) -> tf.TensorSpec:
    return tf.TensorSpec(spec.shape[1:], spec.dtype, spec.name)


def epsilon_greedy_head(
    greedy: tf.Tensor, num_actions: int, epsilon: tf.Tensor, minimum: int = 0, action_mask: tf.Tensor | None = None
) -> dict[str, tf.Tensor]:
    """{action, propensity, greedy_action}: with probability epsilon a uniform allowed action,
    else the greedy one. propensity = P(action) under that policy:
        (1 - eps) * [action == greedy] + eps / n_allowed     (greedy allowed)
        1 / n_allowed                                        (greedy masked out: uniform)
    """
    greedy = tf.convert_to_tensor(greedy)
    idx = tf.cast(greedy, tf.int64) - minimum
    batch = tf.shape(idx)[0]
    eps = tf.cast(epsilon, tf.float32)
    if action_mask is None:
        allowed = tf.ones([batch, num_actions], tf.bool)
    else:
        allowed = tf.cast(action_mask, tf.bool)
    n_allowed = tf.reduce_sum(tf.cast(allowed, tf.float32), -1)
    greedy_ok = tf.gather(allowed, idx, batch_dims=1)
    logits = tf.where(allowed, 0.0, tf.float32.min)
    uniform = tf.squeeze(tf.random.categorical(logits, 1, dtype=tf.int64), -1)
    explore = tf.logical_or(tf.random.uniform([batch]) < eps, tf.logical_not(greedy_ok))
    chosen = tf.where(explore, uniform, idx)
    p_uniform = 1.0 / tf.maximum(n_allowed, 1.0)
    propensity = tf.where(greedy_ok, eps * p_uniform + tf.where(chosen == idx, 1.0 - eps, 0.0), p_uniform)
    return {"action": tf.cast(chosen + minimum, greedy.dtype), "propensity": propensity, "greedy_action": greedy}
