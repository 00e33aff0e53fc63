"""What every component's KFP face (rlops.components.<name>.kfp) shares. KFP hands a component
`dsl.Artifact` objects -- anything with `.uri`, `.name` and `.metadata` will do -- and parameters
as plain values, where "" and 0 mean "not given" (KFP parameters cannot be None-valued)."""

from __future__ import annotations

from typing import Any, Mapping

# Beam's default runner (Prism) downloads a binary at start-up; pin the DirectRunner, as the
# pipelines' default config does. ExperienceGen then runs in process (common.direct_runner); the
# Evaluator's Beam engine still goes through the DirectRunner, which in Beam 2.74 tries Prism
# before it falls back. Pass beam_args (e.g. DataflowRunner flags) to change it.
DEFAULT_BEAM_ARGS = ("--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory")
RESOLVED = "resolved"  # metadata LatestPublished sets: 0 when no published version was found


def record(artifact: Any, properties: Mapping[str, Any]) -> None:
    """A core's artifact properties onto a KFP artifact's metadata, as the TFX face writes them as
    custom properties: non-finite numbers left out (KFP serializes metadata to JSON)."""
    from rlops.components.properties import finite_properties

    artifact.metadata.update(finite_properties(properties))


def given(artifact: Any) -> Any:
    """An optional input artifact, or None when absent or an unresolved LatestPublished output
    (KFP cannot pass "no artifact" from a task's output, so night 1's resolver marks it instead)."""
    if artifact is None or int((artifact.metadata or {}).get(RESOLVED, 1)) == 0:
        return None
    return artifact
