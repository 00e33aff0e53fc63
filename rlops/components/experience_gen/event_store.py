"""Decisions that wait for tomorrow: generations of pending decisions between runs.

A decision whose attribution window is still open at the run's cutoff is not written; it is kept,
with the events seen for it so far, under `events.pending_dir`, and the next run joins it with that
run's events. Each run reads one generation and writes the next:

    pending_dir/gen-000007/part-<hash>.pkl ...   the waiting decisions (ValidBatch) and their events
    pending_dir/gen-000007/manifest.json         written last: a generation without it is ignored

The manifest names the generation the run started from (`parent`) and a key of the run's inputs.
A run whose inputs equal the latest generation's (the same night run again) starts from that
generation's parent, not from what the first attempt wrote: running a night twice neither joins a
waiting decision twice nor loses one. Everything goes through Beam's filesystems (local, gs://).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystems import FileSystems

MANIFEST = "manifest.json"
PART_PREFIX = "part-"
_GENERATION = re.compile(r"gen-(\d{6,})")
KEEP = 4  # committed generations kept (the newest ones); older ones are removed


@dataclass(frozen=True)
class Generation:
    number: int
    path: str
    manifest: dict

    @property
    def parent(self) -> int | None:
        return self.manifest.get("parent")


@dataclass
class PendingPart:
    """Waiting decisions of one batch (a ValidBatch) and the events carried with them (EventChunk)."""

    batch: Any
    events: Any


def _name(number: int) -> str:
    return f"gen-{number:06d}"


def _numbers(root: str) -> list[int]:
    """Every generation directory's number, committed or not."""
    if not FileSystems.exists(root):
        return []
    found = FileSystems.match([FileSystems.join(root, "gen-*", "*")])[0].metadata_list
    out = set()
    for m in found:
        g = _GENERATION.search(m.path)
        if g:
            out.add(int(g.group(1)))
    return sorted(out)


def generations(root: str) -> list[Generation]:
    """Committed generations (those with a manifest), oldest first."""
    out = []
    for n in _numbers(root):
        path = FileSystems.join(root, _name(n))
        manifest = FileSystems.join(path, MANIFEST)
        if FileSystems.exists(manifest):
            with FileSystems.open(manifest) as f:
                out.append(Generation(n, path, json.loads(f.read().decode("utf-8"))))
    return out


@dataclass(frozen=True)
class Plan:
    """Where this run reads waiting decisions from and writes the next generation to."""

    root: str
    start: Generation | None  # the generation this run starts from (None: nothing waits)
    number: int  # the generation this run writes
    inputs_key: str
    layout_key: str

    @property
    def path(self) -> str:
        return FileSystems.join(self.root, _name(self.number))

    def part_files(self) -> list[str]:
        if self.start is None:
            return []
        return sorted(self.start.manifest.get("parts", []))


def plan(root: str, inputs_key: str, layout_key: str) -> Plan:
    """The generation to start from (the latest, or its parent when the latest was written by
    these very inputs) and the number of the one to write. A start written with other columns is
    one error naming the directory (its decisions could not be joined and written as they are)."""
    gens = generations(root)
    by_number = {g.number: g for g in gens}
    start = gens[-1] if gens else None
    if start is not None and start.manifest.get("inputs") == inputs_key:  # this night, again
        start = by_number.get(start.parent) if start.parent is not None else None
    if start is not None and start.manifest.get("layout") != layout_key and start.manifest.get("parts"):
        raise ValueError(
            f"experience_gen.events.pending_dir: the decisions waiting in {start.path} were kept by a run with other "
            f"columns ({start.manifest.get('layout')}; this run: {layout_key}); point pending_dir elsewhere to start "
            "afresh, or run once more with the earlier columns"
        )
    numbers = _numbers(root)
    return Plan(root, start, (numbers[-1] + 1) if numbers else 1, inputs_key, layout_key)


def write_part(directory: str, part: PendingPart) -> str:
    """One part file, named by its content: a retried bundle rewrites the same file."""
    data = pickle.dumps(part, pickle.HIGHEST_PROTOCOL)
    path = FileSystems.join(directory, f"{PART_PREFIX}{hashlib.sha256(data).hexdigest()[:20]}.pkl")
    with FileSystems.create(path) as f:
        f.write(data)
    return path


def read_part(path: str) -> PendingPart:
    with FileSystems.open(path) as f:
        return pickle.loads(f.read())


def commit(p: Plan, counts: dict[str, int]) -> None:
    """The manifest, last: from now on the next run starts from this generation. Then prune."""
    directory = p.path
    found = FileSystems.match([FileSystems.join(directory, PART_PREFIX + "*")])[0].metadata_list
    manifest = {
        "parent": None if p.start is None else p.start.number,
        "inputs": p.inputs_key,
        "layout": p.layout_key,
        "parts": sorted(m.path for m in found),
        "counts": counts,
    }
    with FileSystems.create(FileSystems.join(directory, MANIFEST)) as f:
        f.write(json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
    _prune(p.root)


def _prune(root: str) -> None:
    """Keep the newest KEEP committed generations and what they start from (a re-run needs its parent)."""
    gens = generations(root)
    keep = {g.number for g in gens[-KEEP:]}
    keep |= {g.parent for g in gens[-KEEP:] if g.parent is not None}
    for g in gens:
        if g.number not in keep:
            files = FileSystems.match([FileSystems.join(g.path, "*")])[0].metadata_list
            FileSystems.delete([m.path for m in files])
