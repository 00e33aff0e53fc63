"""rlops components for Kubeflow Pipelines v2: one component spec (YAML) per component.

    from rlops.components import kfp as rlops_kfp
    experience_gen = rlops_kfp.load("experience_gen")          # or kfp.components.load_component_from_file(
    trainer = rlops_kfp.load("trainer", image="us-docker.pkg.dev/p/r/rlops:0.1.0")  #   rlops_kfp.spec_path("trainer"))

Each spec runs in the rlops image and calls, through `entrypoint`, the same executor function as
the TFX component (run_experience_gen, run_trainer, run_evaluator, push_policy). Artifacts:
ExperienceGen -> examples (system.Dataset, TFX Examples layout), quarantine (system.Artifact);
Trainer -> model (system.Model), model_run (system.Artifact); Evaluator -> evaluation
(system.Metrics), blessing (system.Artifact) and a `blessed` output; Pusher -> pushed_model
(system.Artifact) and a `pushed` output. `sample_pipeline.py` wires all four.

The specs are generated from `components.py` (python -m rlops.components.kfp.components); a test
keeps them in sync.
"""
from __future__ import annotations

import os

from rlops import __version__

# The image `docker build -t rlops:<version> .` tags; Vertex AI needs it pushed to a registry.
DEFAULT_IMAGE = f"rlops:{__version__}"
NAMES = ("experience_gen", "trainer", "evaluator", "pusher")
SPEC_DIR = os.path.join(os.path.dirname(__file__), "specs")


def spec_path(name: str) -> str:
    if name not in NAMES:
        raise ValueError(f"unknown rlops KFP component '{name}'; one of {', '.join(NAMES)}")
    return os.path.join(SPEC_DIR, f"{name}.yaml")


def load(name: str, image: str | None = None):
    """The component spec `name` loaded with kfp.components.load_component_from_file; `image`
    replaces the image it runs in (e.g. your registry's copy of the rlops image)."""
    from kfp import components
    component = components.load_component_from_file(spec_path(name))
    if image:
        component.component_spec.implementation.container.image = image
    return component
