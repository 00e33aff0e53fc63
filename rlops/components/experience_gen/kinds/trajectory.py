"""Trajectory records (`record_kind: trajectory`): the steps of an episode, one per source row,
grouped by episode id into one tf.SequenceExample (for PPO).

An episode is written whole or not at all: steps contiguous from 0, none twice, a terminal step
only at its end, no step quarantined; else every one of its steps is quarantined with the
episode's reason. The episode lands in one split, drawn from its id (or the split key).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import apache_beam as beam
import numpy as np

from rlops.components.common import records
from rlops.components.common.decision_kinds import TRAJECTORY
from rlops.components.experience_gen import simulation, splits
from rlops.components.experience_gen.batches import (
    QUARANTINE_PREFIX,
    BadStep,
    ValidBatch,
    concat,
    quarantine_rows,
    take,
)
from rlops.components.experience_gen.checks import (
    NOT_FINITE,
    OUT_OF_RANGE,
    Rejects,
    action_spec,
    check_action,
    finite,
    label,
    message,
    present_key,
)
from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, TrajectoryColumns
from rlops.components.experience_gen.convert import MISSING_VALUE
from rlops.components.experience_gen.kinds.base import RecordKind
from rlops.components.experience_gen.layout import (
    BOOL,
    FLOAT,
    INT,
    STRING,
    Field,
    Layout,
    SourceSchema,
    one_column,
    vector,
)
from rlops.components.experience_gen.records import encode_episode

if TYPE_CHECKING:
    from rlops.components.experience_gen.pipeline import Plan

EPISODE_NOT_CONTIGUOUS = "episode_not_contiguous"
EPISODE_DUPLICATE_STEP = "episode_duplicate_step"
EPISODE_TERMINAL_INSIDE = "episode_terminal_inside"
EPISODE_HAS_BAD_STEP = "episode_has_bad_step"


class Trajectory(RecordKind):
    name = TRAJECTORY
    feature_schema = False  # observations are one float vector, not named features

    def simulates(self, source: SimulationSource) -> bool:
        return simulation.is_gym(source)

    def plan_simulation(self, config: ExperienceGenConfig) -> ExperienceGenConfig:
        dim, spec = simulation.gym_spaces(simulation.source_of(config))
        tcols = TrajectoryColumns(observation_dim=dim, log_probability="log_probability", terminal="terminated")
        return dataclasses.replace(config, trajectory_columns=tcols, action_spec=config.action_spec or spec)

    def simulate(self, config: ExperienceGenConfig, shard: int) -> Iterator[dict[str, np.ndarray]]:
        return simulation.simulate_gym(simulation.source_of(config), shard)

    def fields(self, config: ExperienceGenConfig, schema: SourceSchema, item_ids: Sequence[str]) -> list[Field]:
        return trajectory_fields(config, schema)

    def check(
        self,
        values: dict[str, np.ndarray],
        present: dict[str, np.ndarray],
        layout: Layout,
        config: ExperienceGenConfig,
        rej: Rejects,
    ) -> None:
        check_trajectory(values, present, layout, config, rej)

    def rows_grouped(self, config: ExperienceGenConfig) -> bool:
        return True

    def write(self, plan: Plan, valid: beam.PCollection, bad: beam.PCollection) -> tuple[Any, beam.PCollection | None]:
        out = (
            (valid | "KeySteps" >> beam.FlatMap(key_steps), bad | "KeyBadSteps" >> beam.FlatMap(key_steps))
            | "AllSteps" >> beam.Flatten()
            | "GroupEpisodes" >> beam.GroupByKey()
            | "Assemble"
            >> beam.ParDo(AssembleEpisodeFn(plan.config)).with_outputs(QUARANTINE_PREFIX, *plan.config.splits.names)
        )
        return out, out[QUARANTINE_PREFIX]


# --- layout and checks ----------------------------------------------------------------------


def trajectory_fields(config: ExperienceGenConfig, schema: SourceSchema) -> list[Field]:
    c = config.trajectory_columns
    spec = config.action_spec
    assert spec is not None  # required by the config, or set from a simulation's env
    out = [
        Field(records.EPISODE_ID, (c.episode_id,), STRING),
        Field(records.STEP, (c.step,), INT),
        vector(
            records.OBSERVATION, c.observation, c.observation_prefix, c.observation_dim, FLOAT, schema, "observation"
        ),
    ]
    if spec.is_discrete and not spec.shape:
        out.append(Field(records.ACTION, (one_column(c.action, "action"),), INT))
    else:
        out.append(
            vector(
                records.ACTION,
                c.action,
                c.action_prefix,
                spec.size,
                FLOAT if not spec.is_discrete else INT,
                schema,
                "action",
            )
        )
    out.append(Field(records.REWARD, (c.reward,), FLOAT))
    if c.discount:
        out.append(Field(records.DISCOUNT, (c.discount,), FLOAT))
    if c.terminal:
        out.append(Field(records.TERMINAL, (c.terminal,), BOOL, required=False))
    if c.log_probability:
        out.append(Field(records.LOG_PROBABILITY, (c.log_probability,), FLOAT))
    if c.value_prediction:
        out.append(Field(records.VALUE_PREDICTION, (c.value_prediction,), FLOAT))
    for name, cols in sorted(c.dist_params.items()):
        names = tuple(x for x in cols.split("|") if x)
        prefix = names[0][:-1] if len(names) == 1 and names[0].endswith("*") else None
        out.append(
            vector(
                records.DIST_PARAMS_PREFIX + name,
                () if prefix else names,
                prefix,
                None,
                FLOAT,
                schema,
                f"dist_params[{name}]",
            )
        )
    return out


def check_trajectory(
    values: dict[str, np.ndarray],
    present: dict[str, np.ndarray],
    layout: Layout,
    config: ExperienceGenConfig,
    rej: Rejects,
) -> None:
    f = layout.require
    ids = values[records.EPISODE_ID]
    rej.add(ids == "", MISSING_VALUE, lambda i: f"{label(f(records.EPISODE_ID))}: empty episode id")
    step = values[records.STEP]
    rej.add(step < 0, OUT_OF_RANGE, lambda i: f"{label(f(records.STEP))}: {step[i]} is negative")
    finite(values[records.OBSERVATION], f(records.OBSERVATION), rej)
    check_action(values, layout, config, rej)
    finite(values[records.REWARD], f(records.REWARD), rej)
    if records.DISCOUNT in values:
        d = values[records.DISCOUNT]
        with np.errstate(invalid="ignore"):
            ok = (d >= 0) & (d <= 1)
        rej.add(~ok, OUT_OF_RANGE, lambda i: f"{label(f(records.DISCOUNT))}: {d[i]!r} outside [0, 1]")
    if records.LOG_PROBABILITY in values:
        lp = values[records.LOG_PROBABILITY]
        finite(lp, f(records.LOG_PROBABILITY), rej)
        if action_spec(config).is_discrete:  # a probability mass is at most 1
            rej.add(
                lp > 1e-6,
                OUT_OF_RANGE,
                lambda i: f"{label(f(records.LOG_PROBABILITY))}: {lp[i]!r} > 0 for a discrete action",
            )
    if records.VALUE_PREDICTION in values:
        finite(values[records.VALUE_PREDICTION], f(records.VALUE_PREDICTION), rej)
    for name, v in values.items():
        if name.startswith(records.DIST_PARAMS_PREFIX):  # -inf logits are legal (masked actions)
            nan = np.isnan(v).any(axis=1)
            rej.add(nan, NOT_FINITE, message(f(name), "NaN in distribution parameters"))


# --- group steps into episodes ------------------------------------------------------------------


def key_steps(batch: ValidBatch | BadStep) -> Iterator[tuple[str, ValidBatch | BadStep]]:
    """One (episode id, its steps in this batch) per episode present in the batch."""
    if isinstance(batch, BadStep):
        yield batch.episode_id, batch
        return
    ids = batch.columns[records.EPISODE_ID]
    uniq, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
    for k, episode in enumerate(uniq):
        idx = order[bounds[k] : bounds[k + 1]]
        yield str(episode), take(batch, idx)


class AssembleEpisodeFn(beam.DoFn):
    """(episode id, step parts) -> one SequenceExample in its split, or every step quarantined."""

    def __init__(self, config: ExperienceGenConfig):
        self.config = config

    def process(self, element: tuple[str, list[ValidBatch | BadStep]]) -> Iterator[Any]:
        episode_id, parts = element
        steps = [p for p in parts if isinstance(p, ValidBatch)]
        bad = [p for p in parts if isinstance(p, BadStep)]
        if not steps:
            return
        ep = concat(steps)
        order = np.argsort(ep.columns[records.STEP], kind="stable")
        ep = take(ep, order)
        problem = episode_problem(episode_id, ep.columns)
        if bad:
            problem = (
                EPISODE_HAS_BAD_STEP,
                (f"episode {episode_id!r}: {len(bad)} of its steps were quarantined (first: {bad[0].message})"),
            )
        if problem is not None:
            yield from quarantine_rows(ep, [problem] * len(ep), self.config)
            return
        serialized = encode_episode(episode_id, episode_steps(ep.columns))
        s = self.config.splits
        if ep.split_time is not None:
            which = splits.by_time(ep.split_time[:1], s.time_boundaries)[0]
        else:
            key = ep.split_key[:1] if ep.split_key is not None else np.array([episode_id], object)
            which = splits.by_hash(splits.key_hash(key), s.splits)[0]
        yield beam.pvalue.TaggedOutput(s.splits[int(which)].name, ([serialized], len(ep)))


def episode_problem(episode_id: str, cols: dict[str, np.ndarray]) -> tuple[str, str] | None:
    """Why an episode (steps sorted by index) cannot be written, or None."""
    steps = cols[records.STEP]
    n = len(steps)
    uniq, counts = np.unique(steps, return_counts=True)
    if len(uniq) < n:
        dup = int(uniq[np.argmax(counts > 1)])
        return EPISODE_DUPLICATE_STEP, f"episode {episode_id!r}: step {dup} appears {counts.max()} times"
    if steps[0] != 0 or steps[-1] != n - 1:
        missing = np.setdiff1d(np.arange(n), steps)[:5].tolist()
        return EPISODE_NOT_CONTIGUOUS, (
            f"episode {episode_id!r}: steps are not contiguous from 0 "
            f"(have {n} steps up to {int(steps[-1])}, missing {missing})"
        )
    term = cols.get(records.TERMINAL)
    if term is not None:
        present = cols.get(present_key(records.TERMINAL), np.ones(n, bool))
        inside = np.flatnonzero(term[:-1] & present[:-1])
        if len(inside):
            return EPISODE_TERMINAL_INSIDE, (
                f"episode {episode_id!r}: terminal at step {int(steps[inside[0]])} "
                f"but the episode goes on to step {int(steps[-1])}"
            )
    return None


def episode_steps(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sorted step columns -> the arrays of the SequenceExample (discount derived if not logged)."""
    n = len(cols[records.STEP])
    out = {k: cols[k] for k in (records.OBSERVATION, records.ACTION, records.REWARD)}
    if records.DISCOUNT in cols:
        out[records.DISCOUNT] = cols[records.DISCOUNT]
    else:  # 0 after a terminal step, 1 otherwise (a cut-off episode still bootstraps)
        discount = np.ones(n, np.float32)
        term = cols.get(records.TERMINAL)
        logged = cols.get(present_key(records.TERMINAL), np.ones(n, bool))
        if term is not None and bool(term[-1]) and bool(logged[-1]):
            discount[-1] = 0.0
        out[records.DISCOUNT] = discount
    out.update({k: v for k, v in cols.items() if k.startswith(records.POLICY_INFO_PREFIX)})
    return out
