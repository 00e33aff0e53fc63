"""The KFP v2 definitions behind specs/*.yaml (regenerate: python -m rlops.components.kfp.components).

Lightweight Python components whose body is one call into `entrypoint`: KFP's own executor
(`kfp.dsl.executor_main`) turns the executor input into `dsl.Artifact`s and the return value into
output parameters, and the work is the same function the TFX executor runs. The rlops image
already holds kfp, so nothing is pip-installed at start-up (install_kfp_package=False).
(No `from __future__ import annotations` here: KFP reads the signatures' types at import.)

The specs name DEFAULT_IMAGE, `rlops:<version>`: the tag `docker build -t rlops:<version> .` gives
locally, a placeholder no registry serves. Users pass their pushed image: `load(name, image=...)`,
`sample_pipeline --image`, `rlops compile --image` (docs/vertex.md).
"""

import os
import sys
from typing import NamedTuple, Optional

from kfp import compiler, dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from rlops.components.kfp import DEFAULT_IMAGE, NAMES, SPEC_DIR
from rlops.components.kfp.artifact_types import UnmanagedContainerModel


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def experience_gen(
    config: str,
    examples: Output[Dataset],
    quarantine: Output[Artifact],
    data: Input[Dataset] = None,
    beam_args: Optional[list] = None,
    data_pattern: str = "",
    data_date: str = "",
    run_time: str = "",
    num_records: int = 0,
):
    """rlops ExperienceGen: logged or simulated experience -> validated, split TFRecords (TFX
    Examples layout) plus a quarantine of bad records. config: ExperienceGenConfig JSON.
    data: optional files an upstream step wrote (a file, or a directory of files in the config's
    source.format). data_pattern / data_date / num_records: optional per-run overrides ({date} in
    the pattern). run_time: the job's schedule time; an empty data_date is the day before it."""
    from rlops.components.kfp import entrypoint

    entrypoint.experience_gen(
        config,
        examples,
        quarantine,
        data=data,
        beam_args=beam_args,
        data_pattern=data_pattern,
        data_date=data_date,
        run_time=run_time,
        num_records=num_records,
    )


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def trainer(
    config: str,
    model: Output[Model],
    model_run: Output[Artifact],
    examples: Input[Dataset] = None,
    base_model: Input[Model] = None,
    train_steps: int = 0,
    total_env_steps: int = 0,
):
    """rlops Trainer: a bandit policy from `examples` or a PPO policy online; warm-starts from
    `base_model`. model: Format-Serving/ policy SavedModel + checkpoints. config: TrainerConfig JSON.
    train_steps / total_env_steps: optional per-run budget overrides."""
    from rlops.components.kfp import entrypoint

    entrypoint.trainer(
        config,
        model,
        model_run,
        examples=examples,
        base_model=base_model,
        train_steps=train_steps,
        total_env_steps=total_env_steps,
    )


# mypy takes no NamedTuple(...) call as a type; inline, as KFP runs the function's source alone.
@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def evaluator(
    config: str,
    model: Input[Model],
    evaluation: Output[Metrics],
    blessing: Output[Artifact],
    examples: Input[Dataset] = None,
    baseline_model: Input[Model] = None,
    num_actions: int = 0,
    beam_args: Optional[list] = None,
) -> NamedTuple("Outputs", [("blessed", bool)]):  # type: ignore[valid-type]
    """rlops Evaluator: off-policy estimates (bandits, on the eval split of `examples`) or episode
    returns (PPO) of `model` vs `baseline_model` (default: the logging / a random policy) -> blessing.
    config: EvaluatorConfig JSON."""
    from rlops.components.kfp import entrypoint

    return (
        entrypoint.evaluator(
            config,
            model,
            evaluation,
            blessing,
            examples=examples,
            baseline_model=baseline_model,
            num_actions=num_actions,
            beam_args=beam_args,
        ),
    )


# mypy takes no NamedTuple(...) call as a type; inline, as KFP runs the function's source alone.
@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def pusher(
    model: Input[Model],
    blessing: Input[Artifact],
    push_destination: str,
    pushed_model: Output[Model],
    serving_model: Output[UnmanagedContainerModel],
    examples: Input[Dataset] = None,
    keep_last: int = 5,
    verify_env_id: str = "",
    vertex_upload: str = "",
    litert_allow_flex: bool = False,
    stage_unblessed: str = "",
) -> NamedTuple("Outputs", [("pushed", bool)]):  # type: ignore[valid-type]
    """rlops Pusher: a blessed policy -> a new, verified version under push_destination (a local
    directory or gs://); nothing happens when not blessed. pushed_model: that version (its uri),
    with containerSpec.imageUri metadata for Vertex AI's prebuilt TensorFlow serving container;
    serving_model: the same as a google.UnmanagedContainerModel, what Google Cloud Pipeline
    Components' ModelUploadOp takes. stage_unblessed: a directory an unblessed candidate is
    published to instead, verified and marked UNBLESSED (integration tests only; pushed stays false)."""
    from rlops.components.kfp import entrypoint

    return (
        entrypoint.pusher(
            model,
            blessing,
            push_destination,
            pushed_model,
            examples=examples,
            keep_last=keep_last,
            verify_env_id=verify_env_id,
            vertex_upload=vertex_upload,
            serving_model=serving_model,
            litert_allow_flex=litert_allow_flex,
            stage_unblessed=stage_unblessed,
        ),
    )


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def latest_published(
    push_destination: str, base_model: Output[Model], baseline_model: Output[Model], warm_start: bool = True
):
    """rlops LatestPublished: the newest version rlops published under push_destination (its
    rlops_version.json marker) -> its training run as `base_model` (the Trainer's warm start; left
    unresolved when warm_start is false) and `baseline_model` (the Evaluator's baseline). Nothing
    published yet: both carry metadata resolved=0, which the rlops components read as not given."""
    from rlops.components.kfp import entrypoint

    entrypoint.latest_published(push_destination, base_model, baseline_model, warm_start=warm_start)


COMPONENTS = {
    "experience_gen": experience_gen,
    "trainer": trainer,
    "evaluator": evaluator,
    "pusher": pusher,
    "latest_published": latest_published,
}
assert tuple(COMPONENTS) == NAMES


def write_specs(directory: str = SPEC_DIR) -> list[str]:
    """Compiles each component into <directory>/<name>.yaml; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, component in COMPONENTS.items():
        path = os.path.join(directory, f"{name}.yaml")
        compiler.Compiler().compile(component, path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    print("\n".join(write_specs(sys.argv[1] if len(sys.argv) > 1 else SPEC_DIR)))
