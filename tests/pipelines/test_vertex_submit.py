"""`rlops submit` / `rlops schedule`: PipelineJob and PipelineJobSchedule are built offline with
anonymous (or file-based Application Default) credentials, and every request the Vertex AI SDK
sends is intercepted at its API client (the gapic PipelineService / ScheduleService clients and
the Cloud Storage bucket check) -- no network. Bad input fails before any request, naming the
flag."""

import json
import re
import socket
import types

import pytest
from google.auth.credentials import AnonymousCredentials
from google.protobuf import json_format

from rlops.pipelines.cli import main
from rlops.pipelines.config import load_config
from rlops.pipelines.vertex import submit as vertex
from rlops.pipelines.vertex.compile import compile_pipeline
from rlops.pipelines.vertex.settings import load_vertex_config

PROJECT, REGION, ROOT = "my-proj", "us-central1", "gs://my-bucket/runs"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
TARGET_FLAGS = ["--project", PROJECT, "--region", REGION]
FILE_SOURCE = [
    "experience_gen.source={kind: file, pattern: 'gs://logs/{date}/*.csv', format: csv}",
    "experience_gen.bandit_columns.context_prefix=x_",
    "root=gs://my-bucket/rlops/bandit",
]


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    root = tmp_path_factory.mktemp("templates")
    out = {}
    for name, vertex_overrides in (
        ("nightly", []),
        ("cached_ingestion", ["caching.ExperienceGen=true"]),
        # a notifying template moves the steps into the exit handler's group
        ("cached_ingestion_notify", ["caching.ExperienceGen=true", "notify_url=https://hooks.example.com/rlops"]),
    ):
        out[name] = str(root / f"{name}.json")
        compile_pipeline(
            load_config("bandit", overrides=FILE_SOURCE), load_vertex_config(overrides=vertex_overrides), out[name]
        )
    return out


@pytest.fixture
def adc(tmp_path, monkeypatch):
    """Application Default Credentials from a file (an authorized-user one needs no key and is
    only refreshed at the first real request, which never happens here)."""
    path = tmp_path / "adc.json"
    path.write_text(
        json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "secret", "refresh_token": "token"})
    )
    for var in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GOOGLE_CLOUD_REGION", "CLOUDSDK_COMPUTE_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    return path


@pytest.fixture
def api(monkeypatch, adc):
    """Records every Vertex AI / Cloud Storage / Resource Manager request and answers it; any
    other socket use fails. (The SDK's pre-submit bucket-ownership check looks its credentials up
    through ADC, hence the `adc` file.)"""
    from google.cloud import resourcemanager, storage
    from google.cloud.aiplatform_v1.services.pipeline_service import PipelineServiceClient
    from google.cloud.aiplatform_v1.services.schedule_service import ScheduleServiceClient
    from google.cloud.aiplatform_v1.types import pipeline_state, schedule as gca_schedule

    sent = []
    stored = {}

    def no_network(*args, **kwargs):  # recorded too, in case a caller swallows the error
        sent.append(("NETWORK", {"args": repr(args)}))
        raise AssertionError(f"unexpected network access: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)

    def create_pipeline_job(self, request=None, *, parent=None, pipeline_job=None, pipeline_job_id=None, **kw):
        sent.append(("CreatePipelineJob", {"parent": parent, "pipeline_job": pipeline_job, "id": pipeline_job_id}))
        created = pipeline_job.__class__(pipeline_job)
        created.name = f"{parent}/pipelineJobs/{pipeline_job_id}"
        created.state = pipeline_state.PipelineState.PIPELINE_STATE_PENDING
        return created

    def create_schedule(self, request=None, *, parent=None, schedule=None, **kw):
        sent.append(("CreateSchedule", {"parent": parent, "schedule": schedule}))
        created = gca_schedule.Schedule(schedule)
        created.name = f"{parent}/schedules/42"
        created.state = gca_schedule.Schedule.State.ACTIVE
        stored[created.name] = created
        return created

    def get_schedule(self, request=None, *, name=None, **kw):
        sent.append(("GetSchedule", {"name": name}))
        return stored.setdefault(
            name,
            gca_schedule.Schedule(
                name=name, display_name="nightly", cron="TZ=UTC 0 3 * * *", state=gca_schedule.Schedule.State.ACTIVE
            ),
        )

    def set_state(state, method):
        def call(self, request=None, *, name=None, **kw):
            sent.append((method, {"name": name}))
            stored[name].state = state

        return call

    def delete_schedule(self, request=None, *, name=None, **kw):
        sent.append(("DeleteSchedule", {"name": name}))
        return types.SimpleNamespace(result=lambda *a, **k: None, operation=types.SimpleNamespace(name="operations/7"))

    def list_schedules(self, request=None, **kw):
        sent.append(("ListSchedules", dict(request)))
        return [
            gca_schedule.Schedule(
                name=f"{PARENT}/schedules/{i}",
                display_name=f"s{i}",
                cron="TZ=UTC 0 3 * * *",
                create_pipeline_job_request={"parent": PARENT},
                state=gca_schedule.Schedule.State.ACTIVE,
            )
            for i in (1, 2)
        ]

    monkeypatch.setattr(PipelineServiceClient, "create_pipeline_job", create_pipeline_job)
    monkeypatch.setattr(ScheduleServiceClient, "create_schedule", create_schedule)
    monkeypatch.setattr(ScheduleServiceClient, "get_schedule", get_schedule)
    monkeypatch.setattr(
        ScheduleServiceClient, "pause_schedule", set_state(gca_schedule.Schedule.State.PAUSED, "PauseSchedule")
    )
    monkeypatch.setattr(
        ScheduleServiceClient, "resume_schedule", set_state(gca_schedule.Schedule.State.ACTIVE, "ResumeSchedule")
    )
    monkeypatch.setattr(ScheduleServiceClient, "delete_schedule", delete_schedule)
    monkeypatch.setattr(ScheduleServiceClient, "list_schedules", list_schedules)
    monkeypatch.setattr(
        storage.Bucket, "exists", lambda bucket, *a, **k: sent.append(("BucketExists", {"bucket": bucket.name})) or True
    )

    def reload_bucket(bucket, *args, **kwargs):
        sent.append(("GetBucket", {"bucket": bucket.name}))
        bucket._properties["projectNumber"] = "123456789"

    def get_project(self, request=None, *, name=None, **kw):
        sent.append(("GetProject", {"name": name}))
        return resourcemanager.Project(name="projects/123456789", project_id=PROJECT)

    monkeypatch.setattr(storage.Bucket, "reload", reload_bucket)
    monkeypatch.setattr(resourcemanager.ProjectsClient, "get_project", get_project)
    return sent


def target(**kw):
    return vertex.resolve_target(
        **{"project": PROJECT, "region": REGION, "pipeline_root": ROOT, "credentials": AnonymousCredentials(), **kw}
    )


def spec_dict(job) -> dict:
    """The pipelineSpec a (proto-plus) PipelineJob message carries, as JSON."""
    return json_format.MessageToDict(type(job).pb(job).pipeline_spec)


def test_submit_sends_one_create_pipeline_job_request(templates, api):
    job = vertex.submit_pipeline(
        templates["nightly"],
        target(service_account="runner@my-proj.iam.gserviceaccount.com"),
        parameter_values=["data_date=2026-01-31", "train_steps=5000"],
        labels=["team=rl"],
        job_id="nightly-backfill-1",
    )
    # The SDK checks the pipeline root's bucket belongs to the project, then creates the job.
    assert api[:3] == [
        ("BucketExists", {"bucket": "my-bucket"}),
        ("GetBucket", {"bucket": "my-bucket"}),
        ("GetProject", {"name": f"projects/{PROJECT}"}),
    ]
    assert [name for name, _ in api[3:]] == ["CreatePipelineJob"]
    request = api[3][1]
    assert request["parent"] == PARENT and request["id"] == "nightly-backfill-1"
    sent_job = request["pipeline_job"]
    assert sent_job.service_account == "runner@my-proj.iam.gserviceaccount.com"
    assert sent_job.runtime_config.gcs_output_directory == ROOT
    params = {k: json_format.MessageToDict(v._pb) for k, v in sent_job.runtime_config.parameters.items()}
    assert params == {
        "data_date": {"stringValue": "2026-01-31"},
        "train_steps": {"intValue": "5000"},
        "data_pattern": {"stringValue": "gs://logs/{date}/*.csv"},
    }  # the compiled default
    assert sent_job.labels["team"] == "rl" and sent_job.labels["rlops_version"] == "0-1-0"
    with open(templates["nightly"]) as f:
        compiled = json.load(f)["pipelineSpec"]
    assert spec_dict(sent_job) == compiled  # the template, unchanged: compiled caching policy
    assert job.resource_name == f"{PARENT}/pipelineJobs/nightly-backfill-1"


def test_caching_flag_overrides_every_task(templates, api):
    vertex.submit_pipeline(templates["nightly"], target(), enable_caching=False)
    sent_tasks = spec_dict(api[-1][1]["pipeline_job"])["root"]["dag"]["tasks"]
    assert all(t["cachingOptions"].get("enableCache", False) is False for t in sent_tasks.values())
    vertex.submit_pipeline(templates["nightly"], target(), enable_caching=True)
    sent_tasks = spec_dict(api[-1][1]["pipeline_job"])["root"]["dag"]["tasks"]
    assert all(t["cachingOptions"]["enableCache"] is True for t in sent_tasks.values())


def test_cli_submit_with_application_default_credentials(templates, api, capsys):
    assert (
        main(
            [
                "submit",
                templates["nightly"],
                *TARGET_FLAGS,
                "--pipeline-root",
                ROOT,
                "--param",
                "train_steps=9",
                "--label",
                "env=prod",
                "--caching",
                "off",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["pipeline_job"].startswith(f"{PARENT}/pipelineJobs/rlops-bandit-")
    sent_job = api[-1][1]["pipeline_job"]
    assert sent_job.runtime_config.parameters["train_steps"].int_value == 9 and sent_job.labels["env"] == "prod"


def test_a_kfp_compiled_pipeline_submits_too(tmp_path, api):
    from rlops.components.kfp.sample_pipeline import compile_sample

    path = compile_sample(str(tmp_path / "bandit_kfp.yaml"))
    vertex.submit_pipeline(
        path, target(), parameter_values={"push_destination": "gs://my-bucket/serving", "train_steps": 50}
    )
    values = api[-1][1]["pipeline_job"].runtime_config.parameter_values
    assert values["push_destination"] == "gs://my-bucket/serving" and values["train_steps"] == 50


@pytest.mark.parametrize(
    "argv,message",
    [
        (["submit", "{nightly}", "--project", PROJECT, "--pipeline-root", ROOT], "--region: no region"),
        (
            ["submit", "{nightly}", "--project", PROJECT, "--region", "mars", "--pipeline-root", ROOT],
            "--region: 'mars'",
        ),
        (["submit", "{nightly}", *TARGET_FLAGS], "--pipeline-root: no pipeline root"),
        (["submit", "{nightly}", *TARGET_FLAGS, "--pipeline-root", "/tmp/runs"], "--pipeline-root: expected gs://"),
        (
            ["submit", "{nightly}", *TARGET_FLAGS, "--pipeline-root", ROOT, "--param", "colour=red"],
            "--param colour: the pipeline has no runtime parameter 'colour'; it has: data_date, data_pattern, train_steps",
        ),
        (
            ["submit", "{nightly}", *TARGET_FLAGS, "--pipeline-root", ROOT, "--param", "train_steps=lots"],
            "--param train_steps: expected int",
        ),
        (["submit", "{nightly}", *TARGET_FLAGS, "--pipeline-root", ROOT, "--label", "Team=RL"], "--label Team=RL"),
        (
            ["submit", "{nightly}", *TARGET_FLAGS, "--pipeline-root", ROOT, "--service-account", "robot"],
            "--service-account: 'robot'",
        ),
        (["submit", "{missing}", *TARGET_FLAGS, "--pipeline-root", ROOT], "TEMPLATE: file not found"),
        (["submit", "{invalid}", *TARGET_FLAGS, "--pipeline-root", ROOT], "TEMPLATE {invalid}: not a valid"),
        (["schedule", "create", "{nightly}", *TARGET_FLAGS, "--pipeline-root", ROOT, "--cron", "0 3 * *"], "--cron"),
        (
            [
                "schedule",
                "create",
                "{nightly}",
                *TARGET_FLAGS,
                "--pipeline-root",
                ROOT,
                "--cron",
                "0 3 * * *",
                "--time-zone",
                "Mars/Olympus",
            ],
            "--time-zone: unknown IANA time zone",
        ),
        (
            [
                "schedule",
                "create",
                "{nightly}",
                *TARGET_FLAGS,
                "--pipeline-root",
                ROOT,
                "--cron",
                "0 3 * * *",
                "--start-time",
                "2026-02-01",
                "--end-time",
                "2026-01-01",
            ],
            "--end-time",
        ),
        (
            ["schedule", "create", "{cached_ingestion}", *TARGET_FLAGS, "--pipeline-root", ROOT, "--cron", "0 3 * * *"],
            "TEMPLATE: ExperienceGen is served from cache",
        ),
        (
            [
                "schedule",
                "create",
                "{cached_ingestion_notify}",
                *TARGET_FLAGS,
                "--pipeline-root",
                ROOT,
                "--cron",
                "0 3 * * *",
            ],
            "TEMPLATE: ExperienceGen is served from cache",
        ),
        (["schedule", "pause", "projects/x/schedules/1", *TARGET_FLAGS], "SCHEDULE: 'projects/x/schedules/1'"),
    ],
)
def test_bad_input_fails_before_any_request(argv, message, templates, api, tmp_path, capsys):
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"pipelineSpec": {"pipelineInfo": {"name": "x"}, "colour": "red"}}))
    paths = {**templates, "missing": str(tmp_path / "missing.json"), "invalid": str(invalid)}
    argv = [a.format(**paths) for a in argv]
    message = message.format(**paths)
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().startswith(f"rlops: {message}")
    assert api == []


def test_missing_project_and_credentials_fail_before_any_request(templates, api, tmp_path, monkeypatch, capsys):
    with pytest.raises(vertex.SubmitError, match="^--project: no Google Cloud project"):
        vertex.resolve_target(region=REGION, pipeline_root=ROOT, credentials=AnonymousCredentials(), environ={})
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    assert main(["submit", templates["nightly"], *TARGET_FLAGS, "--pipeline-root", ROOT]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlops: credentials: no Application Default Credentials found")
    assert "gcloud auth application-default login" in err
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-proj")
    monkeypatch.setenv("GOOGLE_CLOUD_REGION", "europe-west1")
    resolved = vertex.resolve_target(pipeline_root=ROOT, credentials=AnonymousCredentials())
    assert (resolved.project, resolved.region) == ("env-proj", "europe-west1")
    assert api == []


def test_schedule_create_sends_cron_time_zone_and_limits(templates, api, capsys):
    assert (
        main(
            [
                "schedule",
                "create",
                templates["nightly"],
                *TARGET_FLAGS,
                "--pipeline-root",
                ROOT,
                "--cron",
                "30 2 * * *",
                "--time-zone",
                "America/New_York",
                "--max-concurrent-runs",
                "1",
                "--start-time",
                "2026-12-01T00:00",
                "--end-time",
                "2027-06-01T00:00:00Z",
                "--max-runs",
                "180",
                "--display-name",
                "bandit-nightly",
                "--param",
                "train_steps=4000",
                "--service-account",
                "runner@my-proj.iam.gserviceaccount.com",
            ]
        )
        == 0
    )
    assert [name for name, _ in api] == ["CreateSchedule"]
    request = api[0][1]
    schedule = request["schedule"]
    assert request["parent"] == PARENT
    assert schedule.display_name == "bandit-nightly" and schedule.cron == "TZ=America/New_York 30 2 * * *"
    assert schedule.max_concurrent_run_count == 1 and schedule.max_run_count == 180
    assert schedule.start_time.isoformat() == "2026-12-01T05:00:00+00:00"  # midnight in New York
    assert schedule.end_time.isoformat() == "2027-06-01T00:00:00+00:00"
    job_request = schedule.create_pipeline_job_request
    assert job_request.parent == PARENT
    assert job_request.pipeline_job.service_account == "runner@my-proj.iam.gserviceaccount.com"
    assert job_request.pipeline_job.runtime_config.parameters["train_steps"].int_value == 4000
    assert job_request.pipeline_job.runtime_config.parameters["data_date"].string_value == ""  # yesterday, per run
    tasks = spec_dict(job_request.pipeline_job)["root"]["dag"]["tasks"]
    assert tasks["ExperienceGen"]["cachingOptions"] == {} and tasks["Trainer"]["cachingOptions"]["enableCache"]
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == f"{PARENT}/schedules/42" and out["state"] == "ACTIVE"


def test_schedule_list_pause_resume_delete(api, capsys):
    assert main(["schedule", "list", *TARGET_FLAGS, "--filter", 'display_name="s1"']) == 0
    assert api[-1] == ("ListSchedules", {"parent": PARENT, "filter": 'display_name="s1"'})
    assert [s["display_name"] for s in json.loads(capsys.readouterr().out)] == ["s1", "s2"]
    assert main(["schedule", "pause", "42", *TARGET_FLAGS]) == 0
    assert api[-2:] == [
        ("GetSchedule", {"name": f"{PARENT}/schedules/42"}),
        ("PauseSchedule", {"name": f"{PARENT}/schedules/42"}),
    ]
    assert json.loads(capsys.readouterr().out)["state"] == "PAUSED"
    full = f"projects/{PROJECT}/locations/{REGION}/schedules/42"
    assert main(["schedule", "resume", full, *TARGET_FLAGS]) == 0
    assert api[-1] == ("ResumeSchedule", {"name": full})
    assert json.loads(capsys.readouterr().out)["state"] == "ACTIVE"
    assert main(["schedule", "delete", "42", *TARGET_FLAGS]) == 0
    assert api[-1] == ("DeleteSchedule", {"name": full})
    assert json.loads(capsys.readouterr().out) == {"deleted": full}


# --- runs you can watch --------------------------------------------------------------------------


def job_states(monkeypatch, api, steps):
    """GetPipelineJob answers: the job goes through `steps`, each (job state, {task: (state, error)})."""
    from google.cloud.aiplatform_v1.services.pipeline_service import PipelineServiceClient
    from google.cloud.aiplatform_v1.types import pipeline_job as gca_job, pipeline_state

    answers = iter(steps)

    def get_pipeline_job(self, request=None, *, name=None, **kw):
        api.append(("GetPipelineJob", {"name": name}))
        state, tasks = next(answers)
        details = [
            gca_job.PipelineTaskDetail(
                task_name=task, state=gca_job.PipelineTaskDetail.State[s], error={"message": error} if error else None
            )
            for task, (s, error) in tasks.items()
        ]
        return gca_job.PipelineJob(
            name=name,
            display_name="rlops-bandit",
            state=pipeline_state.PipelineState[f"PIPELINE_STATE_{state}"],
            error={"message": "some tasks failed"} if state == "FAILED" else None,
            job_detail={"task_details": details},
            runtime_config={"parameter_values": {"data_date": "2026-11-23"}},
        )

    def list_pipeline_jobs(self, request=None, **kw):
        api.append(("ListPipelineJobs", dict(request)))
        return [
            gca_job.PipelineJob(
                name=f"{PARENT}/pipelineJobs/run-{i}",
                display_name="rlops-bandit",
                state=pipeline_state.PipelineState.PIPELINE_STATE_SUCCEEDED,
            )
            for i in (2, 1)
        ]

    monkeypatch.setattr(PipelineServiceClient, "get_pipeline_job", get_pipeline_job)
    monkeypatch.setattr(PipelineServiceClient, "list_pipeline_jobs", list_pipeline_jobs)


FAILING = [
    ("RUNNING", {"ExperienceGen": ("RUNNING", "")}),
    ("RUNNING", {"ExperienceGen": ("SUCCEEDED", ""), "Trainer": ("RUNNING", "")}),
    ("RUNNING", {"ExperienceGen": ("SUCCEEDED", ""), "Trainer": ("RUNNING", "")}),
    (
        "FAILED",
        {
            "ExperienceGen": ("SUCCEEDED", ""),
            "Trainer": ("FAILED", "Replica chief exited with 137"),
            "Evaluator": ("CANCELLED", ""),
        },
    ),
]


def test_submit_wait_streams_task_states_and_fails_with_the_run(templates, api, monkeypatch, capsys):
    job_states(monkeypatch, api, FAILING)
    assert (
        main(["submit", templates["nightly"], *TARGET_FLAGS, "--pipeline-root", ROOT, "--wait", "--poll-seconds", "0"])
        == 1
    )
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[0])["pipeline_job"].startswith(f"{PARENT}/pipelineJobs/")
    lines = [re.sub(r"^\d\d:\d\d:\d\d ", "", ln) for ln in out[1:]]  # drop the time stamps
    assert lines == [
        "job rlops-bandit: RUNNING",
        "  ExperienceGen: RUNNING",
        "  ExperienceGen: SUCCEEDED",
        "  Trainer: RUNNING",
        "job rlops-bandit: FAILED",
        "  Evaluator: CANCELLED",
        "  Trainer: FAILED -- Replica chief exited with 137",
        "job error: some tasks failed",
    ]
    gets = [r for r, _ in api if r == "GetPipelineJob"]
    assert len(gets) == len(FAILING)  # one request per poll, none after the end


def test_runs_wait_succeeds_and_show_lists_tasks(api, monkeypatch, capsys):
    from rlops.pipelines.cli_runs import watch

    job_states(
        monkeypatch,
        api,
        [
            ("RUNNING", {"Trainer": ("RUNNING", "")}),
            ("SUCCEEDED", {"Trainer": ("SUCCEEDED", ""), "Pusher": ("SUCCEEDED", "")}),
            ("SUCCEEDED", {"Trainer": ("SUCCEEDED", ""), "Pusher": ("SUCCEEDED", "")}),
        ],
    )
    assert main(["runs", "wait", "run-7", *TARGET_FLAGS, "--poll-seconds", "0"]) == 0
    assert api[0] == ("GetPipelineJob", {"name": f"{PARENT}/pipelineJobs/run-7"})
    assert "Pusher: SUCCEEDED" in capsys.readouterr().out
    job_states(monkeypatch, api, [("FAILED", {"Trainer": ("FAILED", "OOM")})])
    assert main(["runs", "show", f"{PARENT}/pipelineJobs/run-8", *TARGET_FLAGS]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "FAILED" and shown["tasks"] == {"Trainer": {"state": "FAILED", "error": "OOM"}}
    assert shown["parameters"] == {"data_date": "2026-11-23"} and shown["error"] == "some tasks failed"
    assert main(["runs", "list", *TARGET_FLAGS, "--filter", 'display_name="rlops-bandit"']) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["name"].rsplit("/", 1)[1] for r in listed] == ["run-2", "run-1"]
    assert api[-1][1]["filter"] == 'display_name="rlops-bandit"'
    assert main(["runs", "show", "a/b", *TARGET_FLAGS]) == 2
    assert "JOB: 'a/b'" in capsys.readouterr().err
    # Watching stops at a time limit without failing the run.
    job_states(monkeypatch, api, [("RUNNING", {})] * 3)
    ticks = iter(range(100))
    from rlops.pipelines.cli_runs import get_run

    job = get_run(target(), "run-9")
    assert watch(job, 1.0, sleep=lambda s: None, timeout_s=2, clock=lambda: next(ticks)) == "TIMEOUT"


NETWORK = "projects/123456789/global/networks/ml-vpc"
KEY = f"projects/{PROJECT}/locations/{REGION}/keyRings/ml/cryptoKeys/rlops"
NET_FLAGS = ["--network", NETWORK, "--reserved-ip-range", "pipelines-range", "--kms-key", KEY]


def test_network_reserved_ranges_and_cmek_on_runs_and_schedules(templates, api):
    assert main(["submit", templates["nightly"], *TARGET_FLAGS, "--pipeline-root", ROOT, *NET_FLAGS]) == 0
    sent_job = api[-1][1]["pipeline_job"]
    assert sent_job.network == NETWORK and list(sent_job.reserved_ip_ranges) == ["pipelines-range"]
    assert sent_job.encryption_spec.kms_key_name == KEY
    assert (
        main(
            [
                "schedule",
                "create",
                templates["nightly"],
                *TARGET_FLAGS,
                "--pipeline-root",
                ROOT,
                *NET_FLAGS,
                "--cron",
                "0 3 * * *",
            ]
        )
        == 0
    )
    scheduled = api[-1][1]["schedule"].create_pipeline_job_request.pipeline_job
    assert scheduled.network == NETWORK and list(scheduled.reserved_ip_ranges) == ["pipelines-range"]
    assert scheduled.encryption_spec.kms_key_name == KEY


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--network", "ml-vpc"], "--network: expected projects/PROJECT_NUMBER/global/networks/NAME"),
        (["--reserved-ip-range", "r1"], "--reserved-ip-range: IP ranges are reserved on a peered network"),
        (["--kms-key", KEY.replace(REGION, "europe-west4")], "--kms-key: the key is in 'europe-west4'"),
    ],
)
def test_bad_network_flags_fail_before_any_request(templates, api, capsys, flags, message):
    assert main(["submit", templates["nightly"], *TARGET_FLAGS, "--pipeline-root", ROOT, *flags]) == 2
    assert capsys.readouterr().err.startswith(f"rlops: {message}") and api == []


def test_a_one_off_run_fixes_its_data_date_at_submission(templates, api):
    import datetime

    vertex.submit_pipeline(templates["nightly"], target())
    expected = (datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)).isoformat()
    assert api[-1][1]["pipeline_job"].runtime_config.parameters["data_date"].string_value == expected
    vertex.submit_pipeline(templates["nightly"], target(), parameter_values={"data_date": "2026-01-31"})
    assert api[-1][1]["pipeline_job"].runtime_config.parameters["data_date"].string_value == "2026-01-31"
    assert vertex.with_run_date({"pipelineSpec": {"root": {}}}, {}) == {}  # no data_date parameter: nothing
