"""Vertex AI settings: where and how each pipeline step runs (resources, a custom training job,
Dataflow, caching, private networking, notification), loaded from their own small YAML
(`--vertex-config`, `--vertex-set key=value`) apart from the pipeline config: one says what to
compute, the other where. Everything is checked on load; errors name the key.

    vertex = load_vertex_config(overrides=["image=us-docker.pkg.dev/my-proj/rlops/rlops:0.1.0"])
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rlops.components.json_config import ConfigValueError, build, closest
from rlops.components.kfp import DEFAULT_IMAGE
from rlops.pipelines.config import ConfigError, apply_override, read_yaml_mapping

# DEFAULT_IMAGE is the tag `docker build -t rlops:<version> .` gives (see the Dockerfile). Vertex
# pulls from a registry, so real runs pass --image REGION-docker.pkg.dev/PROJECT/REPO/rlops:<version>.
DATAFLOW_IMAGE_SUFFIX = "-dataflow"  # `docker build --target dataflow`: same image, Beam's boot entrypoint

STEPS = ("ExperienceGen", "Trainer", "Evaluator", "Pusher")
# vCPU and memory (GB) a step asks for when the config says nothing: Beam's DirectRunner and the
# Learner like a few cores; the Pusher only copies and verifies a SavedModel.
DEFAULT_STEP_RESOURCES = {"ExperienceGen": (4, 16), "Trainer": (8, 32), "Evaluator": (4, 16), "Pusher": (2, 8)}
LAUNCHER_RESOURCES = (2, 8)  # a step that only launches and watches a Dataflow / custom job
DEFAULT_CACHING = {"ExperienceGen": False, "Trainer": True, "Evaluator": True, "Pusher": False}

# Vertex AI machine types: (vCPU, memory GB, implied GPU type, implied GPU count).
MACHINE_TYPES: dict[str, tuple[int, float, str | None, int]] = {
    **{f"n1-standard-{n}": (n, 3.75 * n, None, 0) for n in (2, 4, 8, 16, 32, 64, 96)},
    **{f"n1-highmem-{n}": (n, 6.5 * n, None, 0) for n in (2, 4, 8, 16, 32, 64, 96)},
    **{f"n1-highcpu-{n}": (n, 0.9 * n, None, 0) for n in (16, 32, 64, 96)},
    **{f"e2-standard-{n}": (n, 4.0 * n, None, 0) for n in (2, 4, 8, 16, 32)},
    **{f"e2-highmem-{n}": (n, 8.0 * n, None, 0) for n in (2, 4, 8, 16)},
    **{f"a2-highgpu-{g}g": (12 * g, 85.0 * g, "NVIDIA_TESLA_A100", g) for g in (1, 2, 4, 8)},
    "a2-ultragpu-1g": (12, 170.0, "NVIDIA_A100_80GB", 1),
    "a2-ultragpu-8g": (96, 1360.0, "NVIDIA_A100_80GB", 8),
    **{f"g2-standard-{n}": (n, 4.0 * n, "NVIDIA_L4", 1) for n in (4, 8, 12, 16, 32)},
    "g2-standard-24": (24, 96.0, "NVIDIA_L4", 2),
    "g2-standard-48": (48, 192.0, "NVIDIA_L4", 4),
    "a3-highgpu-8g": (208, 1872.0, "NVIDIA_H100_80GB", 8),
}
GPU_TYPES = (
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_L4",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
)
GPU_COUNTS = (1, 2, 4, 8, 16)
# TPU VMs on Vertex training: cloud-tpu with TPU_V2/TPU_V3 x8, or v5e slices (machine type + topology).
TPU_TYPES = {
    "cloud-tpu": ("TPU_V2", "TPU_V3"),
    "ct5lp-hightpu-1t": ("TPU_V5_LITEPOD",),
    "ct5lp-hightpu-4t": ("TPU_V5_LITEPOD",),
    "ct5lp-hightpu-8t": ("TPU_V5_LITEPOD",),
}
TPU_IMAGE_SUFFIX = "-tpu"  # `docker build -f Dockerfile.tpu`: TensorFlow's TPU build + libtpu
_NETWORK = re.compile(r"projects/[^/\s]+/global/networks/[^/\s]+")
_KMS_KEY = re.compile(r"projects/[^/\s]+/locations/(?P<location>[^/\s]+)/keyRings/[^/\s]+/cryptoKeys/[^/\s]+")


def check_network(
    network: str | None,
    reserved_ip_ranges: Sequence[str] | None,
    kms_key: str | None,
    region: str | None,
    where: str = "",
) -> None:
    """VPC peering and CMEK settings as Vertex AI takes them; errors name the setting."""
    if network and not _NETWORK.fullmatch(network):
        raise VertexConfigError(
            f"{where}network: expected projects/PROJECT_NUMBER/global/networks/NAME, got {network!r}"
        )
    if reserved_ip_ranges:
        if not network:
            raise VertexConfigError(
                f"{where}reserved_ip_ranges: IP ranges are reserved on a peered network; set network too"
            )
        bad = [
            r
            for r in reserved_ip_ranges
            if not isinstance(r, str) or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", r)
        ]
        if bad:
            raise VertexConfigError(f"{where}reserved_ip_ranges: {bad[0]!r} is not the name of a reserved range")
    if kms_key:
        m = _KMS_KEY.fullmatch(kms_key)
        if not m:
            raise VertexConfigError(
                f"{where}kms_key: expected projects/P/locations/L/keyRings/R/cryptoKeys/K, got {kms_key!r}"
            )
        if region and m.group("location") != region:
            raise VertexConfigError(
                f"{where}kms_key: the key is in '{m.group('location')}'; Vertex AI needs a key in "
                f"the job's region '{region}'"
            )


class VertexConfigError(ConfigError):
    """A bad Vertex setting; the message starts with its key (e.g. `steps.Trainer.accelerator_count`)."""


def _from_dict(cls: type, d: Any, where: str) -> Any:
    """The one config loader (json_config.build): unknown keys with the closest names, wrong
    types, one error format; then the class's own checks."""
    try:
        return build(cls, d, where)
    except ConfigValueError as e:
        raise VertexConfigError(str(e)) from None


def _positive(value: Any, where: str, kind: type = float) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise VertexConfigError(f"{where}: expected a number, got {value!r}") from None
    if number <= 0:
        raise VertexConfigError(f"{where}: must be > 0, got {value!r}")
    return number


@dataclass
class StepResources:
    """What one pipeline step asks Vertex for: a machine type, or vCPU + memory; optional GPUs."""

    cpu: float | None = None
    memory_gb: float | None = None
    machine_type: str | None = None
    accelerator_type: str | None = None
    accelerator_count: int = 0

    def resolve(self, step: str, where: str) -> "StepResources":
        """Fills vCPU/memory (and a2/g2 machines' GPUs) in; checks GPU type and count."""
        cpu, memory, gpu, count = self.cpu, self.memory_gb, self.accelerator_type, int(self.accelerator_count or 0)
        if self.machine_type:
            if self.machine_type not in MACHINE_TYPES:
                raise VertexConfigError(
                    f"{where}.machine_type: unknown machine type '{self.machine_type}'; "
                    f"known: {', '.join(sorted(MACHINE_TYPES))}"
                )
            if cpu is not None or memory is not None:
                raise VertexConfigError(f"{where}: give machine_type or cpu/memory_gb, not both")
            cpu, memory, implied_gpu, implied_count = MACHINE_TYPES[self.machine_type]
            if implied_gpu:
                if gpu and gpu != implied_gpu:
                    raise VertexConfigError(
                        f"{where}.accelerator_type: {self.machine_type} comes with {implied_gpu}, not {gpu}"
                    )
                gpu, count = implied_gpu, count or implied_count
        default_cpu, default_memory = DEFAULT_STEP_RESOURCES.get(step, LAUNCHER_RESOURCES)
        cpu = _positive(cpu if cpu is not None else default_cpu, f"{where}.cpu")
        memory = _positive(memory if memory is not None else default_memory, f"{where}.memory_gb")
        if gpu or count:
            if gpu not in GPU_TYPES:
                tpu = " (TPUs run as a custom training job: set custom_job)" if gpu and gpu.startswith("TPU") else ""
                raise VertexConfigError(
                    f"{where}.accelerator_type: '{gpu}' is not a Vertex AI GPU type{tpu}; "
                    f"choose one of {', '.join(GPU_TYPES)}"
                )
            if count not in GPU_COUNTS:
                raise VertexConfigError(
                    f"{where}.accelerator_count: {count} {gpu}; Vertex AI attaches {', '.join(map(str, GPU_COUNTS))}"
                )
        return StepResources(
            cpu=cpu, memory_gb=memory, machine_type=self.machine_type, accelerator_type=gpu, accelerator_count=count
        )

    def to_proto(self):
        """KFP's ResourceSpec, what TFX's KubeflowV2DagRunner reads from `platform_config`."""
        from kfp.pipeline_spec import pipeline_spec_pb2

        spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(
            cpu_limit=float(self.cpu), memory_limit=float(self.memory_gb)
        )
        if self.accelerator_type:
            spec.accelerator.type = self.accelerator_type
            spec.accelerator.count = int(self.accelerator_count)
        return spec


@dataclass
class WorkerPool:
    """One worker pool of a Vertex AI custom job (pool 0 is the chief; more pools are workers)."""

    machine_type: str = "n1-standard-8"
    replica_count: int = 1
    accelerator_type: str | None = None
    accelerator_count: int = 0
    tpu_topology: str | None = None  # v5e slices, e.g. "2x2"
    boot_disk_gb: int = 100

    @property
    def is_tpu(self) -> bool:
        return bool(self.accelerator_type and self.accelerator_type.startswith("TPU"))

    def validate(self, where: str) -> None:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", self.machine_type or ""):
            raise VertexConfigError(f"{where}.machine_type: not a machine type: {self.machine_type!r}")
        _positive(self.replica_count, f"{where}.replica_count", int)
        if self.is_tpu:
            allowed = TPU_TYPES.get(self.machine_type)
            if not allowed or self.accelerator_type not in allowed:
                raise VertexConfigError(
                    f"{where}.machine_type: {self.accelerator_type} runs on "
                    f"{' or '.join(m for m, types in TPU_TYPES.items() if self.accelerator_type in types) or 'no known'}"
                    f" machines, not '{self.machine_type}'"
                )
            if self.machine_type.startswith("ct5lp") and not self.tpu_topology:
                raise VertexConfigError(f"{where}.tpu_topology: {self.machine_type} needs a topology, e.g. 2x2")
        elif self.machine_type in TPU_TYPES:
            raise VertexConfigError(
                f"{where}.accelerator_type: {self.machine_type} is a TPU machine; set "
                f"accelerator_type to one of {', '.join(TPU_TYPES[self.machine_type])}"
            )
        elif self.accelerator_type or self.accelerator_count:
            if self.accelerator_type not in GPU_TYPES:
                raise VertexConfigError(
                    f"{where}.accelerator_type: '{self.accelerator_type}' is not a Vertex AI "
                    f"accelerator; choose one of {', '.join(GPU_TYPES + ('TPU_V2', 'TPU_V3'))}"
                )
            if self.accelerator_count not in GPU_COUNTS:
                raise VertexConfigError(
                    f"{where}.accelerator_count: {self.accelerator_count}; Vertex AI attaches "
                    f"{', '.join(map(str, GPU_COUNTS))} GPUs"
                )
        if self.tpu_topology and not self.is_tpu:
            raise VertexConfigError(f"{where}.tpu_topology: only TPU pools have a topology")

    @property
    def devices(self) -> int:
        return max(1, int(self.accelerator_count or 0)) * int(self.replica_count)

    def to_spec(self, image: str) -> dict:
        """A CustomJob WorkerPoolSpec (snake_case, as Vertex's API takes it). The TFX training
        extension fills in container_spec.command (it runs the TFX Trainer executor)."""
        machine: dict[str, Any] = {"machine_type": self.machine_type}
        if self.accelerator_type:
            machine["accelerator_type"] = self.accelerator_type
            machine["accelerator_count"] = int(self.accelerator_count or (8 if self.machine_type == "cloud-tpu" else 0))
        if self.tpu_topology:
            machine["tpu_topology"] = self.tpu_topology
        container: dict[str, Any] = {"image_uri": image}
        if self.is_tpu:  # the Learner's 'auto' strategy picks TPUStrategy on the TPU VM's own chips
            container["env"] = [{"name": "TPU_NAME", "value": "local"}]
        return {
            "machine_spec": machine,
            "replica_count": int(self.replica_count),
            "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": int(self.boot_disk_gb)},
            "container_spec": container,
        }


@dataclass
class CustomJob:
    """Train in a Vertex AI custom job instead of on the pipeline step. More than one replica
    makes Vertex set TF_CONFIG (chief + workers), and the Learner's 'auto' strategy becomes
    MultiWorkerMirroredStrategy; several GPUs on one replica: MirroredStrategy; a TPU: TPUStrategy."""

    worker_pools: list = field(default_factory=lambda: [WorkerPool()])
    service_account: str | None = None
    tpu_image: str | None = None  # TPU pools' image; default <image>-tpu (Dockerfile.tpu)

    def __post_init__(self):
        self.worker_pools = [
            p if isinstance(p, WorkerPool) else _from_dict(WorkerPool, p, f"custom_job.worker_pools[{i}]")
            for i, p in enumerate(self.worker_pools or [])
        ]

    def validate(self) -> None:
        if not self.worker_pools:
            raise VertexConfigError("custom_job.worker_pools: at least one pool (the chief) is needed")
        for i, pool in enumerate(self.worker_pools):
            pool.validate(f"custom_job.worker_pools[{i}]")
        if self.worker_pools[0].replica_count != 1:
            raise VertexConfigError(
                "custom_job.worker_pools[0].replica_count: pool 0 is the chief and has exactly "
                "one replica; add a second pool for more workers"
            )
        if any(p.is_tpu for p in self.worker_pools) and len(self.worker_pools) > 1:
            raise VertexConfigError("custom_job.worker_pools: a TPU job is one pool (one TPU VM slice)")

    @property
    def strategy(self) -> str:
        """The strategy 'auto' will pick inside the job."""
        if any(p.is_tpu for p in self.worker_pools):
            return "tpu"
        if sum(p.replica_count for p in self.worker_pools) > 1:
            return "multi_worker"
        return "mirrored" if self.worker_pools[0].accelerator_count > 1 else "default"


@dataclass
class Dataflow:
    """ExperienceGen's Beam pipeline on Dataflow. Workers run the Dockerfile's `dataflow` target
    (rlops installed, Beam's boot entrypoint): `sdk_container_image`, default <image>-dataflow."""

    temp_location: str = ""
    machine_type: str = "n1-standard-4"
    max_num_workers: int = 10
    sdk_container_image: str | None = None
    service_account_email: str | None = None
    subnetwork: str | None = None  # regions/REGION/subnetworks/NAME (or its full URL)
    network: str | None = None  # default: the name of the Vertex network, when one is set
    use_public_ips: bool = True  # false: workers get internal IPs only (needs Private Google Access)
    kms_key: str | None = None  # default: the Vertex config's kms_key
    extra_args: list = field(default_factory=list)

    def beam_args(
        self, project: str, region: str, image: str, vpc_network: str | None = None, kms_key: str | None = None
    ) -> list[str]:
        if not str(self.temp_location).startswith("gs://"):
            raise VertexConfigError(
                f"dataflow.temp_location: Dataflow stages through Cloud Storage; "
                f"expected gs://BUCKET/PATH, got {self.temp_location!r}"
            )
        _positive(self.max_num_workers, "dataflow.max_num_workers", int)
        if not all(isinstance(a, str) and a.startswith("--") for a in self.extra_args):
            raise VertexConfigError(f"dataflow.extra_args: expected '--flag=value' strings, got {self.extra_args!r}")
        args = [
            "--runner=DataflowRunner",
            f"--project={project}",
            f"--region={region}",
            f"--temp_location={self.temp_location}",
            f"--machine_type={self.machine_type}",
            f"--max_num_workers={int(self.max_num_workers)}",
            f"--sdk_container_image={self.sdk_container_image or dataflow_image(image)}",
            "--experiments=use_runner_v2",
        ]
        if self.service_account_email:
            args.append(f"--service_account_email={self.service_account_email}")
        if self.subnetwork:
            args.append(f"--subnetwork={self.subnetwork}")
        network = self.network or (vpc_network.rsplit("/", 1)[-1] if vpc_network else None)
        if network:
            args.append(f"--network={network}")
        if not self.use_public_ips:
            args.append("--no_use_public_ips")
        key = self.kms_key or kms_key
        if key:
            check_network(None, None, key, region, "dataflow.")
            args.append(f"--dataflow_kms_key={key}")
        return args + list(self.extra_args)


@dataclass
class VertexConfig:
    image: str = DEFAULT_IMAGE
    project: str | None = None  # needed by custom_job and dataflow (compile time)
    region: str | None = None
    steps: dict = field(default_factory=dict)  # step id -> StepResources
    custom_job: CustomJob | None = None
    dataflow: Dataflow | None = None
    caching: dict = field(default_factory=lambda: dict(DEFAULT_CACHING))
    runtime_parameters: bool = True
    # Private networking and CMEK for the jobs a step starts (custom training job, Dataflow); the
    # pipeline run's own are `rlops submit|schedule create --network/--reserved-ip-range/--kms-key`.
    network: str | None = None  # projects/PROJECT_NUMBER/global/networks/NAME (VPC peering)
    reserved_ip_ranges: list = field(default_factory=list)
    kms_key: str | None = None  # projects/P/locations/REGION/keyRings/R/cryptoKeys/K
    # Failure notification: an exit handler POSTs a JSON note here when a run does not succeed
    # (rlops.pipelines.notify); notify_on_success reports every run.
    notify_url: str | None = None
    notify_on_success: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VertexConfig":
        d = copy.deepcopy(dict(d or {}))
        config = _from_dict(cls, d, "vertex")
        steps = config.steps or {}
        if not isinstance(steps, dict):
            raise VertexConfigError(f"steps: expected a mapping of step -> resources, got {steps!r}")
        unknown = sorted(set(steps) - set(STEPS))
        if unknown:
            raise VertexConfigError(f"steps.{unknown[0]}: unknown step; {closest(unknown[0], STEPS)}")
        config.steps = {
            s: v if isinstance(v, StepResources) else _from_dict(StepResources, v or {}, f"steps.{s}")
            for s, v in steps.items()
        }
        if config.custom_job is not None and not isinstance(config.custom_job, CustomJob):
            config.custom_job = _from_dict(CustomJob, config.custom_job, "custom_job")
        if config.dataflow is not None and not isinstance(config.dataflow, Dataflow):
            config.dataflow = _from_dict(Dataflow, config.dataflow, "dataflow")
        caching = {**DEFAULT_CACHING, **(config.caching or {})}
        unknown = sorted(set(caching) - set(STEPS))
        if unknown:
            raise VertexConfigError(f"caching.{unknown[0]}: unknown step; steps: {', '.join(STEPS)}")
        bad = [k for k, v in caching.items() if not isinstance(v, bool)]
        if bad:
            raise VertexConfigError(f"caching.{bad[0]}: expected true or false, got {caching[bad[0]]!r}")
        config.caching = caching
        if not config.image or any(c.isspace() for c in config.image):
            raise VertexConfigError(f"image: not an image reference: {config.image!r}")
        check_network(config.network, config.reserved_ip_ranges, config.kms_key, config.region)
        if config.notify_url is not None and not re.fullmatch(r"https?://\S+", str(config.notify_url)):
            raise VertexConfigError(f"notify_url: expected an http(s):// webhook URL, got {config.notify_url!r}")
        if not isinstance(config.notify_on_success, bool):
            raise VertexConfigError(f"notify_on_success: expected true or false, got {config.notify_on_success!r}")
        return config

    def step_resources(self, step: str) -> StepResources:
        """Resolved resources of `step` (a Dataflow/custom-job launcher step gets a small machine)."""
        given = self.steps.get(step, StepResources())
        launcher = (step == "ExperienceGen" and self.dataflow) or (step == "Trainer" and self.custom_job)
        if launcher:
            if given.accelerator_type or given.accelerator_count:
                raise VertexConfigError(
                    f"steps.{step}.accelerator_type: this step only launches a "
                    f"{'Dataflow job' if step == 'ExperienceGen' else 'custom job'}; "
                    "put accelerators in custom_job.worker_pools"
                )
            if given == StepResources():
                given = StepResources(cpu=LAUNCHER_RESOURCES[0], memory_gb=LAUNCHER_RESOURCES[1])
        return given.resolve(step, f"steps.{step}")


def variant_image(image: str, suffix: str, setting: str) -> str:
    """<repo>:<tag> -> <repo>:<tag><suffix> (another build of the same version). A digest pins one
    build; no other build can be derived from it, so the setting naming it must be given."""
    if "@" in image:
        raise VertexConfigError(
            f"{setting}: image '{image}' is pinned by digest, which names only that build; "
            f"give the {suffix.lstrip('-')} image explicitly (e.g. its own @sha256:... digest)"
        )
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:  # no tag (a ':' only in a registry port)
        return f"{image}:latest{suffix}"
    return f"{name}:{tag}{suffix}"


def dataflow_image(image: str) -> str:
    """<repo>:<tag> -> <repo>:<tag>-dataflow (the Dockerfile's `dataflow` target)."""
    return variant_image(image, DATAFLOW_IMAGE_SUFFIX, "dataflow.sdk_container_image")


def load_vertex_config(path: str | None = None, overrides: Sequence[str] = (), **values: Any) -> VertexConfig:
    """A Vertex YAML file, then `key=value` overrides, then explicit values (CLI flags; None skips)."""
    raw: dict = read_yaml_mapping(path, "--vertex-config", VertexConfigError) if path else {}
    for assignment in overrides:
        try:
            apply_override(raw, assignment)
        except ConfigError as e:
            raise VertexConfigError(str(e).replace("--set", "--vertex-set", 1)) from e
    raw.update({k: v for k, v in values.items() if v is not None})
    return VertexConfig.from_dict(raw)
