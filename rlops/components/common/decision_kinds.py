"""Decision kinds: what one logged record decides, as one table every component looks up.

A kind is `bandit` (one item of K per record), `trajectory` (the steps of an episode, for PPO) or
`slate` (an ordered list of L items of K). Each entry says how the kind's logs are laid out and
read: the config section that maps its columns, whether source rows are grouped into one record by
a key (an episode's steps, a page's shown items), the record format TFX's Examples artifact
declares, the pipeline that trains it, and the off-policy estimators that apply to it. Components
branch on these facts, never on the kind's name, so adding a kind adds an entry and its own modules.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

BANDIT = "bandit"
TRAJECTORY = "trajectory"
SLATE = "slate"

TF_EXAMPLE = "FORMAT_TF_EXAMPLE"
TF_SEQUENCE_EXAMPLE = "FORMAT_TF_SEQUENCE_EXAMPLE"


@dataclass(frozen=True)
class DecisionKind:
    """One row of the table (see the module docstring)."""

    name: str
    columns_section: str  # the ExperienceGen config section that maps the source's columns
    group_key: str | None  # the record field whose rows form one record (None: a row is a record)
    payload_format: str  # what the Examples artifact declares (TFX's payload_format)
    pipeline: str  # the pipeline that trains a policy for it: `rlops run <pipeline>`
    estimators: tuple[str, ...]  # off-policy estimators that apply to its records ((): none)
    unit: str  # what one record is, for counts printed to users

    @property
    def grouped(self) -> bool:
        return self.group_key is not None


SINGLE_ITEM_ESTIMATORS = ("ips", "snips", "dm", "dr", "sndr", "switch_dr", "dr_os")
SLATE_ESTIMATORS = ("sips", "iips", "rips", "snsips", "sniips", "snrips", "cascade_dr", "pi")

KINDS: dict[str, DecisionKind] = {
    k.name: k
    for k in (
        DecisionKind(BANDIT, "bandit_columns", None, TF_EXAMPLE, "bandit", SINGLE_ITEM_ESTIMATORS, "decision"),
        DecisionKind(TRAJECTORY, "trajectory_columns", "episode_id", TF_SEQUENCE_EXAMPLE, "ppo", (), "episode"),
        DecisionKind(SLATE, "slate_columns", "slate_id", TF_EXAMPLE, "ranking", SLATE_ESTIMATORS, "slate"),
    )
}


def decision_kind(name: str, where: str = "record_kind") -> DecisionKind:
    """The table's entry for `name`; an unknown name is one error naming the closest kinds."""
    kind = KINDS.get(name)
    if kind is None:
        near = difflib.get_close_matches(str(name), list(KINDS), n=2, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        raise ValueError(f"{where} must be one of {', '.join(KINDS)}, got {name!r}{hint}")
    return kind


def kind_of_payload(payload_format: str, record_kind: str | None = None) -> DecisionKind:
    """The kind of an Examples artifact: its `record_kind` property when written (slate and bandit
    records are both tf.Examples), else the only kind with that payload format."""
    if record_kind:
        return decision_kind(record_kind)
    matches = [k for k in KINDS.values() if k.payload_format == payload_format and k.name != SLATE]
    if not matches:
        raise ValueError(f"no decision kind writes payload format {payload_format!r}")
    return matches[0]
