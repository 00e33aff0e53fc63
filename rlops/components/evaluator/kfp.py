"""The Evaluator's KFP face: KFP artifacts and parameters in, `run_evaluator` run,
`EvalResult.properties()` onto the artifacts' metadata (the evaluation is a system.Metrics
artifact here: its scalars are logged as metrics)."""

from __future__ import annotations

from typing import Any, Sequence

from rlops.components.common.keys import BLESSING_KEY, EVALUATION_KEY, METRICS_KEY
from rlops.components.common.kfp_io import DEFAULT_BEAM_ARGS, given, record
from rlops.components.common.model import BLESSED_PROPERTY


def evaluator(
    config: str,
    model: Any,
    evaluation: Any,
    blessing: Any,
    examples: Any = None,
    baseline_model: Any = None,
    num_actions: int = 0,
    beam_args: Sequence[str] | None = None,
) -> bool:
    """beam_args: the Beam engine's pipeline options (as ExperienceGen's), used when the eval
    split is large enough for it (evaluator.engine / beam_threshold_records)."""
    from rlops.components.evaluator.core import run_evaluator

    baseline_model = given(baseline_model)
    result = run_evaluator(
        config,
        model.uri,
        evaluation.uri,
        blessing.uri,
        examples_uri=examples.uri if examples else None,
        baseline_model_uri=baseline_model.uri if baseline_model else None,
        num_actions=int(num_actions) if num_actions else None,
        beam_pipeline_args=list(beam_args or DEFAULT_BEAM_ARGS),
    )
    # TFX Evaluator's blessing properties, so the same "latest blessed model" logic applies.
    # current_model_id: the resource name on Vertex AI; a resolved baseline names the model it came
    # from, not the resolver's output artifact
    properties = result.properties(
        model.uri,
        model.name,
        baseline_model.uri if baseline_model else None,
        ((baseline_model.metadata or {}).get("model_id") or baseline_model.name) if baseline_model else None,
    )
    record(blessing, properties[BLESSING_KEY])
    # KFP's evaluation output is a system.Metrics: the scalars the Vertex AI console shows (finite
    # only, see properties.py), and the evaluation's properties but the JSON-valued improvement
    for name, value in properties[METRICS_KEY].items():
        if name != BLESSED_PROPERTY:
            evaluation.log_metric(name, value)
    record(evaluation, {k: v for k, v in properties[EVALUATION_KEY].items() if k != "improvement"})
    return result.blessed
