"""Reward network for per-arm observations (TF-Agents' GlobalAndArmCommonTowerNetwork).

{'global': [B, Dg], 'per_arm': [B, K, Da]} -> [B, K]: a global tower over the global features,
an arm tower over each arm's features, and a common tower over their concatenation that
outputs one scalar per arm. Empty towers pass their input through, so the default is one
common MLP over concat(global, arm). The number of arms may vary between calls (training
scores only the chosen arm: K = 1).
"""

from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.agents.networks import MLP, Activation


def per_arm_dims(observation_spec: Any) -> tuple[int, int]:
    """(Dg, Da) of a per-arm observation spec {global: [Dg], per_arm: [K, Da]}; a one-line error otherwise."""
    g_spec = observation_spec[utils.GLOBAL_FEATURE_KEY]
    a_spec = observation_spec[utils.PER_ARM_FEATURE_KEY]
    if g_spec.shape.rank != 1 or a_spec.shape.rank != 2:
        raise ValueError(
            f"per-arm observation spec needs '{utils.GLOBAL_FEATURE_KEY}' [Dg] and "
            f"'{utils.PER_ARM_FEATURE_KEY}' [K, Da]; got {g_spec.shape} and {a_spec.shape}"
        )
    return int(g_spec.shape[0]), int(a_spec.shape[1])


class PerArmRewardNetwork(tf.Module):
    def __init__(
        self,
        observation_spec: dict[str, Any],
        global_layers: Sequence[int] = (),
        arm_layers: Sequence[int] = (),
        common_layers: Sequence[int] = (64,),
        activation: Activation = tf.nn.relu,
        output_gain: float = 0.03,
        seed: int = 0,
        name: str = "per_arm_reward_network",
    ):
        super().__init__(name=name)
        g_dim, a_dim = per_arm_dims(observation_spec)
        self.observation_spec = observation_spec
        self.global_tower = (
            MLP(g_dim, global_layers, None, activation, seed=seed, name="global_tower") if global_layers else None
        )
        self.arm_tower = (
            MLP(a_dim, arm_layers, None, activation, seed=seed + 11, name="arm_tower") if arm_layers else None
        )
        g_out = self.global_tower.output_size if self.global_tower else g_dim
        a_out = self.arm_tower.output_size if self.arm_tower else a_dim
        self.common_tower = MLP(
            g_out + a_out, common_layers, 1, activation, output_gain=output_gain, seed=seed + 23, name="common_tower"
        )

    def __call__(self, observation: Any) -> tf.Tensor:
        g = tf.cast(observation[utils.GLOBAL_FEATURE_KEY], tf.float32)
        arms = tf.cast(observation[utils.PER_ARM_FEATURE_KEY], tf.float32)  # [B, K, Da]
        if self.global_tower is not None:
            g = self.global_tower(g)  # towers end with their activation (no output layer)
        shape = tf.shape(arms)
        flat_arms = tf.reshape(arms, [-1, arms.shape[-1]])
        if self.arm_tower is not None:
            flat_arms = self.arm_tower(flat_arms)
        g_rep = tf.repeat(g, shape[1], axis=0)  # [B*K, Dg'] row b*K+k = global of b
        out = self.common_tower(tf.concat([g_rep, flat_arms], axis=-1))  # [B*K, 1]
        return tf.reshape(out, shape[:2])
