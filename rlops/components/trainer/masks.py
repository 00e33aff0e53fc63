"""Action masks in training and in the exported policy, TF-Agents style.

When the Examples carry `action_mask` ([K] ints, 1 = allowed), the bandit agent's observation is
{'observation': <what the agent scores>, 'action_mask': [K]} and the agent is built with
`observation_and_action_constraint_splitter=split_mask`: its greedy and exploring policies take
the argmax / draw among allowed actions only (TF-Agents' convention for constrained bandits).

The exported policy takes the mask as part of its observation, as TF-Agents' PolicySaver exports
it: the raw inputs are the features plus `action_mask`, in every signature (`action`,
`serving_default`, `serving_masked`). A model trained with masks must be served with them, so
forgetting the mask is an error from the signature rather than a masked action served.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

MASK = "action_mask"  # the records' column and the exported input's name
OBSERVATION = "observation"  # what the agent scores, beside the mask


def split_mask(observation: dict) -> tuple[Any, tf.Tensor]:
    """The agents' observation_and_action_constraint_splitter for {'observation', 'action_mask'}."""
    return observation[OBSERVATION], observation[MASK]


def mask_spec(num_actions: int) -> tf.TensorSpec:
    return tf.TensorSpec((num_actions,), tf.int64, name=MASK)


def with_mask(observation_spec: Any, num_actions: int) -> dict:
    """The agent's observation spec once a mask rides along."""
    return {OBSERVATION: observation_spec, MASK: mask_spec(num_actions)}


def check_mask(mask: tf.Tensor) -> tf.Tensor:
    """A row that allows no action has no valid answer: fail naming the input, not pick one."""
    mask = tf.convert_to_tensor(mask)
    allowed = tf.reduce_max(tf.cast(mask, tf.int32), axis=-1)
    check = tf.debugging.assert_positive(allowed, message=f"{MASK}: a row allows no action (all zeros)")
    with tf.control_dependencies([check]):
        return tf.identity(mask)


class DenseContext(tf.Module):
    """The encoder of records without a feature schema: the dense `context` input as it is."""

    def __init__(self, name: str, dim: int):
        super().__init__(name="dense_context")
        self.input_name, self.dim = name, dim

    def raw_specs(self, batch_size: int | None = None) -> dict[str, tf.TensorSpec]:
        return {self.input_name: tf.TensorSpec([batch_size, self.dim], tf.float32, self.input_name)}

    def __call__(self, features: dict) -> tf.Tensor:
        return tf.cast(features[self.input_name], tf.float32)


class MaskedFeaturePolicy(tf.Module):
    """`policy` (observation {'observation', 'action_mask'}) acting on raw inputs {features...,
    'action_mask'}: `encoder` (a Preprocessor, PerArmPreprocessor or DenseContext: raw_specs()
    and a call) turns the raw features into what the agent scores."""

    def __init__(self, policy: Any, encoder: Any, num_actions: int, name: str = "masked_feature_policy"):
        super().__init__(name=name)
        raw_specs = encoder.raw_specs()
        if MASK in raw_specs:
            raise ValueError(f"feature '{MASK}' is reserved for the action mask; rename the feature")
        self.wrapped_policy = policy
        self.encoder = encoder  # tracked: lookup tables travel into the SavedModel
        raw = {k: tf.TensorSpec(s.shape[1:], s.dtype, k) for k, s in raw_specs.items()}  # unbatched
        raw[MASK] = mask_spec(num_actions)
        self.time_step_spec = self._no_dependency(policy.time_step_spec._replace(observation=raw))
        self.action_spec = self._no_dependency(policy.action_spec)
        self.info_spec = self._no_dependency(getattr(policy, "info_spec", ()))
        self.policy_state_spec = self._no_dependency(getattr(policy, "policy_state_spec", ()))

    def action(self, time_step: Any, policy_state: Any = (), seed: Any = None) -> Any:
        raw = dict(time_step.observation)
        mask = check_mask(raw.pop(MASK))
        observation = {OBSERVATION: self.encoder(raw), MASK: mask}
        return self.wrapped_policy.action(time_step._replace(observation=observation), policy_state)

    def get_initial_state(self, batch_size: Any = None) -> Any:
        return self.wrapped_policy.get_initial_state(batch_size)
