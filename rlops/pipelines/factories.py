"""Pipeline factories: the same TFX pipeline object runs locally (LocalDagRunner) and compiles
for Vertex AI Pipelines (KubeflowV2DagRunner).

bandit:  ExperienceGen -> Trainer -> Evaluator -> Pusher, with the latest blessed model (a TFX
         Resolver) feeding the Trainer's warm start and the Evaluator's baseline.
ranking: the same nodes on slate logs (the Trainer's ranking path, the Evaluator's slate estimators,
         the Pusher's page checks).
ppo:     Trainer (online) -> Evaluator (episodes) -> Pusher, same resolver.

Runners that compile for the cloud pass `runtime_params` (per-run values such as the data date
or the training budget, usually TFX RuntimeParameters; see RUNTIME_PARAMS for who takes which)
and may swap the Trainer node (`trainer_factory`, e.g. TFX's Vertex training extension).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping

# Direct module imports, not `tfx.v1`: tfx.v1 also imports its Google Cloud extensions (the
# aiplatform SDK), which cost ~7 s of every local run's wall time.
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import LatestBlessedModelStrategy
from tfx.orchestration import metadata, pipeline as tfx_pipeline
from tfx.types import Channel, standard_artifacts

from rlops.components.evaluator.component import Evaluator
from rlops.components.experience_gen.component import ExperienceGen
from rlops.components.experience_gen.fingerprint import input_fingerprint
from rlops.components.pusher.component import Pusher
from rlops.components.trainer.component import Trainer
from rlops.pipelines.config import ConfigError, PipelineConfig, pipeline_kind

RESOLVER_ID = "latest_blessed_model_resolver"
# Optional per-run execution parameters, by the component that takes them.
RUNTIME_PARAMS = {
    "ExperienceGen": ("data_pattern", "data_date", "num_records"),
    "Trainer": ("train_steps", "total_env_steps"),
}
# (config, examples channel or None, base_model channel or None, **runtime params) -> Trainer node
TrainerFactory = Callable[..., Any]


def _params(runtime_params: Mapping[str, Any] | None, component: str) -> dict[str, Any]:
    given = dict(runtime_params or {})
    known = {name for names in RUNTIME_PARAMS.values() for name in names}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"runtime parameter '{unknown[0]}': unknown; known: {', '.join(sorted(known))}")
    return {k: v for k, v in given.items() if k in RUNTIME_PARAMS[component]}


def default_trainer(config: PipelineConfig, examples=None, base_model=None, **runtime_params) -> Trainer:
    return Trainer(config=config.trainer, examples=examples, base_model=base_model, **runtime_params)


def latest_blessed_model_resolver():
    return Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing),
    ).with_id(RESOLVER_ID)


def _metadata(config: PipelineConfig, local: bool):
    return metadata.sqlite_metadata_connection_config(config.metadata_path) if local else None


def create_bandit_pipeline(
    config: PipelineConfig,
    local: bool = True,
    runtime_params: Mapping[str, Any] | None = None,
    trainer_factory: TrainerFactory | None = None,
) -> tfx_pipeline.Pipeline:
    _check_splits(config)
    gen_config = config.experience_gen
    assert gen_config is not None  # _check_splits: the pipeline has its ExperienceGen section
    # Local runs key ExperienceGen's cache on the input files' fingerprints (a file replaced in
    # place is ingested again); on Vertex ingestion is never cached (vertex.DEFAULT_CACHING).
    fingerprint = input_fingerprint(gen_config) if local and config.enable_cache else None
    experience_gen = ExperienceGen(
        config=gen_config, input_fingerprint=fingerprint, **_params(runtime_params, "ExperienceGen")
    )
    examples = experience_gen.outputs["examples"]
    resolver = latest_blessed_model_resolver()
    trainer = (trainer_factory or default_trainer)(
        config,
        examples=examples,
        base_model=resolver.outputs["model"] if config.warm_start else None,
        **_params(runtime_params, "Trainer"),
    )
    evaluator = Evaluator(
        config=config.evaluator,
        model=trainer.outputs["model"],
        examples=examples,
        baseline_model=resolver.outputs["model"],
        num_actions=config.num_actions,
    )
    pusher = _pusher(config, trainer, evaluator, examples=examples)
    return tfx_pipeline.Pipeline(
        pipeline_name=config.name,
        pipeline_root=config.pipeline_root,
        components=[experience_gen, resolver, trainer, evaluator, pusher],
        enable_cache=config.enable_cache,
        metadata_connection_config=_metadata(config, local),
        beam_pipeline_args=config.beam_args,
    )


def _check_splits(config: PipelineConfig) -> None:
    """The Trainer reads Split-train and the Evaluator Split-eval: a config without one of them
    (e.g. every record in eval, for ExperienceGen on its own) cannot run as this pipeline."""
    if config.experience_gen is None:
        raise ValueError(f"the {config.kind} pipeline needs an experience_gen section")
    names = config.experience_gen.splits.names
    if not {"train", "eval"} <= set(names):
        raise ConfigError(
            f"experience_gen.splits: the {config.kind} pipeline trains on split 'train' and evaluates on "
            f"'eval'; the config has {names}"
        )


def create_ppo_pipeline(
    config: PipelineConfig,
    local: bool = True,
    runtime_params: Mapping[str, Any] | None = None,
    trainer_factory: TrainerFactory | None = None,
) -> tfx_pipeline.Pipeline:
    if _params(runtime_params, "ExperienceGen"):
        raise ValueError(
            f"runtime parameters {sorted(_params(runtime_params, 'ExperienceGen'))}: the ppo pipeline "
            "has no ExperienceGen"
        )
    resolver = latest_blessed_model_resolver()
    trainer = (trainer_factory or default_trainer)(
        config,
        base_model=resolver.outputs["model"] if config.warm_start else None,
        **_params(runtime_params, "Trainer"),
    )
    evaluator = Evaluator(
        config=config.evaluator, model=trainer.outputs["model"], baseline_model=resolver.outputs["model"]
    )
    pusher = _pusher(config, trainer, evaluator, verify_env_id=getattr(config.evaluator, "env_id", None))
    return tfx_pipeline.Pipeline(
        pipeline_name=config.name,
        pipeline_root=config.pipeline_root,
        components=[resolver, trainer, evaluator, pusher],
        enable_cache=config.enable_cache,
        metadata_connection_config=_metadata(config, local),
        beam_pipeline_args=config.beam_args,
    )


def _pusher(config: PipelineConfig, trainer, evaluator, examples=None, verify_env_id=None) -> Pusher:
    vertex = config.pusher.vertex_upload
    return Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=config.serving_dir,
        examples=examples,
        keep_last=config.pusher.keep_last,
        verify_env_id=verify_env_id,
        vertex_upload=json.dumps(dataclasses.asdict(vertex)) if vertex else None,
        litert_allow_flex=config.pusher.litert_allow_flex,
        stage_unblessed=config.pusher.stage_unblessed,
    )


def create_pipeline(
    config: PipelineConfig,
    local: bool = True,
    runtime_params: Mapping[str, Any] | None = None,
    trainer_factory: TrainerFactory | None = None,
) -> tfx_pipeline.Pipeline:
    # a pipeline that ingests logs: ExperienceGen -> Trainer -> Evaluator -> Pusher (the kind is in
    # their configs); else the Trainer collects online (PPO)
    factory = create_bandit_pipeline if pipeline_kind(config.kind).ingests else create_ppo_pipeline
    return factory(config, local, runtime_params=runtime_params, trainer_factory=trainer_factory)
