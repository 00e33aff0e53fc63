"""The options and builder LinUCB and LinTS share: closed-form ridge statistics per arm (or one
shared model over per-arm features)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rlops.components.trainer.agents.base import BuildInputs

BATCH_SIZE = 4096  # default records per train step: closed-form sums gain from big batches


@dataclass(frozen=True)
class LinearOptions:
    """lin_ucb's and lin_ts's options (trainer.alpha, trainer.forgetting_factor)."""

    alpha: float = 1.0
    """Exploration width: of the confidence bound (LinUCB) or the posterior's sampling (LinTS)."""
    forgetting_factor: float = 1.0
    """Warm start: A = f * A_base + sum x x^T, b = f * b_base + sum r x over the new split (1.0: the
    base model's statistics count in full; < 1 discounts older days once per run). The Trainer's
    bandit path applies it (agent.forget) after restoring the base model."""

    EXCLUSIVE_KEYS: ClassVar[dict[str, str]] = {
        "forgetting_factor": "discounts LinUCB / LinTS statistics at warm start; agent '{agent}' has none "
        "(leave it at 1.0)",
    }

    @classmethod
    def from_trainer(cls, section: Any) -> LinearOptions:
        return cls(alpha=section.alpha, forgetting_factor=section.forgetting_factor)

    def validate(self) -> None:
        if not 0.0 < self.forgetting_factor <= 1.0:
            raise ValueError(f"trainer.forgetting_factor must be in (0, 1], got {self.forgetting_factor}")


def build_linear(agent_cls: Any, options: LinearOptions, inputs: BuildInputs) -> Any:
    """A LinUCB / LinTS agent (`agent_cls`) for `inputs`' specs."""
    return agent_cls(
        inputs.time_step_spec,
        inputs.action_spec,
        alpha=options.alpha,
        add_bias=True,
        accepts_per_arm_features=inputs.per_arm,
        train_step_counter=inputs.train_step,
        observation_and_action_constraint_splitter=inputs.splitter,
    )
