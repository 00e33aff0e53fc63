"""BigQuery (`kind: bigquery`): a query or a table read by beam.io.ReadFromBigQuery, rows as dicts
batched in the graph. Its rows cannot be fingerprinted: a run is never served from cache."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator, Mapping, cast

import apache_beam as beam

from rlops.components.experience_gen.config import BigQuerySource, ExperienceGenConfig
from rlops.components.experience_gen.layout import Layout, SourceSchema
from rlops.components.experience_gen.sources.base import (
    Block,
    Quarantined,
    Sample,
    SourcePlan,
    Unreadable,
    rows_block,
)


def _source(config: ExperienceGenConfig) -> BigQuerySource:
    return cast(BigQuerySource, config.source)


class BigQuery:
    """Work items are (rows, name) batches made in the graph; nothing is read at construction."""

    kind: ClassVar[str] = "bigquery"
    label: ClassVar[str] = "BigQuery"
    dated_fields: ClassVar[tuple[str, ...]] = ("query", "table")
    runtime_fields: ClassVar[Mapping[str, str]] = {}
    cacheable: ClassVar[bool] = False

    def plan(self, config: ExperienceGenConfig) -> SourcePlan:
        return SourcePlan(config)

    def peek(self, config: ExperienceGenConfig, inputs: tuple) -> Callable[[], Sample] | None:
        return None  # no query at construction: feature kinds are configured

    def columns(self, config: ExperienceGenConfig, inputs: tuple) -> tuple[SourceSchema, str | None]:
        return SourceSchema(), None

    def fingerprint(self, config: ExperienceGenConfig) -> list[list]:
        return []  # not cacheable: input_fingerprint gives every run a fresh key

    def read(self, p: beam.Pipeline, config: ExperienceGenConfig, items: tuple) -> beam.PCollection:
        src = _source(config)
        return (
            p
            | "ReadBigQuery" >> bigquery_read(src)
            | "BatchRows" >> beam.BatchElements(min_batch_size=min(1000, src.batch_size), max_batch_size=src.batch_size)
            | "Name" >> beam.ParDo(BigQueryRowsFn(f"bigquery:{src.table or 'query'}"))
        )

    def read_item(
        self, config: ExperienceGenConfig, layout: Layout, item: Any
    ) -> Iterator[Block | Quarantined | Unreadable]:
        rows, name = item
        yield rows_block(rows, layout.columns, name)

    def cloud_inputs(self, config: ExperienceGenConfig) -> list[str]:
        return [f"experience_gen.source (BigQuery {_source(config).table or 'query'})"]


class BigQueryRowsFn(beam.DoFn):
    """A batch of rows -> (rows, the source's name): the work item `read_item` takes."""

    def __init__(self, name: str):
        self.name = name

    def process(self, rows: list[dict]) -> Iterator[tuple[list[dict], str]]:
        yield rows, self.name


def bigquery_read(src: BigQuerySource) -> beam.PTransform:
    """Beam's BigQuery source for a query or a table (rows arrive as dicts)."""
    kwargs: dict[str, Any] = {"method": getattr(beam.io.ReadFromBigQuery.Method, src.method)}
    if src.method == "DIRECT_READ":  # TIMESTAMPs as datetimes (EXPORT gives "... UTC" text; both work)
        kwargs["use_native_datetime"] = True
    if src.query:
        kwargs.update(query=src.query, use_standard_sql=src.use_standard_sql)
    else:
        kwargs["table"] = src.table
    if src.project:
        kwargs["project"] = src.project
    if src.gcs_location:
        kwargs["gcs_location"] = src.gcs_location
    return beam.io.ReadFromBigQuery(**kwargs)
