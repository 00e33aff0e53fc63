"""Runs you can watch: `rlops submit --wait`, `rlops runs list|show|wait`.

    rlops submit pipeline.json ... --wait        stream task states; exit 1 unless the run succeeds
    rlops runs list --project P --region R [--filter 'display_name="rlops-bandit"'] [--limit 20]
    rlops runs show JOB --project P --region R   one run: state, tasks, errors, parameters
    rlops runs wait JOB --project P --region R   like submit --wait for a run already started

Everything goes through the Vertex AI SDK (`aiplatform.PipelineJob.get/list`); watching polls one
GetPipelineJob per interval, as the SDK's own `wait()` does, and prints a line per task state
change -- so a failed step is seen (with its error) the moment Vertex reports it.
Failure notification by email: compile the KFP pipeline with an exit handler (docs/vertex.md) --
this module only watches.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable, TextIO

JOB_DONE = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED"}
TASK_FAILED = {"FAILED", "CANCELLED"}


def _short(state_name: str) -> str:
    return state_name.replace("PIPELINE_STATE_", "")


def task_states(gca: Any) -> dict[str, tuple[str, str]]:
    """task name -> (state, error message) from a PipelineJob message's job_detail."""
    out = {}
    for task in gca.job_detail.task_details:
        if task.task_name == gca.display_name or task.task_name == "":  # the root DAG's own entry
            continue
        out[task.task_name] = (task.state.name, task.error.message if task.error else "")
    return out


def watch(
    job: Any,
    poll_s: float = 30.0,
    stream: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
    timeout_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Polls `job` (an aiplatform.PipelineJob) until it ends; prints each task state change and
    the job's end state. Returns the final state (SUCCEEDED, FAILED, CANCELLED, or TIMEOUT)."""
    stream = stream or sys.stdout
    seen: dict[str, str] = {}
    start = clock()
    job_state = None
    while True:
        job._sync_gca_resource()  # one GetPipelineJob
        gca = job._gca_resource
        if gca.state.name != job_state:
            job_state = gca.state.name
            print(f"{time.strftime('%H:%M:%S')} job {gca.display_name or gca.name}: {_short(job_state)}", file=stream)
        for name, (state, error) in sorted(task_states(gca).items()):
            if seen.get(name) != state:
                seen[name] = state
                detail = f" -- {error}" if state in TASK_FAILED and error else ""
                print(f"{time.strftime('%H:%M:%S')}   {name}: {state}{detail}", file=stream)
        if job_state in JOB_DONE:
            if job_state != "PIPELINE_STATE_SUCCEEDED" and gca.error.message:
                print(f"job error: {gca.error.message}", file=stream)
            return _short(job_state)
        if timeout_s is not None and clock() - start >= timeout_s:
            print(f"stopped watching after {timeout_s:.0f} s; the run goes on: rlops runs wait {gca.name}", file=stream)
            return "TIMEOUT"
        sleep(poll_s)


def exit_code(state: str) -> int:
    """0 for a succeeded run, 1 for failed/cancelled, 3 when we stopped watching."""
    return 0 if state == "SUCCEEDED" else 3 if state == "TIMEOUT" else 1


def describe_run(job: Any) -> dict:
    gca = job._gca_resource
    params = dict(gca.runtime_config.parameter_values) if gca.runtime_config else {}
    return {
        "name": gca.name,
        "display_name": gca.display_name,
        "state": _short(gca.state.name),
        "create_time": gca.create_time.isoformat() if gca.create_time else None,
        "end_time": gca.end_time.isoformat() if gca.end_time else None,
        "parameters": {k: v for k, v in params.items()},
        "tasks": {
            name: {"state": state, **({"error": error} if error else {})}
            for name, (state, error) in sorted(task_states(gca).items())
        },
        **({"error": gca.error.message} if gca.error.message else {}),
    }


def _job_name(target: Any, job: str) -> str:
    from rlops.pipelines.vertex.submit import SubmitError

    if job.startswith("projects/"):
        return job
    if not job or "/" in job:
        raise SubmitError(f"JOB: '{job}' is not a pipeline job id or projects/P/locations/R/pipelineJobs/ID")
    return f"projects/{target.project}/locations/{target.region}/pipelineJobs/{job}"


def get_run(target: Any, job: str):
    from google.cloud import aiplatform

    return aiplatform.PipelineJob.get(
        _job_name(target, job), project=target.project, location=target.region, credentials=target.credentials
    )


def list_runs(target: Any, filter: str | None = None, limit: int = 20) -> list[dict]:
    from google.cloud import aiplatform

    jobs = aiplatform.PipelineJob.list(
        filter=filter,
        order_by="create_time desc",
        project=target.project,
        location=target.region,
        credentials=target.credentials,
    )
    rows = []
    for job in jobs[:limit]:
        gca = job._gca_resource
        rows.append(
            {
                "name": gca.name,
                "display_name": gca.display_name,
                "state": _short(gca.state.name),
                "create_time": gca.create_time.isoformat() if gca.create_time else None,
            }
        )
    return rows


# --- command line ------------------------------------------------------------------------------


def add_wait_flags(p) -> None:
    p.add_argument("--wait", action="store_true", help="stream task states until the run ends; exit 1 on failure")
    p.add_argument("--poll-seconds", type=float, default=30.0, help="how often --wait asks Vertex AI (default 30)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("runs", help="list, show or wait for Vertex AI pipeline runs")
    actions = p.add_subparsers(dest="action", required=True)
    for action, help_text in (
        ("list", "recent runs, newest first"),
        ("show", "one run's state, tasks and errors"),
        ("wait", "stream a run's task states until it ends"),
    ):
        q = actions.add_parser(action, help=help_text)
        if action != "list":
            q.add_argument("job", help="pipeline job id or projects/P/locations/R/pipelineJobs/ID")
        else:
            q.add_argument("--filter", help='Vertex AI list filter, e.g. display_name="rlops-bandit"')
            q.add_argument("--limit", type=int, default=20)
        q.add_argument("--project", help="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT, then ADC's)")
        q.add_argument("--region", help="Vertex AI region (default: $GOOGLE_CLOUD_REGION)")
        if action == "wait":
            q.add_argument("--poll-seconds", type=float, default=30.0)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from rlops.pipelines.vertex import submit as vertex_submit

    try:
        target = vertex_submit.resolve_target(args.project, args.region, need_root=False)
        if args.action == "list":
            print(json.dumps(list_runs(target, args.filter, args.limit), indent=1))
            return 0
        job = get_run(target, args.job)
        if args.action == "show":
            print(json.dumps(describe_run(job), indent=1))
            return 0
        return exit_code(watch(job, args.poll_seconds))
    except vertex_submit.SubmitError as e:
        print(f"rlops: {e}", file=sys.stderr)
        return 2
