"""Contextual bandit agents with the TF-Agents agent API (train / policy / collect_policy)."""
from rlops.agents.bandits.base import BanditAgent
from rlops.agents.bandits.linear import (LinearBanditAgent, LinearBanditPolicy, LinearThompsonSamplingAgent,
                                         LinUCBAgent)
from rlops.agents.bandits.neural_epsilon_greedy import (GreedyRewardPredictionPolicy,
                                                        NeuralEpsilonGreedyAgent, mean_squared_error)
from rlops.agents.bandits.utils import check_action_spec

__all__ = [
    "BanditAgent", "LinearBanditAgent", "LinearBanditPolicy", "LinUCBAgent", "LinearThompsonSamplingAgent",
    "GreedyRewardPredictionPolicy", "NeuralEpsilonGreedyAgent", "mean_squared_error", "check_action_spec",
]
