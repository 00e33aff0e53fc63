"""Raw global features -> a per-arm observation whose items are known by their index alone.

Slate records name each shown item by its index among the K items (its row in the item table) and
carry no item features, so each candidate's features are its index one-hot: the item tower of a
two-tower network then learns one embedding per item. The exported policy takes the global raw
features and `num_actions` (candidates in use), as a per-arm policy does, without `per_arm_<name>`
inputs: the candidates are always the K items in index order.
"""

from __future__ import annotations

from typing import Mapping

import tensorflow as tf

from rlops.features.preprocessing import Preprocessor
from rlops.features.schema import FeatureSchema, FeatureSchemaError
from rlops.features.serving_names import NUM_ACTIONS

GLOBAL, PER_ARM = "global", "per_arm"


class ItemIndexPreprocessor(tf.Module):
    """`pre(features) -> {'global': [B, Dg], 'per_arm': [B, K, K] one-hot, 'num_actions': [B] int32}`."""

    def __init__(self, schema: FeatureSchema, num_items: int, name: str = "item_index_preprocessor"):
        super().__init__(name=name)
        if not schema.features:
            raise FeatureSchemaError("a per-arm observation needs at least one global (context) feature")
        self.schema = self._no_dependency(schema)
        self.num_arms = int(num_items)
        self.global_preprocessor = Preprocessor(FeatureSchema(schema.features), name="global_preprocessor")
        self.input_names = self.global_preprocessor.input_names
        self.global_dim = self.global_preprocessor.observation_dim
        self.arm_dim = self.num_arms

    def raw_specs(self, batch_size: int | None = None) -> dict[str, tf.TensorSpec]:
        """The raw inputs, batched, keyed by serving input name (as PerArmPreprocessor's)."""
        out = self.global_preprocessor.raw_specs(batch_size)
        out[NUM_ACTIONS] = tf.TensorSpec([batch_size], tf.int64, name=NUM_ACTIONS)
        return out

    def __call__(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        wanted = set(self.schema.names) | set(self.input_names)
        g = self.global_preprocessor({k: v for k, v in features.items() if k in wanted})
        batch = tf.shape(g)[0]
        items = tf.eye(self.num_arms, dtype=tf.float32)
        per_arm = tf.tile(items[None], tf.stack([batch, 1, 1]))
        if NUM_ACTIONS in features:
            n = tf.cast(tf.reshape(features[NUM_ACTIONS], [-1]), tf.int32)
        else:  # every item a candidate
            n = tf.fill([batch], tf.constant(self.num_arms, tf.int32))
        return {GLOBAL: g, PER_ARM: per_arm, NUM_ACTIONS: n}
