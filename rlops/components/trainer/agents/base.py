"""What the registry knows of an agent (`AgentSpec`) and what its builder is given (`BuildInputs`).

TensorFlow-free, so the config loader reads the registry without importing TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rlops.components.common.decision_kinds import KINDS

if TYPE_CHECKING:
    from rlops.components.trainer.config import TrainerConfig

BANDIT = "bandit"  # trained offline from logged bandit feedback (the bandit pipeline)
PPO = "ppo"  # trained online in an environment, or offline from logged trajectories (the ppo pipeline)
RANKING = "ranking"  # trained offline from logged slates (the ranking pipeline)


@dataclass(frozen=True)
class BuildInputs:
    """The specs an agent is built for (duck-types the environment build_ppo_agent reads)."""

    time_step_spec: Any  # what the agent's policies take (with the action mask when `splitter` is set)
    action_spec: Any
    observation_spec: Any  # what the network / linear model scores (without the mask)
    train_step: Any = None  # the train-step counter (tf.Variable); None: the agent makes its own
    splitter: Callable | None = None  # observation_and_action_constraint_splitter (logged masks)
    per_arm: bool = False  # the observation holds each candidate's features ({global, per_arm, num_actions})


Builder = Callable[["TrainerConfig", BuildInputs], Any]


@dataclass(frozen=True)
class AgentSpec:
    """One registered agent: its name (`trainer.agent`), builder, and the facts the Trainer and the
    config loader ask of it instead of branching on its name."""

    name: str
    build: Builder
    pipeline: str  # BANDIT, PPO or RANKING: which pipeline (and training path) trains it
    linear: bool = False  # closed-form sums: one pass by default, order-free, forgetting_factor applies
    per_arm: bool = False  # can score each candidate's features (per-arm records)
    reward_network: bool = False  # trains a reward network: trainer.network and trainer.reward_loss apply
    batch_size: int = 32  # default records per train step and replica
    repeat_steps: int | None = None  # without num_epochs: the split repeats for this many train steps (None: one pass)

    @property
    def is_bandit(self) -> bool:
        return self.pipeline == BANDIT

    @property
    def decision_kind(self) -> str:
        """The decision kind whose records it trains on (rlops.components.common.decision_kinds)."""
        return next(kind.name for kind in KINDS.values() if kind.pipeline == self.pipeline)


def linear_bandit(agent_cls: Any, config: TrainerConfig, inputs: BuildInputs) -> Any:
    """LinUCB / LinTS (one model per arm, or one shared model over per-arm features)."""
    return agent_cls(
        inputs.time_step_spec,
        inputs.action_spec,
        alpha=config.alpha,
        add_bias=True,
        accepts_per_arm_features=inputs.per_arm,
        train_step_counter=inputs.train_step,
        observation_and_action_constraint_splitter=inputs.splitter,
    )
