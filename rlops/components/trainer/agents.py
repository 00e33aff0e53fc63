"""Builds the agent a TrainerConfig names, with networks and optimizer under the strategy."""
from __future__ import annotations

import tensorflow as tf
import tf_keras

from rlops.agents import specs
from rlops.agents.bandits import LinearThompsonSamplingAgent, LinUCBAgent, NeuralEpsilonGreedyAgent
from rlops.agents.networks import RewardNetwork
from rlops.agents.trajectories import time_step_spec
from rlops.components.trainer.config import TrainerConfig


def bandit_specs(context_dim: int, num_actions: int) -> tuple:
    observation_spec = tf.TensorSpec((context_dim,), tf.float32, "context")
    action_spec = specs.BoundedTensorSpec((), tf.int32, 0, num_actions - 1, name="action")
    return time_step_spec(observation_spec), action_spec


def make_bandit_agent(config: TrainerConfig, context_dim: int, train_step: tf.Variable):
    ts_spec, action_spec = bandit_specs(context_dim, config.num_actions)
    if config.agent == "neural_epsilon_greedy":
        network = RewardNetwork(ts_spec.observation, config.num_actions, config.hidden_sizes, seed=config.seed)
        return NeuralEpsilonGreedyAgent(ts_spec, action_spec, network, tf_keras.optimizers.Adam(config.learning_rate),
                                        epsilon=config.epsilon, train_step_counter=train_step)
    agent_cls = LinUCBAgent if config.agent == "lin_ucb" else LinearThompsonSamplingAgent
    return agent_cls(ts_spec, action_spec, alpha=config.alpha, add_bias=True, train_step_counter=train_step)


def serving_policy(agent):
    """What production serves: the greedy policy (LinUCB/LinTS: exploit only)."""
    return getattr(agent, "greedy_policy", None) or agent.policy
