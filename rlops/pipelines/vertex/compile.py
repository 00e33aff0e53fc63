"""Compiling rlops pipelines for Vertex AI Pipelines: TFX's KubeflowV2DagRunner -> PipelineJob JSON.

    config = load_config("bandit", overrides=["root=gs://my-bucket/rlops/bandit"])
    vertex = load_vertex_config(overrides=["image=us-docker.pkg.dev/my-proj/rlops/rlops:0.1.0"])
    job = compile_pipeline(config, vertex, "pipeline.json")   # the dict that was written

The pipeline is the one `rlops run` runs locally (same factories); this module only decides
where and how each step runs (the settings: `rlops.pipelines.vertex.settings`):
- image: every step runs in `image` (default: the image the Dockerfile builds, by tag).
- runtime parameters: what changes per run -- the data pattern and date (or the simulation
  size) and the training budget -- with the config's values as defaults, so one compiled job
  serves every night of a schedule and any backfill (see `runtime_parameters`).
- resources: CPU/memory on every step; the Trainer's machine type and GPUs on its own step, or a
  Vertex AI custom training job (worker pools with replicas, GPUs or a TPU) through TFX's Vertex
  training extension running `rlops.components.trainer.run_fn.run_fn`.
- Dataflow: with `dataflow` set, ExperienceGen's Beam pipeline runs on Dataflow.
- caching, per task: ExperienceGen never (new data arrives under unchanged inputs), Trainer and
  Evaluator when their inputs are unchanged (Vertex keys the cache on them), Pusher never.
What TFX's compiler leaves unsaid is patched in afterwards (`rlops.pipelines.vertex.patches`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import TYPE_CHECKING, Any, Callable

from rlops import __version__
from rlops.components.common.keys import TOTAL_ENV_STEPS_KEY, TRAIN_STEPS_KEY
from rlops.pipelines.config import ConfigError, PipelineConfig
from rlops.pipelines.vertex.patches import (
    EXIT_GROUP,
    apply_caching,
    retitle_custom_types,
    step_tasks,
    system_title_launcher,
    wire_exit_group,
)
from rlops.pipelines.vertex.settings import (
    STEPS,
    TPU_IMAGE_SUFFIX,
    StepResources,
    VertexConfig,
    VertexConfigError,
    variant_image,
)

if TYPE_CHECKING:
    from rlops.components.trainer.config import TrainerConfig

RUN_FN = "rlops.components.trainer.run_fn.run_fn"


# --- runtime parameters -------------------------------------------------------------------------


def runtime_parameters(config: PipelineConfig, vertex: VertexConfig) -> dict:
    """name -> TFX RuntimeParameter for what changes per run, defaulting to the config's values.

    Pipelines that ingest logs (bandit, ranking): their source's parameters -- data_pattern (file
    sources), data_date (file/BigQuery sources: fills {date} and {date_nodash}; '' = yesterday,
    UTC, at run time), num_records (simulations). The Trainer's budget, by the training path of its
    agent's decision kind (trainer.core.TRAINING_PATHS): train_steps (bandit, ranking: a cap on
    train steps; 0 = the config's, its passes decide) or total_env_steps (ppo).
    A custom-job Trainer reads its budget from the compiled config (TFX's run_fn gets no
    per-run parameters), so train_steps is not a runtime parameter there.
    """
    from tfx.orchestration.data_types import RuntimeParameter

    from rlops.components.experience_gen.sources import runtime_parameters as source_parameters
    from rlops.components.trainer.core import training_path

    params: dict[str, Any] = {}
    if config.experience_gen is not None:
        for name, (ptype, default) in source_parameters(config.experience_gen.source).items():
            params[name] = RuntimeParameter(name, ptype, default)
    budget = training_path(config.trainer).budget
    if vertex.custom_job is None:
        params[budget] = RuntimeParameter(budget, int, BUDGET_DEFAULTS[budget](config.trainer))
    return params


def _total_env_steps(trainer: TrainerConfig) -> int:
    from rlops.train.on_policy import PPOConfig

    steps: Any = trainer.ppo.get("total_env_steps", PPOConfig.total_env_steps)  # an int, checked on load
    return int(steps)


# The Trainer's budget parameter (TrainingPath.budget) -> its default from the config.
BUDGET_DEFAULTS: dict[str, Callable[[TrainerConfig], int]] = {
    TRAIN_STEPS_KEY: lambda trainer: int(trainer.max_train_steps or 0),
    TOTAL_ENV_STEPS_KEY: _total_env_steps,
}


# --- checks that need the pipeline config -------------------------------------------------------


def _check_cloud_paths(config: PipelineConfig) -> None:
    """Everything a cloud step writes or reads must be in Cloud Storage, not on the laptop."""
    if not config.root.startswith("gs://"):
        raise ConfigError(
            f"root: Vertex AI runs keep artifacts in Cloud Storage; set root=gs://BUCKET/PATH (got '{config.root}')"
        )
    if not config.serving_dir.startswith("gs://"):
        raise ConfigError(
            f"serving_dir: the Pusher runs in the cloud; set serving_dir=gs://... (got '{config.serving_dir}')"
        )
    local = local_inputs(config)
    if local:
        (key, path), others = local[0], "".join(f"; also {k} '{p}'" for k, p in local[1:])
        raise ConfigError(f"{key}: a cloud step cannot read local files; use gs:// (got '{path}'){others}")


# Every path a cloud step reads (or, for waiting decisions, keeps) from the ExperienceGen config:
# (key, attribute path).
CLOUD_READ_PATHS = (
    ("experience_gen.source.pattern", ("source", "pattern")),
    ("experience_gen.item_source.pattern", ("item_source", "pattern")),
    ("experience_gen.source.policy_path", ("source", "policy_path")),
    ("experience_gen.source.gcs_location", ("source", "gcs_location")),
    ("experience_gen.events.source.pattern", ("events", "source", "pattern")),
    ("experience_gen.events.source.gcs_location", ("events", "source", "gcs_location")),
    ("experience_gen.events.pending_dir", ("events", "pending_dir")),
)


def local_inputs(config: PipelineConfig) -> list[tuple[str, str]]:
    """(key, path) of each local path the ExperienceGen config would read (a comma-separated
    pattern counts each part)."""
    out = []
    for key, attributes in CLOUD_READ_PATHS:
        value: object = config.experience_gen
        for attribute in attributes:
            value = getattr(value, attribute, None)
        for part in str(value or "").split(","):
            if part.strip() and "://" not in part:
                out.append((key, part.strip()))
    return out


def _check_trainer(config: PipelineConfig, vertex: VertexConfig, trainer: StepResources) -> None:
    strategy = config.trainer.strategy
    if vertex.custom_job is not None:
        if config.experience_gen is None:  # bandit and ranking train from ExperienceGen's Examples
            raise VertexConfigError(
                "custom_job: TFX's Vertex training extension trains from an Examples input; "
                f"the {config.kind} pipeline trains online -- give the Trainer step GPUs instead "
                "(steps.Trainer.accelerator_type/accelerator_count)"
            )
        for key in ("project", "region"):
            if not getattr(vertex, key):
                raise VertexConfigError(
                    f"{key}: a custom training job is created in a project and region; pass --{key}"
                )
        vertex.custom_job.validate()
        wanted = vertex.custom_job.strategy
    else:
        wanted = "mirrored" if trainer.accelerator_count > 1 else "default"
    if wanted != "default" and strategy not in ("auto", wanted):
        raise ConfigError(
            f"trainer.strategy: '{strategy}' on {wanted} hardware would leave devices idle; use 'auto' (or '{wanted}')"
        )


# --- compile ------------------------------------------------------------------------------------


def _custom_job_trainer(config: PipelineConfig, vertex: VertexConfig):
    """Trainer factory: TFX's Vertex training extension Trainer running our run_fn in a custom job."""

    def factory(pipeline_config: PipelineConfig, examples=None, base_model=None, **runtime_params):
        from tfx.extensions.google_cloud_ai_platform import constants
        from tfx.extensions.google_cloud_ai_platform.trainer import component as vertex_trainer
        from tfx.extensions.google_cloud_ai_platform.trainer.executor import TRAINING_ARGS_KEY

        from rlops.components.trainer.run_fn import CONFIG_KEY

        job = vertex.custom_job
        assert job is not None  # this branch runs only for a custom job
        tpu_image = job.tpu_image or (
            variant_image(vertex.image, TPU_IMAGE_SUFFIX, "custom_job.tpu_image")
            if any(p.is_tpu for p in job.worker_pools)
            else None
        )
        job_spec: dict[str, Any] = {
            "worker_pool_specs": [p.to_spec(tpu_image if p.is_tpu else vertex.image) for p in job.worker_pools]
        }
        if job.service_account:
            job_spec["service_account"] = job.service_account
        if vertex.network:
            job_spec["network"] = vertex.network
        if vertex.reserved_ip_ranges:
            job_spec["reserved_ip_ranges"] = list(vertex.reserved_ip_ranges)
        training_args: dict[str, Any] = {
            "project": vertex.project,
            "job_spec": job_spec,
            "labels": {"rlops_pipeline": _label(pipeline_config.name)},
        }
        if vertex.kms_key:  # TFX's training client copies it onto the CustomJob
            training_args["encryption_spec"] = {"kms_key_name": vertex.kms_key}
        custom_config = {
            constants.ENABLE_VERTEX_KEY: True,
            constants.VERTEX_REGION_KEY: vertex.region,
            TRAINING_ARGS_KEY: training_args,
            CONFIG_KEY: dataclasses.asdict(pipeline_config.trainer),
        }
        return vertex_trainer.Trainer(
            examples=examples, base_model=base_model, run_fn=RUN_FN, custom_config=custom_config
        )

    return factory


def _label(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


def compile_pipeline(config: PipelineConfig, vertex: VertexConfig, output: str | None = None) -> dict:
    """Compiles the pipeline `config` describes into a Vertex AI PipelineJob (a JSON dict);
    writes it to `output` when given. Everything is checked before anything is written."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as v2

    from rlops.pipelines.factories import create_pipeline

    _check_cloud_paths(config)
    resources = {step: vertex.step_resources(step) for step in STEPS}
    _check_trainer(config, vertex, resources["Trainer"])
    beam_args = list(config.beam_args)
    if vertex.dataflow is not None and config.experience_gen is not None:
        for key in ("project", "region"):
            if not getattr(vertex, key):
                raise VertexConfigError(f"{key}: Dataflow jobs run in a project and region; pass --{key}")
        assert vertex.project and vertex.region  # checked just above
        beam_args = vertex.dataflow.beam_args(
            vertex.project, vertex.region, vertex.image, vertex.network, vertex.kms_key
        )
    cloud_config = dataclasses.replace(config, beam_args=beam_args)
    params = runtime_parameters(config, vertex) if vertex.runtime_parameters else {}
    pipeline = create_pipeline(
        cloud_config,
        local=False,
        runtime_params=params,
        trainer_factory=_custom_job_trainer(config, vertex) if vertex.custom_job else None,
    )
    for component in pipeline.components:
        if component.id in resources:
            component.with_platform_config(resources[component.id].to_proto())
    runner = v2.KubeflowV2DagRunner(v2.KubeflowV2DagRunnerConfig(default_image=vertex.image, display_name=config.name))
    if vertex.notify_url:  # the steps become one group (tfx-dag); this task runs however it ends
        from rlops.pipelines.notify import notify_exit_handler

        runner.set_exit_handler(notify_exit_handler(vertex.notify_url, config.name, vertex.notify_on_success))
    # TFX declares runtime parameters without defaults; the defaults travel in runtimeConfig,
    # where a submit's or a schedule's parameter values override them.
    job = runner.run(pipeline, parameter_values={name: p.default for name, p in params.items()}, write_out=False)
    retitle_custom_types(job, pipeline)
    system_title_launcher(job)
    wire_exit_group(job)
    apply_caching(job, config.enable_cache, vertex.caching)
    job.setdefault("labels", {})["rlops_version"] = _label(__version__.replace(".", "-"))
    if output:
        directory = os.path.dirname(os.path.abspath(output))
        os.makedirs(directory, exist_ok=True)
        with open(output, "w") as f:
            json.dump(job, f, indent=1, sort_keys=True)
    return job


def summary(job: dict) -> list[str]:
    """Human-readable lines: tasks with image, resources and caching; runtime parameters."""
    spec = job["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    tasks = dict(step_tasks(spec))
    tasks.update({name: task for name, task in spec["root"]["dag"]["tasks"].items() if name != EXIT_GROUP})
    lines = [f"pipeline {spec['pipelineInfo']['name']} ({len(tasks)} tasks)"]
    for name, task in sorted(tasks.items()):
        executor = executors.get(spec["components"][task["componentRef"]["name"]]["executorLabel"], {})
        container = executor.get("container")
        cached = "cached when inputs unchanged" if task.get("cachingOptions", {}).get("enableCache") else "never cached"
        if container is None:
            lines.append(f"  {name:<52} resolver, {cached}")
            continue
        res = container.get("resources", {})
        gpu = res.get("accelerator", {})
        where = f"{res.get('cpuLimit', '?')} vCPU, {res.get('memoryLimit', '?')} GB" + (
            f", {gpu.get('count')} x {gpu.get('type')}" if gpu else ""
        )
        lines.append(f"  {name:<52} {container['image']}  [{where}]  {cached}")
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    values = job.get("runtimeConfig", {}).get("parameters", {}) or job.get("runtimeConfig", {}).get(
        "parameterValues", {}
    )
    for name in sorted(params):
        default = values.get(name, {})
        default = next(iter(default.values()), default) if isinstance(default, dict) else default
        lines.append(f"  runtime parameter {name} (default {default!r})")
    return lines
