"""lin_ucb: LinUCB, closed-form ridge statistics per arm (or shared, per-arm features), acting
on the upper confidence bound. Options: LinearOptions (agents/linear.py)."""

from __future__ import annotations

from typing import Any

from rlops.components.common.decision_kinds import BANDIT
from rlops.components.trainer.agents.base import AgentSpec, BuildInputs
from rlops.components.trainer.agents.linear import BATCH_SIZE, LinearOptions, build_linear


def build(options: LinearOptions, inputs: BuildInputs) -> Any:
    from rlops.agents.bandits import LinUCBAgent

    return build_linear(LinUCBAgent, options, inputs)


SPEC = AgentSpec("lin_ucb", build, LinearOptions, BANDIT, linear=True, per_arm=True, batch_size=BATCH_SIZE)
