"""ppo: PPO (clipped surrogate, GAE), trained online in a Gymnasium environment or offline from
logged trajectories. Options: trainer.ppo (PPOConfig fields) and trainer.ppo_offline (below)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.components.trainer.agents.base import PPO, AgentSpec, BuildInputs

if TYPE_CHECKING:
    from rlops.components.trainer.config import TrainerConfig


@dataclass(frozen=True)
class PPOOfflineConfig:
    """How PPO trains from logged trajectories (`trainer.ppo_offline`): episodes are cut into
    windows of `window_length` steps plus a bootstrap row, `batch_size` windows per train step."""

    batch_size: int = 16  # windows per train step: the [B, T+1] batch
    window_length: int = 32  # T: training rows per window
    num_passes: int = 4  # passes over the train split
    max_train_steps: int = 0  # > 0 caps the train steps (a budget, smoke tests)
    shuffle_buffer: int = 4096  # windows

    def validate(self) -> None:
        for name in ("batch_size", "window_length", "num_passes", "shuffle_buffer"):
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.ppo_offline.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_train_steps < 0:
            raise ValueError(f"trainer.ppo_offline.max_train_steps must be >= 0, got {self.max_train_steps}")


def build(config: TrainerConfig, inputs: BuildInputs) -> Any:
    """The agent for `inputs`' specs with trainer.ppo's hyperparameters (it keeps its own step counter)."""
    from rlops.train.on_policy import PPOConfig, build_ppo_agent

    return build_ppo_agent(dataclasses.replace(PPOConfig(seed=config.seed), **config.ppo), inputs)  # type: ignore[arg-type]


SPEC = AgentSpec("ppo", build, PPO)
