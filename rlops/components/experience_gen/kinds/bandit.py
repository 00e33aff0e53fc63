"""Bandit records (`record_kind: bandit`): one decision per source row, written as one tf.Example.

The row holds the context (named features or the legacy dense `context`), the logged action (or,
per-arm, the logged item, whose index among the candidates the item-table join makes the action),
its reward (or the events join's), the logging policy's propensity and optional mask, weight and
timestamp. Records are split by a key, the decision's id or the decision's content (never its
reward), and the hash they were split by is written into each record.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import apache_beam as beam
import numpy as np

from rlops.components.common import records
from rlops.components.common.decision_kinds import BANDIT
from rlops.components.experience_gen import items as item_table, simulation, sinks, slate_simulation, splits
from rlops.components.experience_gen.batches import ValidBatch, pick
from rlops.components.experience_gen.checks import (
    ACTION_NOT_ALLOWED,
    BAD_MASK,
    OUT_OF_RANGE,
    PROPENSITY_BELOW_FLOOR,
    PROPENSITY_OUT_OF_RANGE,
    Rejects,
    action_spec,
    check_action,
    finite,
    label,
    message,
)
from rlops.components.experience_gen.config import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SimulationSource,
    per_arm_column,
)
from rlops.components.experience_gen.convert import MISSING_VALUE
from rlops.components.experience_gen.errors import closest
from rlops.components.experience_gen.kinds.base import RecordKind
from rlops.components.experience_gen.layout import (
    FLOAT,
    INT,
    STRING,
    TIMESTAMP,
    Field,
    Layout,
    SourceSchema,
    feature_field,
    vector,
)
from rlops.components.experience_gen.records import encode_bandit

if TYPE_CHECKING:
    from rlops.components.experience_gen.pipeline import Plan

NS = sinks.METRICS_NAMESPACE
REWARDS = "rewards"  # a distribution of the written rewards (its min and max: constant rewards warn)
REWARD_SCALE = 1_000_000  # rewards enter the distribution in millionths


class Bandit(RecordKind):
    name = BANDIT
    dense_context = True

    def simulates(self, source: SimulationSource) -> bool:
        # digits, linear (an unknown env is named by simulation.make_bandit_env): not a gym env, not the slates world
        return not simulation.is_gym(source) and source.env != slate_simulation.SLATES_ENV

    def plan_simulation(self, config: ExperienceGenConfig) -> ExperienceGenConfig:
        dim, spec = simulation.bandit_shape(simulation.source_of(config))
        bcols = BanditColumns(context=("context",), context_dim=dim, propensity="propensity")
        return dataclasses.replace(config, bandit_columns=bcols, action_spec=config.action_spec or spec)

    def simulate(self, config: ExperienceGenConfig, shard: int) -> Iterator[dict[str, np.ndarray]]:
        return simulation.simulate_bandit(simulation.source_of(config), shard)

    def plan_items(
        self, config: ExperienceGenConfig, joins_items: bool
    ) -> tuple[ExperienceGenConfig, item_table.ItemTable | None, tuple[str, ...]]:
        if not joins_items:  # a simulation's records have no item table
            return config, None, ()
        config, table = item_table.resolve(config)
        return config, table, ()

    def fields(self, config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str]) -> list[Field]:
        return bandit_fields(config, schema) + per_arm_column_fields(config, schema, item_ids)

    def check(
        self,
        values: dict[str, np.ndarray],
        present: dict[str, np.ndarray],
        layout: Layout,
        config: ExperienceGenConfig,
        rej: Rejects,
    ) -> None:
        check_bandit(values, layout, config, rej)

    def write(self, plan: Plan, valid: beam.PCollection, bad: beam.PCollection) -> tuple[Any, beam.PCollection | None]:
        feature_names = tuple(f.name for f in plan.layout.features)
        if plan.item_table is not None:
            feature_names += tuple(item_table.per_arm_key(f.name) for f in plan.item_table.features)
            feature_names += (item_table.NUM_ACTIONS,)
        multivalent = {f.name: ("" if f.dtype == "string" else -1) for f in plan.layout.features if f.multivalent}
        encode = beam.ParDo(EncodeBanditFn(plan.config, feature_names, multivalent))
        return valid | "EncodeSplit" >> encode.with_outputs(*plan.config.splits.names), None


# --- config -----------------------------------------------------------------------------------


# --- layout and checks ----------------------------------------------------------------------


def bandit_fields(config: ExperienceGenConfig, schema: SourceSchema) -> list[Field]:
    c = config.bandit_columns
    spec = config.action_spec
    assert spec is not None  # the plan settles it (an item table's size, a simulation's env)
    num_actions = None if spec.maximum is None else int(spec.maximum) - int(spec.minimum or 0) + 1
    if c.features:
        out = [feature_field(f, schema) for f in c.features]
    else:
        ctx = vector(records.CONTEXT, c.context, c.context_prefix, c.context_dim, FLOAT, schema, "context")
        out = [Field(ctx.name, ctx.columns, ctx.dtype, ctx.width, feature_kind="float_list")]
    if c.item_id:  # per-arm: the action is the logged item's index among the candidates (items.join)
        out.append(Field("item_id", (c.item_id,), STRING))
        if c.candidates:
            out.append(Field("candidates", (c.candidates,), STRING))
    else:
        out.append(Field(records.ACTION, (c.action,), INT))
    if config.events is None:  # else the events join gives each decision its reward
        out.append(Field(records.REWARD, (c.reward,), FLOAT))
    if c.decision_id:
        out.append(Field(records.DECISION_ID, (c.decision_id,), STRING))
    if c.decision_time:
        out.append(Field(records.DECISION_TIME, (c.decision_time,), TIMESTAMP))
    if c.propensity:
        out.append(Field(records.PROPENSITY, (c.propensity,), FLOAT, required=config.require_propensity))
    elif config.require_propensity:
        raise ValueError(
            "bandit_columns.propensity is None but require_propensity is True: off-policy "
            "evaluation needs the logging policy's propensity; map it or set require_propensity=False"
        )
    if c.action_mask or c.action_mask_prefix:
        out.append(
            vector(records.ACTION_MASK, c.action_mask, c.action_mask_prefix, num_actions, INT, schema, "action_mask")
        )
    if c.weight:
        out.append(Field(records.WEIGHT, (c.weight,), FLOAT))
    if c.timestamp:
        out.append(Field(records.TIMESTAMP, (c.timestamp,), TIMESTAMP))
    return out


def per_arm_column_fields(config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str]) -> list[Field]:
    """One float field `per_arm/<name>` [M] per per-arm pattern: its columns for the M items in the
    item table's order (items.join gathers each record's candidates from it). A header or Parquet
    schema (which lists every column) that lacks an item's column is an error naming it."""
    patterns = config.bandit_columns.per_arm_columns
    if patterns and not item_ids:
        raise ValueError("bandit_columns.per_arm_columns: the item table has no items")
    src = config.source
    complete = isinstance(src, FileSource) and src.format in ("csv", "parquet") and bool(schema.names)
    out = []
    for name, pattern in patterns.items():
        columns = tuple(per_arm_column(pattern, i) for i in item_ids)
        missing = [c for c in columns if c not in schema.names] if complete else []
        if missing:
            names = ", ".join(repr(c) for c in missing[:3]) + (", ..." if len(missing) > 3 else "")
            raise ValueError(
                f"experience_gen.bandit_columns.per_arm_columns['{name}']: {len(missing)} of the "
                f"{len(columns)} items of the item table have no column {pattern!r} in the logs ({names}); "
                f"{closest(missing[0], list(schema.names))}"
            )
        out.append(Field(records.PER_ARM_PREFIX + name, columns, FLOAT, len(columns), feature_kind="float"))
    return out


def check_bandit(values: dict[str, np.ndarray], layout: Layout, config: ExperienceGenConfig, rej: Rejects) -> None:
    f = layout.require
    for feature in layout.features:
        if feature.feature_kind != "categorical":
            finite(values[feature.name], feature, rej)
    if records.ACTION in values:  # per-arm records get theirs from the item join
        check_action(values, layout, config, rej)
    if records.REWARD in values:  # else events give the rewards (events.py)
        finite(values[records.REWARD], f(records.REWARD), rej)
    if records.DECISION_ID in values:  # an empty id ("" in Parquet or JSON) joins nothing: not a decision id
        rej.add(values[records.DECISION_ID] == "", MISSING_VALUE, message(f(records.DECISION_ID), "empty id"))
    if records.PROPENSITY in values:
        p = values[records.PROPENSITY]
        with np.errstate(invalid="ignore"):
            ok = (p > 0) & (p <= 1)
        rej.add(~ok, PROPENSITY_OUT_OF_RANGE, lambda i: f"{label(f(records.PROPENSITY))}: {p[i]!r} outside (0, 1]")
        floor = config.propensity_floor
        low = ok & (p < floor)  # e.g. 1e-46 would be written as 0.0 in float32
        if config.propensity_floor_action == "clip":
            values[records.PROPENSITY] = np.where(low, floor, p)
        else:
            rej.add(
                low,
                PROPENSITY_BELOW_FLOOR,
                lambda i: (
                    f"{label(f(records.PROPENSITY))}: {p[i]!r} is below "
                    f"propensity_floor {floor} (set propensity_floor_action: clip to raise it to the floor)"
                ),
            )
    if records.ACTION_MASK in values and records.ACTION in values:
        m, field = values[records.ACTION_MASK], f(records.ACTION_MASK)
        binary = ((m == 0) | (m == 1)).all(axis=1)
        rej.add(~binary, BAD_MASK, lambda i: f"{label(field)}: {m[i].tolist()} is not all 0/1")
        rej.add(binary & ~m.any(axis=1), BAD_MASK, lambda i: f"{label(field)}: allows no action")
        a = values[records.ACTION]
        lo = int(action_spec(config).minimum or 0)
        idx = np.clip(a - lo, 0, m.shape[1] - 1)
        allowed = m[np.arange(len(a)), idx] == 1
        rej.add(
            ~allowed,
            ACTION_NOT_ALLOWED,
            lambda i: f"{label(f(records.ACTION))}: {a[i]} is masked out by {label(field)} {m[i].tolist()}",
        )
    if records.WEIGHT in values:
        w = values[records.WEIGHT]
        finite(w, f(records.WEIGHT), rej)
        rej.add(w < 0, OUT_OF_RANGE, lambda i: f"{label(f(records.WEIGHT))}: {w[i]!r} is negative")


# --- encode + split ---------------------------------------------------------------------------


class EncodeBanditFn(beam.DoFn):
    """Valid batch -> (serialized tf.Examples, count) per split, tagged with the split's name."""

    def __init__(
        self,
        config: ExperienceGenConfig,
        feature_names: tuple[str, ...] = (records.CONTEXT,),
        multivalent: dict[str, Any] | None = None,
    ):
        self.config = config
        self.feature_names = feature_names
        self.multivalent = multivalent or {}
        self.rewards = beam.metrics.Metrics.distribution(NS, REWARDS)

    def process(self, batch: ValidBatch) -> Iterator[Any]:
        reward = batch.columns.get(records.REWARD)
        if reward is not None and len(reward):  # the run warns when every written reward is the same
            self.rewards.update(int(round(float(np.min(reward)) * REWARD_SCALE)))  # Beam's distributions are integers
            self.rewards.update(int(round(float(np.max(reward)) * REWARD_SCALE)))
        serialized, which = encode_and_split(self.config, batch, self.feature_names, self.multivalent)
        for i, s in enumerate(self.config.splits.splits):
            idx = np.flatnonzero(which == i)
            if len(idx) == len(serialized):
                yield beam.pvalue.TaggedOutput(s.name, (serialized, len(idx)))
            elif len(idx):
                yield beam.pvalue.TaggedOutput(s.name, (pick(serialized, idx), len(idx)))


def encode_and_split(
    config: ExperienceGenConfig,
    batch: ValidBatch,
    feature_names: tuple[str, ...],
    multivalent: dict[str, Any] | None = None,
) -> tuple[list[bytes], np.ndarray]:
    """A valid batch's serialized records, each with the hash its split was drawn from (the
    Evaluator resamples by it), and each record's split index."""
    unit = split_hash(batch.columns, batch.split_key, batch.split_time, feature_names)
    columns = batch.columns
    if unit is not None:
        keyed = batch.split_key is not None or records.DECISION_ID in columns
        name = records.SPLIT_UNIT if keyed else records.SPLIT_CONTENT
        columns = {**columns, name: unit.view(np.int64)}
    serialized = encode_bandit(columns, feature_names, multivalent)
    return serialized, assign_splits(config, batch.columns, batch.split_key, batch.split_time, feature_names, unit)


def split_hash(
    columns: dict[str, np.ndarray],
    key: np.ndarray | None,
    time: np.ndarray | None,
    feature_names: tuple[str, ...] = (records.CONTEXT,),
) -> np.ndarray | None:
    """[N] uint64 hash each record's split is drawn from (its key's, or its content's); None when
    the split is by time. Written into the record as its `split_unit` or `split_content`.

    The content is the decision (context, action, propensity, ...), never its reward: hashed with
    the reward, the clicks and the non-clicks of one (context, action) went to different splits,
    so a policy trained on train where its choices clicked was evaluated on eval where the same
    choices had not, and its estimates skewed low."""
    if time is not None:
        return None
    if key is None and records.DECISION_ID in columns:  # the decision's own id: the same split whatever features
        return splits.key_hash(columns[records.DECISION_ID])
    order = tuple(feature_names) + tuple(
        k for k in records.BANDIT_ORDER if k not in feature_names and k != records.REWARD
    )
    return splits.key_hash(key) if key is not None else splits.content_hash(columns, order)


def assign_splits(
    config: ExperienceGenConfig,
    columns: dict[str, np.ndarray],
    key: np.ndarray | None,
    time: np.ndarray | None,
    feature_names: tuple[str, ...] = (records.CONTEXT,),
    unit: np.ndarray | None = None,
) -> np.ndarray:
    """Split index per record: by time, or by the record's `split_hash` (`unit`: already computed)."""
    h = split_hash(columns, key, time, feature_names) if unit is None else unit
    if h is None:
        assert time is not None
        return splits.by_time(time, config.splits.time_boundaries)
    return splits.by_hash(h, config.splits.splits)
