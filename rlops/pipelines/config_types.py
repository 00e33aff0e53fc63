"""Strict types for pipeline configs: YAML that reads numbers as numbers, and a check of raw
values against the config dataclasses' type hints before any of them is built.

Why here and not in each config class: the YAML/`--set` layer is where "fasle", "2.5" and "1e3"
arrive, and one walk over the type hints covers every section (experience_gen, trainer,
evaluator) with the same one-line messages that name the key.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any, Callable, Union

import yaml


class _Loader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, where `1e3` and `1e-46` are strings (1.1 floats need a dot and a
    signed exponent); read them as floats, as YAML 1.2 and JSON do."""


_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
_Loader.yaml_implicit_resolvers = {k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:float"]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _name(tp: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (tuple, list, typing.get_origin(typing.Sequence[int])):
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _shown(v: Any) -> str:
    return f"{v!r} ({type(v).__name__})"


def check_value(tp: Any, v: Any, key: str, nested: dict[str, type] | None = None,
                pick: Callable[[Any, Any], Any] | None = None) -> None:
    """Raise TypeError('<key>: expected ..., got ...') when `v` does not fit the type hint `tp`.

    nested: dict-typed fields whose values follow another dataclass (e.g. trainer.ppo -> PPOConfig).
    pick: for a Union of dataclasses, which member a raw mapping is (e.g. by its `kind`)."""
    if tp is Any or v is None and _optional(tp):
        return
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if all(dataclasses.is_dataclass(m) for m in members) and len(members) > 1:
            if not isinstance(v, dict):
                raise TypeError(f"{key}: expected a mapping, got {_shown(v)}")
            chosen = pick(members, v) if pick else None
            if chosen is not None:
                check_dataclass(chosen, v, key, nested, pick)
            return
        errors = []
        for m in members:
            try:
                check_value(m, v, key, nested, pick)
                return
            except TypeError as e:
                errors.append(e)
        raise errors[0]
    if v is None:
        raise TypeError(f"{key}: expected {_name(tp)}, got null")
    if tp is bool:
        if not isinstance(v, bool):
            raise TypeError(f"{key}: expected true or false, got {_shown(v)}")
    elif tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{key}: expected an integer, got {_shown(v)}")
    elif tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{key}: expected a number, got {_shown(v)}")
    elif tp is str:
        if not isinstance(v, str):
            raise TypeError(f"{key}: expected a string, got {_shown(v)}")
    elif dataclasses.is_dataclass(tp):
        shorthand = getattr(tp, "SHORTHAND_FIELD", None)  # a bare string stands for {field: string}
        check_dataclass(tp, {shorthand: v} if shorthand and isinstance(v, str) else v, key, nested, pick)
    elif origin in (tuple, list) or (origin is not None and origin.__name__ == "Sequence"):
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"{key}: expected a list, got {_shown(v)}")
        inner = args[0] if args else Any
        for i, x in enumerate(v):
            check_value(inner, x, f"{key}[{i}]", nested, pick)
    elif origin is dict or tp is dict:
        if not isinstance(v, dict):
            raise TypeError(f"{key}: expected a mapping, got {_shown(v)}")
        leaf = key.rsplit(".", 1)[-1]
        if nested and leaf in nested:
            check_dataclass(nested[leaf], v, key, None, pick)
        elif len(args) == 2:
            for k, x in v.items():
                check_value(args[1], x, f"{key}.{k}", nested, pick)


def _optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def check_dataclass(cls: type, v: Any, key: str, nested: dict[str, type] | None = None,
                    pick: Callable[[Any, Any], Any] | None = None) -> None:
    """Check a raw mapping field by field against `cls`'s type hints. Unknown keys are left to the
    class's own parser (which names them and lists the known ones)."""
    if not isinstance(v, dict):
        raise TypeError(f"{key}: expected a mapping, got {_shown(v)}")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in v:
            check_value(hints[f.name], v[f.name], f"{key}.{f.name}", nested, pick)
