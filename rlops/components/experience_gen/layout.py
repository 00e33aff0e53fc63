"""The resolved layout: which source columns feed which output field, with what type and width.

Resolved once at pipeline construction from the config and a peek at the source's schema
(header, Parquet schema, first JSON line or tf.Example), then shipped to every worker, so all
workers check every file against the same widths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from rlops.components.common.decision_kinds import BANDIT, SLATE, TRAJECTORY
from rlops.components.experience_gen import json_paths, records
from rlops.components.experience_gen.config import ExperienceGenConfig, FileSource, per_arm_column
from rlops.components.experience_gen.errors import closest

FLOAT, INT, STRING, BOOL, TIMESTAMP = "float", "int", "string", "bool", "timestamp"


@dataclass(frozen=True)
class Field:
    """One output field. `columns`: one scalar or list-valued column, or several scalars stacked
    into a vector. `width` None means a scalar."""

    name: str
    columns: tuple[str, ...]
    dtype: str
    width: int | None = None
    required: bool = True
    feature_kind: str | None = None  # bandit context feature: float | float_list | categorical
    multivalent: bool = False  # a categorical list: `width` = the most values kept per record
    separator: str | None = None  # multivalent text cells: values joined by it


@dataclass(frozen=True)
class SourceSchema:
    """What a peek at the source showed: column names, and the width of list-valued ones."""

    names: tuple[str, ...] = ()
    list_widths: dict[str, int] = field(default_factory=dict)
    text: bool = False  # every value arrives as text (CSV): no list cells


@dataclass(frozen=True)
class Layout:
    kind: str
    fields: tuple[Field, ...]
    split_key: Field | None = None
    split_time: Field | None = None

    @property
    def columns(self) -> list[str]:
        """Every source column read, in a stable order."""
        out: list[str] = []
        for f in self.all_fields:
            out.extend(c for c in f.columns if c not in out)
        # a path column (json_paths) is read through its base column, e.g. request_payload
        out.extend(b for b in dict.fromkeys(map(json_paths.base_column, out)) if b and b not in out)
        return out

    @property
    def features(self) -> list[Field]:
        """The bandit record's context features (the legacy dense `context` is one; so is a per-arm
        column's field, `per_arm/<name>`, whose values the item join gathers per candidate)."""
        return [f for f in self.fields if f.feature_kind is not None]

    @property
    def all_fields(self) -> list[Field]:
        return list(self.fields) + [f for f in (self.split_key, self.split_time) if f is not None]

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def require(self, name: str) -> Field:
        """The field `name`, which the record kind's checks know the layout has."""
        found = self.field(name)
        if found is None:
            raise KeyError(f"the {self.kind} layout has no field {name!r}")
        return found


def resolve_layout(config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str] = ()) -> Layout:
    """`item_ids`: the item table's ids, in its order (per-arm columns: one column per item)."""
    fields = FIELDS[config.record_kind](config, schema)
    if config.record_kind == BANDIT:
        fields += per_arm_column_fields(config, schema, item_ids)
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


def _bandit_fields(config: ExperienceGenConfig, schema: SourceSchema) -> list[Field]:
    c = config.bandit_columns
    spec = config.action_spec
    assert spec is not None  # the plan settles it (an item table's size, a simulation's env)
    num_actions = None if spec.maximum is None else int(spec.maximum) - int(spec.minimum or 0) + 1
    if c.features:
        out = [_feature_field(f, schema) for f in c.features]
    else:
        ctx = _vector(records.CONTEXT, c.context, c.context_prefix, c.context_dim, FLOAT, schema, "context")
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
            _vector(records.ACTION_MASK, c.action_mask, c.action_mask_prefix, num_actions, INT, schema, "action_mask")
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


def _feature_field(f, schema: SourceSchema) -> Field:
    """A resolved FeatureColumn (kind and dtype concrete) -> the field it is read into."""
    col = f.source_column
    if f.kind == "categorical":
        if f.is_multivalent:
            return Field(
                f.name,
                (col,),
                STRING if f.dtype == "string" else INT,
                int(f.dim),
                feature_kind=f.kind,
                multivalent=True,
                separator=f.separator,
            )
        return Field(f.name, (col,), STRING if f.dtype == "string" else INT, feature_kind=f.kind)
    if f.kind == "float":
        return Field(f.name, (col,), FLOAT, feature_kind=f.kind)
    v = _vector(f.name, (col,), None, f.dim, FLOAT, schema, f"features['{f.name}']")
    return Field(f.name, v.columns, FLOAT, v.width, feature_kind=f.kind)


def _trajectory_fields(config: ExperienceGenConfig, schema: SourceSchema) -> list[Field]:
    c = config.trajectory_columns
    spec = config.action_spec
    assert spec is not None  # required by the config, or set from a simulation's env
    out = [
        Field(records.EPISODE_ID, (c.episode_id,), STRING),
        Field(records.STEP, (c.step,), INT),
        _vector(
            records.OBSERVATION, c.observation, c.observation_prefix, c.observation_dim, FLOAT, schema, "observation"
        ),
    ]
    if spec.is_discrete and not spec.shape:
        out.append(Field(records.ACTION, (_one(c.action, "action"),), INT))
    else:
        out.append(
            _vector(
                records.ACTION,
                c.action,
                c.action_prefix,
                spec.size,
                FLOAT if not spec.is_discrete else INT,
                schema,
                "action",
            )
        )
    out.append(Field(records.REWARD, (c.reward,), FLOAT))
    if c.discount:
        out.append(Field(records.DISCOUNT, (c.discount,), FLOAT))
    if c.terminal:
        out.append(Field(records.TERMINAL, (c.terminal,), BOOL, required=False))
    if c.log_probability:
        out.append(Field(records.LOG_PROBABILITY, (c.log_probability,), FLOAT))
    if c.value_prediction:
        out.append(Field(records.VALUE_PREDICTION, (c.value_prediction,), FLOAT))
    for name, cols in sorted(c.dist_params.items()):
        names = tuple(x for x in cols.split("|") if x)
        prefix = names[0][:-1] if len(names) == 1 and names[0].endswith("*") else None
        out.append(
            _vector(
                records.DIST_PARAMS_PREFIX + name,
                () if prefix else names,
                prefix,
                None,
                FLOAT,
                schema,
                f"dist_params[{name}]",
            )
        )
    return out


def _slate_fields(config: ExperienceGenConfig, schema: SourceSchema) -> list[Field]:
    """One row per shown item: the slate it belongs to, its position, the item and the slot's
    reward and propensities, and the request's context (repeated on each of its rows)."""
    c = config.slate_columns
    out = [_feature_field(f, schema) for f in c.features]
    item_dtype = STRING if config.item_source is not None else INT
    if not c.position:  # one row per slate: the slot fields are lists in display order
        length = int(config.slate_length or 0)

        def slots(name: str, column: str, dtype: str) -> Field:
            return Field(name, (column,), dtype, length, multivalent=True, separator=c.separator)

        if c.slate_id:
            out.append(Field(records.SLATE_ID, (c.slate_id,), STRING))
        out += [
            slots(records.SLATE_ITEM, c.item_id, item_dtype),
            slots(records.REWARD, c.reward, FLOAT),
            slots(records.PROPENSITY, c.propensity, FLOAT),
        ]
        if c.propensity_cascade:
            out.append(slots(records.PROPENSITY_CASCADE, c.propensity_cascade, FLOAT))
        if c.timestamp:
            out.append(Field(records.TIMESTAMP, (c.timestamp,), TIMESTAMP))
        return out
    assert c.slate_id is not None  # config validation
    out += [
        Field(records.SLATE_ID, (c.slate_id,), STRING),
        Field(records.POSITION, (c.position,), INT),
        Field(records.SLATE_ITEM, (c.item_id,), item_dtype),
        Field(records.PROPENSITY, (c.propensity,), FLOAT),
    ]
    if config.events is None:  # else the events join gives each slot its reward
        out.append(Field(records.REWARD, (c.reward,), FLOAT))
    elif c.decision_time:
        out.append(Field(records.DECISION_TIME, (c.decision_time,), TIMESTAMP))
    if c.propensity_cascade:
        out.append(Field(records.PROPENSITY_CASCADE, (c.propensity_cascade,), FLOAT))
    if c.timestamp:
        out.append(Field(records.TIMESTAMP, (c.timestamp,), TIMESTAMP))
    return out


# The fields each decision kind reads from a source row.
FIELDS = {BANDIT: _bandit_fields, TRAJECTORY: _trajectory_fields, SLATE: _slate_fields}


def _one(names: tuple[str, ...], what: str) -> str:
    if len(names) != 1:
        raise ValueError(f"{what}: a scalar field maps to exactly one column, got {list(names)}")
    return names[0]


def _vector(
    name: str,
    columns: tuple[str, ...],
    prefix: str | None,
    width: int | None,
    dtype: str,
    schema: SourceSchema,
    what: str,
) -> Field:
    if prefix:
        columns = prefixed_columns(schema.names, prefix)
        if not columns:
            raise ValueError(f"{what}: no column starts with prefix {prefix!r}; columns: {list(schema.names)[:20]}")
    if not columns:
        raise ValueError(f"{what}: map it to column names or a prefix")
    if len(columns) > 1:
        if width is not None and width != len(columns):
            raise ValueError(f"{what}: {len(columns)} columns {list(columns)[:5]}... but width {width} was configured")
        return Field(name, tuple(columns), dtype, len(columns))
    col = columns[0]
    # A configured width wins over the peek (whose sample may be a malformed record); rows of any
    # other width are quarantined as wrong_shape.
    width = width if width is not None else schema.list_widths.get(col)
    if width is None:
        if col in schema.names:
            width = 1  # a single scalar column
        else:
            raise ValueError(
                f"{what}: cannot tell the width of column {col!r}; set it in the config "
                f"(e.g. context_dim / observation_dim)"
            )
    if schema.text and width != 1:
        raise ValueError(f"{what}: CSV has no list cells; map {what} to one column per value (names or a prefix)")
    return Field(name, (col,), dtype, width)


def prefixed_columns(names: tuple[str, ...] | list[str], prefix: str) -> tuple[str, ...]:
    """Columns starting with `prefix`, ordered by numeric suffix (x_2 before x_10) when all have one."""
    cols = [n for n in names if n.startswith(prefix)]
    suffixes = [n[len(prefix) :] for n in cols]
    if cols and all(re.fullmatch(r"\d+", s) for s in suffixes):
        cols = [c for _, c in sorted(zip((int(s) for s in suffixes), cols))]
    return tuple(cols)
