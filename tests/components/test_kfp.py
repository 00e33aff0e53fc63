"""The KFP v2 component specs: each runs through kfp 2.5's kfp.local SubprocessRunner (this venv's
interpreter, use_venv=False, forked warm: warm_kfp_python) on a small digits bandit, and its
outputs match the TFX component's executor run on the same inputs; the specs load with
kfp.components.load_component_from_file, stay in sync with components.py, and the sample pure-KFP
pipeline compiles.

kfp 2.5's local runner refuses input artifacts ("not yet supported for local execution");
`input_artifacts` below hands them to it the way a pipeline backend does -- as RuntimeArtifacts
in the executor input -- and everything else (placeholder resolution, the subprocess running
`kfp.dsl.executor_main`, reading outputs back) is kfp.local's own.
"""

import contextlib
import filecmp
import json
import os
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import yaml
from google.protobuf import json_format
from kfp import components as kfp_components, dsl, local
from kfp.local import executor_input_utils, task_dispatcher
from kfp.pipeline_spec import pipeline_spec_pb2

from rlops.components import kfp as rlops_kfp
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, SpecConfig
from rlops.components.trainer.config import TrainerConfig

pytestmark = pytest.mark.slow

NUM_ACTIONS = 10
# Budgets come as per-run overrides (num_records, train_steps), in both faces: the configs' own
# values are never used, so the runs also prove the override path.
GEN_CONFIG = ExperienceGenConfig(
    source=SimulationSource(env="digits", num_records=50_000, seed=3), action_spec=SpecConfig.discrete(NUM_ACTIONS)
)
NUM_RECORDS = 3000
TRAINER_CONFIG = TrainerConfig(
    agent="neural_epsilon_greedy", num_actions=NUM_ACTIONS, train_steps=5000, steps_per_run=100, seed=1
)
TRAIN_STEPS = 300
EVALUATOR_CONFIG = EvaluatorConfig(kind="bandit", num_bootstrap=100, use_lower_bound=False)
BEAM_ARGS = ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"]


@contextlib.contextmanager
def input_artifacts(artifacts: dict):
    original = executor_input_utils.construct_executor_input

    def construct(component_spec, arguments, task_root):
        declared = {name: spec.artifact_type for name, spec in component_spec.input_definitions.artifacts.items()}
        unknown = set(artifacts) - set(declared)
        assert not unknown, f"not inputs of this component: {unknown}"
        stripped = pipeline_spec_pb2.ComponentSpec()
        stripped.CopyFrom(component_spec)
        stripped.input_definitions.ClearField("artifacts")
        executor_input = original(stripped, arguments, task_root)
        for name, artifact in artifacts.items():
            runtime = pipeline_spec_pb2.RuntimeArtifact(name=name, type=declared[name], uri=artifact.uri)
            runtime.metadata.update(dict(artifact.metadata))
            executor_input.inputs.artifacts[name].artifacts.append(runtime)
        return executor_input

    with mock.patch.object(executor_input_utils, "construct_executor_input", construct):
        yield


def run_locally(component, artifacts=None, **parameters) -> dict:
    """What `component(**parameters)` does under kfp.local, plus input artifacts."""
    with input_artifacts(artifacts or {}):
        return task_dispatcher.run_single_component(
            pipeline_spec=component.component_spec.to_pipeline_spec(), arguments=parameters
        )


def tfx_artifact(cls, uri):
    artifact = cls()
    artifact.uri = uri
    return artifact


def records(examples_uri: str, split: str) -> list[bytes]:
    """Every record of one split, canonically serialized and sorted (shard names and a proto map's
    field order may differ between processes; the content may not)."""
    files = sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
    assert files, f"no files in {examples_uri}/Split-{split}"
    out = []
    for path in files:
        out.extend(
            tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
            for r in tf.data.TFRecordDataset(path, compression_type="GZIP")
        )
    return sorted(out)


def tree(root: str) -> set:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files}


@pytest.fixture(scope="module")
def warm_kfp_python():
    """kfp.local's subprocesses (`python3 -m kfp.dsl.executor_main ...`) forked from the suite's
    warm interpreter (tests/conftest.py: one that has imported TensorFlow): each is still a new
    process running the spec's command, without paying TensorFlow's import again."""
    from kfp.local import subprocess_task_handler

    from rlops.components.pusher.core import VERIFY_PYTHON_ENV

    shim = os.environ[VERIFY_PYTHON_ENV]  # waits for the interpreter while it still imports

    @contextlib.contextmanager
    def warm_environment(use_venv: bool) -> Iterator[str]:
        assert not use_venv
        yield shim

    with mock.patch.object(subprocess_task_handler, "environment", warm_environment):
        yield


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm_kfp_python):
    """One small dataset and model, each made by the KFP spec (kfp.local) and by the TFX executor."""
    from tfx.types import standard_artifacts

    from rlops.components.experience_gen.component import ExperienceQuarantine
    from rlops.components.experience_gen.executor import Executor as GenExecutor
    from rlops.components.trainer.executor import Executor as TrainerExecutor

    root = tmp_path_factory.mktemp("kfp")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "kfp_root"))
    out = {"root": root}
    # The TFX executor first (in this process), while the warm interpreter finishes its imports.
    tfx_examples = tfx_artifact(standard_artifacts.Examples, str(root / "tfx" / "examples"))
    tfx_quarantine = tfx_artifact(ExperienceQuarantine, str(root / "tfx" / "quarantine"))
    GenExecutor(GenExecutor.Context(beam_pipeline_args=BEAM_ARGS, tmp_dir=str(root / "tmp"))).Do(
        {},
        {"examples": [tfx_examples], "quarantine": [tfx_quarantine]},
        {"config": GEN_CONFIG.to_json(), "num_records": NUM_RECORDS},
    )
    out["tfx_gen"] = {"examples": tfx_examples, "quarantine": tfx_quarantine}
    # ExperienceGen without its optional `data` input (kfp.local refuses specs declaring input artifacts).
    out["kfp_gen"] = run_locally(
        rlops_kfp.load("experience_gen"), {}, config=GEN_CONFIG.to_json(), beam_args=BEAM_ARGS, num_records=NUM_RECORDS
    )
    # Trainer on the KFP examples, both ways.
    examples = out["kfp_gen"]["examples"]
    out["kfp_train"] = run_locally(
        rlops_kfp.load("trainer"), {"examples": examples}, config=TRAINER_CONFIG.to_json(), train_steps=TRAIN_STEPS
    )
    tfx_model = tfx_artifact(standard_artifacts.Model, str(root / "tfx" / "model"))
    tfx_run = tfx_artifact(standard_artifacts.ModelRun, str(root / "tfx" / "model_run"))
    TrainerExecutor().Do(
        {"examples": [tfx_artifact(standard_artifacts.Examples, examples.uri)]},
        {"model": [tfx_model], "model_run": [tfx_run]},
        {"config": TRAINER_CONFIG.to_json(), "train_steps": TRAIN_STEPS},
    )
    out["tfx_train"] = {"model": tfx_model, "model_run": tfx_run}
    return out


def test_specs_load_and_declare_artifacts_by_type():
    schema = {name: {} for name in rlops_kfp.NAMES}
    for name in rlops_kfp.NAMES:
        component = kfp_components.load_component_from_file(rlops_kfp.spec_path(name))
        spec = component.pipeline_spec.components[f"comp-{name.replace('_', '-')}"]
        for io in (spec.input_definitions.artifacts, spec.output_definitions.artifacts):
            schema[name].update({k: v.artifact_type.schema_title for k, v in io.items()})
        assert component.component_spec.implementation.container.image == rlops_kfp.DEFAULT_IMAGE
    assert schema["experience_gen"] == {
        "data": "system.Dataset",
        "examples": "system.Dataset",
        "quarantine": "system.Artifact",
    }
    assert schema["trainer"] == {
        "examples": "system.Dataset",
        "base_model": "system.Model",
        "model": "system.Model",
        "model_run": "system.Artifact",
    }
    assert schema["evaluator"] == {
        "model": "system.Model",
        "examples": "system.Dataset",
        "baseline_model": "system.Model",
        "evaluation": "system.Metrics",
        "blessing": "system.Artifact",
    }
    assert schema["pusher"] == {
        "model": "system.Model",
        "blessing": "system.Artifact",
        "examples": "system.Dataset",
        "pushed_model": "system.Model",
        "serving_model": "google.UnmanagedContainerModel",
    }


def test_image_override_reaches_a_single_components_compiled_spec(tmp_path):
    """Found: kfp 2.5 compiled a loaded component on its own with the spec's original image."""
    from kfp import compiler

    for name in rlops_kfp.NAMES:
        component = rlops_kfp.load(name, image="eu.gcr.io/p/rlops:9")
        assert component.component_spec.implementation.container.image == "eu.gcr.io/p/rlops:9"
        compiler.Compiler().compile(component, str(tmp_path / f"{name}.yaml"))
        with open(tmp_path / f"{name}.yaml") as f:
            executors = yaml.safe_load(f)["deploymentSpec"]["executors"]
        assert [e["container"]["image"] for e in executors.values()] == ["eu.gcr.io/p/rlops:9"]
    with pytest.raises(ValueError, match="^image"):
        rlops_kfp.load("trainer", image="bad image")


def test_run_date_comes_from_the_jobs_schedule_time_not_the_container_clock(tmp_path):
    import datetime

    from rlops.components.experience_gen.config import FileSource
    from rlops.components.kfp import entrypoint

    assert entrypoint.run_day("2026-11-24T02:00:00Z") == datetime.date(2026, 11, 24)
    assert entrypoint.run_day("2026-11-24T23:30:00-02:00") == datetime.date(2026, 11, 25)  # UTC
    with pytest.raises(ValueError, match="^run_time"):
        entrypoint.run_day("last night")
    seen = {}
    with mock.patch(
        "rlops.components.experience_gen.kfp.run_for_kfp",
        lambda config, *a: seen.update(json.loads(config)["source"]),
    ):
        config = ExperienceGenConfig(
            source=FileSource(pattern="gs://b/logs/{date}/*.csv"), action_spec=SpecConfig.discrete(3)
        ).to_json()
        entrypoint.experience_gen(config, None, None, run_time="2026-11-24T02:00:00Z")
        assert seen["pattern"] == "gs://b/logs/2026-11-23/*.csv"
        entrypoint.experience_gen(config, None, None, data_date="2026-01-31", run_time="2026-11-24T02:00:00Z")
        assert seen["pattern"] == "gs://b/logs/2026-01-31/*.csv"
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "a.csv").write_text("x")
        entrypoint.experience_gen(config, None, None, data=dsl.Dataset(uri=str(tmp_path / "logs")))
        assert seen["pattern"] == str(tmp_path / "logs") + "/*"
        with pytest.raises(ValueError, match="^data"):
            entrypoint.experience_gen(config, None, None, data=dsl.Dataset(uri=str(tmp_path / "none")))


def test_specs_are_generated_from_components_py(tmp_path):
    from rlops.components.kfp.components import write_specs

    for path in write_specs(str(tmp_path)):
        checked_in = rlops_kfp.spec_path(os.path.basename(path)[: -len(".yaml")])
        assert filecmp.cmp(path, checked_in, shallow=False), (
            f"{checked_in} is stale: run python -m rlops.components.kfp.components"
        )


def test_experience_gen_spec_matches_the_tfx_component(runs):
    kfp_examples, tfx_examples = runs["kfp_gen"]["examples"], runs["tfx_gen"]["examples"]
    assert isinstance(kfp_examples, dsl.Dataset)
    assert kfp_examples.metadata["split_names"] == json.loads(tfx_examples.split_names) == ["train", "eval"]
    for key in ("records_read", "records_written", "records_quarantined", "examples_train", "examples_eval"):
        assert kfp_examples.metadata[key] == tfx_examples.get_int_custom_property(key), key
    assert kfp_examples.metadata["records_read"] == NUM_RECORDS
    for split in ("train", "eval"):
        assert records(kfp_examples.uri, split) == records(tfx_examples.uri, split)


def test_trainer_spec_matches_the_tfx_component(runs):
    kfp_model, tfx_model = runs["kfp_train"]["model"], runs["tfx_train"]["model"]
    assert isinstance(kfp_model, dsl.Model)
    assert tree(kfp_model.uri) == tree(tfx_model.uri)
    assert "Format-Serving/saved_model.pb" in tree(kfp_model.uri)
    assert kfp_model.metadata["train_steps"] == tfx_model.get_int_custom_property("train_steps") == TRAIN_STEPS
    with open(os.path.join(runs["kfp_train"]["model_run"].uri, "metrics.json")) as f:
        kfp_metrics = json.load(f)
    with open(os.path.join(runs["tfx_train"]["model_run"].uri, "metrics.json")) as f:
        tfx_metrics = json.load(f)
    assert kfp_metrics.keys() == tfx_metrics.keys()
    np.testing.assert_allclose(
        [loss for _, loss in kfp_metrics["curve"]], [loss for _, loss in tfx_metrics["curve"]], rtol=1e-4
    )
    # Same greedy policy: the same action on every eval context.
    from rlops.components.common.feedback import load_logged_feedback
    from rlops.train.policy_saver import SavedPolicy

    contexts = load_logged_feedback(runs["kfp_gen"]["examples"].uri).contexts
    kfp_actions = SavedPolicy(os.path.join(kfp_model.uri, "Format-Serving")).actions(contexts)
    tfx_actions = SavedPolicy(os.path.join(tfx_model.uri, "Format-Serving")).actions(contexts)
    np.testing.assert_array_equal(kfp_actions, tfx_actions)


@pytest.fixture(scope="module")
def evaluations(runs):
    from tfx.types import standard_artifacts

    from rlops.components.evaluator.executor import Executor as EvalExecutor

    root, model, examples = runs["root"], runs["kfp_train"]["model"], runs["kfp_gen"]["examples"]
    kfp_out = run_locally(
        rlops_kfp.load("evaluator"),
        {"model": model, "examples": examples},
        config=EVALUATOR_CONFIG.to_json(),
        num_actions=NUM_ACTIONS,
    )
    tfx_model = tfx_artifact(standard_artifacts.Model, model.uri)
    tfx_model.id = 7
    evaluation = tfx_artifact(standard_artifacts.ModelEvaluation, str(root / "tfx" / "evaluation"))
    blessing = tfx_artifact(standard_artifacts.ModelBlessing, str(root / "tfx" / "blessing"))
    EvalExecutor().Do(
        {"model": [tfx_model], "examples": [tfx_artifact(standard_artifacts.Examples, examples.uri)]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        {"config": EVALUATOR_CONFIG.to_json(), "num_actions": NUM_ACTIONS},
    )
    return kfp_out, {"evaluation": evaluation, "blessing": blessing}


def test_evaluator_spec_matches_the_tfx_component(evaluations):
    kfp_out, tfx_out = evaluations
    with open(os.path.join(kfp_out["evaluation"].uri, "metrics.json")) as f:
        kfp_metrics = json.load(f)
    with open(os.path.join(tfx_out["evaluation"].uri, "metrics.json")) as f:
        tfx_metrics = json.load(f)
    assert kfp_metrics == tfx_metrics
    assert kfp_metrics["baseline"] == "logging_policy" and kfp_metrics["num_eval_records"] > 200
    blessed = tfx_out["blessing"].get_int_custom_property("blessed")
    assert kfp_out["blessed"] is bool(blessed) and kfp_out["blessing"].metadata["blessed"] == blessed
    assert tree(kfp_out["blessing"].uri) == tree(tfx_out["blessing"].uri) == {"BLESSED" if blessed else "NOT_BLESSED"}
    # The Metrics artifact carries scalars a console can show.
    assert kfp_out["evaluation"].metadata["candidate_dr"] == pytest.approx(kfp_metrics["candidate"]["dr"]["value"])


def test_pusher_spec_matches_the_tfx_component(runs, evaluations, tmp_path):
    from tfx.types import standard_artifacts

    from rlops.components.pusher.executor import Executor as PushExecutor

    kfp_eval, _ = evaluations
    model, examples = runs["kfp_train"]["model"], runs["kfp_gen"]["examples"]
    blessing = dsl.Artifact(uri=kfp_eval["blessing"].uri, metadata={"blessed": 1})  # push even if not blessed here
    kfp_out = run_locally(
        rlops_kfp.load("pusher"),
        {"model": model, "blessing": blessing, "examples": examples},
        push_destination=str(tmp_path / "kfp_serving"),
    )
    tfx_blessing = tfx_artifact(standard_artifacts.ModelBlessing, blessing.uri)
    tfx_blessing.set_int_custom_property("blessed", 1)
    pushed = tfx_artifact(standard_artifacts.PushedModel, str(tmp_path / "pushed"))
    PushExecutor().Do(
        {
            "model": [tfx_artifact(standard_artifacts.Model, model.uri)],
            "model_blessing": [tfx_blessing],
            "examples": [tfx_artifact(standard_artifacts.Examples, examples.uri)],
        },
        {"pushed_model": [pushed]},
        {"push_destination": str(tmp_path / "tfx_serving"), "keep_last": 5},
    )
    assert kfp_out["pushed"] is True and kfp_out["pushed_model"].metadata["pushed"] == 1
    assert pushed.get_int_custom_property("pushed") == 1
    kfp_version = kfp_out["pushed_model"].metadata["pushed_destination"]
    tfx_version = pushed.get_string_custom_property("pushed_destination")
    assert os.path.dirname(kfp_version) == str(tmp_path / "kfp_serving")
    assert tree(kfp_version) == tree(tfx_version) and "saved_model.pb" in tree(kfp_version)
    assert filecmp.cmp(
        os.path.join(kfp_version, "saved_model.pb"), os.path.join(tfx_version, "saved_model.pb"), shallow=False
    )
    # Not blessed: nothing is pushed, the spec says why.
    refused = run_locally(
        rlops_kfp.load("pusher"),
        {"model": model, "blessing": dsl.Artifact(uri=blessing.uri, metadata={"blessed": 0})},
        push_destination=str(tmp_path / "never"),
    )
    assert refused["pushed"] is False and refused["pushed_model"].metadata["reason"] == "model not blessed"
    assert not os.path.exists(tmp_path / "never")


def test_sample_pipeline_compiles_and_wires_by_artifact(tmp_path):
    from rlops.components.kfp.sample_pipeline import compile_sample

    path = compile_sample(str(tmp_path / "bandit_kfp.yaml"), image="eu.gcr.io/p/rlops:9", trainer_gpu="NVIDIA_L4:1")
    with open(path) as f:
        spec_dict = yaml.safe_load(f)
    spec = json_format.ParseDict(spec_dict, pipeline_spec_pb2.PipelineSpec())  # strict
    tasks = spec.root.dag.tasks
    assert set(tasks) == {"latest-published", "experience-gen", "trainer", "evaluator", "condition-1"}
    for task, key, output in (
        ("trainer", "base_model", "base_model"),
        ("evaluator", "baseline_model", "baseline_model"),
    ):
        resolved = tasks[task].inputs.artifacts[key].task_output_artifact
        assert (resolved.producer_task, resolved.output_artifact_key) == ("latest-published", output)
    assert not tasks["latest-published"].caching_options.enable_cache
    trainer_examples = tasks["trainer"].inputs.artifacts["examples"].task_output_artifact
    assert (trainer_examples.producer_task, trainer_examples.output_artifact_key) == ("experience-gen", "examples")
    model_in = tasks["evaluator"].inputs.artifacts["model"].task_output_artifact
    assert (model_in.producer_task, model_in.output_artifact_key) == ("trainer", "model")
    assert "evaluator-blessed" in tasks["condition-1"].trigger_policy.condition
    inner = spec.components["comp-condition-1"].dag.tasks["pusher"]
    assert inner.component_ref.name == "comp-pusher"
    assert not tasks["experience-gen"].caching_options.enable_cache and not inner.caching_options.enable_cache
    assert tasks["trainer"].caching_options.enable_cache
    executors = spec_dict["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"eu.gcr.io/p/rlops:9"}
    trainer_resources = executors["exec-trainer"]["container"]["resources"]
    assert trainer_resources["accelerator"] == {"type": "NVIDIA_L4", "count": "1"}
    assert trainer_resources["cpuLimit"] == 8.0
