"""The nightly loop on (emulated) Vertex AI: `rlops compile`'s PipelineJob run task by task by
rlops.testing.vertex_emulator -- each step's own command through TFX's v2 launcher, Vertex's
artifact names and executor inputs, the latest-blessed-model resolver's queries evaluated
against the recorded artifacts.

Three nights, each with that night's logged feedback (digits bandit, uniform logging policy):
night 1 trains and beats the logging policy; night 2 warm-starts from night 1's blessed model and
is compared against it; night 3 trains an untrained candidate (learning rate 0, no warm start),
which is compared against the latest blessed model and not pushed.

The ranking pipeline takes the same path: `rlops compile ranking`'s job runs one night of simulated
slate logs to a push whose pages a server's fresh process reads, and the KFP sample pipeline on the
ranking config's component configs runs the next night from that push.

Found here before the fix (same data and budgets): on nights 2 and 3 the model resolver returned
nothing although a blessed model existed (the blessing's current_model_id was the launcher's int
hash, 5.24e18, not the model's resource name), so night 2 neither warm-started nor compared
against night 1 (baseline: logging_policy) -- warm start and the baseline comparison silently
never happened on Vertex. The Pusher's pushed_model_id was the same hash.
"""

import json
import os

import numpy as np
import pytest

from rlops.pipelines.config import load_config
from rlops.pipelines.vertex.compile import compile_pipeline
from rlops.pipelines.vertex.settings import load_vertex_config
from rlops.testing.vertex_emulator import EmulatorError, MetadataStore, VertexEmulator

BUCKET = "gs://rlops-emulated"
NIGHTS = ("2026-11-21", "2026-11-22", "2026-11-23")
RECORDS = 1200
LAUNCHER = ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]
TFX_LAUNCHER_WITH_SYSTEM_TITLES = ["python", "-m", "rlops.components.kfp.tfx_launcher"]
MODEL_RESOLVER = "latest_blessed_model_resolver-model-resolver"
SMALL = [
    f"root={BUCKET}/bandit",
    "experience_gen.source={kind: file, pattern: '%s/logs/{date}/*.csv'}" % BUCKET,
    "experience_gen.bandit_columns.context_prefix=c",
    "experience_gen.action_spec={shape: [], dtype: int32, minimum: 0, maximum: 9}",
    "trainer.train_steps=300",
    "trainer.steps_per_run=100",
    "evaluator.num_bootstrap=100",
    # ~120 eval rows under uniform logging over 10 actions: an importance-weight ESS of ~12,
    # under the default min_ess (30) that guards full-size nights.
    "evaluator.min_ess=5",
    "evaluator.min_eval_records=50",
    # The Beam engine (what a full-size night picks by size) with the pipeline's beam_args.
    "evaluator.engine=beam",
    "evaluator.dm_refits=0",
    "beam_args=['--runner=DirectRunner', '--direct_num_workers=1', '--direct_running_mode=in_memory']",
]


def write_night(path: str, seed: int, n: int = RECORDS) -> None:
    """One night of logged feedback as CSV: digits contexts, a uniform-random logged action
    (propensity 0.1), reward 1 when it is the true digit."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(digits.target), n, replace=False)
    x, y, a = digits.data[idx] / 16.0, digits.target[idx], rng.integers(0, 10, n)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(",".join([f"c{j}" for j in range(64)] + ["action", "reward", "propensity"]) + "\n")
        for i in range(n):
            f.write(",".join([f"{v:.4f}" for v in x[i]] + [str(a[i]), str(float(a[i] == y[i])), "0.1"]) + "\n")


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    emulator = VertexEmulator(str(tmp_path_factory.mktemp("vertex")))
    job = compile_pipeline(load_config("bandit", overrides=SMALL), load_vertex_config())
    worse = compile_pipeline(
        load_config("bandit", overrides=SMALL + ["warm_start=false", "trainer.learning_rate=0.0"]), load_vertex_config()
    )
    runs = []
    for night, (date, compiled) in enumerate(zip(NIGHTS, (job, job, worse))):
        write_night(emulator.local_path(f"{BUCKET}/logs/{date}/part-0.csv"), seed=night)
        runs.append(emulator.run(compiled, {"data_date": date}))
    return emulator, job, runs


def assert_ran_compiled_commands(emulator, job, run, artifacts_root: str) -> None:
    """The run succeeded, each step through its compiled command and args, with output artifacts
    named as Vertex names them and stored under the compiled pipeline root."""
    assert run.state == "SUCCEEDED", {n: t.error for n, t in run.tasks.items() if t.error}
    executors = job["pipelineSpec"]["deploymentSpec"]["executors"]
    for step in ("ExperienceGen", "Trainer", "Evaluator", "Pusher"):
        task = run.task(step)
        container = executors[f"{step}_executor"]["container"]
        assert (
            task.argv[:3]
            == container["command"]
            == (TFX_LAUNCHER_WITH_SYSTEM_TITLES if step == "Evaluator" else LAUNCHER)
        )
        assert task.argv[3:] == [json.dumps(task.executor_input) if a == "{{$}}" else a for a in container["args"]]
        for artifact in task.outputs.values():
            assert (
                artifact[0]["name"].startswith("projects/")
                and "/metadataStores/default/artifacts/" in artifact[0]["name"]
            )
            assert artifact[0]["uri"].startswith(emulator.local_path(artifacts_root))


def meta(run, task, key):
    artifact = run.artifact(task, key)
    return artifact["metadata"] if artifact else None


def versions(emulator):
    """The published versions (numeric directories; `.rlops/` holds the Pusher's claims)."""
    return sorted(n for n in os.listdir(emulator.local_path(f"{BUCKET}/bandit/serving")) if n.isdigit())


@pytest.mark.slow
def test_every_step_runs_its_compiled_command_with_vertex_artifacts(nights):
    emulator, job, runs = nights
    first = runs[0]
    assert_ran_compiled_commands(emulator, job, first, f"{BUCKET}/bandit/artifacts/")
    gen = meta(first, "ExperienceGen", "examples")
    assert gen["records_read"] == RECORDS and gen["examples_train"] + gen["examples_eval"] == RECORDS
    # Night 1: nothing blessed yet -- both resolvers resolve nothing; compared with the logging policy.
    assert first.task(MODEL_RESOLVER).outputs["model"] == []
    assert meta(first, "Trainer", "model")["warm_started_from"] == ""
    # The Evaluator ran its Beam engine, through the compiled command, on every eval record.
    evaluation = meta(first, "Evaluator", "evaluation")
    assert evaluation["engine"] == "beam"
    assert evaluation["eval_records"] == gen["examples_eval"]
    blessing = meta(first, "Evaluator", "blessing")
    assert blessing["blessed"] == 1 and "logging_policy" in blessing["reason"]
    # Scalars for the Vertex AI console: a system.Metrics artifact with the evaluation's numbers.
    metrics = first.artifact("Evaluator", "metrics")
    assert metrics["schema_title"] == "system.Metrics" and metrics["metadata"]["blessed"] == 1.0
    improvement = json.loads(meta(first, "Evaluator", "evaluation")["improvement"])
    assert metrics["metadata"]["improvement_dr"] == pytest.approx(improvement["dr"]["value"])
    assert metrics["metadata"]["improvement_dr_lower"] == pytest.approx(improvement["dr"]["lower"])
    assert metrics["metadata"]["improvement_dr_lower"] > 0
    assert meta(first, "Pusher", "pushed_model")["pushed"] == 1 and len(versions(emulator)) == 1


@pytest.mark.slow
def test_blessing_and_push_name_the_model_by_its_vertex_resource_name(nights):
    _, _, runs = nights
    for run in runs:
        model = run.artifact("Trainer", "model")
        assert meta(run, "Evaluator", "blessing")["current_model_id"] == model["name"]
        pushed = meta(run, "Pusher", "pushed_model")
        if pushed["pushed"]:
            assert pushed["pushed_model_id"] == model["name"]


@pytest.mark.slow
def test_night_two_warm_starts_from_and_is_compared_with_night_one(nights):
    emulator, _, (first, second, _) = nights
    assert second.state == "SUCCEEDED", {n: t.error for n, t in second.tasks.items() if t.error}
    night1_model = first.artifact("Trainer", "model")
    resolved = second.task(MODEL_RESOLVER).outputs["model"]
    assert [a["name"] for a in resolved] == [night1_model["name"]]
    assert meta(second, "Trainer", "model")["warm_started_from"].startswith(night1_model["uri"])
    blessing = meta(second, "Evaluator", "blessing")
    assert blessing["baseline_model"] == night1_model["uri"] and blessing["baseline_model_id"] == night1_model["name"]
    assert meta(second, "ExperienceGen", "examples")["records_read"] == RECORDS
    pushed = meta(second, "Pusher", "pushed_model")
    assert pushed["pushed"] == blessing["blessed"]
    assert len(versions(emulator)) == 1 + int(blessing["blessed"])


@pytest.mark.slow
def test_night_three_worse_candidate_is_compared_with_the_latest_blessed_and_not_pushed(nights):
    emulator, _, (first, second, third) = nights
    assert third.state == "SUCCEEDED", {n: t.error for n, t in third.tasks.items() if t.error}
    latest_blessed = second if meta(second, "Evaluator", "blessing")["blessed"] else first
    baseline = latest_blessed.artifact("Trainer", "model")
    assert [a["name"] for a in third.task(MODEL_RESOLVER).outputs["model"]] == [baseline["name"]]
    assert meta(third, "Trainer", "model")["warm_started_from"] == ""  # warm_start=false this night
    blessing = meta(third, "Evaluator", "blessing")
    assert blessing["baseline_model"] == baseline["uri"] and blessing["blessed"] == 0
    assert meta(third, "Pusher", "pushed_model")["pushed"] == 0
    assert len(versions(emulator)) == 1 + int(meta(second, "Evaluator", "blessing")["blessed"])
    # The served version is still the latest blessed model's.
    served = os.path.join(emulator.local_path(f"{BUCKET}/bandit/serving"), versions(emulator)[-1])
    assert meta(latest_blessed, "Pusher", "pushed_model")["pushed_destination"] == served


# --- the ranking pipeline on Vertex: `rlops compile ranking`, then the KFP specs ----------------------

PAGES, RANKING_STEPS = 1000, 20  # each night's runtime parameters: simulated pages, the Trainer's step cap
RANKING = [
    f"root={BUCKET}/ranking",
    "evaluator.num_bootstrap=100",
    # ~120 eval pages cannot tell a 20-step policy from the logger (test_ranking_pipeline's larger
    # run shows it learning); these nights are about the Vertex path, so the slate estimate blesses
    # unless the policy is a click per page worse, and the Pusher's own page checks decide the push.
    "evaluator.min_improvement=-1.0",
]


@pytest.fixture(scope="module")
def ranking_nights(tmp_path_factory):
    """Night 1: the job `rlops compile ranking` writes; night 2: the KFP sample pipeline given the
    ranking config's component configs, publishing into the same serving directory."""
    from rlops.components.kfp.sample_pipeline import build, pipeline_parameters
    from rlops.pipelines.cli import main

    tmp = tmp_path_factory.mktemp("ranking")
    argv = ["compile", "ranking", *(a for s in RANKING for a in ("--set", s)), "--output", str(tmp / "ranking.json")]
    assert main(argv) == 0
    job = json.loads((tmp / "ranking.json").read_text())
    emulator = VertexEmulator(str(tmp / "vertex"))
    tfx = emulator.run(job, {"num_records": PAGES, "train_steps": RANKING_STEPS})
    spec = compile_kfp(build(), tmp / "kfp.yaml")
    params = {
        **pipeline_parameters(load_config("ranking", overrides=RANKING)),
        "push_destination": f"{BUCKET}/ranking/serving",
        "num_records": PAGES,
        "train_steps": RANKING_STEPS,
    }
    kfp = emulator.run(spec, params, pipeline_root=f"{BUCKET}/kfp/root", schedule_time="2026-11-24T02:00:00Z")
    return emulator, job, tfx, kfp


def assert_serves_pages(version: str) -> None:
    """A server's fresh process (TensorFlow only) gets valid pages from the pushed version."""
    from helpers import run_fresh_python
    from test_ranking_pipeline import SERVE_PAGES

    pages = run_fresh_python(SERVE_PAGES, version)  # num_actions 10, 10, 10, 4, 3
    slates, marginals, cascade = (
        np.asarray(pages[k]) for k in ("slate", "propensity_item_position", "propensity_cascade")
    )
    assert slates.shape == (5, 3) and all(len(set(s)) == 3 for s in slates.tolist())
    assert (slates < np.array([10, 10, 10, 4, 3])[:, None]).all()
    assert ((marginals > 0) & (marginals <= 1)).all() and np.allclose(cascade[:, 0], marginals[:, 0])
    assert (np.diff(cascade, axis=1) <= 1e-7).all()


@pytest.mark.slow
def test_compiled_ranking_night_ends_in_a_verified_push_serving_pages(ranking_nights):
    """The compiled job's steps by their own commands: slates simulated at the num_records given
    at run time, the ranking Trainer capped by train_steps, the slate estimators' verdict, and a
    push whose serving_ranked pages the Pusher drew in two fresh processes."""
    emulator, job, run, _ = ranking_nights
    assert job["pipelineSpec"]["root"]["inputDefinitions"]["parameters"] == {
        "num_records": {"type": "INT"},
        "train_steps": {"type": "INT"},
    }
    assert_ran_compiled_commands(emulator, job, run, f"{BUCKET}/ranking/artifacts/")
    gen = meta(run, "ExperienceGen", "examples")
    assert gen["record_kind"] == "slate"
    assert gen["records_read"] == PAGES == gen["examples_train"] + gen["examples_eval"]
    model = run.artifact("Trainer", "model")
    # 12 passes of 256 pages would take ~48 steps: the runtime cap ended training
    assert model["metadata"]["train_steps"] == RANKING_STEPS and model["metadata"]["warm_started_from"] == ""
    blessing = meta(run, "Evaluator", "blessing")
    assert "snrips" in blessing["reason"] and blessing["current_model_id"] == model["name"]
    assert {"sips", "iips", "rips", "snrips"} <= set(json.loads(meta(run, "Evaluator", "evaluation")["improvement"]))
    pushed = meta(run, "Pusher", "pushed_model")
    assert pushed["pushed"] == 1 and pushed["pushed_model_id"] == model["name"], blessing["reason"]
    assert os.path.dirname(pushed["pushed_destination"]) == emulator.local_path(f"{BUCKET}/ranking/serving")
    assert_serves_pages(pushed["pushed_destination"])


@pytest.mark.slow
def test_kfp_specs_run_the_ranking_night_warm_started_from_the_compiled_push(ranking_nights):
    """The KFP sample pipeline's four specs on the ranking config, each by kfp's executor:
    LatestPublished finds the compiled night's push, the Trainer warm-starts from it, the Evaluator
    compares the pages paired against it (system.Metrics scalars), and the Pusher, run under the
    `blessed` condition, publishes a second verified version beside it."""
    _, _, tfx, run = ranking_nights
    assert run.state == "SUCCEEDED", {n: t.error for n, t in run.tasks.items() if t.error}
    gen = run.task("experience-gen")
    assert gen.argv[:2] == ["sh", "-ec"] and "kfp.dsl.executor_main" in gen.argv[2]
    assert gen.executor_input["inputs"]["parameterValues"]["run_time"] == "2026-11-24T02:00:00Z"
    examples = meta(run, "experience-gen", "examples")
    assert examples["record_kind"] == "slate" and examples["records_read"] == PAGES
    night1 = tfx.artifact("Trainer", "model")
    assert run.artifact("latest-published", "base_model")["uri"] == night1["uri"]
    model = run.artifact("trainer", "model")
    assert model["metadata"]["warm_started_from"].startswith(night1["uri"])
    assert model["metadata"]["train_steps"] == RANKING_STEPS
    blessing = meta(run, "evaluator", "blessing")
    assert blessing["baseline_model"] == night1["uri"] and blessing["baseline_model_id"] == night1["name"]
    assert blessing["current_model_id"] == model["name"] and "snrips" in blessing["reason"]
    evaluation = run.artifact("evaluator", "evaluation")  # scalars the Vertex console shows
    assert evaluation["schema_title"] == "system.Metrics" and "candidate_snrips" in evaluation["metadata"]
    assert run.task("evaluator").output_parameters["blessed"] is True and run.task("condition-1").state == "SUCCEEDED"
    pushed = run.artifact("pusher", "pushed_model")
    assert pushed["schema_title"] == "system.Model" and pushed["metadata"]["pushed"] == 1
    assert pushed["uri"] == pushed["metadata"]["pushed_destination"] and os.path.isdir(pushed["uri"])
    assert pushed["metadata"]["pushed_version"] > meta(tfx, "Pusher", "pushed_model")["pushed_version"]
    assert pushed["metadata"]["containerSpec"]["imageUri"].startswith("us-docker.pkg.dev/vertex-ai/prediction/tf2-")


# --- the emulator's own rules (fast) ---------------------------------------------------------


def test_resolver_queries_match_names_metadata_and_take_the_latest(tmp_path):
    store = MetadataStore(str(tmp_path / "m.json"))
    blessing_type = {"instanceSchema": "title: tfx.ModelBlessing\ntype: object\n"}
    model_type = {"instanceSchema": "title: tfx.Model\ntype: object\n"}
    for i, blessed in enumerate((1, 0)):
        store.record(
            "p",
            {
                "name": f"projects/1/locations/l/metadataStores/default/artifacts/m{i}",
                "type": model_type,
                "uri": f"/m{i}",
                "metadata": {},
            },
        )
        store.record(
            "p",
            {
                "name": f"b{i}",
                "type": blessing_type,
                "uri": f"/b{i}",
                "metadata": {
                    "blessed": float(blessed),
                    "current_model_id": f"projects/1/locations/l/metadataStores/default/artifacts/m{i}",
                },
            },
        )
    store.record("other", {"name": "b9", "type": blessing_type, "uri": "/b9", "metadata": {"blessed": 1.0}})
    hits = store.query(
        "p", [("schema_title", "tfx.ModelBlessing"), ("state", "LIVE"), ("metadata.blessed.number_value", "1")]
    )
    assert [h["name"] for h in hits] == ["b0"]  # the newer blessing is not blessed; other pipelines do not count
    assert store.query("p", [("schema_title", "tfx.Model"), ("name", "5.24e+18")]) == []
    assert [
        h["uri"]
        for h in MetadataStore(str(tmp_path / "m.json")).query(
            "p", [("schema_title", "tfx.Model"), ("name", hits[0]["metadata"]["current_model_id"])]
        )
    ] == ["/m0"]


def test_conditions_and_unknown_parameters(tmp_path):
    assert VertexEmulator._condition(
        "inputs.parameter_values['pipelinechannel--e-blessed'] == true", {"pipelinechannel--e-blessed": True}
    )
    assert not VertexEmulator._condition(
        "inputs.parameter_values['x'] == true && inputs.parameter_values['y'] > 2", {"x": True, "y": 1}
    )
    emulator = VertexEmulator(str(tmp_path))
    job = {
        "pipelineSpec": {
            "pipelineInfo": {"name": "p"},
            "root": {"dag": {"tasks": {}}, "inputDefinitions": {"parameters": {"data_date": {"type": "STRING"}}}},
            "components": {},
            "deploymentSpec": {"executors": {}},
        },
        "runtimeConfig": {"gcsOutputDirectory": "gs://b/root"},
    }
    with pytest.raises(EmulatorError, match="^parameter 'date'"):
        emulator.run(job, {"date": "2026-11-24"})
    with pytest.raises(EmulatorError, match="^parameter 'data_date': required"):
        emulator.run(job)
    assert emulator.run(job, {"data_date": "2026-11-24"}).state == "SUCCEEDED"


# --- the KFP path: the sample pipeline and a third-party DAG around the four specs ----------------


def small_kfp_configs(**gen_overrides):
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.experience_gen.config import ExperienceGenConfig, SpecConfig
    from rlops.components.trainer.config import TrainerConfig

    gen = ExperienceGenConfig(action_spec=SpecConfig.discrete(10), **gen_overrides)
    return {
        "experience_gen_config": gen.to_json(),
        "trainer_config": TrainerConfig(
            agent="neural_epsilon_greedy", num_actions=10, train_steps=200, steps_per_run=100
        ).to_json(),
        # ~150 eval rows under a uniform logging policy over 10 actions: an importance-weight
        # ESS of ~11-15, under the default min_ess (30) that guards full-size nights.
        "evaluator_config": EvaluatorConfig(kind="bandit", num_bootstrap=100, min_ess=5).to_json(),
    }


def compile_kfp(pipeline, path) -> dict:
    import yaml
    from kfp import compiler

    compiler.Compiler().compile(pipeline, str(path))
    with open(path) as f:
        return yaml.safe_load(f)


USER_PIPELINE = '''
from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output
from rlops.components.kfp import load
from rlops.components.kfp.artifact_types import UnmanagedContainerModel  # GCPC's schema title


@dsl.component(base_image="python:3.10", install_kfp_package=False)
def export_logs(seed: int, logs: Output[Dataset]):
    """The user's own step: yesterday's decisions from their warehouse, as CSV files."""
    import os
    import numpy as np
    from sklearn.datasets import load_digits
    digits = load_digits()
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(digits.target), 1200, replace=False)
    x, y, a = digits.data[idx] / 16.0, digits.target[idx], rng.integers(0, 10, 1200)
    os.makedirs(logs.path, exist_ok=True)
    for part in range(2):
        with open(os.path.join(logs.path, f"part-{part}.csv"), "w") as f:
            f.write(",".join([f"c{j}" for j in range(64)] + ["action", "reward", "propensity"]) + "\\n")
            for i in range(part, 1200, 2):
                f.write(",".join([f"{v:.4f}" for v in x[i]] + [str(a[i]), str(float(a[i] == y[i])), "0.1"]) + "\\n")


@dsl.component(base_image="python:3.10", install_kfp_package=False)
def smoke_test(pushed_model: Input[Model], report: Output[Dataset]) -> int:
    """The user's downstream step: loads what was pushed and asks it for actions."""
    import json
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    policy = tf.saved_model.load(pushed_model.uri)
    digits = load_digits()
    obs = tf.constant(digits.data[:200] / 16.0, tf.float32)
    out = policy.signatures["action"](step_type=tf.zeros([200], tf.int32), reward=tf.zeros([200]),
                                      discount=tf.ones([200]), observation=obs)
    hits = int(np.sum(out["action"].numpy() == digits.target[:200]))
    with open(report.path, "w") as f:
        json.dump({"hits": hits, "model": pushed_model.uri}, f)
    return hits


@dsl.component(base_image="python:3.10", install_kfp_package=False)
def upload_model(unmanaged_container_model: Input[UnmanagedContainerModel]) -> str:
    """Stands in for GCPC's ModelUploadOp, which takes a google.UnmanagedContainerModel."""
    import json
    return json.dumps({"uri": unmanaged_container_model.uri, "metadata": unmanaged_container_model.metadata})


@dsl.pipeline(name="users-own-pipeline")
def users_pipeline(push_destination: str, experience_gen_config: str, trainer_config: str,
                   evaluator_config: str, seed: int = 7):
    experience_gen, trainer, evaluator, pusher = (load(n) for n in ("experience_gen", "trainer", "evaluator",
                                                                     "pusher"))
    logs = export_logs(seed=seed)
    gen = experience_gen(config=experience_gen_config, data=logs.outputs["logs"],
                         run_time=dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER)
    train = trainer(config=trainer_config, examples=gen.outputs["examples"])
    evaluate = evaluator(config=evaluator_config, model=train.outputs["model"], examples=gen.outputs["examples"],
                         num_actions=10)
    push = pusher(model=train.outputs["model"], blessing=evaluate.outputs["blessing"],
                  examples=gen.outputs["examples"], push_destination=push_destination)
    smoke_test(pushed_model=push.outputs["pushed_model"])
    upload_model(unmanaged_container_model=push.outputs["serving_model"])
'''


@pytest.mark.slow
def test_third_party_pipeline_feeds_and_consumes_rlops_components(tmp_path):
    """User's upstream step -> the four rlops specs -> user's downstream step on the pushed model."""
    import importlib.util

    from rlops.components.experience_gen.config import BanditColumns, FileSource

    module_path = tmp_path / "users_pipeline.py"
    module_path.write_text(USER_PIPELINE)
    loader = importlib.util.spec_from_file_location("users_pipeline", module_path)
    users = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(users)
    spec = compile_kfp(users.users_pipeline, tmp_path / "users.yaml")
    emulator = VertexEmulator(str(tmp_path / "vertex"))
    configs = small_kfp_configs(
        source=FileSource(pattern="(the data input)", format="csv"), bandit_columns=BanditColumns(context_prefix="c")
    )
    run = emulator.run(
        spec, {**configs, "push_destination": f"{BUCKET}/users/serving"}, pipeline_root=f"{BUCKET}/users/root"
    )
    assert run.state == "SUCCEEDED", {n: t.error for n, t in run.tasks.items() if t.error}
    logs = run.artifact("export-logs", "logs")
    gen = run.task("experience-gen")
    assert gen.executor_input["inputs"]["artifacts"]["data"]["artifacts"][0]["name"] == logs["name"]
    assert meta(run, "experience-gen", "examples")["records_read"] == 1200
    pushed = run.artifact("pusher", "pushed_model")
    assert meta(run, "pusher", "pushed_model")["pushed"] == 1
    smoke = run.task("smoke-test")
    assert smoke.executor_input["inputs"]["artifacts"]["pushed_model"]["artifacts"][0]["uri"] == pushed["uri"]
    assert smoke.output_parameters["Output"] > 100  # of 200 digits: the pushed policy learned
    with open(run.artifact("smoke-test", "report")["uri"]) as f:
        assert json.load(f)["model"] == pushed["uri"]
    # GCPC's model upload takes the Pusher's serving_model: typed google.UnmanagedContainerModel,
    # uri = the pushed version, containerSpec = Vertex AI's prebuilt TensorFlow serving image.
    upload_input = spec["components"]["comp-upload-model"]["inputDefinitions"]["artifacts"]["unmanaged_container_model"]
    assert upload_input["artifactType"] == {"schemaTitle": "google.UnmanagedContainerModel", "schemaVersion": "0.0.1"}
    serving = run.artifact("pusher", "serving_model")
    assert serving["schema_title"] == "google.UnmanagedContainerModel" and serving["uri"] == pushed["uri"]
    received = json.loads(run.task("upload-model").output_parameters["Output"])
    assert received["uri"] == pushed["uri"] and os.path.isfile(os.path.join(received["uri"], "saved_model.pb"))
    assert received["metadata"]["containerSpec"]["imageUri"].startswith("us-docker.pkg.dev/vertex-ai/prediction/tf2-")


def test_kfp_type_check_keeps_a_plain_model_out_of_gcpc_model_upload():
    """The typed output is what makes it consumable: a system.Model does not pass for one."""
    from kfp import compiler, dsl
    from kfp.dsl import Input, Model, Output

    from rlops.components.kfp.artifact_types import UnmanagedContainerModel

    @dsl.component
    def make_model(model: Output[Model]):
        pass

    @dsl.component
    def upload(unmanaged_container_model: Input[UnmanagedContainerModel]):
        pass

    def wire():
        @dsl.pipeline(name="p")
        def p():
            upload(unmanaged_container_model=make_model().outputs["model"])

        return p

    with pytest.raises(Exception, match="UnmanagedContainerModel"):
        compiler.Compiler().compile(wire(), "/dev/null")


@pytest.fixture
def webhook():
    """A local HTTP endpoint recording the JSON bodies POSTed to it."""
    import http.server
    import threading

    received = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()
    thread.join(timeout=5)


@pytest.mark.slow
def test_exit_handler_reports_a_failed_run(tmp_path, webhook):
    from rlops.components.kfp.sample_pipeline import build

    url, received = webhook
    spec = compile_kfp(build(notify=True), tmp_path / "notify.yaml")
    # Cold: every step in a fresh interpreter, the path the warm one stands in for (warm_python).
    emulator = VertexEmulator(str(tmp_path / "vertex"), warm=False)
    assert emulator.warm_log_path is None
    bad_config = json.dumps({"source": {"kind": "warehouse"}})  # ExperienceGen fails on it
    run = emulator.run(
        spec,
        {"push_destination": f"{BUCKET}/n/serving", "notify_url": url, "experience_gen_config": bad_config},
        pipeline_root=f"{BUCKET}/n/root",
    )
    assert run.state == "FAILED"
    assert run.task("experience-gen").state == "FAILED" and "warehouse" in run.task("experience-gen").error
    assert run.task("trainer").state == "CANCELLED"
    notify = run.task("notify-on-failure")
    assert notify.state == "SUCCEEDED" and notify.output_parameters["Output"] == "FAILED"
    (note,) = received
    assert note["state"] == "FAILED" and note["job"].endswith(run.job_id) and "experience-gen" in note["error"]


def test_exit_task_stays_quiet_when_the_run_succeeds(webhook):
    from kfp.dsl import PipelineTaskFinalStatus

    from rlops.components.kfp.sample_pipeline import notify_on_failure

    url, received = webhook
    ok = PipelineTaskFinalStatus(
        state="SUCCEEDED",
        pipeline_job_resource_name="projects/1/pipelineJobs/j",
        pipeline_task_name="exit-handler-1",
        error_code=None,
        error_message=None,
    )
    assert notify_on_failure(ok, url) == "SUCCEEDED" and received == []
    failed = PipelineTaskFinalStatus(
        state="FAILED",
        pipeline_job_resource_name="projects/1/pipelineJobs/j",
        pipeline_task_name="exit-handler-1",
        error_code=9,
        error_message="trainer failed",
    )
    assert notify_on_failure(failed, "") == "FAILED" and received == []  # no URL: nothing sent
    assert notify_on_failure(failed, url) == "FAILED" and received[0]["error"] == "trainer failed"


# --- failure notification on the TFX path: `rlops compile` with notify_url ----------------------


@pytest.mark.slow  # a compiled pipeline through the emulator: its ExperienceGen step is a TFX process
def test_compiled_tfx_pipeline_notifies_a_failed_night(tmp_path, webhook):
    """notify_url compiles TFX's exit handler; a night whose ExperienceGen finds no files fails,
    the rest is cancelled, and the exit task POSTs the note to a local webhook."""
    from rlops.pipelines.notify import EXIT_HANDLER_ID
    from rlops.pipelines.vertex.compile import summary
    from rlops.pipelines.vertex.patches import EXIT_GROUP

    url, received = webhook
    job = compile_pipeline(load_config("bandit", overrides=SMALL), load_vertex_config(overrides=[f"notify_url={url}"]))
    spec = job["pipelineSpec"]
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {EXIT_GROUP, EXIT_HANDLER_ID}
    exit_task = root[EXIT_HANDLER_ID]
    assert exit_task["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert exit_task["inputs"]["parameters"]["final_status"] == {"taskFinalStatus": {"producerTask": EXIT_GROUP}}
    assert exit_task["cachingOptions"] == {}
    group = spec["components"][EXIT_GROUP]
    assert {"ExperienceGen", "Trainer", "Evaluator", "Pusher"} <= set(group["dag"]["tasks"])
    # The steps' runtime parameters reach the group (TFX 1.16 left them unwired).
    assert set(group["inputDefinitions"]["parameters"]) == {"data_pattern", "data_date", "train_steps"}
    assert root[EXIT_GROUP]["inputs"]["parameters"]["data_date"] == {"componentInputParameter": "data_date"}
    assert group["dag"]["tasks"]["ExperienceGen"]["cachingOptions"] == {}  # per-step caching still applies
    assert any(EXIT_HANDLER_ID in line for line in summary(job))

    emulator = VertexEmulator(str(tmp_path / "vertex"))  # no logs for 2026-11-30: ExperienceGen fails
    run = emulator.run(job, {"data_date": "2026-11-30"})
    assert run.state == "FAILED"
    gen = run.task("ExperienceGen")
    assert gen.state == "FAILED" and gen.executor_input["inputs"]["parameterValues"]["data_date"] == "2026-11-30"
    assert run.task("Trainer").state == "CANCELLED" and run.task("Pusher").state == "CANCELLED"
    assert run.task(EXIT_HANDLER_ID).state == "SUCCEEDED", run.task(EXIT_HANDLER_ID).error
    (note,) = received
    assert note["pipeline"] == "rlops-bandit" and note["state"] == "FAILED"
    assert note["job"].endswith("/pipelineJobs/" + run.job_id) and "ExperienceGen" in note["error"]
    assert note["task"] == EXIT_GROUP and "FAILED" in note["text"]


def test_notify_handler_stays_quiet_on_success_unless_asked(webhook):
    from rlops.pipelines.notify import NotifyOnFailure, note_for, parse_final_status

    url, received = webhook
    run = NotifyOnFailure.EXECUTOR_SPEC.executor_class  # the executor the launcher runs
    ok = json.dumps({"state": "SUCCEEDED", "pipelineJobResourceName": "projects/1/locations/l/pipelineJobs/j"})
    execute = lambda status, on_success: run().Do(
        {},
        {},
        {
            "final_status": status,
            "notify_url": url,  # noqa: E731
            "pipeline_name": "p",
            "notify_on_success": on_success,
        },
    )
    execute(ok, 0)
    assert received == []
    execute(ok, 1)
    assert received[0]["state"] == "SUCCEEDED" and received[0]["job"].endswith("/j")
    assert (
        note_for(parse_final_status(json.dumps({"state": "FAILED", "error": {"code": 9, "message": "x"}})), "p")[
            "error"
        ]
        == "x"
    )
    from google.protobuf import struct_pb2

    as_struct = struct_pb2.Struct()  # how TFX's launcher hands over a struct-valued parameter
    as_struct.update({"state": "CANCELLED", "pipelineTaskName": "tfx-dag"})
    assert parse_final_status(as_struct) == {"state": "CANCELLED", "pipelineTaskName": "tfx-dag"}
    with pytest.raises(ValueError, match="^final_status"):
        parse_final_status("not json")
    with pytest.raises(Exception, match="notify_url"):
        load_vertex_config(overrides=["notify_url=hooks.example.com"])


def test_cli_compile_notify_url(tmp_path, capsys):
    from rlops.pipelines.cli import main
    from rlops.pipelines.notify import EXIT_HANDLER_ID

    out = tmp_path / "pipeline.json"
    assert (
        main(["compile", "ppo", "--set", "root=gs://b/r", "--output", str(out), "--notify-url", "hooks.example"]) == 2
    )
    assert "notify_url: expected an http(s):// webhook URL" in capsys.readouterr().err and not out.exists()
    assert (
        main(
            [
                "compile",
                "ppo",
                "--set",
                "root=gs://b/r",
                "--output",
                str(out),
                "--notify-url",
                "https://hooks.example.com/x",
            ]
        )
        == 0
    )
    assert EXIT_HANDLER_ID in capsys.readouterr().out
    job = json.loads(out.read_text())
    notify = job["pipelineSpec"]["root"]["dag"]["tasks"][EXIT_HANDLER_ID]["inputs"]["parameters"]["notify_url"]
    assert notify == {"runtimeValue": {"constantValue": {"stringValue": "https://hooks.example.com/x"}}}
    # ppo's runtime parameter reaches the Trainer inside the group
    group = job["pipelineSpec"]["components"]["tfx-dag"]
    assert group["inputDefinitions"]["parameters"]["total_env_steps"]["type"] == "INT"
