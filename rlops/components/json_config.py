"""One strict, typed loader for every config section (dataclasses), and the JSON round trip
every face uses to pass a config as a string (TFX execution property, KFP parameter, CLI file).

Why one: the pipeline YAML, `--set` overrides and the components' JSON all arrive as raw
mappings; one walk over the dataclasses' type hints builds them, with one error format,
`<key.path>: <problem>; closest: <names>`, for unknown keys, wrong types and unknown kinds.

A union of dataclasses that each have a `kind` field (e.g. a file, BigQuery or simulation
source) is tagged by `kind`: a mapping that names a `kind` is a whole member and replaces the
one it overlays; a mapping without `kind` edits the current member's fields (`merge_raw`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import json
import types
import typing
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Union

T = TypeVar("T", bound="JsonConfig")
TAG = "kind"


class ConfigValueError(TypeError, ValueError):
    """A raw config value that does not fit its key (message: `<key.path>: <problem>`). Both a
    TypeError and a ValueError, so callers that caught either from the older checkers still do."""


@dataclasses.dataclass(frozen=True)
class PartialOf:
    """`Annotated[dict[str, Any], PartialOf("module:Class")]`: a mapping of some of that
    dataclass's fields (overrides applied later, e.g. trainer.ppo -> PPOConfig), checked key by
    key against its hints. The class is named, not imported, so loading a config stays light."""

    target: str

    def resolve(self) -> type:
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


def closest(name: str, names: typing.Iterable[str]) -> str:
    """`closest: a, b` for the nearest known names; every known name when none is near."""
    names = sorted(names)
    near = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
    return f"closest: {', '.join(near)}" if near else f"known: {', '.join(names)}"


def unknown_key(key: str, name: str, names: typing.Iterable[str]) -> ConfigValueError:
    return ConfigValueError(f"{join(key, name)}: unknown key; {closest(name, names)}")


def join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


# --- type hints -----------------------------------------------------------------------------------


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _members(tp: Any) -> list[Any]:
    return [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]


def optional(tp: Any) -> bool:
    return _is_union(tp) and type(None) in typing.get_args(tp)


def _strip(tp: Any) -> tuple[Any, PartialOf | None]:
    """An Annotated hint's type and its PartialOf marker (if any)."""
    if typing.get_origin(tp) is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return base, next((e for e in extra if isinstance(e, PartialOf)), None)
    return tp, None


def _kind_of(cls: type) -> str | None:
    """The `kind` default of a dataclass that is a member of a tagged union."""
    for f in dataclasses.fields(cls):
        if f.name == TAG and isinstance(f.default, str):
            return f.default
    return None


def tagged_members(tp: Any) -> dict[str, type] | None:
    """{kind: member} when `tp` (optionally Optional) is a union of dataclasses tagged by `kind`,
    else None. Read from the type hints, so a new member needs no registration."""
    tp, _ = _strip(tp)
    members = _members(tp)
    if len(members) < 2 or not all(isinstance(m, type) and dataclasses.is_dataclass(m) for m in members):
        return None  # one dataclass (even with a `kind` field, e.g. the evaluator) is a plain section
    kinds = {k: m for k, m in ((_kind_of(m), m) for m in members) if k is not None}
    if len(kinds) != len(members):  # a member without a `kind` default, or two of one kind
        return None
    return kinds


def hints(cls: type) -> dict[str, Any]:
    """A dataclass's init fields and their (resolved) type hints."""
    resolved = typing.get_type_hints(cls, include_extras=True)
    return {f.name: resolved[f.name] for f in dataclasses.fields(cls) if f.init}


def _field_default_kind(cls: type | None, name: str) -> str | None:
    """The kind of a tagged-union field's default member (what a mapping without `kind` means)."""
    for f in dataclasses.fields(cls) if cls is not None else ():
        if f.name == name and f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
            return _kind_of(type(value)) if dataclasses.is_dataclass(value) else None
    return None


def sections(tp: Any) -> dict[str, Any] | None:
    """The named sub-keys of a mapping-typed hint and their types (None: not a mapping of
    known keys). A dict given as a schema ({key: type}) stands for a dataclass."""
    tp, partial = _strip(tp)
    if isinstance(tp, dict):
        return tp
    if partial is not None:
        return hints(partial.resolve())
    members = _members(tp)
    if len(members) == 1 and isinstance(members[0], type) and dataclasses.is_dataclass(members[0]):
        return hints(members[0])
    return None


# --- overlays: a YAML file on the defaults, `--set key=value` on both -----------------------------


def _current_member(tp: Any, raw: Any, default_kind: str | None) -> type | None:
    members = tagged_members(tp) or {}
    kind = raw.get(TAG, default_kind) if isinstance(raw, dict) else default_kind
    return members.get(kind) if kind is not None else None


def merge_raw(tp: Any, base: Any, overlay: Any, default_kind: str | None = None) -> Any:
    """`overlay` (raw, from the user) on `base` (raw) for a key of type `tp`.

    Mappings merge key by key, except a tagged union's member: an overlay that names a `kind`
    replaces the member whole, so no field of the default member (a simulation's num_records
    under a file source) leaks into the user's. Anything else replaces."""
    if tp is Any or not isinstance(overlay, dict) or not isinstance(base, dict):
        return copy.deepcopy(overlay)  # untyped keys (and values) are replaced
    members = tagged_members(tp)
    if members is not None:
        if TAG in overlay:
            return copy.deepcopy(overlay)
        member = _current_member(tp, base, default_kind)
        schema: dict[str, Any] | None = hints(member) if member else None
    else:
        schema = sections(tp)
    out = copy.deepcopy(base)
    for name, value in overlay.items():
        sub = schema.get(name, Any) if schema is not None else _dict_value_type(tp)
        kind = _field_default_kind(_dataclass_of(tp, base, default_kind), name) if schema is not None else None
        out[name] = merge_raw(sub, out.get(name), value, kind)
    return out


def _dict_value_type(tp: Any) -> Any:
    tp, _ = _strip(tp)
    args = typing.get_args(_members(tp)[0]) if _members(tp) else ()
    return args[1] if len(args) == 2 else Any


def _dataclass_of(tp: Any, raw: Any, default_kind: str | None) -> type | None:
    """The dataclass whose fields a raw mapping of type `tp` holds (for field defaults)."""
    tp, _ = _strip(tp)
    member = _current_member(tp, raw, default_kind)
    if member is not None:
        return member
    members = _members(tp)
    if len(members) == 1 and isinstance(members[0], type) and dataclasses.is_dataclass(members[0]):
        return members[0]
    return None


def set_path(tp: Any, raw: dict, path: list[str], value: Any) -> None:
    """`--set a.b.c=value` on a raw mapping of type `tp`: the value overlays what is there
    (`merge_raw`), and `a.b.kind=x` on a tagged union switches the member, keeping none of the
    old member's fields (the same kind again changes nothing)."""
    node, node_tp, default_kind = raw, tp, None
    for i, part in enumerate(path[:-1]):
        sub_tp, sub_default = _child(node_tp, node, part, default_kind)
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ConfigValueError(f"{'.'.join(path[: i + 1])}: is a value, not a section; cannot set {'.'.join(path)}")
        node, node_tp, default_kind = nxt, sub_tp, sub_default
    leaf = path[-1]
    members = tagged_members(node_tp)
    if members is not None and leaf == TAG:
        current = node.get(TAG, default_kind)
        if value != current:
            node.clear()
            node[TAG] = copy.deepcopy(value)
        return
    sub_tp, sub_default = _child(node_tp, node, leaf, default_kind)
    node[leaf] = merge_raw(sub_tp, node.get(leaf), value, sub_default)


def _child(tp: Any, raw: Any, name: str, default_kind: str | None) -> tuple[Any, str | None]:
    """The type of `name` under a raw mapping of type `tp`, and its default member's kind."""
    cls = _dataclass_of(tp, raw, default_kind)
    if cls is not None:
        fields = hints(cls)
        return fields.get(name, Any), _field_default_kind(cls, name)
    schema = sections(tp)
    if schema is not None:
        return schema.get(name, Any), None
    return _dict_value_type(tp), None


# --- building: raw mapping -> dataclass ----------------------------------------------------------


def _name(tp: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (tuple, list) or (origin is not None and getattr(origin, "__name__", "") == "Sequence"):
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def shown(v: Any) -> str:
    return f"{v!r} ({type(v).__name__})"


def convert(tp: Any, v: Any, key: str, default_kind: str | None = None, make: bool = True) -> Any:
    """`v` as the type hint `tp` says (tuples, nested dataclasses, tagged-union members), or a
    ConfigValueError naming `key`. Values are not coerced: "fasle" is not a bool, 2.5 not an int."""
    tp, partial = _strip(tp)
    if tp is Any:
        return v
    if v is None:
        if optional(tp):
            return None
        raise ConfigValueError(f"{key}: expected {_name(_members(tp)[0])}, got null")
    members = tagged_members(tp)
    if members is not None:
        return _member(members, v, key, default_kind, make)
    if _is_union(tp):
        inner = _members(tp)
        if len(inner) == 1:
            return convert(inner[0], v, key, default_kind, make)
        errors = []
        for m in inner:
            try:
                return convert(m, v, key, make=make)
            except ConfigValueError as e:
                errors.append(e)
        raise errors[0]
    if partial is not None:
        return _partial(partial.resolve(), v, key)
    return _convert_plain(tp, v, key, make)


def _member(members: dict[str, type], v: Any, key: str, default_kind: str | None, make: bool) -> Any:
    if any(isinstance(v, m) for m in members.values()):
        return v
    if not isinstance(v, dict):
        raise ConfigValueError(f"{key}: expected a mapping with a `kind` ({', '.join(members)}), got {shown(v)}")
    kind = v.get(TAG, default_kind)
    if kind is None:
        raise ConfigValueError(f"{join(key, TAG)}: missing; one of {', '.join(members)}")
    if kind not in members:
        raise ConfigValueError(f"{join(key, TAG)}: unknown kind {kind!r}; {closest(str(kind), members)}")
    return build(members[kind], v, key, make)


def _partial(cls: type, v: Any, key: str) -> dict:  # checked, never built: a partial mapping
    if not isinstance(v, dict):
        raise ConfigValueError(f"{key}: expected a mapping, got {shown(v)}")
    fields = hints(cls)
    for name, value in v.items():
        if name not in fields:
            raise unknown_key(key, name, fields)
        convert(fields[name], value, join(key, name), make=False)
    return dict(v)


def _convert_plain(tp: Any, v: Any, key: str, make: bool) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        if not isinstance(v, bool):
            raise ConfigValueError(f"{key}: expected true or false, got {shown(v)}")
    elif tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigValueError(f"{key}: expected an integer, got {shown(v)}")
    elif tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigValueError(f"{key}: expected a number, got {shown(v)}")
    elif tp is str:
        if not isinstance(v, str):
            raise ConfigValueError(f"{key}: expected a string, got {shown(v)}")
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(v, tp):
            return v
        shorthand = getattr(tp, "SHORTHAND_FIELD", None)  # a bare string stands for {field: string}
        return build(tp, {shorthand: v} if shorthand and isinstance(v, str) else v, key, make)
    elif origin in (tuple, list) or (origin is not None and getattr(origin, "__name__", "") == "Sequence"):
        if not isinstance(v, (list, tuple)):
            raise ConfigValueError(f"{key}: expected a list, got {shown(v)}")
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        if fixed and len(v) != len(args):
            raise ConfigValueError(f"{key}: expected a list of {len(args)}, got {shown(v)}")
        items = [
            convert(args[i] if fixed else (args[0] if args else Any), x, f"{key}[{i}]", make=make)
            for i, x in enumerate(v)
        ]
        return tuple(items) if origin is tuple else items
    elif origin is dict or tp is dict:
        if not isinstance(v, dict):
            raise ConfigValueError(f"{key}: expected a mapping, got {shown(v)}")
        if len(args) == 2:
            return {k: convert(args[1], x, join(key, str(k)), make=make) for k, x in v.items()}
    return v


def build(cls: type, d: Any, key: str, make: bool = True) -> Any:
    """A dataclass from a raw mapping: unknown keys, wrong types and unknown kinds fail naming the
    key path; then the class's own checks (__post_init__) run. make=False only checks (and
    returns the checked mapping), for sections whose values the pipeline completes later."""
    if not isinstance(d, dict):
        raise ConfigValueError(f"{key}: expected a mapping, got {shown(d)}")
    fields = hints(cls)
    for name in d:
        if name not in fields:
            raise unknown_key(key, name, fields)
    kwargs = {
        name: convert(
            fields[name],
            value,
            join(key, name),
            _field_default_kind(cls, name) if tagged_members(fields[name]) else None,
            make,
        )
        for name, value in d.items()
    }
    return cls(**kwargs) if make else kwargs


def check(tp: Any, v: Any, key: str) -> None:
    """Raise ConfigValueError when a raw value does not fit the type hint `tp` (nothing built
    beyond what the check needs)."""
    convert(tp, v, key, make=False)


class JsonConfig:
    SECTION = "config"  # the key prefix errors name, e.g. "trainer"
    if TYPE_CHECKING:  # what dataclasses.asdict asks for: every JsonConfig is a dataclass
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any]) -> T:
        return build(cls, d, cls.SECTION)

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))
