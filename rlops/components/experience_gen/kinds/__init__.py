"""ExperienceGen's table of decision kinds: the kind's name (rlops.components.common.decision_kinds)
-> how ExperienceGen reads, checks, groups and writes its logs (a RecordKind, kinds/base.py).

One module per kind holds all of it: bandit.py, trajectory.py, slate.py. A new kind is its module
and one row here; nothing outside this package tests a kind's name.
"""

from __future__ import annotations

from rlops.components.common.decision_kinds import decision_kind
from rlops.components.experience_gen.kinds.bandit import Bandit
from rlops.components.experience_gen.kinds.base import RecordKind
from rlops.components.experience_gen.kinds.slate import Slate
from rlops.components.experience_gen.kinds.trajectory import Trajectory

KINDS: dict[str, RecordKind] = {k.name: k for k in (Bandit(), Trajectory(), Slate())}


def record_kind(name: str) -> RecordKind:
    """The table's row for `name`; an unknown name is decision_kinds' one error naming the closest."""
    decision_kind(name)
    return KINDS[name]


__all__ = ["KINDS", "RecordKind", "record_kind"]
