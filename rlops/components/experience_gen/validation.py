"""Per-record validation: typed extraction, then the checks that make data safe to train on.

Everything is vectorized over a batch; messages are only built for the rows that fail. Each bad
row gets its first failing reason: a code (counted, for the top-reasons summary) and a message
naming the column and value. The checks are the record kind's (kinds/), over the shared ones in
checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from rlops.components.common.decision_kinds import decision_kind
from rlops.components.common.records import (
    DISCOUNT,
    LOG_PROBABILITY,
    PROPENSITY,
    REWARD,
    VALUE_PREDICTION,
    WEIGHT,
)
from rlops.components.common.slates import PROPENSITY_CASCADE
from rlops.components.experience_gen import convert, slates
from rlops.components.experience_gen.checks import TRUNCATED_SUFFIX, Rejects, message, present_key, truncated_key
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.convert import MISSING_VALUE, RawColumn
from rlops.components.experience_gen.kinds.base import RecordKind
from rlops.components.experience_gen.layout import Layout


@dataclass
class Validated:
    columns: dict[str, np.ndarray]  # canonical field -> values of the valid rows
    rows: np.ndarray  # int64 indices of the valid rows in the input batch
    rejects: dict[int, tuple[str, str]]  # input row -> (reason code, message)
    split_key: np.ndarray | None = None  # valid rows' split key (UTF-8 bytes objects)
    split_time: np.ndarray | None = None  # valid rows' split time (int64)
    # grouped kinds (trajectories, slates): rejected row -> its episode / slate id, if readable
    reject_episodes: dict[int, str] | None = None


def validate(
    raw: Mapping[str, RawColumn],
    num_rows: int,
    layout: Layout,
    config: ExperienceGenConfig,
    text: bool,
    kind: RecordKind,
) -> Validated:
    """Typed extraction of every layout field from `raw` (num_rows rows), then the semantic
    checks of the record kind. `text`: values arrive as strings to parse (CSV)."""
    rej = Rejects(num_rows)
    values: dict[str, np.ndarray] = {}
    present: dict[str, np.ndarray] = {}
    id_ok = None
    group_key = decision_kind(layout.kind).group_key
    for field in layout.all_fields:
        if field is layout.split_key:
            ex = convert.extract_keys(raw, num_rows, field, text)
        else:
            ex = convert.extract(raw, num_rows, field, text)
        if field.name == group_key:
            id_ok = ~ex.missing & (ex.values != "")
            id_ok[list(ex.errors)] = False
        absent = all(raw.get(c) is None for c in field.columns)
        if not field.required and absent:
            continue  # an optional column this source does not have
        rej.add_errors(ex.errors)
        if field.required:
            rej.add(ex.missing, MISSING_VALUE, message(field, "missing value"))
        else:
            present[field.name] = ~ex.missing
        values[field.name] = ex.values
        if field.multivalent and ex.counts is not None:
            if kind.cuts_long_lists:
                present[truncated_key(field.name)] = ex.counts > int(field.width or 0)
            else:  # e.g. a slate's slot lists: the kind's checks quarantine a longer one
                values[slates.COUNT_PREFIX + field.name] = ex.counts
    kind.check(values, present, layout, config, rej)
    rows = np.flatnonzero(~rej.bad)
    pick = (lambda v: v) if len(rows) == num_rows else (lambda v: v[rows])  # all good: no copies
    out = {name: pick(v) for name, v in values.items() if not name.startswith("_")}
    for name, mask in present.items():  # optional values: keep "absent" visible to assembly
        out[name if name.endswith(TRUNCATED_SUFFIX) else present_key(name)] = pick(mask)
    for name in (REWARD, PROPENSITY, PROPENSITY_CASCADE, WEIGHT, DISCOUNT, LOG_PROBABILITY, VALUE_PREDICTION):
        if name in out:
            out[name] = out[name].astype(np.float32)
    key = pick(values["_split_key"]) if "_split_key" in values else None
    time = pick(values["_split_time"]) if "_split_time" in values else None
    episodes = None
    if id_ok is not None and group_key is not None:  # assembly drops the rest of a group that lost a row
        ids = values[group_key]
        episodes = {i: str(ids[i]) for i in rej.items if id_ok[i]}
    return Validated(out, rows, rej.items, key, time, episodes)
