"""Running pipelines locally: TFX LocalDagRunner with a sqlite ML Metadata store (the embedded
default), progress while components run, a summary read back from ML Metadata, and lineage."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

import tensorflow as tf

from rlops.components.properties import number
from rlops.pipelines.config import PipelineConfig

CACHED_STATE = 5  # ml_metadata Execution.State.CACHED
COMPLETE_STATE = 3


class ProgressHandler(logging.Handler):
    """Turns TFX's 'Component X is running/finished' log lines into progress output; rlops'
    own INFO lines (trainer progress, evaluator decision) are shown indented."""

    def __init__(self, total: int, stream: TextIO | None = None):
        super().__init__(logging.INFO)
        # sys.stderr as it is now, not at import (a test's captured stream may be closed since)
        self.total, self.stream, self.done = total, stream or sys.stderr, 0
        self._started: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("Component ") and msg.endswith(" is running."):
            node = msg[len("Component ") : -len(" is running.")]
            self._started[node] = time.perf_counter()
            self._print(f"[{self.done + 1}/{self.total}] {node} ...")
        elif msg.startswith("Component ") and msg.endswith(" is finished."):
            node = msg[len("Component ") : -len(" is finished.")]
            self.done += 1
            took = time.perf_counter() - self._started.get(node, time.perf_counter())
            self._print(f"[{self.done}/{self.total}] {node} done in {took:.1f}s")
        elif msg.startswith("A cached execution"):
            self._print("      (served from cache)")
        elif record.name.startswith("rlops."):
            self._print(f"      {msg}")

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def _quiet_tfx_logging(handler: logging.Handler) -> list:
    """Route absl/TFX logging to the progress handler only (TFX logs a lot at INFO)."""
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO)
    touched = []
    for name in ("absl", "rlops"):
        logger = logging.getLogger(name)
        touched.append((logger, logger.handlers[:], logger.propagate, logger.level))
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(logging.INFO)
    return touched


@dataclass
class RunSummary:
    pipeline: str
    wall_s: float
    components: dict[str, str] = field(default_factory=dict)  # node -> COMPLETE / CACHED / ...
    metrics: dict = field(default_factory=dict)
    blessed: bool | None = None
    pushed: bool | None = None
    pushed_destination: str | None = None
    blessing_reason: str | None = None
    # ExperienceGen's counts: records_read, records_written, records_written_<split>,
    # records_quarantined, quarantine_reasons (reason -> count)
    ingest: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "ingest"}
        return {**out, **self.ingest}  # records_* at the top level of --summary-json

    def _reason_beyond_estimates(self) -> str | None:
        """The blessing reason without the words the `estimates` line has just printed (why there
        is no estimate), so a refusal reads once."""
        estimates, reason = str(self.metrics.get("estimates", "")), self.blessing_reason
        why = estimates.removeprefix("none: ")
        if reason and why != estimates and why and why in reason:
            return reason.replace(why, "see estimates")
        return reason

    def render(self) -> str:
        lines = [f"pipeline {self.pipeline} finished in {self.wall_s:.1f}s"]
        for node, state in self.components.items():
            lines.append(f"  {node:<32} {state.lower()}")
        if self.ingest:
            lines.append(f"  {render_ingest(self.ingest)}")
        for key, value in self.metrics.items():
            lines.append(f"  {key}: {value}")
        lines.append(f"  blessed: {self.blessed}  ({self._reason_beyond_estimates()})")
        lines.append(f"  pushed: {self.pushed}" + (f" -> {self.pushed_destination}" if self.pushed else ""))
        return "\n".join(lines)


def run_local(config: PipelineConfig, stream: TextIO | None = None) -> RunSummary:
    """Runs the pipeline with LocalDagRunner; returns what ran, key metrics and the push."""
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from rlops.pipelines.factories import create_pipeline

    os.makedirs(config.root, exist_ok=True)
    pipeline = create_pipeline(config, local=True)
    handler = ProgressHandler(len(pipeline.components), stream)
    touched = _quiet_tfx_logging(handler)
    start = time.perf_counter()
    try:
        LocalDagRunner().run(pipeline)
        wall_s = time.perf_counter() - start
        return summarize_latest_run(config, wall_s)  # still inside: keeps MLMD's INFO lines quiet
    finally:
        for logger, handlers, propagate, level in touched:
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(level)


def metadata_store_of(config: PipelineConfig):
    """The run's ML Metadata store (the sqlite file under pipeline_root)."""
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.metadata_path))


def _node_name(store, execution) -> str:
    for ctx in store.get_contexts_by_execution(execution.id):
        if store.get_context_types_by_id([ctx.type_id])[0].name == "node":
            return ctx.name.split(".", 1)[-1]
    return str(execution.id)


def _outputs(store, execution_ids: list[int]) -> dict[int, list]:
    from ml_metadata.proto import metadata_store_pb2

    out: dict[int, list] = {}
    events = store.get_events_by_execution_ids(execution_ids)
    wanted = [
        e for e in events if e.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
    ]
    artifacts = {a.id: a for a in store.get_artifacts_by_id(list({e.artifact_id for e in wanted}))}
    for e in wanted:
        out.setdefault(e.execution_id, []).append(artifacts[e.artifact_id])
    return out


def artifact_property(artifact, name: str):
    if name not in artifact.custom_properties:
        return None
    v = artifact.custom_properties[name]
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


def summarize_latest_run(config: PipelineConfig, wall_s: float) -> RunSummary:
    store = metadata_store_of(config)
    runs = store.get_contexts_by_type("pipeline_run")
    summary = RunSummary(pipeline=config.name, wall_s=wall_s)
    if not runs:
        return summary
    run = max(runs, key=lambda c: c.id)
    executions = sorted(store.get_executions_by_context(run.id), key=lambda e: e.id)
    names = {"0": "UNKNOWN", "1": "NEW", "2": "RUNNING", "3": "COMPLETE", "4": "FAILED", "5": "CACHED", "6": "CANCELED"}
    outputs = _outputs(store, [e.id for e in executions])
    for execution in executions:
        node = _node_name(store, execution)
        summary.components[node] = names.get(str(execution.last_known_state), str(execution.last_known_state))
        for artifact in outputs.get(execution.id, []):
            type_name = store.get_artifact_types_by_id([artifact.type_id])[0].name
            if type_name == "ModelEvaluation":
                path = os.path.join(artifact.uri, "metrics.json")
                if tf.io.gfile.exists(path):
                    with tf.io.gfile.GFile(path) as f:
                        metrics = json.load(f)
                    summary.metrics.update(_key_metrics(metrics))
            elif type_name == "Examples" and artifact_property(artifact, "records_read") is not None:
                summary.ingest = ingest_counts(artifact)
            elif type_name == "ModelBlessing":
                summary.blessed = bool(artifact_property(artifact, "blessed"))
                summary.blessing_reason = artifact_property(artifact, "reason")
            elif type_name == "PushedModel":
                summary.pushed = bool(artifact_property(artifact, "pushed"))
                summary.pushed_destination = artifact_property(artifact, "pushed_destination")
            elif type_name == "ModelRun":
                path = os.path.join(artifact.uri, "metrics.json")
                if tf.io.gfile.exists(path):
                    with tf.io.gfile.GFile(path) as f:
                        train = json.load(f)
                    summary.metrics["train_steps"] = train.get("train_steps")
                    if "train_records" in train:  # records the Trainer consumed (bandits)
                        summary.metrics["train_records"] = train["train_records"]
                    if "records_per_sec" in train:  # bandits: a step's batch varies (4,096 for LinUCB)
                        summary.metrics["train_records_per_sec"] = train["records_per_sec"]
                    else:
                        summary.metrics["train_steps_per_sec"] = train.get("steps_per_sec")
    return summary


def ingest_counts(examples) -> dict:
    """ExperienceGen's counts from its Examples artifact's properties (IngestResult.properties)."""
    out = {key: artifact_property(examples, key) for key in ("records_read", "records_written", "records_quarantined")}
    order = {"records_written_train": 0, "records_written_eval": 1}
    splits = sorted(
        (k for k in examples.custom_properties if k.startswith("records_written_")), key=lambda k: (order.get(k, 2), k)
    )
    out.update({k: artifact_property(examples, k) for k in splits})
    out["quarantine_reasons"] = json.loads(artifact_property(examples, "quarantine_reasons") or "{}")
    events = artifact_property(examples, "events")
    if events:  # events to rewards: read = written + quarantined + pending, and every event's category
        out["records"] = {
            "read": out["records_read"],
            "written": out["records_written"],
            "quarantined": out["records_quarantined"],
            "pending": artifact_property(examples, "records_pending"),
        }
        out["events"] = json.loads(events)
        out["events_read"] = artifact_property(examples, "events_read")
        out["events_carried"] = artifact_property(examples, "events_carried")
        out["notes"] = json.loads(artifact_property(examples, "notes") or "[]")
    constant = artifact_property(examples, "constant_reward")
    if constant is not None:
        out["constant_reward"] = constant
    return out


def render_ingest(counts: dict, top: int = 3) -> str:
    """'records: read 10000, written 9997 (train 9007, eval 990), quarantined 3 (parse_error 3)'."""
    prefix = "records_written_"
    per_split = ", ".join(f"{k[len(prefix) :]} {v}" for k, v in counts.items() if k.startswith(prefix))
    reasons = sorted(counts.get("quarantine_reasons", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    why = ", ".join(f"{code} {n}" for code, n in reasons[:top]) + (", ..." if len(reasons) > top else "")
    line = (
        f"records: read {counts.get('records_read')}, written {counts.get('records_written')}"
        + (f" ({per_split})" if per_split else "")
        + f", quarantined {counts.get('records_quarantined')}"
        + (f" ({why})" if why else "")
    )
    if "records" in counts:
        line += f", pending {counts['records']['pending']} (their window is open: joined by the next run)"
    if "events" in counts:
        carried = counts.get("events_carried") or 0
        shown = ", ".join(f"{k} {v}" for k, v in counts["events"].items())
        line += f"\n  events: read {counts.get('events_read')}" + (f" + {carried} carried" if carried else "")
        line += f": {shown}"
    for note in counts.get("notes", []):
        line += f"\n  {note}"
    if counts.get("constant_reward") is not None:
        line += (
            f"\n  warning: every written reward is {counts['constant_reward']:g}: nothing to learn from, and the "
            "Evaluator will not bless on it"
        )
    return line


def _estimate_text(est: dict, sign: str = "") -> str:
    """`value [lower, upper]`, or `value` alone where the interval was not asked for; an estimate
    the Evaluator did not trust is none, with the reason (never its raw number, nor `[nan, nan]`)."""
    if est.get("value") is None or (isinstance(est["value"], float) and not math.isfinite(est["value"])):
        return f"none ({est.get('reason') or 'not trusted'})"
    value = number(est["value"], sign)
    lower, upper = est.get("lower"), est.get("upper")
    if not (isinstance(lower, (int, float)) and isinstance(upper, (int, float))) or not (
        math.isfinite(lower) and math.isfinite(upper)
    ):
        return f"{value} (no interval{': ' + est['reason'] if est.get('reason') else ''})"
    return f"{value} [{number(lower, sign)}, {number(upper, sign)}]"


def _untrusted_text(metrics: dict) -> str | None:
    """The point estimates the Evaluator did not trust (metrics.json's `untrusted_value`), labelled
    as such: `candidate dr 0.0512, snips 0.0498; improvement dr +0.0120, ... (point estimates
    without an interval, not trusted: see estimates)`. The reason is the `estimates` line's, just
    above, so it reads once. None where there is no such number."""
    parts = []
    for group, sign in (("candidate", ""), ("improvement", "+")):
        values = [
            f"{name} {number(est['untrusted_value'], sign)}"
            for name, est in (metrics.get(group) or {}).items()
            if isinstance(est.get("untrusted_value"), (int, float)) and math.isfinite(est["untrusted_value"])
        ]
        if values:
            parts.append(f"{group} " + ", ".join(values))
    if not parts:
        return None
    return "; ".join(parts) + " (point estimates without an interval, not trusted: see estimates)"


def _key_metrics(metrics: dict) -> dict:
    """The summary's lines. No trusted comparison: one line saying why, and what would make one
    (the reason ends with it), then the untrusted point estimates on a line of their own, labelled
    as untrusted, instead of a row of `candidate_<estimator>` lines that would read as results."""
    out = {"baseline": metrics.get("baseline")}
    if metrics.get("eval_records") is not None:  # records the Evaluator read: check against the eval split
        out["eval_records"] = metrics["eval_records"]
    trust = metrics.get("trust", {})
    if trust.get("trusted") is False:
        out["estimates"] = f"none: {trust.get('reason') or 'not trusted'}"
        untrusted = _untrusted_text(metrics)
        if untrusted:  # the numbers `rlops evaluate --json` has, on their own line, never as a result
            out["untrusted_estimates"] = untrusted
        return out
    for name, est in metrics.get("candidate", {}).items():
        out[f"candidate_{name}"] = _estimate_text(est)
    for name, est in metrics.get("improvement", {}).items():
        out[f"improvement_{name}"] = _estimate_text(est, "+")
    if standing := loop_standing(metrics):
        out["standing"] = standing
    return out


def loop_standing(metrics: dict) -> str | None:
    """One line on where the nightly loop stands: the candidate's estimate against the baseline's
    (the incumbent: the last blessed model), what its lower bound must clear, and the exploration
    the candidate would serve. None where the metrics carry no blessing rule (before the gate ran)."""
    rule = metrics.get("rule") or {}
    measure = rule.get("measure")
    candidate = (metrics.get("candidate") or {}).get(measure) or {}
    baseline = (metrics.get("baseline_estimates") or {}).get(measure) or {}
    improvement = (metrics.get("improvement") or {}).get(measure) or {}
    if candidate.get("value") is None or baseline.get("value") is None or improvement.get("lower") is None:
        return None
    tolerated = rule.get("tolerated_regression")
    if not rule.get("use_lower_bound", True):
        needs = f"point estimate > {rule.get('min_improvement', 0.0):g}"
    elif tolerated is not None:
        bound = min(rule.get("min_improvement", 0.0), -tolerated)  # gate.judge's bound
        needs = f"point estimate > {rule.get('min_improvement', 0.0):g} and lower bound > {bound:.4f}"
    else:
        needs = f"lower bound > {rule.get('min_improvement', 0.0):g}"
    served = metrics.get("served_policy") or {}
    epsilon = served.get("candidate_epsilon")
    explores = (
        ""
        if epsilon is None
        else f"; serves epsilon {epsilon:g}"
        + (" (certified above the trained one)" if served.get("trained_epsilon") not in (None, epsilon) else "")
    )
    return (
        f"{measure}: candidate {candidate['value']:.4f} vs {metrics.get('baseline')} {baseline['value']:.4f}, "
        f"improvement {improvement['value']:+.4f} (lower bound {improvement['lower']:+.4f}); clears with {needs}"
        f"{explores}"
    )


def lineage(config: PipelineConfig, version: int | None = None) -> list[str]:
    """Which data and training run produced a pushed policy: walks ML Metadata's events from the
    PushedModel back to the Examples and the ExperienceGen run that wrote them."""
    from ml_metadata.proto import metadata_store_pb2

    store = metadata_store_of(config)
    pushed = [a for a in store.get_artifacts_by_type("PushedModel") if artifact_property(a, "pushed")]
    if version is not None:
        pushed = [a for a in pushed if artifact_property(a, "pushed_version") == version]
    if not pushed:
        raise LookupError(
            f"no pushed model{'' if version is None else f' with version {version}'} in {config.metadata_path}"
        )
    target = max(pushed, key=lambda a: a.id)
    lines = [
        f"pushed policy version {artifact_property(target, 'pushed_version')} at {artifact_property(target, 'pushed_destination')}"
    ]
    seen: set[int] = set()

    def walk(artifact, depth: int) -> None:
        if artifact.id in seen:
            return
        seen.add(artifact.id)
        events = [
            e for e in store.get_events_by_artifact_ids([artifact.id]) if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        for event in events:
            execution = store.get_executions_by_id([event.execution_id])[0]
            node = _node_name(store, execution)
            lines.append(f"{'  ' * depth}<- produced by {node} (execution {execution.id})")
            in_events = [
                e for e in store.get_events_by_execution_ids([execution.id]) if e.type == metadata_store_pb2.Event.INPUT
            ]
            for in_event in in_events:
                parent = store.get_artifacts_by_id([in_event.artifact_id])[0]
                type_name = store.get_artifact_types_by_id([parent.type_id])[0].name
                lines.append(f"{'  ' * (depth + 1)}{type_name} {parent.id}: {parent.uri}")
                walk(parent, depth + 2)

    walk(target, 1)
    return lines
