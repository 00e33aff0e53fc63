"""What ExperienceGen needs to know of a decision kind: one subclass of RecordKind per kind module
(bandit.py, trajectory.py, slate.py), one instance per row of the table in kinds/__init__.py.

A kind says which simulation envs log it, which fields its rows are read
into, how they are checked, whether they are grouped into records later, and the Beam stage that
writes its records. Code outside the kinds asks the config's kind (`kinds.record_kind(name)`)
rather than testing the kind's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    import apache_beam as beam

    from rlops.components.experience_gen.checks import Rejects
    from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource
    from rlops.components.experience_gen.items import ItemTable
    from rlops.components.experience_gen.layout import Field, Layout, SourceSchema
    from rlops.components.experience_gen.pipeline import Plan
    from rlops.components.experience_gen.sources import Block, Sample
    from rlops.components.experience_gen.validation import Validated


class RecordKind:
    """The defaults are a kind whose rows are records: no item table, no events, no groups."""

    name: ClassVar[str]
    # A multivalent list longer than its field's width is cut to it (counted); else quarantined.
    cuts_long_lists: ClassVar[bool] = True
    # Its named context features get a schema (vocabularies, statistics) beside the records.
    feature_schema: ClassVar[bool] = True
    # Its records may carry the legacy dense float `context`, whose schema the driver writes.
    dense_context: ClassVar[bool] = False

    # --- simulation -------------------------------------------------------------------------

    def simulates(self, source: SimulationSource) -> bool:
        """Whether the source's env logs records of this kind."""
        raise NotImplementedError

    def plan_simulation(self, config: ExperienceGenConfig) -> ExperienceGenConfig:
        """The config with the simulated records' columns and the env's action spec."""
        raise NotImplementedError

    def simulate(self, config: ExperienceGenConfig, shard: int) -> Iterator[dict[str, np.ndarray]]:
        """One shard's column batches."""
        raise NotImplementedError

    # --- plan -------------------------------------------------------------------------------

    def plan_items(
        self, config: ExperienceGenConfig, joins_items: bool
    ) -> tuple[ExperienceGenConfig, ItemTable | None, tuple[str, ...]]:
        """The config with what the item table settles, the table joined to every batch (per-arm
        features) and the item ids records index into."""
        return config, None, ()

    def resolve_sample(self, config: ExperienceGenConfig, peek: Callable[[], Sample] | None) -> ExperienceGenConfig:
        """The config with what the source's sample settles, once its columns are known to be there."""
        return config

    # --- layout and checks ------------------------------------------------------------------

    def fields(self, config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str]) -> list[Field]:
        """The fields a source row is read into (`item_ids`: the item table's, in its order)."""
        raise NotImplementedError

    def check(
        self,
        values: dict[str, np.ndarray],
        present: dict[str, np.ndarray],
        layout: Layout,
        config: ExperienceGenConfig,
        rej: Rejects,
    ) -> None:
        """Reject the rows that are not valid records of the kind (values may be normalized in place)."""
        raise NotImplementedError

    def rows_grouped(self, config: ExperienceGenConfig) -> bool:
        """Whether valid rows are assembled into records later (so a rejected row takes its group)."""
        return False

    def finish_rows(self, v: Validated, block: Block, config: ExperienceGenConfig, item_ids: Sequence[str]) -> None:
        """After the per-arm join: what the kind does to a block's validated rows before they go on."""

    # --- write ------------------------------------------------------------------------------

    def write(self, plan: Plan, valid: beam.PCollection, bad: beam.PCollection) -> tuple[Any, beam.PCollection | None]:
        """The Beam stage from valid batches (and `bad`, the marks of groups that lost a row) to
        (serialized records, count) per split name, and the rows of rejected groups (or None)."""
        raise NotImplementedError
