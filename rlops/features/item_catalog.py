"""The item table a per-arm policy serves by id: ids (int64 or string, as logged) and each item's raw
features, one row per item.

ExperienceGen writes it beside the splits (`item_table.json`); the Trainer reads it there and the
exported policy holds it as constants, so a server sends only candidate ids (rlops.train.by_id).
Its identity is `sha256`: the hash of its canonical bytes (sorted-key compact JSON of ids, id dtype
and columns), which the policy's `get_metadata` and `policy_specs.json` report with `num_rows`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

ITEM_TABLE_FILE = "item_table.json"
INT64, STRING = "int64", "string"
ID_PAD = {INT64: -1, STRING: ""}  # a candidate slot holding no item (never chosen)

Array = np.ndarray[Any, Any]


@dataclass
class ItemCatalog:
    """`ids` [M] (int64, or str objects); `columns` {item feature name: [M] or [M, W] values}."""

    ids: Array
    columns: Mapping[str, Array] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        self.ids = ids.astype(np.int64) if ids.dtype.kind in "iu" else ids.astype(str).astype(object)
        if len(set(self.ids.tolist())) != len(self.ids):
            raise ValueError("item table: item ids must be unique")
        pad = ID_PAD[self.id_dtype]
        if any(v == pad for v in self.ids.tolist()):
            raise ValueError(f"item table: id {pad!r} is the candidate pad and cannot name an item")
        for name, v in self.columns.items():
            if len(v) != len(self.ids):
                raise ValueError(f"item table: column '{name}' has {len(v)} rows, the ids {len(self.ids)}")

    @property
    def id_dtype(self) -> str:
        return INT64 if self.ids.dtype == np.int64 else STRING

    @property
    def num_rows(self) -> int:
        return int(len(self.ids))

    def to_json(self) -> dict[str, Any]:
        return {
            "id_dtype": self.id_dtype,
            "ids": self.ids.tolist(),
            "columns": {k: np.asarray(v).tolist() for k, v in sorted(self.columns.items())},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ItemCatalog:
        ids = np.asarray(obj["ids"], np.int64 if obj["id_dtype"] == INT64 else object)
        return cls(ids, {k: _column(v) for k, v in obj["columns"].items()})

    def canonical_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_bytes()).hexdigest()


def _column(values: list[Any]) -> Array:
    a = np.asarray(values)
    return a.astype(object) if a.dtype.kind in "US" else a


def write_item_catalog(directory: str, catalog: ItemCatalog) -> None:
    """`directory/item_table.json` (an Examples artifact's root: beside the splits)."""
    import tensorflow as tf

    tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(os.path.join(directory, ITEM_TABLE_FILE), "w") as f:
        f.write(catalog.canonical_bytes().decode())


def read_item_catalog(directory: str) -> ItemCatalog | None:
    """The item table written beside the splits, or None (records with no item table)."""
    import tensorflow as tf

    path = os.path.join(directory, ITEM_TABLE_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return ItemCatalog.from_json(json.loads(f.read()))
