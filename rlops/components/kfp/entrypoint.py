"""What runs inside the rlops KFP components: KFP artifacts and parameters in, the same executor
functions the TFX components call, results onto KFP artifact metadata.

Each KFP component (components.py) is a one-line function that KFP's executor
(`python -m kfp.dsl.executor_main`, in the rlops image) calls with `dsl.Artifact` objects; it
hands them to the function of the same name here. Artifacts are read and written by `uri`
(gs://... on Vertex AI, a local path under kfp.local): TensorFlow and Beam speak Cloud Storage
directly, and Dataflow workers cannot see the /gcs mount a `path` would point at.
Empty parameter values ("", 0) mean "not given", as KFP parameters cannot be None-valued.
Integer parameters are cast: kfp 2.5 compiles an int constant for a loaded spec's int input as
a number (10.0), and backends may hand it over as such.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from rlops.quiet import entry_point_setup

# Imported first thing in the KFP container's process (components.py bodies): Keras mode and
# quiet start-up before TensorFlow / TFX load (the image sets TF_USE_LEGACY_KERAS too).
entry_point_setup()

# Beam's default runner (Prism) downloads a binary at start-up; pin the in-process DirectRunner,
# as the pipelines' default config does. Pass beam_args (e.g. DataflowRunner flags) to change it.
DEFAULT_BEAM_ARGS = ("--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory")
# Vertex AI's prebuilt TensorFlow prediction container: the newest the pinned aiplatform SDK lists
# (2.15; pusher.registry.DEFAULT_TF_RUNTIME). TF 2.15.1 loads and serves a pushed rlops policy
# written with TF 2.16 (checked by hand: `serving_default` answers).
# ({region}-docker.pkg.dev/vertex-ai/prediction/tf2-{cpu|gpu}.{major}-{minor}:latest).
SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"


def run_day(run_time: str):
    """'2026-11-24T02:00:00Z' (a job's schedule or create time, RFC 3339) -> date(2026, 11, 24), UTC."""
    import datetime

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
    from rlops.components.experience_gen.executor import apply_runtime_params
    from rlops.components.experience_gen.kfp_component import run_for_kfp

    cfg = apply_runtime_params(
        ExperienceGenConfig.from_json(config),
        data_pattern=data_pattern or None,
        data_date=data_date or None,
        num_records=num_records or None,
        today=run_day(run_time) if run_time else None,
    )
    run_for_kfp(cfg.to_json(), list(beam_args or DEFAULT_BEAM_ARGS), examples, quarantine)


RESOLVED = "resolved"  # metadata LatestPublished sets: 0 when no published version was found


def given(artifact: Any) -> Any:
    """An optional input artifact, or None when absent or an unresolved LatestPublished output
    (KFP cannot pass "no artifact" from a task's output, so night 1's resolver marks it instead)."""
    if artifact is None or int((artifact.metadata or {}).get(RESOLVED, 1)) == 0:
        return None
    return artifact


def latest_published(push_destination: str, base_model: Any, baseline_model: Any, warm_start: bool = True) -> None:
    """The newest rlops version under push_destination -> its training run (the Trainer's Model
    artifact directory, recorded in the version marker's lineage) as both outputs' uri; the
    marker's lineage (version, data, the model's resource name) goes onto their metadata."""
    from rlops.components.pusher import publish
    from rlops.components.pusher.storage import open_store

    for artifact in (base_model, baseline_model):
        artifact.metadata[RESOLVED] = 0
    versions = [v for v in publish.scan(open_store(push_destination)) if v.is_rlops]
    if not versions:
        return
    latest = versions[-1]
    lineage = latest.marker.get("lineage") or {}
    training_run = lineage.get("training_run")
    if not training_run:
        raise ValueError(
            f"push_destination: version {latest.number} under {push_destination} has no "
            f"lineage.training_run in its {publish.MARKER}, so there is no model to warm-start from"
        )
    evaluation = lineage.get("evaluation") or {}
    info = {
        RESOLVED: 1,
        "pushed_version": latest.number,
        "training_run": training_run,
        "data": lineage.get("data") or "",
        "model_id": evaluation.get("current_model_id", ""),
    }
    for artifact in (base_model, baseline_model) if warm_start else (baseline_model,):
        artifact.uri = training_run
        artifact.metadata.update(info)


def trainer(
    config: str,
    model: Any,
    model_run: Any,
    examples: Any = None,
    base_model: Any = None,
    train_steps: int = 0,
    total_env_steps: int = 0,
) -> None:
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer
    from rlops.components.trainer.executor import apply_runtime_params

    cfg = apply_runtime_params(TrainerConfig.from_json(config), train_steps or None, total_env_steps or None)
    base_model = given(base_model)
    result = run_trainer(
        cfg,
        model.uri,
        model_run.uri,
        examples_uri=examples.uri if examples else None,
        base_model_uri=base_model.uri if base_model else None,
    )
    from rlops.components.properties import finite_properties

    model.metadata.update(
        finite_properties(
            {
                "train_steps": result.train_steps,
                "final_loss": result.final_loss,
                "warm_started_from": result.warm_started_from or "",
            }
        )
    )
    if "train_records" in result.extra:  # as the TFX executor: records consumed, to check against the split
        model.metadata["train_records"] = int(result.extra["train_records"])
    if result.extra.get("cold_start_reason"):  # as the TFX executor: a base model given that could not seed it
        model.metadata["cold_start_reason"] = result.extra["cold_start_reason"]
    model_run.metadata.update(finite_properties({"steps_per_sec": result.steps_per_sec}))


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
    from rlops.components.evaluator.core import evaluation_properties, run_evaluator, scalar_metrics

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
    blessing.metadata.update(
        result.blessing_properties(
            model.uri,
            model.name,
            baseline_model.uri if baseline_model else None,
            ((baseline_model.metadata or {}).get("model_id") or baseline_model.name) if baseline_model else None,
        )
    )
    # scalars the Vertex AI console shows for a Metrics artifact: finite only (see properties.py)
    for name, value in scalar_metrics(result).items():
        if name != "blessed":
            evaluation.log_metric(name, value)
    evaluation.metadata.update({k: v for k, v in evaluation_properties(result).items() if k != "improvement"})
    return result.blessed


def is_blessed(blessing: Any) -> bool:
    """The blessing's `blessed` metadata, else TFX's BLESSED marker file in its directory."""
    if "blessed" in (blessing.metadata or {}):
        return bool(int(blessing.metadata["blessed"]))
    import tensorflow as tf

    from rlops.components.evaluator.core import BLESSED_FILE

    return tf.io.gfile.exists(os.path.join(blessing.uri, BLESSED_FILE))


def pusher(
    model: Any,
    blessing: Any,
    push_destination: str,
    pushed_model: Any,
    examples: Any = None,
    keep_last: int = 5,
    verify_env_id: str = "",
    vertex_upload: str = "",
    serving_model: Any = None,
    litert_allow_flex: bool = False,
) -> bool:
    """serving_model (google.UnmanagedContainerModel): the pushed version with its serving
    container, for Google Cloud Pipeline Components' ModelUploadOp; only meaningful when pushed.
    litert_allow_flex: publish a LiteRT policy that needs Flex ops (unchecked) instead of failing."""
    from rlops.components.pusher import core
    from rlops.components.pusher.executor import verification_inputs
    from rlops.components.trainer.core import serving_dir

    blessed = is_blessed(blessing)
    inputs = verification_inputs(examples.uri if examples else None, verify_env_id or None) if blessed else None
    lineage = core.lineage(model.uri, examples.uri if examples else None, dict(blessing.metadata or {}))
    result = core.push_policy(
        serving_dir(model.uri),
        push_destination,
        blessed,
        inputs,
        keep_last=keep_last,
        lineage=lineage,
        litert_allow_flex=bool(litert_allow_flex),
    )
    pushed_model.metadata["pushed"] = int(result.pushed)
    if not result.pushed:
        pushed_model.metadata["reason"] = result.reason
        return False
    pushed_model.metadata.update(
        {
            "pushed_destination": result.destination,
            "pushed_version": result.version,
            "pushed_model": model.uri,
            "pushed_model_id": model.name,
            # google.UnmanagedContainerModel's shape: what Vertex AI serves it with
            "containerSpec": {"imageUri": SERVING_IMAGE},
        }
    )
    pushed_model.uri = result.destination  # the served SavedModel itself, for downstream steps
    if serving_model is not None:
        serving_model.uri = result.destination
        serving_model.metadata["containerSpec"] = {"imageUri": SERVING_IMAGE}
    if vertex_upload:  # the same registry call as the TFX Pusher: alias, parent model, optional deployment
        from rlops.components.pusher import registry

        uploaded = registry.upload_version(
            result.destination, registry.RegistryConfig.from_dict(json.loads(vertex_upload)), lineage
        )
        pushed_model.metadata["vertex_model"] = uploaded["versioned_name"]
        if "endpoint" in uploaded:
            pushed_model.metadata["vertex_endpoint"] = uploaded["endpoint"]
    return True
