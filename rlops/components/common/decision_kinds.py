"""Decision kinds: what one logged record decides, as one table every component looks up.

A kind is `bandit` (one item of K per record), `trajectory` (the steps of an episode, for PPO) or
`slate` (an ordered list of L items of K). Each entry says how the kind's logs are laid out and
read: the config section that maps its columns, whether source rows are grouped into one record by
a key (an episode's steps, a page's shown items), the record format TFX's Examples artifact
declares, the pipeline that trains it (`rlops run <pipeline>`: a kind plus its default agent) and
whether its logs carry the logging policy's probabilities (off-policy evaluation needs them).

The name travels: ExperienceGen writes it beside the splits (`record_kind.json`, and the
artifact's `record_kind` property), the Trainer into the policy's metadata (`decision_kind`), and
every component reads it from there (`read_record_kind`) to look up its own table's row: nothing
probes a record or a signature to guess it. Components branch on these facts or their own table,
never on the kind's name, so adding a kind adds an entry, its own modules and one row per table.
"""

from __future__ import annotations

import difflib
import json
import os
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
    default_agent: str  # what that pipeline trains unless trainer.agent says otherwise
    logged_probabilities: bool  # its logs carry the logging policy's probabilities (off-policy evaluation)

    @property
    def grouped(self) -> bool:
        return self.group_key is not None


KINDS: dict[str, DecisionKind] = {
    k.name: k
    for k in (
        DecisionKind(BANDIT, "bandit_columns", None, TF_EXAMPLE, "bandit", "neural_epsilon_greedy", True),
        DecisionKind(TRAJECTORY, "trajectory_columns", "episode_id", TF_SEQUENCE_EXAMPLE, "ppo", "ppo", False),
        DecisionKind(SLATE, "slate_columns", "slate_id", TF_EXAMPLE, "ranking", "ranking", True),
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


PIPELINES = {k.pipeline: k for k in KINDS.values()}  # `rlops run bandit | ppo | ranking` -> its kind


def kind_named(name: str, where: str) -> DecisionKind:
    """A kind by its own name or by the name of the pipeline that trains it (`ppo` is trajectory,
    `ranking` slate): the two vocabularies users meet, read in this one place."""
    kind = KINDS.get(name) or PIPELINES.get(name)
    if kind is not None:
        return kind
    names = [*KINDS, *(p for p in PIPELINES if p not in KINDS)]
    near = difflib.get_close_matches(str(name), names, n=2, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    raise ValueError(f"{where}: unknown kind {name!r}; choose one of {', '.join(names)}{hint}")


# Beside the Examples' splits: {"record_kind": name}. TFX's own components read only the splits.
RECORD_KIND_FILE = "record_kind.json"


def write_record_kind(examples_uri: str, name: str) -> None:
    """Write the kind of the records under `examples_uri` beside their splits."""
    import tensorflow as tf

    decision_kind(name)
    tf.io.gfile.makedirs(examples_uri)
    with tf.io.gfile.GFile(os.path.join(examples_uri, RECORD_KIND_FILE), "w") as f:
        f.write(json.dumps({"record_kind": name}))


def read_record_kind(examples_uri: str) -> DecisionKind:
    """The kind ExperienceGen wrote beside the splits. Examples without the file (written by hand,
    or by rlops before the kind travelled) are read as bandit records: run ExperienceGen again to
    have slates or trajectories read as such."""
    import tensorflow as tf

    path = os.path.join(examples_uri, RECORD_KIND_FILE)
    if not tf.io.gfile.exists(path):
        return KINDS[BANDIT]
    with tf.io.gfile.GFile(path) as f:
        return decision_kind(str(json.loads(f.read()).get("record_kind")), f"{path}: record_kind")
