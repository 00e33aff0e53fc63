"""Every file of a run (each split's TFRecords and the quarantine) through one Beam write.

Each `beam.io.Write` costs ~0.1-0.2 CPU-s per run whatever the data: its initialize,
pre-finalize and finalize stages read side inputs, and the runner sizes them. One transform
keyed by destination pays a single stage instead: bundles write temp files (a fresh name per
bundle attempt) under a `beam-temp-*` folder beside each destination's final files, and one
finalize step, fed by a GroupByKey of the committed temp names, renames them into place the way
FileBasedSink does. It is idempotent (a retried finalize skips what it already renamed), then
removes the temp folders, with what failed bundle attempts left there.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

import apache_beam as beam
from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms import window
from apache_beam.utils.windowed_value import WindowedValue

from rlops.components.experience_gen import sinks

TFRECORD, TEXT = "tfrecord", "text"
GLOBAL = (window.GlobalWindow(),)
MAX_TIMESTAMP = window.GlobalWindow().max_timestamp()


@dataclass(frozen=True)
class Destination:
    """Final names are `prefix-SSSSS-of-NNNNN<suffix>`. TFRECORD elements are (serialized records,
    units) and count `written_records:<name>` / `written_units:<name>`; TEXT elements are lines."""

    name: str
    prefix: str
    suffix: str
    kind: str = TFRECORD
    num_shards: int = 0  # 0: one file per bundle, as the runner splits the work
    compression_level: int = 1

    def temp_dir(self, run_id: str) -> str:
        base, last = FileSystems.split(self.prefix)
        return FileSystems.join(base, f"beam-temp-{last}-{run_id}")

    def final_name(self, shard: int, num_shards: int) -> str:
        return f"{self.prefix}-{shard:05d}-of-{num_shards:05d}{self.suffix}"

    def open(self, path: str) -> Any:
        if self.kind == TFRECORD:
            raw = FileSystems.create(path, "application/octet-stream", CompressionTypes.UNCOMPRESSED)
            return sinks.GzipWriter(raw, self.compression_level)
        return FileSystems.create(path, "text/plain", CompressionTypes.GZIP)


def tfrecord_split(examples_uri: str, split: str, compression_level: int, num_shards: int) -> Destination:
    from rlops.components.common.records import split_dir

    prefix = FileSystems.join(split_dir(examples_uri, split), "data_tfrecord")
    return Destination(split, prefix, ".gz", TFRECORD, num_shards, compression_level)


class WriteTempFilesFn(beam.DoFn):
    """Elements of one destination -> a temp file per bundle (per shard when sharded: elements are
    then (shard, values) groups); at the end of the bundle, (None, (destination, temp path)) for
    each file it closed, for the one finalize step."""

    def __init__(self, dest: Destination, run_id: str):
        self.dest = dest
        self.run_id = run_id

    def setup(self) -> None:
        ns, name = sinks.METRICS_NAMESPACE, self.dest.name
        self.records = beam.metrics.Metrics.counter(ns, f"{sinks.WRITTEN_RECORDS}:{name}")
        self.units = beam.metrics.Metrics.counter(ns, f"{sinks.WRITTEN_UNITS}:{name}")

    def start_bundle(self) -> None:
        self.files: dict[int | None, tuple[str, Any]] = {}

    def process(self, element: Any) -> None:
        if self.dest.num_shards:
            shard, values = element
            handle = self._file(shard)
            for value in values:
                self._write(handle, value)
        else:
            self._write(self._file(None), element)

    def _file(self, shard: int | None) -> Any:
        if shard not in self.files:  # a fresh name per bundle attempt: a retried bundle never meets its own
            path = FileSystems.join(self.dest.temp_dir(self.run_id), uuid.uuid4().hex + self.dest.suffix)
            self.files[shard] = (path, self.dest.open(path))
        return self.files[shard][1]

    def _write(self, handle: Any, value: Any) -> None:
        if self.dest.kind == TEXT:
            handle.write(value.encode("utf-8") + b"\n")
            return
        records, units = value
        handle.write(sinks.frame_records(records))
        self.records.inc(len(records))
        self.units.inc(units)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for path, handle in self.files.values():
            handle.close()
            yield WindowedValue((None, (self.dest.name, path)), MAX_TIMESTAMP, GLOBAL)
        self.files = {}


class _RoundRobinFn(beam.DoFn):
    """value -> (shard, value), shards in turn from a random start per bundle (as Beam's Write)."""

    def __init__(self, num_shards: int):
        self.num_shards = num_shards

    def start_bundle(self) -> None:
        self.counter = random.randrange(self.num_shards)

    def process(self, value: Any) -> Iterator[tuple[int, Any]]:
        self.counter += 1
        yield self.counter % self.num_shards, value


class FinalizeFn(beam.DoFn):
    """(None, [(destination name, temp path)] + [None]) -> every destination's final files."""

    def __init__(self, destinations: Mapping[str, Destination], run_id: str):
        self.destinations = dict(destinations)
        self.run_id = run_id

    def process(self, element: tuple[None, Iterable[tuple[str, str] | None]]) -> Iterator[str]:
        temp: dict[str, list[str]] = {name: [] for name in self.destinations}
        for result in element[1]:
            if result is not None:  # the start marker: finalize runs when nothing was written
                temp[result[0]].append(result[1])
        for name, dest in self.destinations.items():
            yield from finalize(dest, sorted(temp[name]), self.run_id)


def finalize(dest: Destination, temp_files: list[str], run_id: str) -> list[str]:
    """Renames the committed temp files to their final names, with empty files up to num_shards
    (at least one: an empty output still has a file); then removes the temp folder. A retried
    finalize finds the same committed names in the same order and skips those it renamed."""
    num_shards = dest.num_shards or max(1, len(temp_files))
    if len(temp_files) > num_shards:
        raise BeamIOError(f"{dest.name}: {len(temp_files)} temp files for {num_shards} shards")
    temp_dir = dest.temp_dir(run_id)
    for _ in range(num_shards - len(temp_files)):
        path = FileSystems.join(temp_dir, uuid.uuid4().hex + dest.suffix)
        dest.open(path).close()
        temp_files.append(path)
    finals = [dest.final_name(i, num_shards) for i in range(num_shards)]
    existing = {m.path for r in FileSystems.match([FileSystems.join(temp_dir, "*"), *finals]) for m in r.metadata_list}
    missing = [(src, dst) for src, dst in zip(temp_files, finals) if src not in existing and dst not in existing]
    if missing:
        raise BeamIOError(f"{dest.name}: neither {missing[0][0]} nor {missing[0][1]} exists")
    todo = [(src, dst) for src, dst in zip(temp_files, finals) if src in existing]
    if todo:
        FileSystems.rename([src for src, _ in todo], [dst for _, dst in todo])
    leftovers = [m.path for r in FileSystems.match([FileSystems.join(temp_dir, "*")]) for m in r.metadata_list]
    if leftovers:  # failed bundle attempts' files
        FileSystems.delete(leftovers)
    try:
        FileSystems.delete([temp_dir])
    except BeamIOError:  # object stores have no folder to delete
        logging.getLogger(__name__).debug("no temp folder to delete: %s", temp_dir)
    return finals


def write_all(
    pcolls: Mapping[str, beam.PCollection], destinations: Mapping[str, Destination], run_id: str | None = None
) -> beam.PCollection:
    """{destination name: PCollection of its elements} -> the final file names of every destination
    (one empty file for each without elements). `run_id` names the temp folders: fresh per run.
    Each destination's temp files are written in its producer's fused stage, `Write[<name>]` (a
    Flatten of the data would make the runner encode every element between stages); only their
    names meet, in `Finalize`."""
    run_id = run_id or uuid.uuid4().hex
    p = next(iter(pcolls.values())).pipeline
    temp = []
    for name, pcoll in pcolls.items():
        dest = destinations[name]
        if dest.num_shards:
            pcoll = (
                pcoll
                | f"Shard[{name}]" >> beam.ParDo(_RoundRobinFn(dest.num_shards))
                | f"GroupShards[{name}]" >> beam.GroupByKey()
            )
        temp.append(pcoll | f"Write[{name}]" >> beam.ParDo(WriteTempFilesFn(dest, run_id)))
    temp.append(p | "WriteStart" >> beam.Create([(None, None)]))
    return (
        temp
        | "AllTempFiles" >> beam.Flatten()
        | "GroupTempFiles" >> beam.GroupByKey()
        | "Finalize" >> beam.ParDo(FinalizeFn(destinations, run_id))
    )
