"""neural_epsilon_greedy: a reward network trained by regression, acting epsilon-greedily.

Options (trainer.*): hidden_sizes, network (per-arm: common_tower or dot_product), reward_loss
(squared_error or sigmoid_cross_entropy), learning_rate, weight_decay, epsilon, seed. Without num_epochs the
split repeats for train_steps steps (TRAIN_STEPS when unset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlops.components.trainer.agents.base import BANDIT, AgentSpec, BuildInputs

if TYPE_CHECKING:
    from rlops.components.trainer.config import TrainerConfig

BATCH_SIZE = 32  # records per train step and replica
TRAIN_STEPS = 2_000  # the budget without num_epochs or train_steps


def build(config: TrainerConfig, inputs: BuildInputs) -> Any:
    import tf_keras

    from rlops.agents.bandits import NeuralEpsilonGreedyAgent, PerArmRewardNetwork, mean_squared_error
    from rlops.agents.bandits.dot_product import GlobalAndArmDotProductNetwork
    from rlops.agents.networks import RewardNetwork

    if config.network == "dot_product" and not inputs.per_arm:
        raise ValueError(
            "trainer.network: 'dot_product' scores each item by its features; these examples have no "
            "per-arm features (give experience_gen.bandit_columns.item_features), or use 'common_tower'"
        )
    if inputs.per_arm:  # scores each candidate: {global, per_arm} (num_actions only masks)
        obs = {k: v for k, v in inputs.observation_spec.items() if k != "num_actions"}
        if config.network == "dot_product":
            network = GlobalAndArmDotProductNetwork(
                obs, global_layers=config.hidden_sizes, arm_layers=config.hidden_sizes, seed=config.seed
            )
        else:
            network = PerArmRewardNetwork(obs, common_layers=config.hidden_sizes, seed=config.seed)
    else:
        assert config.num_actions is not None  # TrainerConfig.validate: a bandit agent needs it
        network = RewardNetwork(inputs.observation_spec, config.num_actions, config.hidden_sizes, seed=config.seed)
    return NeuralEpsilonGreedyAgent(
        inputs.time_step_spec,
        inputs.action_spec,
        network,
        # weight_decay=None, not 0.0: the optimizer TF-Agents' numbers were pinned with.
        tf_keras.optimizers.Adam(config.learning_rate, weight_decay=config.weight_decay or None),
        epsilon=config.epsilon,
        accepts_per_arm_features=inputs.per_arm,
        train_step_counter=inputs.train_step,
        observation_and_action_constraint_splitter=inputs.splitter,
        error_loss_fn=sigmoid_cross_entropy if config.reward_loss == "sigmoid_cross_entropy" else mean_squared_error,
    )


def sigmoid_cross_entropy(labels: Any, logits: Any, weights: Any = 1.0, reduction: Any = None) -> Any:
    """Elementwise log loss of 0/1 rewards on logits: `tf.compat.v1.losses.sigmoid_cross_entropy`
    with reduction NONE (the agent reduces), without its v1 loss collections."""
    import tensorflow as tf

    del reduction
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits) * weights


SPEC = AgentSpec(
    "neural_epsilon_greedy",
    build,
    BANDIT,
    per_arm=True,
    reward_network=True,
    batch_size=BATCH_SIZE,
    repeat_steps=TRAIN_STEPS,
)
