"""ExperienceGen's KFP face: the same `run_experience_gen`, KFP artifacts around it.

`run_for_kfp` is the plain function the KFP v2 component (rlops.components.kfp, `experience_gen`)
calls inside the rlops image with `dsl.Artifact` objects; anything with `.uri` and `.metadata`
will do, which keeps it testable without a KFP backend.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlops.components.experience_gen.core import ExperienceGenError, IngestResult, run_experience_gen


def run_for_kfp(config: str, beam_pipeline_args: Sequence[str], examples: Any, quarantine: Any) -> IngestResult:
    """Ingest into `examples.uri` / `quarantine.uri`, recording counts in both artifacts' metadata
    (as TFX records them as custom properties), then raise if the run failed its checks."""
    try:
        result = run_experience_gen(config, examples.uri, quarantine.uri, list(beam_pipeline_args or []))
    except ExperienceGenError as e:
        _record(e.result, examples, quarantine)
        raise
    _record(result, examples, quarantine)
    return result


def _record(result: IngestResult, examples: Any, quarantine: Any) -> None:
    props = result.properties()
    examples.metadata.update(props)
    examples.metadata.update(
        {"split_names": result.split_names, "payload_format": result.payload_format, "file_format": "tfrecords_gzip"}
    )
    quarantine.metadata.update(props)
