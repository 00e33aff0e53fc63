"""lin_ts: linear Thompson sampling over the same closed-form statistics as LinUCB.
Options: LinearOptions (agents/linear.py)."""

from __future__ import annotations

from typing import Any

from rlops.components.common.decision_kinds import BANDIT
from rlops.components.trainer.agents.base import AgentSpec, BuildInputs
from rlops.components.trainer.agents.linear import BATCH_SIZE, LinearOptions, build_linear


def build(options: LinearOptions, inputs: BuildInputs) -> Any:
    from rlops.agents.bandits import LinearThompsonSamplingAgent

    return build_linear(LinearThompsonSamplingAgent, options, inputs)


SPEC = AgentSpec("lin_ts", build, LinearOptions, BANDIT, linear=True, per_arm=True, batch_size=BATCH_SIZE)
