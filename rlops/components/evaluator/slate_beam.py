"""The Beam engine of the slate estimators (slate_estimators.py): batches of slates become their
columns on the workers (`slate_columns`), a CombineFn sums them with the hash-derived Poisson
bootstrap, and the driver turns the one `SlateSums` into the same SlateComparison the in-memory
engine gives (<= 1e-9 apart: only the order of float additions differs). The accumulator holds
sums only ([width] and [B, boot_width]), so memory does not grow with the number of slates.
DirectRunner here, Dataflow in the cloud (`beam_pipeline_args`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from rlops.components.evaluator import bootstrap
from rlops.components.evaluator.beam import run_pipeline
from rlops.components.evaluator.estimators import DEFAULT_MIN_ESS, DEFAULT_MIN_RECORDS, TrustRule
from rlops.components.evaluator.slate_estimators import (
    SlateComparison,
    SlateLayout,
    SlateLog,
    SlateSums,
    SlateTarget,
    check_position_weights,
    comparison_from_sums,
    make_layout,
    slate_columns,
)


@dataclass(frozen=True)
class SlateBatch:
    """One element of the pipeline: a batch of logged slates and every policy's target on them."""

    log: SlateLog
    targets: tuple[SlateTarget, ...]


@dataclass(frozen=True)
class BatchColumns:
    """What a worker turns a SlateBatch into: the columns [n, width] and bootstrap keys."""

    layout: SlateLayout
    position_weights: np.ndarray

    def __call__(self, batch: SlateBatch) -> tuple[np.ndarray, np.ndarray]:
        return slate_columns(batch.log, batch.targets, self.layout, self.position_weights), batch.log.keys


def slate_sums_combine_fn() -> type:
    """The CombineFn class (made on first use: apache_beam imports only where Beam runs)."""
    import apache_beam as beam

    class SlateSumsCombineFn(beam.CombineFn):
        """(columns, keys) batches -> their SlateSums, whatever the batches' order or grouping."""

        def __init__(self, layout: SlateLayout, num_bootstrap: int, seed: int):
            self.layout, self.num_bootstrap, self.seed = layout, num_bootstrap, seed

        def create_accumulator(self):
            return None

        def add_input(self, acc, element):
            columns, keys = element
            part = SlateSums.of(columns, keys, self.layout, self.num_bootstrap, self.seed)
            return part if acc is None else acc.merge(part)

        def merge_accumulators(self, accumulators):
            out = None
            for acc in accumulators:
                if acc is not None:
                    out = acc if out is None else out.merge(acc)
            return out

        def extract_output(self, acc):
            return acc

    return SlateSumsCombineFn


def sum_slates(
    batches: Any,
    layout: SlateLayout,
    num_bootstrap: int = 500,
    seed: int = 0,
    position_weights: np.ndarray | Sequence[float] | None = None,
) -> Any:
    """PCollection of SlateBatch -> PCollection of one SlateSums (None when there were no slates)."""
    import apache_beam as beam

    theta = check_position_weights(position_weights, layout.num_slots)
    combine = slate_sums_combine_fn()
    return (
        batches
        | "SlateColumns" >> beam.Map(BatchColumns(layout, theta))
        | "SumSlates" >> beam.CombineGlobally(combine(layout, num_bootstrap, seed))
    )


def compare_slates_beam(
    batches: Iterable[tuple[SlateLog, Sequence[SlateTarget]]],
    num_bootstrap: int = 500,
    confidence: float = 0.95,
    seed: int = 0,
    min_records: int = DEFAULT_MIN_RECORDS,
    min_ess: float = DEFAULT_MIN_ESS,
    position_weights: np.ndarray | Sequence[float] | None = None,
    beam_pipeline_args: Sequence[str] | None = None,
    layout: SlateLayout | None = None,
) -> SlateComparison:
    """compare_slates over batches of (log, [candidate] or [candidate, baseline]) as a Beam
    pipeline. The layout (which estimators each policy has inputs for) comes from the first batch
    unless given; every batch must carry the same inputs."""
    import apache_beam as beam

    bootstrap.check_bootstrap_args(num_bootstrap, confidence)
    elements = [SlateBatch(log, tuple(targets)) for log, targets in batches]
    if not elements:
        raise ValueError("no slates to evaluate")
    layout = make_layout(elements[0].log, elements[0].targets) if layout is None else layout

    def build(p):
        return sum_slates(
            p | "Batches" >> beam.Create(elements, reshuffle=False), layout, num_bootstrap, seed, position_weights
        )

    with tempfile.TemporaryDirectory() as out_dir:
        sums = run_pipeline(build, beam_pipeline_args, out_dir)
    rule = TrustRule(num_bootstrap, confidence, min_records, min_ess)
    return comparison_from_sums(sums, rule, 0, 1 if len(layout.groups) > 1 else None)
