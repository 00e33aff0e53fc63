"""Files (`kind: file`): CSV, JSON Lines, Parquet or TFRecord, matched by Beam filesystems."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator, Mapping, cast

import apache_beam as beam

from rlops.components.experience_gen.config import ExperienceGenConfig, FileSource
from rlops.components.experience_gen.layout import Layout, SourceSchema
from rlops.components.experience_gen.sources.base import (
    Block,
    Quarantined,
    Sample,
    SourceError,
    SourcePlan,
    Unreadable,
    create_items,
    file_stamps,
    match_files,
    on_cloud_storage,
    plan_ranges,
)
from rlops.components.experience_gen.sources.parquet import read_parquet
from rlops.components.experience_gen.sources.peek import peek_schema
from rlops.components.experience_gen.sources.sample import emptiness, sample_types
from rlops.components.experience_gen.sources.text import read_csv, read_jsonl
from rlops.components.experience_gen.sources.tfrecord import read_tfrecord

READERS = {"csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet, "tfrecord": read_tfrecord}
SCHEMA_TRIES = 10  # files whose schema is looked for before giving up (a torn one fails later)


def _source(config: ExperienceGenConfig) -> FileSource:
    return cast(FileSource, config.source)


class Files:
    """Uncompressed CSV / JSONL files are cut into byte ranges, other files are one item each."""

    kind: ClassVar[str] = "file"
    label: ClassVar[str] = "file"
    dated_fields: ClassVar[tuple[str, ...]] = ("pattern",)
    runtime_fields: ClassVar[Mapping[str, str]] = {"data_pattern": "pattern"}
    cacheable: ClassVar[bool] = True

    def plan(self, config: ExperienceGenConfig) -> SourcePlan:
        src = _source(config)
        files = match_files(src.pattern)
        # Text files without a byte (not even a header): say so, not "no column x". An empty
        # Parquet or TFRecord file is a torn one: the readers report its bytes as unreadable.
        if src.format in ("csv", "jsonl") and all(size == 0 for _, size in files):
            raise ValueError(f"experience_gen.source: no records to read: {emptiness([p for p, _ in files], src)}")
        return SourcePlan(config, tuple(plan_ranges(files, src)), tuple(files))

    def peek(self, config: ExperienceGenConfig, inputs: tuple) -> Callable[[], Sample] | None:
        src = _source(config)
        return lambda: sample_types(list(inputs), src)

    def columns(self, config: ExperienceGenConfig, inputs: tuple) -> tuple[SourceSchema, str | None]:
        """The schema of the first readable file (a torn one fails the run later, naming its
        bytes); a CSV header that cannot be decoded fails here, naming the file. A CSV header or
        a Parquet schema lists every column; a JSONL / TFRecord first record need not."""
        src = _source(config)
        for path, _ in inputs[:SCHEMA_TRIES]:
            try:
                schema = peek_schema(path, src)
            except SourceError:
                raise
            except Exception:  # noqa: BLE001 - e.g. a truncated Parquet footer
                continue
            if schema.names:
                return schema, (inputs[0][0] if src.format in ("csv", "parquet") else None)
        return SourceSchema(), None

    def fingerprint(self, config: ExperienceGenConfig) -> list[list]:
        return file_stamps(_source(config).pattern)

    def read(self, p: beam.Pipeline, config: ExperienceGenConfig, items: tuple) -> beam.PCollection:
        return create_items(p, items)

    def read_item(
        self, config: ExperienceGenConfig, layout: Layout, item: Any
    ) -> Iterator[Block | Quarantined | Unreadable]:
        src = _source(config)
        yield from READERS[src.format](item, src, layout)

    def cloud_inputs(self, config: ExperienceGenConfig) -> list[str]:
        src = _source(config)
        return [f"experience_gen.source.pattern '{src.pattern}'"] if on_cloud_storage(src.pattern) else []
