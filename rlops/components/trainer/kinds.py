"""What the Trainer's config and builders ask of each decision kind's records: the Trainer's own
row per kind of decision_kinds.KINDS (TensorFlow-free: the config loader reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.components.common.decision_kinds import BANDIT, SLATE, TRAJECTORY


@dataclass(frozen=True)
class KindFacts:
    """One row: what the agents of one decision kind need from the trainer section."""

    # trainer.num_actions (>= 2) is the records' action count: one item of K per record, the
    # Examples' action spec (agents.build.make_bandit_agent builds these agents).
    sized_by_num_actions: bool
    # Can train without examples, online in a Gymnasium environment (trainer.ppo.env_id).
    online: bool


KIND_FACTS: dict[str, KindFacts] = {
    BANDIT: KindFacts(sized_by_num_actions=True, online=False),
    TRAJECTORY: KindFacts(sized_by_num_actions=False, online=True),
    SLATE: KindFacts(sized_by_num_actions=False, online=False),
}
