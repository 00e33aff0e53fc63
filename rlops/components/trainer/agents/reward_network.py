"""The reward network's options, shared by the agents that train one (neural_epsilon_greedy,
ranking): its shape, loss and optimizer, and how the per-arm network and the loss are built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

NETWORKS = ("common_tower", "dot_product")  # trainer.network
REWARD_LOSSES = ("squared_error", "sigmoid_cross_entropy")  # trainer.reward_loss

_NO_NETWORK = "agent '{agent}' has none"


@dataclass(frozen=True)
class RewardNetworkOptions:
    """What an agent's reward network is and how it trains (trainer.hidden_sizes, network,
    reward_loss, learning_rate, weight_decay, average_weights, seed)."""

    hidden_sizes: tuple[int, ...] = (64,)
    """Layer widths (dot_product: of each tower; the last is the embedding's size)."""
    network: str = "common_tower"
    """Per-arm features: 'common_tower' (one MLP over concat(global, arm)) or 'dot_product' (two towers)."""
    reward_loss: str = "squared_error"
    """The error loss on the predicted reward; 'sigmoid_cross_entropy': 0/1 rewards, predictions are logits."""
    learning_rate: float = 1e-3
    """Adam's step size."""
    weight_decay: float = 0.0
    """Adam's decoupled weight decay; 0: none (TF-Agents' optimizer)."""
    average_weights: bool = False
    """The Trainer exports the weights' moving average over about the last pass (trainer/averaging.py)."""
    seed: int = 0
    """Seeds the network's initialisation."""

    EXCLUSIVE_KEYS: ClassVar[dict[str, str]] = {
        "network": f"chooses the agent's reward network; {_NO_NETWORK} (leave it at 'common_tower')",
        "reward_loss": f"chooses the agent's reward network; {_NO_NETWORK} (leave it at 'squared_error')",
        "weight_decay": f"decays the agent's reward network; {_NO_NETWORK} (leave it at 0)",
        "average_weights": f"averages the agent's reward network; {_NO_NETWORK} (leave it at false)",
    }

    @staticmethod
    def network_keys(section: Any) -> dict[str, Any]:
        """The reward network's keys of the trainer section, as keyword arguments."""
        return {
            "hidden_sizes": tuple(section.hidden_sizes),
            "network": section.network,
            "reward_loss": section.reward_loss,
            "learning_rate": section.learning_rate,
            "weight_decay": section.weight_decay,
            "average_weights": section.average_weights,
            "seed": section.seed,
        }

    def validate(self) -> None:
        from rlops.components.json_config import closest

        for name, choices in (("network", NETWORKS), ("reward_loss", REWARD_LOSSES)):
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"trainer.{name}: unknown value {value!r}; {closest(str(value), choices)}")
        if self.weight_decay < 0:
            raise ValueError(f"trainer.weight_decay must be >= 0, got {self.weight_decay}")
        if self.network == "dot_product" and not self.hidden_sizes:
            raise ValueError("trainer.hidden_sizes: network 'dot_product' needs at least one size (the embedding's)")

    def per_arm_network(self, observation_spec: dict[str, Any]) -> Any:
        """The network that scores each candidate of a per-arm observation ({global, per_arm}; num_actions only masks)."""
        from rlops.agents.bandits import PerArmRewardNetwork
        from rlops.agents.bandits.dot_product import GlobalAndArmDotProductNetwork

        obs = {k: v for k, v in observation_spec.items() if k != "num_actions"}
        if self.network == "dot_product":
            return GlobalAndArmDotProductNetwork(
                obs, global_layers=self.hidden_sizes, arm_layers=self.hidden_sizes, seed=self.seed
            )
        return PerArmRewardNetwork(obs, common_layers=self.hidden_sizes, seed=self.seed)

    def optimizer(self) -> Any:
        import tf_keras

        # weight_decay=None, not 0.0: the optimizer TF-Agents' numbers were pinned with.
        return tf_keras.optimizers.Adam(self.learning_rate, weight_decay=self.weight_decay or None)

    @property
    def log_loss(self) -> bool:
        """The network's outputs are logits of 0/1 rewards."""
        return self.reward_loss == "sigmoid_cross_entropy"

    def error_loss_fn(self) -> Any:
        from rlops.agents.bandits import mean_squared_error

        return sigmoid_cross_entropy if self.log_loss else mean_squared_error


def sigmoid_cross_entropy(labels: Any, logits: Any, weights: Any = 1.0, reduction: Any = None) -> Any:
    """Elementwise log loss of 0/1 rewards on logits: `tf.compat.v1.losses.sigmoid_cross_entropy`
    with reduction NONE (the agent reduces), without its v1 loss collections."""
    import tensorflow as tf

    del reduction
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits) * weights
