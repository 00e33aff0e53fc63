"""Builds the bandit agent the trainer section names for the Examples' specs (plain, masked,
per-arm), through the registry: the agent's own module supplies the agent, from its options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlops.components.trainer.agents.base import BuildInputs
from rlops.components.trainer.agents.registry import agent_spec
from rlops.components.trainer.kinds import KIND_FACTS

if TYPE_CHECKING:
    import tensorflow as tf


def bandit_specs(context_dim: int, num_actions: int, minimum: int = 0) -> tuple:
    import tensorflow as tf

    from rlops.agents import specs
    from rlops.agents.trajectories import time_step_spec

    observation_spec = tf.TensorSpec((context_dim,), tf.float32, "context")
    action_spec = specs.BoundedTensorSpec((), tf.int32, minimum, minimum + num_actions - 1, name="action")
    return time_step_spec(observation_spec), action_spec


def per_arm_specs(global_dim: int, num_arms: int, arm_dim: int) -> tuple:
    import tensorflow as tf

    from rlops.agents import specs
    from rlops.agents.trajectories import time_step_spec

    observation_spec = {
        "global": tf.TensorSpec((global_dim,), tf.float32, "global"),
        "per_arm": tf.TensorSpec((num_arms, arm_dim), tf.float32, "per_arm"),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, num_arms, name="num_actions"),
    }
    action_spec = specs.BoundedTensorSpec((), tf.int32, 0, num_arms - 1, name="action")
    return time_step_spec(observation_spec), action_spec


def make_bandit_agent(
    config: Any,
    context_dim: int,
    train_step: tf.Variable,
    per_arm: tuple[int, int, int] | None = None,
    masked: bool = False,
) -> Any:
    """The agent the trainer section `config` names, for records of one choice of K.
    `per_arm` (global dim, K, arm dim): the agent scores each candidate's features. `masked`:
    the observation is {'observation', 'action_mask'} and the agent's policies act among the
    allowed actions only (TF-Agents' observation_and_action_constraint_splitter)."""
    from rlops.components.trainer import masks

    spec = agent_spec(config.agent)
    if not KIND_FACTS[spec.kind].sized_by_num_actions:
        raise ValueError(f"trainer.agent: '{config.agent}' is not a bandit agent")
    if per_arm is not None:
        if not spec.per_arm:
            raise ValueError(f"trainer.agent: '{config.agent}' cannot score per-arm features")
        if config.action_minimum:
            raise ValueError(
                f"trainer.action_minimum: {config.action_minimum}, but per-arm records log the chosen "
                "candidate's slot, counted from 0; set action_spec.minimum to 0"
            )
        ts_spec, action_spec = per_arm_specs(*per_arm)
    else:
        assert config.num_actions is not None  # validated: records of this kind are sized by it
        ts_spec, action_spec = bandit_specs(context_dim, config.num_actions, config.action_minimum)
    scored = ts_spec.observation  # what the network / linear model sees
    splitter = None
    if masked:
        ts_spec = ts_spec._replace(
            observation=masks.with_mask(scored, int(action_spec.maximum) - int(action_spec.minimum) + 1)
        )
        splitter = masks.split_mask
    return spec.build(
        spec.options_from(config), BuildInputs(ts_spec, action_spec, scored, train_step, splitter, per_arm is not None)
    )


def serving_policy(agent: Any) -> Any:
    """What production serves: the greedy policy (LinUCB/LinTS: exploit only)."""
    return getattr(agent, "greedy_policy", None) or agent.policy
