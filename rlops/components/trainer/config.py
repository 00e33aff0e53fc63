"""The Trainer's typed config: which agent, its hyperparameters, the budget, the strategy.

A plain dataclass that round-trips through JSON (the TFX component passes it as an execution
property string, the KFP component as a string parameter). Unknown keys are errors that name
the key: a typo in a nightly job's config should fail before anything runs.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

BANDIT_AGENTS = ("neural_epsilon_greedy", "lin_ucb", "lin_ts")
AGENTS = BANDIT_AGENTS + ("ppo",)


@dataclass
class TrainerConfig:
    agent: str = "neural_epsilon_greedy"
    # Bandits (offline, from an Examples artifact of bandit feedback).
    num_actions: int | None = None
    hidden_sizes: tuple[int, ...] = (64,)
    learning_rate: float = 1e-3
    epsilon: float = 0.1                 # collect (logging) policy's exploration
    alpha: float = 1.0                   # LinUCB / LinTS exploration width
    batch_size: int = 32
    train_steps: int = 2_000
    # PPO (online against a Gymnasium env): PPOConfig fields, e.g. {"env_id": "CartPole-v1"}.
    ppo: dict[str, Any] = field(default_factory=dict)
    # Learner.
    strategy: str = "auto"
    steps_per_run: int = 100             # train steps per tf.function call
    checkpoint_interval: int = 500
    summary_interval: int = 100
    max_checkpoints_to_keep: int = 3
    seed: int = 0

    def __post_init__(self):
        self.hidden_sizes = tuple(self.hidden_sizes)
        self.validate()

    def validate(self) -> None:
        if self.agent not in AGENTS:
            raise ValueError(f"trainer.agent: unknown agent '{self.agent}'; choose one of {', '.join(AGENTS)}")
        if self.agent in BANDIT_AGENTS and (self.num_actions is None or self.num_actions < 2):
            raise ValueError(f"trainer.num_actions: bandit agent '{self.agent}' needs num_actions >= 2, "
                             f"got {self.num_actions}")
        if self.agent == "ppo" and not self.ppo.get("env_id"):
            raise ValueError("trainer.ppo.env_id: PPO trains online and needs a Gymnasium environment id")
        for name in ("batch_size", "train_steps", "steps_per_run"):
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        if self.agent == "ppo":
            from rlops.train.on_policy import PPOConfig
            known = {f.name for f in dataclasses.fields(PPOConfig)}
            unknown = sorted(set(self.ppo) - known)
            if unknown:
                raise ValueError(f"trainer.ppo.{unknown[0]}: unknown PPO option; known: {', '.join(sorted(known))}")

    @property
    def is_bandit(self) -> bool:
        return self.agent in BANDIT_AGENTS

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainerConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"trainer.{unknown[0]}: unknown key; known keys: {', '.join(sorted(known))}")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "TrainerConfig":
        return cls.from_dict(json.loads(text))
