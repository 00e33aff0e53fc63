"""What flows between ExperienceGen's Beam stages: batches of valid rows (numpy columns) and the
marks of groups that lost a row, plus the helpers every kind's write stage takes them apart with."""

from __future__ import annotations

import operator
import pickle
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import apache_beam as beam
import numpy as np

from rlops.components.experience_gen import sources
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.sources import Quarantined

QUARANTINE_PREFIX = "quarantine"  # the tag of quarantined records, and their files' prefix


@dataclass
class ValidBatch:
    columns: dict[str, np.ndarray]
    split_key: np.ndarray | None = None
    split_time: np.ndarray | None = None
    # Provenance, kept for rows of grouped kinds (an invalid group quarantines all its rows).
    provenance: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def nbytes(self) -> int:
        arrays = [*self.columns.values(), *self.provenance.values(), self.split_key, self.split_time]
        return sum(a.nbytes for a in arrays if a is not None)


class ValidBatchCoder(beam.coders.Coder):
    """Valid batches are pickled where they cross workers, and sized from their arrays: Beam sizes
    sampled elements of every PCollection by encoding them, which for batches (few elements, each
    thousands of rows) meant pickling nearly every batch once more, text columns value by value."""

    def encode(self, value: ValidBatch) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> ValidBatch:
        return pickle.loads(encoded)

    def is_deterministic(self) -> bool:
        return False

    def estimate_size(self, value: ValidBatch) -> int:
        return value.nbytes()

    def to_type_hint(self) -> type:
        return ValidBatch


beam.coders.registry.register_coder(ValidBatch, ValidBatchCoder)


@dataclass(frozen=True)
class BadStep:
    """Marks a group (an episode, a page) one of whose rows was quarantined: the rest of it is not
    written. `episode_id` is the group's id."""

    episode_id: str
    message: str


def take(batch: ValidBatch, idx: np.ndarray) -> ValidBatch:
    pick = lambda d: {k: v[idx] for k, v in d.items()}  # noqa: E731
    return ValidBatch(
        pick(batch.columns),
        None if batch.split_key is None else batch.split_key[idx],
        None if batch.split_time is None else batch.split_time[idx],
        pick(batch.provenance),
    )


def concat(parts: list[ValidBatch]) -> ValidBatch:
    cat = lambda ds: {k: np.concatenate([d[k] for d in ds]) for k in ds[0]}  # noqa: E731
    key = None if parts[0].split_key is None else np.concatenate([p.split_key for p in parts])
    time = None if parts[0].split_time is None else np.concatenate([p.split_time for p in parts])
    return ValidBatch(cat([p.columns for p in parts]), key, time, cat([p.provenance for p in parts]))


def pick(serialized: list[bytes], idx: np.ndarray) -> list[bytes]:
    """serialized[idx] without a Python step per record."""
    if len(idx) == 1:
        return [serialized[int(idx[0])]]
    return list(operator.itemgetter(*idx.tolist())(serialized))


def quarantine_rows(rows: ValidBatch, reasons: list[tuple[str, str]], config: ExperienceGenConfig) -> Iterator[Any]:
    """Rows that cannot be written, each with its group's (reason, message); payloads that were
    left in the source (Block.payload_from_file) are read back here."""
    p = rows.provenance
    if "payload" in p:
        payloads: Sequence[bytes] = p["payload"].tolist()
    else:
        payloads = sources.read_back_payloads(config.source, p["file"], p["line"], p["offset"])
    for i, (code, message) in enumerate(reasons):
        yield beam.pvalue.TaggedOutput(
            QUARANTINE_PREFIX,
            Quarantined(code, message, str(p["file"][i]), int(p["line"][i]), int(p["offset"][i]), payloads[i]),
        )
