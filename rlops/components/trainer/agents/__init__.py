"""Agents registered by name, Acme-style: one module per agent (its builder, its options and its
SPEC: pipeline, linear, per-arm, default batch size), one table (registry.AGENTS) that the
Trainer and the config loader ask instead of branching on names.

A new agent touches this package only: its module (e.g. `my_agent.py` with `build` and `SPEC`)
and its line in registry.py. Its hyperparameters are TrainerConfig fields or its own section.
"""

from rlops.components.trainer.agents.base import BANDIT, PPO, RANKING, AgentSpec, BuildInputs
from rlops.components.trainer.agents.build import bandit_specs, make_bandit_agent, per_arm_specs, serving_policy
from rlops.components.trainer.agents.registry import AGENTS, agent_names, agent_spec

__all__ = [
    "AGENTS",
    "BANDIT",
    "PPO",
    "RANKING",
    "AgentSpec",
    "BuildInputs",
    "agent_names",
    "agent_spec",
    "bandit_specs",
    "make_bandit_agent",
    "per_arm_specs",
    "serving_policy",
]
