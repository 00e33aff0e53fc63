"""Per-arm raw features -> the per-arm agents' observation {'global', 'per_arm', 'num_actions'}.

Records carry the global raw features by name, each item feature of the K candidates as
`per_arm/<name>` [B, K] (arms past `num_actions` are padding) and `num_actions` [B]; the exported
policy takes the same tensors under their serving input names (`per_arm_<name>`, see
serving_names.py), and this module accepts either. The global part goes through the schema's
Preprocessor; every candidate's item features go through a second Preprocessor over
`schema.per_arm` (one row per arm), giving [B, K, Da].
"""

from __future__ import annotations

from typing import Mapping

import tensorflow as tf

from rlops.features.preprocessing import Preprocessor, input_spec, pad_value
from rlops.features.schema import FeatureSchema, FeatureSchemaError, FeatureSpec
from rlops.features.serving_names import NUM_ACTIONS, PER_ARM_PREFIX, serving_input_name, serving_inputs

GLOBAL, PER_ARM = "global", "per_arm"
__all__ = ["PER_ARM_PREFIX", "NUM_ACTIONS", "per_arm_key", "arm_input_spec", "PerArmPreprocessor"]


def per_arm_key(name: str) -> str:
    """An item feature's key in records (not its serving input: serving_names.serving_input_name)."""
    return PER_ARM_PREFIX + name


def arm_input_spec(f: FeatureSpec, num_arms: int, batch_size: int | None = None) -> tf.TensorSpec:
    """[B, K] raw values of one item feature for K candidate arms; [B, K, W] (padded, any width W)
    for a multivalent categorical (an item's category list)."""
    if f.kind == "float_list":
        raise FeatureSchemaError(f"per-arm feature '{f.name}': float-list item features are not supported yet")
    shape = [batch_size, num_arms] + ([None] if f.multivalent else [])
    return tf.TensorSpec(shape, input_spec(f).dtype, name=serving_input_name(f.name, per_arm=True))


class PerArmPreprocessor(tf.Module):
    """`pre(features) -> {'global': [B, Dg], 'per_arm': [B, K, Da], 'num_actions': [B] int32}`."""

    def __init__(self, schema: FeatureSchema, num_arms: int, name: str = "per_arm_preprocessor"):
        super().__init__(name=name)
        if not schema.per_arm:
            raise FeatureSchemaError("the feature schema has no per-arm features")
        self.schema = self._no_dependency(schema)
        self.input_names = serving_inputs(schema.names, [f.name for f in schema.per_arm])  # collisions raise
        self.num_arms = int(num_arms)
        self.global_preprocessor = Preprocessor(FeatureSchema(schema.features), name="global_preprocessor")
        self.arm_preprocessor = Preprocessor(FeatureSchema(schema.per_arm), name="arm_preprocessor")
        self.global_dim = self.global_preprocessor.observation_dim
        self.arm_dim = self.arm_preprocessor.observation_dim

    def raw_specs(self, batch_size: int | None = None) -> dict[str, tf.TensorSpec]:
        """The raw inputs, batched, keyed by serving input name."""
        out = {serving_input_name(f.name): input_spec(f, batch_size) for f in self.schema.features}
        out.update(
            {
                serving_input_name(f.name, per_arm=True): arm_input_spec(f, self.num_arms, batch_size)
                for f in self.schema.per_arm
            }
        )
        out[NUM_ACTIONS] = tf.TensorSpec([batch_size], tf.int64, name=NUM_ACTIONS)
        return out

    def _get(self, features: Mapping[str, tf.Tensor], key: str) -> tf.Tensor:
        """The input for record key `key`, given under that key (records) or its serving input name."""
        for k in (key, next(n for n, r in self.input_names.items() if r == key)):
            if k in features:
                return features[k]
        raise FeatureSchemaError(f"per-arm input '{key}' is missing; got {sorted(features)}")

    def __call__(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        wanted = set(self.schema.names) | set(self.global_preprocessor.input_names)
        g = self.global_preprocessor({k: v for k, v in features.items() if k in wanted})
        arms = {}
        for f in self.schema.per_arm:
            x = self._get(features, per_arm_key(f.name))
            if f.multivalent:  # [B, K, W] -> one row of W values per arm
                x = x.to_tensor(tf.constant(pad_value(f), x.dtype)) if isinstance(x, tf.RaggedTensor) else x
                x = tf.convert_to_tensor(x)
                arms[f.name] = tf.reshape(x, [-1, tf.shape(x)[-1]])
            else:
                arms[f.name] = tf.reshape(tf.convert_to_tensor(x), [-1])
        flat = self.arm_preprocessor(arms)  # [B*K, Da]
        per_arm = tf.reshape(flat, [-1, self.num_arms, self.arm_dim])
        n = tf.cast(tf.reshape(self._get(features, NUM_ACTIONS), [-1]), tf.int32)
        return {GLOBAL: g, PER_ARM: per_arm, NUM_ACTIONS: n}
