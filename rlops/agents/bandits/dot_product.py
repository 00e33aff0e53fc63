"""Two-tower reward network for per-arm observations (TF-Agents' GlobalAndArmDotProductNetwork).

{'global': [B, Dg], 'per_arm': [B, K, Da]} -> [B, K]: a global tower maps the global features to
an embedding, an arm tower maps each arm's features to an embedding of the same size, and each
arm's score is their dot product. This is the shape of a low-rank click model,

    score(x, a) = g(x) . h(a) + b_arm(a) + b_global(x),

with far fewer parameters than a common tower over concat(global, arm), which cannot represent
a user x item interaction without learning the product itself.

Differences from TF-Agents (documented, deliberate):
- Each tower's LAST layer is linear (TF-Agents' EncodingNetwork ends with its activation: a
  ReLU embedding is non-negative, so the dot product could never be negative, which a logit
  must be free to be). Earlier layers use `activation`.
- `with_bias=True` (the default) adds a linear score of each side, b_arm(a) and b_global(x)
  (TF-Agents: dot product only). b_arm carries the item's popularity, which a dot product
  can express only by spending an embedding dimension on it; b_global does not change the
  ranking of arms, but it lets a logistic reward head fit the base rate.
- Towers are given as layer sizes (`global_layers`, `arm_layers`, the last entries equal: the
  embedding size), as in `create_feed_forward_dot_product_network`, not as networks.
"""

from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.agents.bandits.per_arm import per_arm_dims
from rlops.agents.networks import MLP, Activation, Dense


class GlobalAndArmDotProductNetwork(tf.Module):
    def __init__(
        self,
        observation_spec: dict[str, Any],
        global_layers: Sequence[int] = (8,),
        arm_layers: Sequence[int] = (8,),
        activation: Activation = tf.nn.relu,
        with_bias: bool = True,
        seed: int = 0,
        name: str = "dot_product_reward_network",
    ):
        super().__init__(name=name)
        if not global_layers or not arm_layers or global_layers[-1] != arm_layers[-1]:
            raise ValueError(
                "global_layers and arm_layers must each give at least one layer and end with the same "
                f"size (the embedding both towers map to); got {tuple(global_layers)} and {tuple(arm_layers)}"
            )
        g_dim, a_dim = per_arm_dims(observation_spec)
        self.observation_spec = observation_spec
        self.embedding_size = int(global_layers[-1])
        # Unit output gain: with orthogonal kernels the initial scores are small (|g . h| ~ 0.1 on
        # one-hot inputs), so early greedy choices are not locked in, yet the gradient of the
        # bilinear term is not vanishing (both towers at ~0 would be a saddle point).
        self.global_tower = MLP(
            g_dim, global_layers[:-1], global_layers[-1], activation, output_gain=1.0, seed=seed, name="global_tower"
        )
        self.arm_tower = MLP(
            a_dim, arm_layers[:-1], arm_layers[-1], activation, output_gain=1.0, seed=seed + 11, name="arm_tower"
        )
        self.global_bias = Dense(g_dim, 1, 0.03, seed + 23, name="global_bias") if with_bias else None
        self.arm_bias = Dense(a_dim, 1, 0.03, seed + 29, name="arm_bias") if with_bias else None

    def __call__(self, observation: Any) -> tf.Tensor:
        g = tf.cast(observation[utils.GLOBAL_FEATURE_KEY], tf.float32)  # [B, Dg]
        arms = tf.cast(observation[utils.PER_ARM_FEATURE_KEY], tf.float32)  # [B, K, Da]
        shape = tf.shape(arms)
        flat_arms = tf.reshape(arms, [-1, arms.shape[-1]])  # [B*K, Da]
        g_emb = self.global_tower(g)  # [B, E]
        a_emb = tf.reshape(self.arm_tower(flat_arms), [shape[0], shape[1], self.embedding_size])  # [B, K, E]
        scores = tf.linalg.matvec(a_emb, g_emb)  # [B, K]
        if self.arm_bias is not None and self.global_bias is not None:
            scores += tf.reshape(self.arm_bias(flat_arms), shape[:2]) + self.global_bias(g)
        return scores
