"""Preprocessing inside the exported policy, and the exploring serving head.

`FeaturePolicy` wraps any policy over the dense observation so that it acts on raw named
features: its observation spec is {serving input name: raw spec} (serving_names.py: the feature
name, or `per_arm_<name>` for an item feature), and `action` runs the Preprocessor first.
Exported with rlops.train.policy_saver, the SavedModel then takes raw features (strings included)
in every signature. Duck-typed (time_step_spec, action_spec, action, ...) so this
bottom layer does not import the agents.

The exploring serving head (what a server logs: the drawn action and its propensity) is
rlops.heads.epsilon_greedy.
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
