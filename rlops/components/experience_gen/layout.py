"""The resolved layout: which source columns feed which output field, with what type and width.

Resolved once at pipeline construction from the config and a peek at the source's schema
(header, Parquet schema, first JSON line or tf.Example), then shipped to every worker, so all
workers check every file against the same widths. Each record kind (kinds/) lists its fields with
the builders here (feature_field, vector).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rlops.components.experience_gen import json_paths
from rlops.components.experience_gen.config import FeatureColumn

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


def feature_field(f: FeatureColumn, schema: SourceSchema) -> Field:
    """A resolved FeatureColumn (kind and dtype concrete) -> the field it is read into."""
    col = f.source_column
    if f.kind == "categorical":
        if f.is_multivalent:
            assert f.dim is not None  # resolved from the data's sample (features.resolve_features)
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
    v = vector(f.name, (col,), None, f.dim, FLOAT, schema, f"features['{f.name}']")
    return Field(f.name, v.columns, FLOAT, v.width, feature_kind=f.kind)


def one_column(names: tuple[str, ...], what: str) -> str:
    if len(names) != 1:
        raise ValueError(f"{what}: a scalar field maps to exactly one column, got {list(names)}")
    return names[0]


def vector(
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
