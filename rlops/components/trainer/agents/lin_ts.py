"""lin_ts: linear Thompson sampling over the same closed-form statistics as LinUCB.
Options (trainer.*): alpha, forgetting_factor (warm start)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlops.components.trainer.agents.base import BANDIT, AgentSpec, BuildInputs, linear_bandit

if TYPE_CHECKING:
    from rlops.components.trainer.config import TrainerConfig

BATCH_SIZE = 4096  # closed-form sums gain from big batches


def build(config: TrainerConfig, inputs: BuildInputs) -> Any:
    from rlops.agents.bandits import LinearThompsonSamplingAgent

    return linear_bandit(LinearThompsonSamplingAgent, config, inputs)


SPEC = AgentSpec("lin_ts", build, BANDIT, linear=True, per_arm=True, batch_size=BATCH_SIZE)
