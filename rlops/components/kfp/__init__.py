"""rlops components for Kubeflow Pipelines v2: one component spec (YAML) per component.

    from rlops.components import kfp as rlops_kfp
    experience_gen = rlops_kfp.load("experience_gen")          # or kfp.components.load_component_from_file(
    trainer = rlops_kfp.load("trainer", image="us-docker.pkg.dev/p/r/rlops:0.1.0")  #   rlops_kfp.spec_path("trainer"))

Each spec runs in the rlops image and calls, through `entrypoint`, the same executor function as
the TFX component (run_experience_gen, run_trainer, run_evaluator, push_policy). Artifacts:
ExperienceGen -> examples (system.Dataset, TFX Examples layout), quarantine (system.Artifact),
reading an optional input `data` (system.Dataset: files your own upstream step wrote) or its
config's pattern; Trainer -> model (system.Model), model_run (system.Artifact); Evaluator ->
evaluation (system.Metrics: the scalar estimates the Vertex AI console shows), blessing
(system.Artifact) and a `blessed` output; Pusher -> pushed_model (system.Model whose uri is the
pushed SavedModel version, with `containerSpec.imageUri` metadata in the google.UnmanagedContainerModel
shape, so a downstream step or Google Cloud Pipeline Components' upload can take it) and a
`pushed` output. LatestPublished resolves the newest version rlops published under a serving
directory (its rlops_version.json marker's training run) into `base_model` (the Trainer's warm
start) and `baseline_model` (the Evaluator's baseline): KFP's counterpart of TFX's
latest-blessed-model resolver; with nothing published yet both carry metadata `resolved: 0`
and the Trainer / Evaluator treat them as not given. `sample_pipeline.py` wires all five.

The run date: ExperienceGen takes `data_date` and `run_time`; pipelines pass the job's
schedule time ({{$.pipeline_job_schedule_time_utc}}) as `run_time`, so an empty data_date means
"the day before this run was scheduled" and the step's cache key changes every day (an empty
date resolved from the container's clock let KFP caching serve day one's ingestion on day two).

The specs are generated from `components.py` (python -m rlops.components.kfp.components); a test
keeps them in sync.
"""

from __future__ import annotations

import os

from rlops import __version__

# The image `docker build -t rlops:<version> .` tags; Vertex AI needs it pushed to a registry.
DEFAULT_IMAGE = f"rlops:{__version__}"
NAMES = ("experience_gen", "trainer", "evaluator", "pusher", "latest_published")
SPEC_DIR = os.path.join(os.path.dirname(__file__), "specs")


def spec_path(name: str) -> str:
    if name not in NAMES:
        raise ValueError(f"unknown rlops KFP component '{name}'; one of {', '.join(NAMES)}")
    return os.path.join(SPEC_DIR, f"{name}.yaml")


def load(name: str, image: str | None = None):
    """The component spec `name` loaded with kfp.components.load_component_from_text; `image`
    replaces the image it runs in (e.g. your registry's copy of the rlops image).

    The image is replaced in the spec's text, not on the loaded object: kfp 2.5 compiles a loaded
    component on its own from the pipeline spec it read, so setting
    `component_spec.implementation.container.image` reached pipelines but not a single
    component's compiled spec."""
    import yaml
    from kfp import components

    with open(spec_path(name)) as f:
        spec = yaml.safe_load(f)
    if image:
        if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
            raise ValueError(f"image: not an image reference: {image!r}")
        for executor in spec["deploymentSpec"]["executors"].values():
            executor["container"]["image"] = image
    return components.load_component_from_text(yaml.safe_dump(spec, sort_keys=False))
