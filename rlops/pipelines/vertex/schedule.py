"""Scheduling compiled pipelines on Vertex AI Pipelines (PipelineJobSchedule), and managing the
schedules.

    schedule = create_schedule("pipeline.json", target, ScheduleSpec(cron="0 3 * * *", time_zone="Europe/Berlin"))
    list_schedules(target); pause_schedule(target, "123"); resume_schedule(target, "123"); delete_schedule(target, "123")

`target` is `rlops.pipelines.vertex.submit.resolve_target(...)`; bad input raises its SubmitError
naming the flag (cron, time zone, times, counts) before any request. Schedules always keep the
compiled per-task caching, and refuse a template whose ingestion is cached: a nightly run would
re-serve the first night's data.
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rlops.pipelines.vertex.patches import step_tasks
from rlops.pipelines.vertex.submit import (
    SubmitError,
    Target,
    build_pipeline_job,
    check_offline as check_run_offline,
    load_template,
)

INGESTION_TASKS = ("ExperienceGen",)
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,?-]+")


def cached_ingestion_tasks(job: dict) -> list[str]:
    """Ingestion steps the template serves from cache, wherever they sit: in the root DAG, or in
    the exit handler's group when the template notifies (notify_url)."""
    spec = job["pipelineSpec"]
    tasks = step_tasks(spec) if spec.get("root", {}).get("dag", {}).get("tasks") else {}
    return sorted(name for name in INGESTION_TASKS if tasks.get(name, {}).get("cachingOptions", {}).get("enableCache"))


@dataclass
class ScheduleSpec:
    cron: str  # five fields, e.g. "0 3 * * *" (03:00 every day)
    time_zone: str = "UTC"  # IANA name; the cron is read in this zone
    max_concurrent_runs: int = 1  # a nightly retrain should not overlap itself
    start_time: str | None = None  # ISO 8601; default: now
    end_time: str | None = None
    max_runs: int | None = None
    allow_queueing: bool = False  # queue a run that would exceed max_concurrent_runs
    display_name: str | None = None

    def cron_expression(self) -> str:
        """'TZ=<zone> <cron>', the form Vertex AI schedules take a time zone in."""
        cron = self.cron.strip()
        if cron.startswith(("TZ=", "CRON_TZ=")):
            raise SubmitError("--cron: give the time zone with --time-zone, not inside the cron expression")
        fields = cron.split()
        if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
            raise SubmitError(f"--cron: '{self.cron}' is not a 5-field cron expression (minute hour day month weekday)")
        try:
            zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise SubmitError(f"--time-zone: unknown IANA time zone '{self.time_zone}' (e.g. Europe/Berlin)") from None
        return f"TZ={self.time_zone} {' '.join(fields)}"

    def times(self) -> tuple[str | None, str | None]:
        """Start and end as RFC 3339 UTC; naive times are read in `time_zone`."""
        out: list[str | None] = []
        for flag, text in (("--start-time", self.start_time), ("--end-time", self.end_time)):
            if not text:
                out.append(None)
                continue
            try:
                moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise SubmitError(f"{flag}: '{text}' is not an ISO 8601 time (e.g. 2026-01-31T03:00)") from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=zoneinfo.ZoneInfo(self.time_zone))
            out.append(moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        start, end = out
        if start and end and end <= start:
            raise SubmitError(f"--end-time: {end} is not after --start-time {start}")
        return start, end

    def validate(self) -> None:
        self.cron_expression()
        self.times()
        if int(self.max_concurrent_runs) < 1:
            raise SubmitError(f"--max-concurrent-runs: must be >= 1, got {self.max_concurrent_runs}")
        if self.max_runs is not None and int(self.max_runs) < 1:
            raise SubmitError(f"--max-runs: must be >= 1, got {self.max_runs}")


def check_offline(
    template_path: str,
    spec: ScheduleSpec,
    parameter_values: Mapping[str, Any] | Sequence[str] | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
) -> None:
    """The schedule's flags that need no network (cron, time zone, times, counts, the template,
    each --param and --label): checked before the credentials."""
    spec.validate()
    check_run_offline(template_path, parameter_values, labels)


def create_schedule(
    template_path: str,
    target: Target,
    spec: ScheduleSpec,
    parameter_values: Mapping[str, Any] | Sequence[str] | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
):
    """Creates a PipelineJobSchedule (one CreateSchedule request) running the template on `spec`."""
    from google.cloud import aiplatform

    spec.validate()
    job_dict = load_template(template_path)
    cached = cached_ingestion_tasks(job_dict)
    if cached:
        raise SubmitError(
            f"TEMPLATE: {', '.join(cached)} is served from cache in this pipeline, so every scheduled "
            "run would re-ingest the first run's data; recompile with caching."
            f"{cached[0]}=false (the default)"
        )
    job = build_pipeline_job(template_path, target, parameter_values, labels, enable_caching=None)
    if target.reserved_ip_ranges:  # the SDK's create() takes a network only; runs copy this job message
        job._gca_resource.reserved_ip_ranges = list(target.reserved_ip_ranges)
    start, end = spec.times()
    name = spec.display_name or f"{job_dict['pipelineSpec']['pipelineInfo']['name']}-schedule"
    schedule = aiplatform.PipelineJobSchedule(
        pipeline_job=job,
        display_name=name,
        credentials=target.credentials,
        project=target.project,
        location=target.region,
    )
    schedule.create(
        cron=spec.cron_expression(),
        start_time=start,
        end_time=end,
        allow_queueing=spec.allow_queueing,
        max_run_count=spec.max_runs,
        max_concurrent_run_count=int(spec.max_concurrent_runs),
        service_account=target.service_account,
        network=target.network,
    )
    return schedule


def schedule_resource_name(target: Target, schedule: str) -> str:
    """A schedule id ('123') or its full resource name -> the full resource name."""
    if not schedule:
        raise SubmitError("SCHEDULE: empty schedule id")
    if schedule.startswith("projects/"):
        if not re.fullmatch(r"projects/[^/]+/locations/[^/]+/schedules/[^/]+", schedule):
            raise SubmitError(f"SCHEDULE: '{schedule}' is not projects/P/locations/R/schedules/ID")
        return schedule
    if not re.fullmatch(r"[0-9A-Za-z_-]+", schedule):
        raise SubmitError(f"SCHEDULE: '{schedule}' is not a schedule id")
    return f"projects/{target.project}/locations/{target.region}/schedules/{schedule}"


def _schedule(target: Target, schedule: str):
    from google.cloud import aiplatform

    return aiplatform.PipelineJobSchedule.get(
        schedule_resource_name(target, schedule),
        project=target.project,
        location=target.region,
        credentials=target.credentials,
    )


def describe(schedule) -> dict:
    gca = schedule._gca_resource  # the API's Schedule message, as the SDK holds it
    return {
        "name": gca.name,
        "display_name": gca.display_name,
        "cron": gca.cron,
        "state": gca.state.name,
        "max_concurrent_run_count": gca.max_concurrent_run_count,
        "started_run_count": gca.started_run_count,
    }


def list_schedules(target: Target, filter: str | None = None) -> list[dict]:
    from google.cloud import aiplatform

    schedules = aiplatform.PipelineJobSchedule.list(
        filter=filter, project=target.project, location=target.region, credentials=target.credentials
    )
    return [describe(s) for s in schedules]


def pause_schedule(target: Target, schedule: str) -> dict:
    s = _schedule(target, schedule)
    s.pause()
    return describe(s)


def resume_schedule(target: Target, schedule: str) -> dict:
    s = _schedule(target, schedule)
    s.resume()
    return describe(s)


def delete_schedule(target: Target, schedule: str) -> str:
    s = _schedule(target, schedule)
    name = s.resource_name
    s.delete()
    return name
