"""Pipeline factories: the same TFX pipeline object runs locally (LocalDagRunner) and compiles
for Vertex AI Pipelines (KubeflowV2DagRunner).

bandit:  ExperienceGen -> Trainer -> Evaluator -> Pusher, with the latest blessed model (a TFX
         Resolver) feeding the Trainer's warm start and the Evaluator's baseline.
ppo:     Trainer (online) -> Evaluator (episodes) -> Pusher, same resolver.
"""
from __future__ import annotations

import json

# Direct module imports, not `tfx.v1`: tfx.v1 also imports its Google Cloud extensions (the
# aiplatform SDK), which cost ~7 s of every local run's wall time.
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import LatestBlessedModelStrategy
from tfx.orchestration import metadata, pipeline as tfx_pipeline
from tfx.types import Channel, standard_artifacts

from rlops.components.evaluator.component import Evaluator
from rlops.components.experience_gen.component import ExperienceGen
from rlops.components.pusher.component import Pusher
from rlops.components.trainer.component import Trainer
from rlops.pipelines.config import PipelineConfig

RESOLVER_ID = "latest_blessed_model_resolver"


def latest_blessed_model_resolver():
    return Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing)).with_id(RESOLVER_ID)


def _metadata(config: PipelineConfig, local: bool):
    return metadata.sqlite_metadata_connection_config(config.metadata_path) if local else None


def create_bandit_pipeline(config: PipelineConfig, local: bool = True) -> tfx_pipeline.Pipeline:
    experience_gen = ExperienceGen(config=config.experience_gen)
    examples = experience_gen.outputs["examples"]
    resolver = latest_blessed_model_resolver()
    trainer = Trainer(config=config.trainer, examples=examples,
                      base_model=resolver.outputs["model"] if config.warm_start else None)
    evaluator = Evaluator(config=config.evaluator, model=trainer.outputs["model"], examples=examples,
                          baseline_model=resolver.outputs["model"], num_actions=config.num_actions)
    pusher = _pusher(config, trainer, evaluator, examples=examples)
    return tfx_pipeline.Pipeline(
        pipeline_name=config.name, pipeline_root=config.pipeline_root,
        components=[experience_gen, resolver, trainer, evaluator, pusher], enable_cache=config.enable_cache,
        metadata_connection_config=_metadata(config, local), beam_pipeline_args=config.beam_args)


def create_ppo_pipeline(config: PipelineConfig, local: bool = True) -> tfx_pipeline.Pipeline:
    resolver = latest_blessed_model_resolver()
    trainer = Trainer(config=config.trainer, base_model=resolver.outputs["model"] if config.warm_start else None)
    evaluator = Evaluator(config=config.evaluator, model=trainer.outputs["model"],
                          baseline_model=resolver.outputs["model"])
    pusher = _pusher(config, trainer, evaluator, verify_env_id=config.evaluator.env_id)
    return tfx_pipeline.Pipeline(
        pipeline_name=config.name, pipeline_root=config.pipeline_root,
        components=[resolver, trainer, evaluator, pusher], enable_cache=config.enable_cache,
        metadata_connection_config=_metadata(config, local), beam_pipeline_args=config.beam_args)


def _pusher(config: PipelineConfig, trainer, evaluator, examples=None, verify_env_id=None) -> Pusher:
    vertex = config.pusher.get("vertex_upload")
    return Pusher(model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
                  push_destination=config.serving_dir, examples=examples,
                  keep_last=int(config.pusher.get("keep_last", 5)), verify_env_id=verify_env_id,
                  vertex_upload=json.dumps(vertex) if vertex else None)


def create_pipeline(config: PipelineConfig, local: bool = True) -> tfx_pipeline.Pipeline:
    factory = create_bandit_pipeline if config.kind == "bandit" else create_ppo_pipeline
    return factory(config, local)
