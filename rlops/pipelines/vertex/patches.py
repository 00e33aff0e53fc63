"""Patches to the PipelineJob that TFX's KubeflowV2DagRunner compiles, applied in place: what TFX
1.16 leaves unwired or unsaid for Vertex AI (the exit handler group's inputs, per-task caching,
custom artifact types' titles, the launcher of steps with KFP system-typed outputs). Each works on
the JSON dict alone; `rlops.pipelines.vertex.compile` applies them in order.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import yaml

EXIT_GROUP = "tfx-dag"  # TFX's name for the group of steps an exit handler guards


def step_tasks(spec: dict) -> dict:
    """The pipeline steps' tasks: the root DAG's, or the exit-handler group's when there is one."""
    root = spec["root"]["dag"]["tasks"]
    if EXIT_GROUP in root and "dag" in spec["components"].get(EXIT_GROUP, {}):
        return spec["components"][EXIT_GROUP]["dag"]["tasks"]
    return root


def wire_exit_group(job: dict) -> None:
    """TFX 1.16 moves the steps into the `tfx-dag` group but leaves their runtime parameters
    pointing at the root's inputs (componentInputParameter), which a nested DAG cannot see: the
    group gets those inputs declared and passed down from the root."""
    spec = job["pipelineSpec"]
    if EXIT_GROUP not in spec["root"]["dag"]["tasks"]:
        return
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    if params:
        spec["components"][EXIT_GROUP].setdefault("inputDefinitions", {})["parameters"] = copy.deepcopy(params)
        spec["root"]["dag"]["tasks"][EXIT_GROUP].setdefault("inputs", {})["parameters"] = {
            name: {"componentInputParameter": name} for name in params
        }


def apply_caching(job: dict, enable_cache: bool, caching: Mapping[str, bool]) -> None:
    """Per-task cache settings: each step's `caching` policy (step id -> bool, the Vertex
    config's), under the pipeline config's `enable_cache` switch. Resolver tasks query 'the latest
    blessed model' and must never be served from cache; nor may the exit handler, which reports
    on this run."""
    spec = job["pipelineSpec"]
    for task in spec["root"]["dag"]["tasks"].values():
        task["cachingOptions"] = {}
    for name, task in step_tasks(spec).items():
        enabled = enable_cache and caching.get(name, False)
        task["cachingOptions"] = {"enableCache": True} if enabled else {}


def retitle_custom_types(job: dict, pipeline: Any) -> None:
    """Custom artifact types' schema titles in the compiled spec become their import paths (see
    `_custom_type_titles`)."""
    _retitle(job["pipelineSpec"], _custom_type_titles(pipeline))


def _custom_type_titles(pipeline: Any) -> dict[str, str]:
    """TYPE_NAME -> import path for the pipeline's custom artifact types. TFX's v2 container
    launcher imports a custom artifact class by its schema title, while ours keep short names
    (rlops.ExperienceQuarantine) in local ML Metadata; the compiled titles become import paths."""
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    titles = {}
    for component in pipeline.components:
        for channel in list(component.inputs.values()) + list(component.outputs.values()):
            cls = channel.type
            title = yaml.safe_load(compiler_utils.get_artifact_schema(cls)).get("title")
            path = f"{cls.__module__}.{cls.__qualname__}"
            if (
                title == cls.TYPE_NAME
                and title not in compiler_utils.TITLE_TO_CLASS_PATH
                and title != path
                and not title.startswith("system.")
            ):  # KFP system titles: see system_title_launcher
                titles[title] = path
    return titles


def _retitle(node: Any, titles: Mapping[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "instanceSchema" and isinstance(value, str):
                schema = yaml.safe_load(value)
                if schema.get("title") in titles:
                    schema["title"] = titles[schema["title"]]
                    node[key] = yaml.dump(schema, sort_keys=False)
            else:
                _retitle(value, titles)
    elif isinstance(node, list):
        for item in node:
            _retitle(item, titles)


def system_title_launcher(job: dict) -> None:
    """Steps with an output titled like a KFP system type (the Evaluator's system.Metrics, which
    the Vertex AI console shows) start through rlops' wrapper of TFX's launcher, which can import
    that type; every other step keeps TFX's launcher."""
    from rlops.components.kfp.tfx_launcher import COMMAND, SYSTEM_TITLES

    spec = job["pipelineSpec"]
    for component in spec["components"].values():
        outputs = component.get("outputDefinitions", {}).get("artifacts", {}).values()
        titles = {yaml.safe_load(o["artifactType"].get("instanceSchema", "") or "{}").get("title") for o in outputs}
        executor = spec["deploymentSpec"]["executors"].get(component.get("executorLabel", ""), {})
        if titles & set(SYSTEM_TITLES) and "container" in executor:
            executor["container"]["command"] = list(COMMAND)
