"""Failure notification for pipelines compiled by `rlops compile`: a TFX exit handler.

    rlops compile bandit --vertex-set notify_url=https://hooks.example.com/rlops ...

With `notify_url` set, KubeflowV2DagRunner puts the pipeline's steps in a group (`tfx-dag`) and
adds this component as its exit task (trigger ALL_UPSTREAM_TASKS_COMPLETED), so it runs however
the steps end. Vertex AI hands it the group's PipelineTaskFinalStatus (JSON: state,
pipelineJobResourceName, pipelineTaskName, error {code, message}); unless the state is SUCCEEDED
it POSTs {text, pipeline, job, state, task, error} as JSON to the URL (a Slack / Google Chat /
Cloud Run webhook). `notify_on_success` also reports succeeded runs.
(No `from __future__ import annotations`: TFX reads the component function's type hints.)
"""

import json
import urllib.request
from typing import Any

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.orchestration.kubeflow.decorators import FinalStatusStr, exit_handler

EXIT_HANDLER_ID = "NotifyOnFailure"


def parse_final_status(final_status: Any) -> dict:
    """Vertex's PipelineTaskFinalStatus (a JSON string, or a protobuf Struct) -> a dict."""
    if not isinstance(final_status, str):
        from google.protobuf import json_format

        return json_format.MessageToDict(final_status)
    try:
        status = json.loads(final_status)
    except ValueError:
        raise ValueError(f"final_status: not a PipelineTaskFinalStatus JSON: {final_status[:200]!r}") from None
    if not isinstance(status, dict) or "state" not in status:
        raise ValueError(f"final_status: no 'state' in {final_status[:200]!r}")
    return status


def note_for(status: dict, pipeline_name: str) -> dict:
    """The JSON note a webhook receives."""
    error = status.get("error") or {}
    job = status.get("pipelineJobResourceName", "")
    message = error.get("message", "") if isinstance(error, dict) else str(error)
    return {
        "text": f"rlops pipeline {pipeline_name}: run {job.rsplit('/', 1)[-1]} {status['state']}"
        + (f": {message}" if message else ""),
        "pipeline": pipeline_name,
        "job": job,
        "state": status["state"],
        "task": status.get("pipelineTaskName", ""),
        "error": message,
        "error_code": error.get("code", 0) if isinstance(error, dict) else 0,
    }


def post_note(url: str, note: dict, timeout_s: float = 30) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(note).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.status


@exit_handler
def NotifyOnFailure(
    final_status: Parameter[str],
    notify_url: Parameter[str],
    pipeline_name: Parameter[str],
    notify_on_success: Parameter[int] = 0,
):
    """Exit task: POSTs the run's outcome to notify_url unless it SUCCEEDED (or always, with
    notify_on_success=1). A failed POST fails this task, so Vertex shows it."""
    status = parse_final_status(final_status)
    if status["state"] == "SUCCEEDED" and not notify_on_success:
        print(f"run {status.get('pipelineJobResourceName', '')} SUCCEEDED: nothing to report")
        return
    code = post_note(notify_url, note_for(status, pipeline_name))
    print(f"notified {notify_url}: HTTP {code}")


def notify_exit_handler(url: str, pipeline_name: str, on_success: bool = False):
    """The exit-handler node for KubeflowV2DagRunner.set_exit_handler."""
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise ValueError(f"notify_url: expected an http(s):// webhook URL, got {url!r}")
    return NotifyOnFailure(
        final_status=FinalStatusStr(), notify_url=url, pipeline_name=pipeline_name, notify_on_success=int(on_success)
    ).with_id(EXIT_HANDLER_ID)
