"""Contextual bandit agents with the TF-Agents agent API (train / policy / collect_policy)."""

from rlops.agents.bandits.base import BanditAgent
from rlops.agents.bandits.linear import (
    LinearBanditAgent,
    LinearBanditPolicy,
    LinearBanditVariables,
    LinearThompsonSamplingAgent,
    LinearUCBAgent,
    LinUCBAgent,
)
from rlops.agents.bandits.neural_epsilon_greedy import (
    BanditEpsilonGreedyPolicy,
    GreedyRewardPredictionPolicy,
    NeuralEpsilonGreedyAgent,
    mean_squared_error,
)
from rlops.agents.bandits.per_arm import PerArmRewardNetwork
from rlops.agents.bandits.utils import check_action_spec

__all__ = [
    "BanditAgent",
    "LinearBanditAgent",
    "LinearBanditPolicy",
    "LinearBanditVariables",
    "LinUCBAgent",
    "LinearUCBAgent",
    "LinearThompsonSamplingAgent",
    "BanditEpsilonGreedyPolicy",
    "GreedyRewardPredictionPolicy",
    "NeuralEpsilonGreedyAgent",
    "PerArmRewardNetwork",
    "mean_squared_error",
    "check_action_spec",
]
