"""A JSON round trip for component configs (dataclasses): every face passes a config as a
string (TFX execution property, KFP parameter, CLI file), and unknown keys fail naming the key."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

T = TypeVar("T", bound="JsonConfig")


class JsonConfig:
    SECTION = "config"  # the key prefix errors name, e.g. "trainer"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any]) -> T:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"{cls.SECTION}.{unknown[0]}: unknown key; known keys: {', '.join(sorted(known))}")
        return cls(**d)

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))
