"""Simulation (`kind: simulation`): records logged by a policy acting in an environment, one work
item per shard. Its records are its config. The record kind says which envs log it and runs them
(kinds/: experience_gen/simulation.py for bandits and gym, slate_simulation.py for pages)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator, Mapping, cast

import apache_beam as beam

from rlops.components.experience_gen import slate_simulation
from rlops.components.experience_gen.config import (
    ExperienceGenConfig,
    SimulationSource,
)
from rlops.components.experience_gen.layout import Layout, SourceSchema
from rlops.components.experience_gen.sources.base import (
    Block,
    Quarantined,
    Sample,
    SourcePlan,
    Unreadable,
    create_items,
    numpy_block,
)


def _source(config: ExperienceGenConfig) -> SimulationSource:
    return cast(SimulationSource, config.source)


class Simulation:
    """Simulated records use the default column names; widths and the action spec come from the env."""

    kind: ClassVar[str] = "simulation"
    label: ClassVar[str] = "SimulationSource"
    dated_fields: ClassVar[tuple[str, ...]] = ()
    runtime_fields: ClassVar[Mapping[str, str]] = {"num_records": "num_records"}
    cacheable: ClassVar[bool] = True

    def plan(self, config: ExperienceGenConfig) -> SourcePlan:
        from rlops.components.experience_gen.kinds import record_kind  # the kinds build on the sources

        src = _source(config)
        kind = record_kind(config.record_kind)
        if not kind.simulates(src):  # a gym env with another kind: the config has said so already
            raise ValueError(
                f"experience_gen.source.env: {src.env!r} with record_kind {config.record_kind!r}; "
                f"env '{slate_simulation.SLATES_ENV}' logs pages (record_kind: slate), and only it does"
            )
        return SourcePlan(kind.plan_simulation(config), tuple(range(src.num_shards)), joins_items=False)

    def peek(self, config: ExperienceGenConfig, inputs: tuple) -> Callable[[], Sample] | None:
        return None  # the columns are the defaults, with no named features to infer

    def columns(self, config: ExperienceGenConfig, inputs: tuple) -> tuple[SourceSchema, str | None]:
        return SourceSchema(), None

    def fingerprint(self, config: ExperienceGenConfig) -> list[list]:
        return []

    def read(self, p: beam.Pipeline, config: ExperienceGenConfig, items: tuple) -> beam.PCollection:
        return create_items(p, items)

    def read_item(
        self, config: ExperienceGenConfig, layout: Layout, item: Any
    ) -> Iterator[Block | Quarantined | Unreadable]:
        from rlops.components.experience_gen.kinds import record_kind  # the kinds build on the sources

        src = _source(config)
        row0 = 0
        for cols in record_kind(config.record_kind).simulate(config, item):
            yield numpy_block(cols, f"simulation:{src.env}:shard-{item}", row0)
            row0 += len(cols["reward"])

    def cloud_inputs(self, config: ExperienceGenConfig) -> list[str]:
        return []
