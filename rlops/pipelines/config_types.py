"""Strict types for pipeline configs: YAML that reads numbers as numbers, and a check of raw
values against the config dataclasses' type hints before any of them is built.

The walk over the type hints itself is rlops.components.json_config (one loader for the
pipeline YAML, `--set` and the components' JSON); this module adds the YAML reading.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from rlops.components.json_config import build, check


class _Loader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, where `1e3` and `1e-46` are strings (1.1 floats need a dot and a
    signed exponent); read them as floats, as YAML 1.2 and JSON do."""


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.yaml_implicit_resolvers = {
    k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def check_value(tp: Any, v: Any, key: str) -> None:
    """Raise TypeError('<key>: expected ..., got ...') when `v` does not fit the type hint `tp`
    (the one loader's check: rlops.components.json_config.check)."""
    check(tp, v, key)


def check_dataclass(cls: type, v: Any, key: str) -> None:
    """Check a raw mapping against `cls`'s type hints: unknown keys (with the closest names),
    wrong types and unknown kinds of tagged unions, without building it."""
    build(cls, v, key, make=False)
