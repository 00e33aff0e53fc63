"""Submitting compiled pipelines to Vertex AI Pipelines (one PipelineJob per call).

    target = resolve_target(project="my-proj", region="us-central1", pipeline_root="gs://my-bucket/runs")
    job = submit_pipeline("pipeline.json", target, parameter_values={"train_steps": 5000})

Everything goes through the Vertex AI SDK (`aiplatform.PipelineJob(...).submit()`). Credentials
come from Application Default Credentials unless given. Everything that can be checked offline is
checked before the first request, and the errors name the flag: project, region, pipeline root
bucket, credentials, parameter names and types, labels. Schedules: `rlops.pipelines.vertex.schedule`.

Caching: `enable_caching=None` (the default) keeps the compiled per-task settings -- ingestion
never cached, training only on unchanged inputs; True/False overrides every task for one run.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import yaml

from rlops.pipelines.vertex.settings import VertexConfigError, check_network

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+")
_BUCKET_URI = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


class SubmitError(ValueError):
    """Raised before any request; the message starts with the flag or setting at fault."""


@dataclass
class Target:
    """Where runs go and who sends them."""

    project: str
    region: str
    credentials: Any
    pipeline_root: str | None = None
    service_account: str | None = None
    network: str | None = None  # VPC the run's pods peer with
    reserved_ip_ranges: tuple = ()  # named ranges on that network
    kms_key: str | None = None  # CMEK for the run's resources


def resolve_target(
    project: str | None = None,
    region: str | None = None,
    pipeline_root: str | None = None,
    service_account: str | None = None,
    credentials: Any = None,
    need_root: bool = True,
    environ: Mapping[str, str] | None = None,
    network: str | None = None,
    reserved_ip_ranges: Sequence[str] = (),
    kms_key: str | None = None,
) -> Target:
    """Flags, then the usual environment variables, then Application Default Credentials'
    project. Raises SubmitError naming what is missing or malformed -- before any request."""
    environ = os.environ if environ is None else environ
    project = project or environ.get("GOOGLE_CLOUD_PROJECT") or environ.get("CLOUDSDK_CORE_PROJECT")
    region = region or environ.get("GOOGLE_CLOUD_REGION") or environ.get("CLOUDSDK_COMPUTE_REGION")
    if not region:
        raise SubmitError("--region: no region; pass --region (e.g. us-central1) or set GOOGLE_CLOUD_REGION")
    if not _REGION.fullmatch(region):
        raise SubmitError(f"--region: '{region}' is not a Google Cloud region (e.g. us-central1)")
    if need_root:
        if not pipeline_root:
            raise SubmitError(
                "--pipeline-root: no pipeline root; Vertex AI writes run artifacts to a Cloud Storage "
                "bucket: pass --pipeline-root gs://BUCKET/PATH"
            )
        if not _BUCKET_URI.fullmatch(pipeline_root):
            raise SubmitError(f"--pipeline-root: expected gs://BUCKET/PATH, got '{pipeline_root}'")
    if service_account and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+", service_account):
        raise SubmitError(f"--service-account: '{service_account}' is not a service account email")
    try:
        check_network(network, list(reserved_ip_ranges or ()), kms_key, region, where="--")
    except VertexConfigError as e:
        raise SubmitError(
            str(e).replace("--reserved_ip_ranges", "--reserved-ip-range").replace("--kms_key", "--kms-key")
        ) from None
    if credentials is None:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, adc_project = google.auth.default(scopes=list(SCOPES))
        except DefaultCredentialsError as e:
            raise SubmitError(
                "credentials: no Application Default Credentials found; run `gcloud auth "
                "application-default login` or point GOOGLE_APPLICATION_CREDENTIALS at a service "
                f"account key ({e})"
            ) from None
        project = project or adc_project
    if not project:
        raise SubmitError("--project: no Google Cloud project; pass --project or set GOOGLE_CLOUD_PROJECT")
    if not _PROJECT.fullmatch(project):
        raise SubmitError(f"--project: '{project}' is not a project id (6-30 lowercase letters, digits, hyphens)")
    return Target(
        project=project,
        region=region,
        credentials=credentials,
        pipeline_root=pipeline_root,
        service_account=service_account,
        network=network,
        reserved_ip_ranges=tuple(reserved_ip_ranges or ()),
        kms_key=kms_key,
    )


# --- the template -------------------------------------------------------------------------------


def load_template(path: str) -> dict:
    """The compiled file as a PipelineJob dict ({"pipelineSpec": ..., "runtimeConfig": ...}),
    checked strictly against KFP's protos. Accepts `rlops compile` JSON and KFP-compiled YAML."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    if not os.path.exists(path):
        raise SubmitError(f"TEMPLATE: file not found: {path} (make one with `rlops compile`)")
    with open(path) as f:
        try:
            data = yaml.safe_load(f)  # YAML is a superset of JSON
        except yaml.YAMLError as e:
            raise SubmitError(f"TEMPLATE {path}: not JSON or YAML: {e}") from None
    if not isinstance(data, dict):
        raise SubmitError(f"TEMPLATE {path}: expected a PipelineJob or PipelineSpec mapping")
    job = data if "pipelineSpec" in data else {"pipelineSpec": data, "runtimeConfig": {}}
    try:
        json_format.ParseDict(job, pipeline_spec_pb2.PipelineJob())
        json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    except json_format.ParseError as e:
        raise SubmitError(f"TEMPLATE {path}: not a valid PipelineJob/PipelineSpec: {e}") from None
    return job


def declared_parameters(job: dict) -> dict[str, str]:
    """Runtime parameter name -> type (INT, DOUBLE, STRING, BOOLEAN, LIST, STRUCT)."""
    params = job["pipelineSpec"].get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    names = {"NUMBER_INTEGER": "INT", "NUMBER_DOUBLE": "DOUBLE"}
    out = {}
    for name, spec in params.items():
        kind = spec.get("parameterType") or spec.get("type") or "STRING"
        out[name] = names.get(kind, kind)
    return out


def _parse_value(name: str, kind: str, value: Any) -> Any:
    try:
        if kind == "INT":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "DOUBLE":
            return float(value)
        if kind == "BOOLEAN":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError
        if kind in ("LIST", "STRUCT"):
            parsed = json.loads(value) if isinstance(value, str) else value
            if not isinstance(parsed, list if kind == "LIST" else dict):
                raise ValueError
            return parsed
        return str(value)
    except (TypeError, ValueError):
        raise SubmitError(f"--param {name}: expected {kind.lower()}, got {value!r}") from None


def check_parameter_values(job: dict, values: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """Checks names against the pipeline's runtime parameters and converts each to its type.
    `values` is a mapping, or `name=value` strings (what --param collects)."""
    if not values:
        return {}
    if not isinstance(values, Mapping):
        pairs = {}
        for item in values:
            if "=" not in item:
                raise SubmitError(f"--param {item}: expected name=value")
            name, value = item.split("=", 1)
            pairs[name.strip()] = value
        values = pairs
    declared = declared_parameters(job)
    out = {}
    for name, value in values.items():
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise SubmitError(f"--param {name}: the pipeline has no runtime parameter '{name}'; it has: {known}")
        out[name] = _parse_value(name, declared[name], value)
    return out


def parse_labels(labels: Mapping[str, str] | Sequence[str] | None) -> dict[str, str]:
    """Vertex label rules: keys start with a lowercase letter; keys and values <= 63 characters
    of lowercase letters, digits, '_' and '-'."""
    if not labels:
        return {}
    if not isinstance(labels, Mapping):
        pairs = {}
        for item in labels:
            if "=" not in item:
                raise SubmitError(f"--label {item}: expected key=value")
            key, value = item.split("=", 1)
            pairs[key] = value
        labels = pairs
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(str(value)):
            raise SubmitError(
                f"--label {key}={value}: labels are lowercase letters, digits, '_' and '-' (keys "
                "start with a letter; at most 63 characters each)"
            )
    return dict(labels)


def _job_labels(job: dict, labels: Mapping[str, str]) -> dict[str, str]:
    compiled = {
        k: v for k, v in (job.get("labels") or {}).items() if _LABEL_KEY.fullmatch(k) and _LABEL_VALUE.fullmatch(str(v))
    }
    return {**compiled, **labels}


# --- jobs ---------------------------------------------------------------------------------------


def check_offline(
    template_path: str,
    parameter_values: Mapping[str, Any] | Sequence[str] | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
    job_id: str | None = None,
) -> None:
    """What a run's flags can get wrong without the network (the template, each --param, each
    --label, --job-id): checked before the credentials, so a typo is not hidden behind them."""
    check_parameter_values(load_template(template_path), parameter_values)
    parse_labels(labels)
    if job_id is not None and not re.fullmatch(r"[a-z][-a-z0-9]{0,127}", job_id):
        raise SubmitError(f"--job-id: '{job_id}' must be lowercase letters, digits and '-', starting with a letter")


def build_pipeline_job(
    template_path: str,
    target: Target,
    parameter_values: Mapping[str, Any] | Sequence[str] | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
    enable_caching: bool | None = None,
    display_name: str | None = None,
    job_id: str | None = None,
):
    """An `aiplatform.PipelineJob`, constructed offline (nothing is sent until `.submit()`)."""
    from google.cloud import aiplatform

    job = load_template(template_path)
    if not target.pipeline_root:
        raise SubmitError("--pipeline-root: no pipeline root; pass --pipeline-root gs://BUCKET/PATH")
    values = check_parameter_values(job, parameter_values)
    name = display_name or job.get("displayName") or job["pipelineSpec"]["pipelineInfo"]["name"]
    if job_id is not None and not re.fullmatch(r"[a-z][-a-z0-9]{0,127}", job_id):
        raise SubmitError(f"--job-id: '{job_id}' must be lowercase letters, digits and '-', starting with a letter")
    return aiplatform.PipelineJob(
        display_name=name,
        template_path=template_path,
        job_id=job_id,
        pipeline_root=target.pipeline_root,
        parameter_values=values,
        enable_caching=enable_caching,
        labels=_job_labels(job, parse_labels(labels)),
        credentials=target.credentials,
        project=target.project,
        location=target.region,
        encryption_spec_key_name=target.kms_key,
    )


def with_run_date(job: dict, values: dict[str, Any], today: datetime.date | None = None) -> dict[str, Any]:
    """A one-off run's data_date, fixed now when the template has one and nobody gave it:
    yesterday (UTC). Left empty, the step would read its container's clock, and a cached or
    retried step could ingest a different day than the run was started for. (Schedules keep it
    empty: every scheduled run must take its own day, and they refuse cached ingestion.)"""
    if "data_date" not in declared_parameters(job) or values.get("data_date"):
        return values
    default = job.get("runtimeConfig", {}).get("parameters", {}).get("data_date", {}).get("stringValue") or job.get(
        "runtimeConfig", {}
    ).get("parameterValues", {}).get("data_date")
    if default:
        return values
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    return {**values, "data_date": (today - datetime.timedelta(days=1)).isoformat()}


def submit_pipeline(
    template_path: str,
    target: Target,
    parameter_values: Mapping[str, Any] | Sequence[str] | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
    enable_caching: bool | None = None,
    display_name: str | None = None,
    job_id: str | None = None,
):
    """Creates the PipelineJob in Vertex AI (one CreatePipelineJob request); returns the job."""
    template = load_template(template_path)
    values = with_run_date(template, check_parameter_values(template, parameter_values))
    job = build_pipeline_job(template_path, target, values, labels, enable_caching, display_name, job_id)
    job.submit(
        service_account=target.service_account,
        network=target.network,
        reserved_ip_ranges=list(target.reserved_ip_ranges) or None,
    )
    return job
