"""ppo: PPO (clipped surrogate, GAE), trained online in a Gymnasium environment or offline from
logged trajectories. Options: PPOOptions (trainer.ppo, trainer.ppo_offline, num_actions, seed)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Union

from rlops.components.common.decision_kinds import TRAJECTORY
from rlops.components.json_config import PartialOf, convert
from rlops.components.trainer.agents.base import AgentSpec, BuildInputs

# A PPO option's value as YAML/JSON gives it (checked against PPOConfig's own hint per key).
PPOValue = Union[bool, int, float, str, list, dict, None]
# trainer.ppo: some of PPOConfig's fields, each checked against PPOConfig's type hint.
PPOSection = Annotated[dict[str, PPOValue], PartialOf("rlops.train.on_policy:PPOConfig")]


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


@dataclass(frozen=True)
class PPOOptions:
    """ppo's options: trainer.ppo (PPOConfig's fields as given), trainer.ppo_offline,
    trainer.num_actions and trainer.seed."""

    ppo: dict[str, Any] = field(default_factory=dict)
    """Some of PPOConfig's fields (the rest keep PPOConfig's defaults); online it needs env_id."""
    offline: PPOOfflineConfig = PPOOfflineConfig()
    """How it trains from logged trajectories (batch of windows, window length, passes)."""
    num_actions: int | None = None
    """Sizes a discrete action the logs leave open (None: the environment or the logs size it)."""
    seed: int = 0
    """PPOConfig's seed unless `ppo` gives one."""

    EXCLUSIVE_KEYS: ClassVar[dict[str, str]] = {
        "ppo_offline": "options for agent 'ppo', but agent is '{agent}'",
    }

    @classmethod
    def from_trainer(cls, section: Any) -> PPOOptions:
        return cls(dict(section.ppo), section.ppo_offline, section.num_actions, section.seed)

    def validate(self) -> None:
        convert(PPOSection, self.ppo, "trainer.ppo", make=False)  # the Python API skips build()
        self.offline.validate()
        if self.num_actions is not None and self.num_actions < 2:
            raise ValueError(f"trainer.num_actions: needs >= 2 actions, got {self.num_actions}")

    def ppo_config(self) -> Any:
        """The PPOConfig these options give (rlops.train.on_policy; imports TensorFlow)."""
        from rlops.train.on_policy import PPOConfig

        return dataclasses.replace(PPOConfig(seed=self.seed), **self.ppo)


def build(options: PPOOptions, inputs: BuildInputs) -> Any:
    """The agent for `inputs`' specs with trainer.ppo's hyperparameters (it keeps its own step counter)."""
    from rlops.train.on_policy import build_ppo_agent

    return build_ppo_agent(options.ppo_config(), inputs)  # type: ignore[arg-type]


SPEC = AgentSpec("ppo", build, PPOOptions, TRAJECTORY)
