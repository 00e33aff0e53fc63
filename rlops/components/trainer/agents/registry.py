"""The one table of agents: `trainer.agent` -> its AgentSpec. A new agent is its module in this
package (options, builder, SPEC) and its line below."""

from __future__ import annotations

from rlops.components.json_config import closest
from rlops.components.trainer.agents import lin_ts, lin_ucb, neural_epsilon_greedy, ppo, ranking
from rlops.components.trainer.agents.base import AgentSpec

AGENTS: dict[str, AgentSpec] = {
    spec.name: spec
    for spec in (
        neural_epsilon_greedy.SPEC,
        lin_ucb.SPEC,
        lin_ts.SPEC,
        ppo.SPEC,
        ranking.SPEC,
    )
}


def agent_spec(name: str) -> AgentSpec:
    """The registered agent `name`; unknown: one line with the closest names."""
    if name not in AGENTS:
        raise ValueError(f"trainer.agent: unknown agent '{name}'; {closest(name, AGENTS)}")
    return AGENTS[name]


def agent_names(pipeline: str) -> list[str]:
    """The agents the pipeline `pipeline` (bandit, ppo, ranking) trains: those of its decision kind, in registry order."""
    return [name for name, spec in AGENTS.items() if spec.pipeline == pipeline]
