"""ExperienceGen's table of decision kinds: the kind's name (rlops.components.common.decision_kinds)
-> how ExperienceGen reads, checks, groups and writes its logs (a RecordKind, kinds/base.py).

One module per kind holds all of it: bandit.py, trajectory.py, slate.py. A new kind is its module
and one row here; nothing outside this package tests a kind's name.
"""

from __future__ import annotations

from typing import Sequence

from rlops.components.common.decision_kinds import decision_kind
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.kinds.bandit import Bandit
from rlops.components.experience_gen.kinds.base import RecordKind
from rlops.components.experience_gen.kinds.slate import Slate
from rlops.components.experience_gen.kinds.trajectory import Trajectory
from rlops.components.experience_gen.layout import STRING, TIMESTAMP, Field, Layout, SourceSchema

KINDS: dict[str, RecordKind] = {k.name: k for k in (Bandit(), Trajectory(), Slate())}


def record_kind(name: str) -> RecordKind:
    """The table's row for `name`; an unknown name is decision_kinds' one error naming the closest."""
    decision_kind(name)
    return KINDS[name]


def resolve_layout(config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str] = ()) -> Layout:
    """The layout of the config's kind over a source's columns, with its split key or time.
    `item_ids`: the item table's ids, in its order (per-arm columns: one column per item)."""
    fields = record_kind(config.record_kind).fields(config, schema, item_ids)
    by_column = {f.columns[0]: f for f in fields if len(f.columns) == 1}
    key = time = None
    s = config.splits
    if s.time_column:
        time = by_column.get(s.time_column)
        if time is None or time.dtype != TIMESTAMP:
            time = Field("_split_time", (s.time_column,), TIMESTAMP)
    elif s.key:
        key = Field("_split_key", (s.key,), STRING)
    return Layout(config.record_kind, tuple(fields), key, time)


__all__ = ["KINDS", "RecordKind", "record_kind", "resolve_layout"]
