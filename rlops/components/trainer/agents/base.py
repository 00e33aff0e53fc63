"""What the registry knows of an agent (`AgentSpec`), what its options provide (`AgentOptions`)
and what its builder is given (`BuildInputs`).

TensorFlow-free, so the config loader reads the registry without importing TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

from rlops.components.common.decision_kinds import KINDS


class AgentOptions(Protocol):
    """An agent's own options: a frozen dataclass beside its builder, read from the trainer section."""

    # trainer.<key> -> the error when another agent's config sets it ({agent}: that agent's name):
    # keys only this agent's options read, which another agent must leave at their defaults.
    EXCLUSIVE_KEYS: ClassVar[dict[str, str]]

    @classmethod
    def from_trainer(cls, section: Any) -> AgentOptions:
        """The options as the trainer section (its YAML keys) gives them."""
        ...

    def validate(self) -> None:
        """Raises ValueError naming the trainer key of a value out of range."""
        ...


@dataclass(frozen=True)
class BuildInputs:
    """The specs an agent is built for (duck-types the environment build_ppo_agent reads)."""

    time_step_spec: Any  # what the agent's policies take (with the action mask when `splitter` is set)
    action_spec: Any
    observation_spec: Any  # what the network / linear model scores (without the mask)
    train_step: Any = None  # the train-step counter (tf.Variable); None: the agent makes its own
    splitter: Callable | None = None  # observation_and_action_constraint_splitter (logged masks)
    per_arm: bool = False  # the observation holds each candidate's features ({global, per_arm, num_actions})


Builder = Callable[[Any, BuildInputs], Any]  # (the agent's options, inputs) -> the agent


@dataclass(frozen=True)
class AgentSpec:
    """One registered agent: its name (`trainer.agent`), builder, options, and the facts the Trainer
    and the config loader ask of it instead of branching on its name."""

    name: str
    build: Builder
    options_class: type[AgentOptions]  # what `build` takes, made by its from_trainer
    kind: str  # the decision kind whose records it trains on (decision_kinds.KINDS)
    # closed-form sums: one pass by default, order-free (no user x item taste over per-arm features)
    linear: bool = False
    per_arm: bool = False  # can score each candidate's features (per-arm records)
    batch_size: int = 32  # default records per train step and replica
    repeat_steps: int | None = None  # without num_epochs: the split repeats for this many train steps (None: one pass)

    def options_from(self, section: Any) -> Any:
        """This agent's options as the trainer section gives them (what `build` takes)."""
        return self.options_class.from_trainer(section)

    @property
    def pipeline(self) -> str:
        """The pipeline that trains it (`rlops run <pipeline>`): its kind's."""
        return KINDS[self.kind].pipeline
