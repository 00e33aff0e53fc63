"""Runs a compiled Vertex AI PipelineJob here, task by task, the way Vertex AI Pipelines does.

    emulator = VertexEmulator(root="/tmp/vertex")
    run = emulator.run(job, parameter_values={"data_date": "2026-11-23"})   # job: `rlops compile` output
    run.state, run.tasks["Evaluator"].outputs["blessing"][0]["metadata"]

What is emulated (read from TFX 1.16's v2 compiler and container launcher, and kfp 2.5's executor):
- order: tasks run in dependency order (dependentTasks and the producers of their inputs);
  nested DAGs (kfp's dsl.If / dsl.ExitHandler groups) run as their own DAG; a task whose
  triggerPolicy condition is false is SKIPPED; after a failure the rest is CANCELLED, except the
  exit task of a dsl.ExitHandler, which always runs.
- containers: each task runs the exact command and args of its executor spec in a subprocess
  (`python` on PATH is this interpreter, standing in for the image's; warm by default: forked
  from an interpreter that has already imported TensorFlow, TFX, Beam and KFP, see
  rlops.testing.warm_python; `warm=False` or RLOPS_EMULATOR_WARM=0: a fresh one per step), with the placeholders
  Vertex fills: `{{$}}` is the ExecutorInput JSON, built as Vertex builds it -- output artifacts
  get a resource `name` (projects/N/locations/L/metadataStores/default/artifacts/ID) and a `uri`
  under the pipeline root (<root>/<project number>/<job id>/<task>_<task id>/<output key>),
  inputs carry their producer's recorded metadata, parameters come as `parameterValues` (and
  as typed `parameters` for schema 2.0.0 specs, which is what TFX's launcher reads).
- results: the executor's executor_output.json (artifact metadata, output parameter values) is
  recorded in an ML Metadata stand-in: artifacts with name, schema title, uri, metadata, state
  LIVE and creation order, per pipeline name (the pipeline's context).
- resolvers: `resolver` executors' artifact queries (`schema_title="tfx.ModelBlessing" AND
  state=LIVE AND metadata.blessed.number_value=1`, `name="{{$.inputs.artifacts['input']
  .metadata['current_model_id']}}"`) are evaluated against those records; the latest match wins;
  no match gives no artifact (an optional input left out downstream).
- importers: the artifact at `artifactUri` is recorded (reused when the uri is already known).

Cloud Storage is a local directory: every `gs://BUCKET/PATH` in the job and in the parameter
values reads and writes <root>/gcs/BUCKET/PATH (`local_path` maps one). Not emulated: caching
(every task runs), Vertex's own container (GPU/CPU limits are read, not enforced), ParallelFor.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rlops.testing.warm_python import DEFAULT_PRELOAD, WarmPythonServer, import_time_env, write_client_shim

PROJECT_NUMBER = "123456789012"
LOCATION = "us-central1"
TERMINAL = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELLED")
_PLACEHOLDER = re.compile(r"\{\{\$(?P<path>[^}]*)\}\}")


# What the rlops image's Dockerfile sets with ENV: TFX's own launcher (which steps without a
# system.Metrics output run) starts no rlops code before TFX, so the image's Keras mode matters.
IMAGE_ENV = {"TF_USE_LEGACY_KERAS": "0"}


# One warm interpreter per emulator process and import-time environment (warm_python): started
# with the first emulator that needs it, shared by the later ones, stopped when this process ends.
_WARM_SERVERS: dict[tuple, tuple[subprocess.Popen, str]] = {}


def _warm_server(env: Mapping[str, str]) -> str | None:
    """The socket of a warm-python server for `env`, started if need be; None if it cannot start
    (the emulator then runs every step cold)."""
    key = tuple(sorted(import_time_env(env).items()))
    known = _WARM_SERVERS.get(key)
    if known and known[0].poll() is None:
        return known[1]
    socket_path = os.path.join(tempfile.mkdtemp(prefix="rlops-warm-"), "python.sock")
    try:
        proc = WarmPythonServer.start(socket_path, DEFAULT_PRELOAD, env)
    except (OSError, RuntimeError) as e:
        print(f"vertex emulator: running steps cold ({e})", file=sys.stderr)
        return None
    _WARM_SERVERS[key] = (proc, socket_path)
    if len(_WARM_SERVERS) == 1:
        atexit.register(_stop_warm_servers)
    return socket_path


def _stop_warm_servers() -> None:
    for proc, socket_path in _WARM_SERVERS.values():
        proc.kill()
        proc.wait()
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)
    _WARM_SERVERS.clear()


class EmulatorError(RuntimeError):
    """The job uses something the emulator (or Vertex) cannot run; the message names the task."""


@dataclass
class TaskRun:
    name: str
    state: str = "PENDING"
    outputs: dict = field(default_factory=dict)  # output key -> [runtime artifact dicts]
    output_parameters: dict = field(default_factory=dict)  # output key -> value
    executor_input: dict | None = None
    argv: list = field(default_factory=list)  # the command line it ran
    log_path: str | None = None
    wall_s: float = 0.0
    error: str = ""


@dataclass
class PipelineRun:
    job_id: str
    state: str
    tasks: dict  # task path ('condition-1/pusher' inside a group) -> TaskRun
    wall_s: float

    def task(self, suffix: str) -> TaskRun:
        """The task whose name (or path) ends with `suffix`."""
        hits = [t for name, t in self.tasks.items() if name == suffix or name.endswith("/" + suffix)]
        if len(hits) != 1:
            raise KeyError(f"task '{suffix}': {len(hits)} matches among {sorted(self.tasks)}")
        return hits[0]

    def artifact(self, task: str, key: str) -> dict | None:
        found = self.task(task).outputs.get(key) or []
        return found[0] if found else None


def _hash_id(text: str) -> str:
    return str(int(hashlib.sha256(text.encode()).hexdigest(), 16) % (10**19))


def schema_title(artifact_type: Mapping[str, Any]) -> str:
    if "schemaTitle" in artifact_type:
        return artifact_type["schemaTitle"]
    import yaml

    return (yaml.safe_load(artifact_type.get("instanceSchema") or "") or {}).get("title", "system.Artifact")


def _typed_value(value: Any, kind: str) -> dict:
    """A schema 2.0.0 `Value` ({intValue|doubleValue|stringValue})."""
    if kind in ("INT", "NUMBER_INTEGER"):
        return {"intValue": str(int(value))}
    if kind in ("DOUBLE", "NUMBER_DOUBLE"):
        return {"doubleValue": float(value)}
    return {"stringValue": value if isinstance(value, str) else json.dumps(value)}


def _plain_value(value: Any) -> Any:
    """A runtimeValue constant / runtimeConfig parameter in either schema -> a Python value."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, v),) = value.items()
        if kind == "intValue":
            return int(v)
        if kind == "doubleValue":
            return float(v)
        if kind == "stringValue":
            return v
    return value


class MetadataStore:
    """The artifacts a Vertex AI metadata store would hold for these runs, persisted as JSON."""

    def __init__(self, path: str):
        self.path = path
        self.artifacts: list[dict] = []
        if os.path.exists(path):
            with open(path) as f:
                self.artifacts = json.load(f)

    def save(self) -> None:
        with open(self.path, "w") as f:
            json.dump(self.artifacts, f, indent=1)

    def record(self, pipeline: str, artifact: dict) -> dict:
        entry = {
            "name": artifact["name"],
            "pipeline": pipeline,
            "schema_title": schema_title(artifact["type"]),
            "uri": artifact.get("uri", ""),
            "metadata": artifact.get("metadata", {}),
            "state": "LIVE",
            "create_time": len(self.artifacts),
            "type": artifact["type"],
        }
        self.artifacts.append(entry)
        self.save()
        return entry

    def query(self, pipeline: str, clauses: list[tuple[str, str]]) -> list[dict]:
        """Artifacts of `pipeline` matching every (field, value) clause, newest first."""

        def matches(a: dict, key: str, value: str) -> bool:
            if key == "schema_title":
                return a["schema_title"] == value
            if key == "state":
                return a["state"] == value
            if key == "name":
                return a["name"] == value
            m = re.fullmatch(r"metadata\.(\w+)\.(number_value|string_value|bool_value)", key)
            if not m:
                raise EmulatorError(f"resolver filter: cannot evaluate '{key}'")
            got = a["metadata"].get(m.group(1))
            if m.group(2) == "number_value":
                return isinstance(got, (int, float)) and float(got) == float(value)
            if m.group(2) == "bool_value":
                return got is (value == "true")
            return got == value

        hits = [a for a in self.artifacts if a["pipeline"] == pipeline and all(matches(a, k, v) for k, v in clauses)]
        return sorted(hits, key=lambda a: -a["create_time"])


class VertexEmulator:
    """Executes compiled PipelineJobs (TFX KubeflowV2DagRunner JSON, or kfp 2.x pipeline YAML
    loaded as a dict) with Vertex AI's executor inputs, artifact names and resolver queries."""

    def __init__(
        self,
        root: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 900,
        on_state: Callable[[str, str], None] | None = None,
        warm: bool | None = None,
    ):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.store = MetadataStore(os.path.join(self.root, "metadata.json"))
        self.timeout_s = timeout_s
        self.on_state = on_state or (lambda task, state: None)
        self._bin = os.path.join(self.root, "bin")  # `python` / `python3` as the image would have them
        os.makedirs(self._bin, exist_ok=True)
        self.env = {
            **os.environ,
            **IMAGE_ENV,
            **(env or {}),
            "PATH": self._bin + os.pathsep + os.environ.get("PATH", ""),
        }
        if warm is None:
            warm = os.environ.get("RLOPS_EMULATOR_WARM", "1") != "0"
        socket_path = _warm_server(self.env) if warm else None
        # Which steps ran warm, and why any did not (one line per `python` started): warm_python.
        self.warm_log_path = socket_path + ".log" if socket_path else None
        for name in ("python", "python3"):  # scripts, not symlinks: a virtualenv's python finds its
            path = os.path.join(self._bin, name)  # packages from its own path
            if socket_path:
                write_client_shim(path, socket_path)
            else:
                with open(path, "w") as f:
                    f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
                os.chmod(path, 0o755)
        self._runs = len([d for d in os.listdir(self.root) if d.startswith("logs-")])

    # --- Cloud Storage -----------------------------------------------------------------------
    def local_path(self, uri: str) -> str:
        return uri.replace("gs://", os.path.join(self.root, "gcs") + "/", 1) if uri.startswith("gs://") else uri

    def _localize(self, obj: Any) -> Any:
        return json.loads(json.dumps(obj).replace("gs://", os.path.join(self.root, "gcs") + "/"))

    # --- runs ---------------------------------------------------------------------------------
    def run(
        self,
        job: Mapping[str, Any],
        parameter_values: Mapping[str, Any] | None = None,
        pipeline_root: str | None = None,
        job_id: str | None = None,
        schedule_time: str | None = None,
    ) -> PipelineRun:
        """Runs `job` to the end. schedule_time (RFC 3339, e.g. 2026-11-24T02:00:00Z): what a
        schedule's run sees as {{$.pipeline_job_schedule_time_utc}} (default: now, as for a run
        created by hand, whose create time Vertex fills in)."""
        job = self._localize(dict(job))
        spec = job.get("pipelineSpec", job)
        runtime = job.get("runtimeConfig", {})
        root = (
            self._localize(pipeline_root)
            if pipeline_root
            else runtime.get("gcsOutputDirectory") or spec.get("defaultPipelineRoot")
        )
        if not root:
            raise EmulatorError("pipeline root: the job has no runtimeConfig.gcsOutputDirectory; pass pipeline_root")
        self._runs += 1
        name = spec["pipelineInfo"]["name"]
        job_id = job_id or f"{name}-{time.strftime('%Y%m%d%H%M%S')}-{self._runs}"
        params = self._pipeline_parameters(spec, runtime, self._localize(dict(parameter_values or {})))
        ctx = {
            "spec": spec,
            "root": root,
            "job_id": job_id,
            "pipeline": name,
            "schema": spec.get("schemaVersion", "2.1.0"),
            "logs": os.path.join(self.root, f"logs-{job_id}"),
            "tasks": {},
            "time": schedule_time or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.makedirs(ctx["logs"], exist_ok=True)
        start = time.time()
        ok = self._run_dag(ctx, spec["root"], "", params, {})
        return PipelineRun(
            job_id=job_id, state="SUCCEEDED" if ok else "FAILED", tasks=ctx["tasks"], wall_s=time.time() - start
        )

    def _pipeline_parameters(self, spec: dict, runtime: dict, given: dict) -> dict:
        defined = spec["root"].get("inputDefinitions", {}).get("parameters", {})
        values = {k: d["defaultValue"] for k, d in defined.items() if "defaultValue" in d}
        values.update({k: _plain_value(v) for k, v in runtime.get("parameters", {}).items()})
        values.update(runtime.get("parameterValues", {}))
        unknown = sorted(set(given) - set(defined))
        if unknown:
            raise EmulatorError(
                f"parameter '{unknown[0]}': not a pipeline parameter; known: {', '.join(sorted(defined))}"
            )
        values.update(given)
        missing = sorted(k for k, d in defined.items() if k not in values and not d.get("isOptional"))
        if missing:
            raise EmulatorError(f"parameter '{missing[0]}': required and not given")
        return values

    @staticmethod
    def _order(tasks: dict) -> list[str]:
        deps = {}
        for name, task in tasks.items():
            wanted = set(task.get("dependentTasks", []))
            for kind in ("artifacts", "parameters"):
                for spec in task.get("inputs", {}).get(kind, {}).values():
                    producer = (spec.get("taskOutputArtifact") or spec.get("taskOutputParameter") or {}).get(
                        "producerTask"
                    )
                    if producer:
                        wanted.add(producer)
            deps[name] = wanted & set(tasks)
        order: list[str] = []
        done: set[str] = set()
        while len(order) < len(tasks):
            ready = sorted(n for n in tasks if n not in done and deps[n] <= done)
            if not ready:
                raise EmulatorError(f"tasks {sorted(set(tasks) - done)}: dependency cycle")
            order.append(ready[0])
            done.add(ready[0])
        return order

    def _run_dag(self, ctx: dict, component: dict, prefix: str, params: dict, artifacts: dict) -> bool:
        """Runs one DAG (the root or a group) with its inputs; True when nothing failed."""
        dag = component["dag"]
        tasks = dag["tasks"]
        runs: dict[str, TaskRun] = {}
        failed = False
        for name in self._order(tasks):
            task = tasks[name]
            path = f"{prefix}{name}"
            run = ctx["tasks"][path] = runs[name] = TaskRun(path)
            always = task.get("triggerPolicy", {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED"
            if failed and not always:
                self._set(run, "CANCELLED")
                continue
            try:
                in_params, in_artifacts = self._task_inputs(ctx, task, params, artifacts, runs, path)
                condition = task.get("triggerPolicy", {}).get("condition")
                if condition and not self._condition(condition, in_params):
                    self._set(run, "SKIPPED")
                    continue
                if any(runs[d].state == "SKIPPED" for d in task.get("dependentTasks", []) if d in runs) and not always:
                    self._set(run, "SKIPPED")
                    continue
                self._set(run, "RUNNING")
                child = ctx["spec"]["components"][task["componentRef"]["name"]]
                if "dag" in child:
                    ok = self._run_dag(ctx, child, path + "/", in_params, in_artifacts)
                    run.outputs = self._dag_outputs(child, runs, ctx, path + "/")
                else:
                    ok = self._run_executor(ctx, task, child, run, in_params, in_artifacts)
                self._set(run, "SUCCEEDED" if ok else "FAILED")
            except EmulatorError:
                raise
            except Exception as e:  # a task's failure, not the emulator's
                run.error = f"{type(e).__name__}: {e}"
                self._set(run, "FAILED")
            failed = failed or run.state == "FAILED"
        return not failed

    def _dag_outputs(self, component: dict, runs: dict, ctx: dict, prefix: str) -> dict:
        out = {}
        for key, sel in component["dag"].get("outputs", {}).get("artifacts", {}).items():
            for s in sel.get("artifactSelectors", []):
                run = ctx["tasks"].get(prefix + s["producerSubtask"])
                if run and run.outputs.get(s["outputArtifactKey"]):
                    out[key] = run.outputs[s["outputArtifactKey"]]
        return out

    def _set(self, run: TaskRun, state: str) -> None:
        run.state = state
        self.on_state(run.name, state)

    def _task_inputs(
        self, ctx: dict, task: dict, params: dict, artifacts: dict, runs: dict, path: str
    ) -> tuple[dict, dict]:
        in_params, in_artifacts = {}, {}
        for key, spec in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in spec:
                rv = spec["runtimeValue"]
                in_params[key] = _plain_value(rv["constantValue"]) if "constantValue" in rv else rv.get("constant")
            elif "componentInputParameter" in spec:
                if spec["componentInputParameter"] in params:
                    in_params[key] = params[spec["componentInputParameter"]]
            elif "taskFinalStatus" in spec:  # an exit task: how the group it guards ended
                producer = runs[spec["taskFinalStatus"]["producerTask"]]
                failed = [t for t in ctx["tasks"].values() if t.state == "FAILED" and t.error]
                in_params[key] = {
                    "state": "SUCCEEDED" if producer.state == "SUCCEEDED" else "FAILED",
                    "pipelineJobResourceName": f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/"
                    f"pipelineJobs/{ctx['job_id']}",
                    "pipelineTaskName": producer.name,
                    "error": {"code": 9, "message": f"task {failed[0].name} failed"}
                    if failed and producer.state != "SUCCEEDED"
                    else {},
                }
            elif "taskOutputParameter" in spec:
                src = spec["taskOutputParameter"]
                producer = runs[src["producerTask"]]
                if src["outputParameterKey"] in producer.output_parameters:
                    in_params[key] = producer.output_parameters[src["outputParameterKey"]]
            else:
                raise EmulatorError(f"{path}: input parameter '{key}': cannot resolve {spec}")
        for key, spec in task.get("inputs", {}).get("artifacts", {}).items():
            if "taskOutputArtifact" in spec:
                src = spec["taskOutputArtifact"]
                found = runs[src["producerTask"]].outputs.get(src["outputArtifactKey"]) or []
            elif "componentInputArtifact" in spec:
                found = artifacts.get(spec["componentInputArtifact"]) or []
            else:
                raise EmulatorError(f"{path}: input artifact '{key}': cannot resolve {spec}")
            if found:
                in_artifacts[key] = found
        for key, value in in_params.items():  # job-level placeholders Vertex fills into parameter values
            if isinstance(value, str) and "{{$.pipeline_job" in value:
                in_params[key] = (
                    value.replace("{{$.pipeline_job_schedule_time_utc}}", ctx["time"])
                    .replace("{{$.pipeline_job_create_time_utc}}", ctx["time"])
                    .replace("{{$.pipeline_job_name}}", ctx["job_id"])
                )
        return in_params, in_artifacts

    @staticmethod
    def _condition(expression: str, values: dict) -> bool:
        """A kfp trigger condition (CEL: inputs.parameter_values['x'] == true, &&, ||, !)."""
        text = re.sub(r"inputs\.parameter_values\['([^']+)'\]", lambda m: repr(values.get(m.group(1))), expression)
        text = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", text))
        text = text.replace("&&", " and ").replace("||", " or ").replace("!=", "<>").replace("!", " not ")
        text = text.replace("<>", "!=")
        return bool(eval(text, {"__builtins__": {}, "int": int, "float": float, "str": str}))  # noqa: S307

    # --- executors ----------------------------------------------------------------------------
    def _run_executor(
        self, ctx: dict, task: dict, component: dict, run: TaskRun, params: dict, artifacts: dict
    ) -> bool:
        executor = ctx["spec"]["deploymentSpec"]["executors"][component["executorLabel"]]
        if "resolver" in executor:
            return self._resolve(ctx, executor["resolver"], component, run, artifacts)
        if "importer" in executor:
            return self._import(ctx, executor["importer"], component, run, params)
        if "container" not in executor:
            raise EmulatorError(f"{run.name}: executor kind {sorted(executor)} is not emulated")
        task_dir = os.path.join(
            ctx["root"],
            PROJECT_NUMBER,
            ctx["job_id"],
            f"{task['taskInfo']['name']}_{_hash_id(ctx['job_id'] + run.name)[:10]}",
        )
        executor_input = self._executor_input(ctx, component, task_dir, run, params, artifacts)
        run.executor_input = executor_input
        c = executor["container"]
        argv = run.argv = [
            self._fill(a, executor_input, ctx, run) for a in list(c.get("command", [])) + list(c.get("args", []))
        ]
        run.log_path = os.path.join(ctx["logs"], run.name.replace("/", "__") + ".log")
        start = time.time()
        with open(run.log_path, "w") as log:
            proc = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.root, timeout=self.timeout_s
            )
        run.wall_s = time.time() - start
        if proc.returncode != 0:
            with open(run.log_path) as f:
                run.error = f.read()[-3000:]
            return False
        self._collect(ctx, run, executor_input)
        return True

    def _executor_input(
        self, ctx: dict, component: dict, task_dir: str, run: TaskRun, params: dict, artifacts: dict
    ) -> dict:
        defs = component.get("inputDefinitions", {})
        legacy = ctx["schema"].startswith("2.0")
        # Protobuf Values hold doubles; Vertex's JSON writes integral ones as integers (10, not 10.0).
        inputs: dict[str, Any] = {
            "parameterValues": {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in params.items()}
        }
        if legacy:  # what TFX's launcher reads when no inputs spec is passed
            inputs["parameters"] = {
                k: _typed_value(v, defs.get("parameters", {}).get(k, {}).get("type", "STRING"))
                for k, v in params.items()
            }
        inputs["artifacts"] = {k: {"artifacts": [self._runtime_artifact(a) for a in v]} for k, v in artifacts.items()}
        outputs: dict[str, Any] = {
            "artifacts": {},
            "parameters": {},
            "outputFile": os.path.join(task_dir, "executor_output.json"),
        }
        for key, d in component.get("outputDefinitions", {}).get("artifacts", {}).items():
            artifact_id = _hash_id(f"{ctx['job_id']}/{run.name}/{key}")
            outputs["artifacts"][key] = {
                "artifacts": [
                    {
                        "name": f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/metadataStores/default/artifacts/{artifact_id}",
                        "type": d["artifactType"],
                        "uri": os.path.join(task_dir, key),
                        "metadata": {},
                    }
                ]
            }
        for key in component.get("outputDefinitions", {}).get("parameters", {}):
            outputs["parameters"][key] = {"outputFile": os.path.join(task_dir, "parameters", key)}
        return {"inputs": inputs, "outputs": outputs}

    @staticmethod
    def _runtime_artifact(a: dict) -> dict:
        return {k: a[k] for k in ("name", "type", "uri", "metadata") if k in a}

    def _fill(self, arg: str, executor_input: dict, ctx: dict, run: TaskRun) -> str:
        def value(m: re.Match) -> str:
            p = m.group("path")
            if p == "":
                return json.dumps(executor_input)
            if p == ".pipeline_job_name":
                return ctx["job_id"]
            if p in (".pipeline_job_schedule_time_utc", ".pipeline_job_create_time_utc"):
                return ctx["time"]
            if p == ".pipeline_task_name":
                return run.name
            m2 = re.fullmatch(r"\.(inputs|outputs)\.(parameters|artifacts)\['([^']+)'\](?:\.(\w+))?", p)
            if not m2:
                raise EmulatorError(f"{run.name}: placeholder '{m.group(0)}' is not emulated")
            side, kind, key, attr = m2.groups()
            if kind == "parameters" and side == "inputs":
                v = executor_input["inputs"]["parameterValues"].get(key, "")
                return v if isinstance(v, str) else json.dumps(v)
            if kind == "parameters":
                return executor_input["outputs"]["parameters"][key]["outputFile"]
            arts = executor_input[side]["artifacts"].get(key, {}).get("artifacts", [])
            return arts[0].get(attr or "uri", "") if arts else ""

        return _PLACEHOLDER.sub(value, arg)

    def _collect(self, ctx: dict, run: TaskRun, executor_input: dict) -> None:
        """executor_output.json (when written) over the declared outputs -> records."""
        path = executor_input["outputs"]["outputFile"]
        output = {}
        if os.path.exists(path):
            with open(path) as f:
                output = json.load(f)
        for key, listed in executor_input["outputs"]["artifacts"].items():
            declared = listed["artifacts"][0]
            written = (output.get("artifacts", {}).get(key, {}).get("artifacts") or [{}])[0]
            artifact = {
                **declared,
                "uri": written.get("uri") or declared["uri"],
                "metadata": {**declared.get("metadata", {}), **written.get("metadata", {})},
            }
            run.outputs[key] = [self.store.record(ctx["pipeline"], artifact)]
        for key, spec in executor_input["outputs"]["parameters"].items():
            if key in output.get("parameterValues", {}):
                run.output_parameters[key] = output["parameterValues"][key]
            elif key in output.get("parameters", {}):
                run.output_parameters[key] = _plain_value(output["parameters"][key])
            elif os.path.exists(spec["outputFile"]):
                with open(spec["outputFile"]) as f:
                    text = f.read()
                try:
                    run.output_parameters[key] = json.loads(text)
                except ValueError:
                    run.output_parameters[key] = text

    def _resolve(self, ctx: dict, resolver: dict, component: dict, run: TaskRun, artifacts: dict) -> bool:
        for key, query in resolver.get("outputArtifactQueries", {}).items():
            text = _PLACEHOLDER.sub(lambda m: self._metadata_placeholder(m, artifacts, run), query["filter"])
            clauses = []
            for clause in re.split(r"\s+AND\s+", text.strip()):
                m = re.fullmatch(r'([\w.]+)\s*=\s*"?(.*?)"?', clause.strip())
                if not m:
                    raise EmulatorError(f"{run.name}: resolver filter clause '{clause}' is not emulated")
                clauses.append((m.group(1), m.group(2)))
            unresolved = any(v == _UNRESOLVED for _, v in clauses)
            hits = [] if unresolved else self.store.query(ctx["pipeline"], clauses)
            run.outputs[key] = (
                [dict(hits[0], type=component["outputDefinitions"]["artifacts"][key]["artifactType"])] if hits else []
            )
        return True

    @staticmethod
    def _metadata_placeholder(m: re.Match, artifacts: dict, run: TaskRun) -> str:
        p = re.fullmatch(r"\.inputs\.artifacts\['([^']+)'\]\.metadata\['([^']+)'\]", m.group("path"))
        if not p:
            raise EmulatorError(f"{run.name}: resolver placeholder '{m.group(0)}' is not emulated")
        found = artifacts.get(p.group(1))
        if not found:
            return _UNRESOLVED  # no input artifact: the query resolves nothing
        value = found[0]["metadata"].get(p.group(2), "")
        return value if isinstance(value, str) else json.dumps(value)

    def _import(self, ctx: dict, importer: dict, component: dict, run: TaskRun, params: dict) -> bool:
        uri_spec = importer["artifactUri"]
        uri = (
            _plain_value(uri_spec["constantValue"])
            if "constantValue" in uri_spec
            else (uri_spec.get("constant") or params.get(uri_spec.get("runtimeParameter", ""), ""))
        )
        uri = self._localize(uri)
        key = next(iter(component["outputDefinitions"]["artifacts"]))
        known = [a for a in self.store.artifacts if a["uri"] == uri and not importer.get("reimport")]
        if known:
            artifact = known[-1]
        else:
            name = f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/metadataStores/default/artifacts/{_hash_id(uri)}"
            artifact = self.store.record(
                ctx["pipeline"],
                {"name": name, "type": importer["typeSchema"], "uri": uri, "metadata": importer.get("metadata", {})},
            )
        run.outputs[key] = [artifact]
        return True


_UNRESOLVED = "\x00unresolved"
