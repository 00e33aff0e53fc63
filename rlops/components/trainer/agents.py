"""Builds the agent a TrainerConfig names, with networks and optimizer under the strategy."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from rlops.agents import specs
from rlops.agents.bandits import LinearThompsonSamplingAgent, LinUCBAgent, NeuralEpsilonGreedyAgent
from rlops.agents.networks import RewardNetwork
from rlops.agents.trajectories import time_step_spec
from rlops.components.trainer import masks
from rlops.components.trainer.config import TrainerConfig


def bandit_specs(context_dim: int, num_actions: int, minimum: int = 0) -> tuple:
    observation_spec = tf.TensorSpec((context_dim,), tf.float32, "context")
    action_spec = specs.BoundedTensorSpec((), tf.int32, minimum, minimum + num_actions - 1, name="action")
    return time_step_spec(observation_spec), action_spec


def per_arm_specs(global_dim: int, num_arms: int, arm_dim: int) -> tuple:
    observation_spec = {
        "global": tf.TensorSpec((global_dim,), tf.float32, "global"),
        "per_arm": tf.TensorSpec((num_arms, arm_dim), tf.float32, "per_arm"),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, num_arms, name="num_actions"),
    }
    action_spec = specs.BoundedTensorSpec((), tf.int32, 0, num_arms - 1, name="action")
    return time_step_spec(observation_spec), action_spec


def make_bandit_agent(
    config: TrainerConfig,
    context_dim: int,
    train_step: tf.Variable,
    per_arm: tuple[int, int, int] | None = None,
    masked: bool = False,
):
    """`per_arm` (global dim, K, arm dim): the agent scores each candidate's features. `masked`:
    the observation is {'observation', 'action_mask'} and the agent's policies act among the
    allowed actions only (TF-Agents' observation_and_action_constraint_splitter)."""
    if per_arm is not None:
        if config.action_minimum:
            raise ValueError(
                f"trainer.action_minimum: {config.action_minimum}, but per-arm records log the chosen "
                "candidate's slot, counted from 0; set action_spec.minimum to 0"
            )
        ts_spec, action_spec = per_arm_specs(*per_arm)
    else:
        ts_spec, action_spec = bandit_specs(context_dim, config.num_actions, config.action_minimum)
    scored = ts_spec.observation  # what the network / linear model sees
    splitter = None
    if masked:
        ts_spec = ts_spec._replace(
            observation=masks.with_mask(scored, int(action_spec.maximum) - int(action_spec.minimum) + 1)
        )
        splitter = masks.split_mask
    if per_arm is not None:
        return _make_per_arm_agent(config, ts_spec, action_spec, scored, train_step, splitter)
    if config.agent == "neural_epsilon_greedy":
        network = RewardNetwork(scored, config.num_actions, config.hidden_sizes, seed=config.seed)
        return NeuralEpsilonGreedyAgent(
            ts_spec,
            action_spec,
            network,
            tf_keras.optimizers.Adam(config.learning_rate),
            epsilon=config.epsilon,
            train_step_counter=train_step,
            observation_and_action_constraint_splitter=splitter,
        )
    agent_cls = LinUCBAgent if config.agent == "lin_ucb" else LinearThompsonSamplingAgent
    return agent_cls(
        ts_spec,
        action_spec,
        alpha=config.alpha,
        add_bias=True,
        train_step_counter=train_step,
        observation_and_action_constraint_splitter=splitter,
    )


def serving_policy(agent):
    """What production serves: the greedy policy (LinUCB/LinTS: exploit only)."""
    return getattr(agent, "greedy_policy", None) or agent.policy


def _make_per_arm_agent(config: TrainerConfig, ts_spec, action_spec, scored: dict, train_step: tf.Variable, splitter):
    from rlops.agents.bandits import PerArmRewardNetwork

    if config.agent == "neural_epsilon_greedy":
        obs = {k: v for k, v in scored.items() if k != "num_actions"}
        network = PerArmRewardNetwork(obs, common_layers=config.hidden_sizes, seed=config.seed)
        return NeuralEpsilonGreedyAgent(
            ts_spec,
            action_spec,
            network,
            tf_keras.optimizers.Adam(config.learning_rate),
            epsilon=config.epsilon,
            accepts_per_arm_features=True,
            train_step_counter=train_step,
            observation_and_action_constraint_splitter=splitter,
        )
    agent_cls = LinUCBAgent if config.agent == "lin_ucb" else LinearThompsonSamplingAgent
    return agent_cls(
        ts_spec,
        action_spec,
        alpha=config.alpha,
        add_bias=True,
        accepts_per_arm_features=True,
        train_step_counter=train_step,
        observation_and_action_constraint_splitter=splitter,
    )
