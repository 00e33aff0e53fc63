"""neural_epsilon_greedy: a reward network trained by regression, acting epsilon-greedily.

Options (trainer.*): hidden_sizes, learning_rate, epsilon, seed. Without num_epochs the split
repeats for train_steps steps (TRAIN_STEPS when unset).
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

    from rlops.agents.bandits import NeuralEpsilonGreedyAgent, PerArmRewardNetwork
    from rlops.agents.networks import RewardNetwork

    if inputs.per_arm:  # scores each candidate: {global, per_arm} (num_actions only masks)
        obs = {k: v for k, v in inputs.observation_spec.items() if k != "num_actions"}
        network = PerArmRewardNetwork(obs, common_layers=config.hidden_sizes, seed=config.seed)
    else:
        assert config.num_actions is not None  # TrainerConfig.validate: a bandit agent needs it
        network = RewardNetwork(inputs.observation_spec, config.num_actions, config.hidden_sizes, seed=config.seed)
    return NeuralEpsilonGreedyAgent(
        inputs.time_step_spec,
        inputs.action_spec,
        network,
        tf_keras.optimizers.Adam(config.learning_rate),
        epsilon=config.epsilon,
        accepts_per_arm_features=inputs.per_arm,
        train_step_counter=inputs.train_step,
        observation_and_action_constraint_splitter=inputs.splitter,
    )


SPEC = AgentSpec("neural_epsilon_greedy", build, BANDIT, per_arm=True, batch_size=BATCH_SIZE, repeat_steps=TRAIN_STEPS)
