"""neural_epsilon_greedy: a reward network trained by regression, acting epsilon-greedily.

Options: NeuralEpsilonGreedyOptions (the reward network's, agents/reward_network.py, plus epsilon
and num_actions). Without num_epochs the split repeats for train_steps steps (TRAIN_STEPS when unset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlops.components.common.decision_kinds import BANDIT
from rlops.components.trainer.agents.base import AgentSpec, BuildInputs
from rlops.components.trainer.agents.reward_network import RewardNetworkOptions

BATCH_SIZE = 32  # records per train step and replica
TRAIN_STEPS = 2_000  # the budget without num_epochs or train_steps


@dataclass(frozen=True)
class NeuralEpsilonGreedyOptions(RewardNetworkOptions):
    """neural_epsilon_greedy's options: its reward network's (trainer.hidden_sizes, network,
    reward_loss, learning_rate, weight_decay, average_weights, seed), trainer.epsilon and trainer.num_actions."""

    epsilon: float = 0.1
    """The collect (logging) policy's exploration."""
    num_actions: int | None = None
    """Without per-arm features: the network's outputs, one per action (the bandit records' action count)."""

    @classmethod
    def from_trainer(cls, section: Any) -> NeuralEpsilonGreedyOptions:
        return cls(**cls.network_keys(section), epsilon=section.epsilon, num_actions=section.num_actions)


def build(options: NeuralEpsilonGreedyOptions, inputs: BuildInputs) -> Any:
    from rlops.agents.bandits import NeuralEpsilonGreedyAgent
    from rlops.agents.networks import RewardNetwork

    if options.network == "dot_product" and not inputs.per_arm:
        raise ValueError(
            "trainer.network: 'dot_product' scores each item by its features; these examples have no "
            "per-arm features (give experience_gen.bandit_columns.item_features), or use 'common_tower'"
        )
    if inputs.per_arm:  # scores each candidate
        network = options.per_arm_network(inputs.observation_spec)
    else:
        assert options.num_actions is not None  # validated: records of its kind are sized by it
        network = RewardNetwork(inputs.observation_spec, options.num_actions, options.hidden_sizes, seed=options.seed)
    return NeuralEpsilonGreedyAgent(
        inputs.time_step_spec,
        inputs.action_spec,
        network,
        options.optimizer(),
        epsilon=options.epsilon,
        accepts_per_arm_features=inputs.per_arm,
        train_step_counter=inputs.train_step,
        observation_and_action_constraint_splitter=inputs.splitter,
        error_loss_fn=options.error_loss_fn(),
    )


SPEC = AgentSpec(
    "neural_epsilon_greedy",
    build,
    NeuralEpsilonGreedyOptions,
    BANDIT,
    per_arm=True,
    batch_size=BATCH_SIZE,
    repeat_steps=TRAIN_STEPS,
)
