"""Simulation (`kind: simulation`): records logged by a policy acting in an environment
(experience_gen/simulation.py runs it; slate pages: slate_simulation.py), one work item per shard.
Its records are its config."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Iterator, Mapping, cast

import apache_beam as beam

from rlops.components.common.decision_kinds import SLATE
from rlops.components.experience_gen import simulation, slate_simulation
from rlops.components.experience_gen.config import (
    BanditColumns,
    ExperienceGenConfig,
    SimulationSource,
    TrajectoryColumns,
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
        src = _source(config)
        if slate_simulation.is_slates(src) != (config.record_kind == SLATE):
            raise ValueError(
                f"experience_gen.source.env: {src.env!r} with record_kind {config.record_kind!r}; "
                f"env '{slate_simulation.SLATES_ENV}' logs pages (record_kind: slate), and only it does"
            )
        if config.record_kind == SLATE:
            config = slate_simulation.plan_config(config)
        elif simulation.is_gym(src):
            dim, spec = simulation.gym_spaces(src)
            tcols = TrajectoryColumns(observation_dim=dim, log_probability="log_probability", terminal="terminated")
            config = dataclasses.replace(config, trajectory_columns=tcols, action_spec=config.action_spec or spec)
        else:
            dim, spec = simulation.bandit_shape(src)
            bcols = BanditColumns(context=("context",), context_dim=dim, propensity="propensity")
            config = dataclasses.replace(config, bandit_columns=bcols, action_spec=config.action_spec or spec)
        return SourcePlan(config, tuple(range(src.num_shards)), joins_items=False)

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
        src = _source(config)
        if config.record_kind == SLATE:
            batches = slate_simulation.simulate_slates(config, item)
        else:
            batches = (simulation.simulate_gym if simulation.is_gym(src) else simulation.simulate_bandit)(src, item)
        row0 = 0
        for cols in batches:
            yield numpy_block(cols, f"simulation:{src.env}:shard-{item}", row0)
            row0 += len(cols["reward"])

    def cloud_inputs(self, config: ExperienceGenConfig) -> list[str]:
        return []
