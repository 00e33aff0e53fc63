"""ExperienceGen's KFP face: this run's parameters merged into the config as the TFX executor
merges them, then `run_for_kfp`: the same `run_experience_gen`, its counts onto both artifacts'
metadata. The KFP component (rlops.components.kfp.components, `experience_gen`) calls it through
rlops.components.kfp.entrypoint inside the rlops image with `dsl.Artifact` objects; anything with
`.uri` and `.metadata` will do, which keeps it testable without a KFP backend."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Sequence

from rlops.components.common.kfp_io import DEFAULT_BEAM_ARGS

if TYPE_CHECKING:
    from rlops.components.experience_gen.core import IngestResult


def run_day(run_time: str) -> datetime.date:
    """'2026-11-24T02:00:00Z' (a job's schedule or create time, RFC 3339) -> date(2026, 11, 24), UTC."""
    text = run_time.strip().replace("Z", "+00:00")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"run_time: expected an RFC 3339 time such as 2026-11-24T02:00:00Z, got {run_time!r}"
        ) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc)
    return moment.date()


def data_files(data: Any) -> str:
    """The file pattern of an upstream step's Dataset: its file, or every file in its directory."""
    import tensorflow as tf

    uri = data.uri.rstrip("/")
    if tf.io.gfile.isdir(uri):
        if not tf.io.gfile.glob(uri + "/*"):
            raise ValueError(f"data: the input Dataset's directory {uri} is empty")
        return uri + "/*"
    if not tf.io.gfile.exists(uri):
        raise ValueError(f"data: the input Dataset's uri {uri} does not exist")
    return uri


def experience_gen(
    config: str,
    examples: Any,
    quarantine: Any,
    data: Any = None,
    beam_args: Sequence[str] | None = None,
    data_pattern: str = "",
    data_date: str = "",
    run_time: str = "",
    num_records: int = 0,
) -> None:
    """This run's values merged into the config as the TFX executor merges them, then
    ExperienceGen's own KFP mapping (counts into both artifacts' metadata, as TFX records them).
    `data` (an upstream step's files) replaces the source pattern; an empty `data_date` is the day
    before `run_time` when given (the container's own clock only when neither is)."""
    if data is not None:
        if data_pattern:
            raise ValueError("data: give the input Dataset or data_pattern, not both")
        data_pattern = data_files(data)

    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.experience_gen.core import apply_runtime_params

    cfg = apply_runtime_params(
        ExperienceGenConfig.from_json(config),
        data_pattern=data_pattern or None,
        data_date=data_date or None,
        num_records=num_records or None,
        today=run_day(run_time) if run_time else None,
    )
    run_for_kfp(cfg.to_json(), list(beam_args or DEFAULT_BEAM_ARGS), examples, quarantine)


def run_for_kfp(config: str, beam_pipeline_args: Sequence[str], examples: Any, quarantine: Any) -> IngestResult:
    """Ingest into `examples.uri` / `quarantine.uri`, recording counts in both artifacts' metadata
    (as TFX records them as custom properties), then raise if the run failed its checks."""
    from rlops.components.experience_gen.core import ExperienceGenError, run_experience_gen  # Beam: when run

    try:
        result = run_experience_gen(config, examples.uri, quarantine.uri, list(beam_pipeline_args or []))
    except ExperienceGenError as e:
        record_counts(e.result, examples, quarantine)
        raise
    record_counts(result, examples, quarantine)
    return result


def record_counts(result: IngestResult, examples: Any, quarantine: Any) -> None:
    props = result.properties()
    examples.metadata.update(props)
    examples.metadata.update(
        {"split_names": result.split_names, "payload_format": result.payload_format, "file_format": "tfrecords_gzip"}
    )
    quarantine.metadata.update(props)
