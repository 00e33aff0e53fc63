"""rlops on Vertex AI Pipelines, one module per job:

- `settings`: where and how each step runs (resources, custom training job, Dataflow, caching,
  networking, notification): `VertexConfig`, loaded by `load_vertex_config`.
- `compile`: the pipeline config + settings -> a PipelineJob JSON (`compile_pipeline`), with the
  per-run `runtime_parameters` and the Trainer's custom-job wiring.
- `patches`: what TFX's compiler leaves unsaid, patched into the compiled spec.
- `submit`: one run of a compiled template (`resolve_target`, `submit_pipeline`).
- `schedule`: recurring runs (`create_schedule`, list / pause / resume / delete).

    config = load_config("bandit", overrides=["root=gs://my-bucket/rlops/bandit"])
    vertex = load_vertex_config(overrides=["image=us-docker.pkg.dev/my-proj/rlops/rlops:0.1.0"])
    compile_pipeline(config, vertex, "pipeline.json")
    target = resolve_target(project="my-proj", region="us-central1", pipeline_root="gs://my-bucket/runs")
    submit_pipeline("pipeline.json", target)
"""

from rlops.pipelines.vertex.compile import compile_pipeline, runtime_parameters, summary
from rlops.pipelines.vertex.patches import EXIT_GROUP, step_tasks
from rlops.pipelines.vertex.schedule import (
    ScheduleSpec,
    create_schedule,
    delete_schedule,
    list_schedules,
    pause_schedule,
    resume_schedule,
)
from rlops.pipelines.vertex.settings import (
    DEFAULT_IMAGE,
    CustomJob,
    Dataflow,
    StepResources,
    VertexConfig,
    VertexConfigError,
    WorkerPool,
    check_network,
    dataflow_image,
    load_vertex_config,
)
from rlops.pipelines.vertex.submit import SubmitError, Target, resolve_target, submit_pipeline

__all__ = [
    "DEFAULT_IMAGE",
    "EXIT_GROUP",
    "CustomJob",
    "Dataflow",
    "ScheduleSpec",
    "StepResources",
    "SubmitError",
    "Target",
    "VertexConfig",
    "VertexConfigError",
    "WorkerPool",
    "check_network",
    "compile_pipeline",
    "create_schedule",
    "dataflow_image",
    "delete_schedule",
    "list_schedules",
    "load_vertex_config",
    "pause_schedule",
    "resolve_target",
    "resume_schedule",
    "runtime_parameters",
    "step_tasks",
    "submit_pipeline",
    "summary",
]
