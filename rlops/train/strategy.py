"""Picking a `tf.distribute.Strategy` so users don't have to.

`get_strategy('auto')` looks at the machine and the environment, in this order:
  1. a TPU is configured (the `tpu` argument, the `TPU_NAME` environment variable, or TPU
     devices on this host)                                  -> TPUStrategy
  2. TF_CONFIG names more than one worker/chief             -> MultiWorkerMirroredStrategy
  3. more than one GPU                                      -> MirroredStrategy
  4. otherwise                                              -> the default strategy
Explicit names ('default', 'one_device', 'mirrored', 'multi_worker', 'tpu') skip the detection.

Detection never initializes the TensorFlow runtime (only physical devices are listed), because
MultiWorkerMirroredStrategy and logical-device configuration must come first in a process.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf

log = logging.getLogger(__name__)

STRATEGY_NAMES = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu")

__all__ = [
    "STRATEGY_NAMES",
    "get_strategy",
    "tpu_strategy",
    "is_chief",
    "task_info",
    "cluster_workers",
    "tpu_address_from_env",
]


def tpu_address_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The TPU name/address Cloud TPU tooling exports (TPU_NAME), if any."""
    environ = os.environ if environ is None else environ
    return environ.get("TPU_NAME") or None


def cluster_workers(tf_config: str | Mapping | None = None) -> int:
    """Number of chief + worker tasks in TF_CONFIG (0 when unset). Raises on parameter servers,
    which need ParameterServerStrategy and a different training loop."""
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG", "")
    if not tf_config:
        return 0
    try:
        config = json.loads(tf_config) if isinstance(tf_config, str) else dict(tf_config)
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
    cluster = config.get("cluster", {})
    if cluster.get("ps"):
        raise ValueError(
            "TF_CONFIG has 'ps' tasks: parameter-server training is not supported by the "
            "Learner; use 'chief'/'worker' tasks (MultiWorkerMirroredStrategy)."
        )
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def tpu_strategy(tpu: str = "", resolver_fn: Callable[..., Any] | None = None) -> tf.distribute.Strategy:
    """TPUStrategy through the cluster-resolver path: resolve -> connect -> initialize -> strategy.

    `tpu` is a TPU name, a 'grpc://host:port' address, or 'local' (TPU VM). The TF calls are looked
    up at call time so tests can stand in for the parts that need real TPU hardware.
    """
    resolver_fn = resolver_fn or tf.distribute.cluster_resolver.TPUClusterResolver
    resolver = resolver_fn(tpu=tpu)
    if tpu != "local":  # a TPU VM's own chips need no remote connection
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    log.info("TPUStrategy on %s with %d replicas", tpu or "<default>", strategy.num_replicas_in_sync)
    return strategy


def _local_tpu_present() -> bool:
    try:
        return bool(tf.config.list_physical_devices("TPU"))
    except Exception:  # noqa: BLE001 - a broken TPU runtime means: no TPU for us
        return False


def get_strategy(
    name: str | tf.distribute.Strategy | None = "auto",
    *,
    tpu: str | None = None,
    devices: Sequence[str] | None = None,
    communication: str = "auto",
) -> tf.distribute.Strategy:
    """Returns a strategy by name (see the module docstring); a Strategy instance passes through.

    Args:
      name: 'auto' (default), 'default', 'one_device', 'mirrored', 'multi_worker', 'tpu', a
        Strategy, or None (same as 'default').
      tpu: TPU name or address for 'tpu' (and for 'auto': configuring it means "use the TPU").
      devices: device list for 'mirrored' / 'one_device' (e.g. ['/cpu:0', '/cpu:1']).
      communication: collective implementation for 'multi_worker': 'auto', 'ring' or 'nccl'.
    """
    if isinstance(name, tf.distribute.Strategy):
        return name
    name = "default" if name is None else str(name).lower()
    if name not in STRATEGY_NAMES:
        raise ValueError(f"strategy={name!r} is not one of {STRATEGY_NAMES}")

    if name == "auto":
        name = _detect(tpu)
        log.info("strategy='auto' picked %r", name)

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0] if devices else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(devices) if devices else None)
    if name == "multi_worker":
        impl = {
            "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
            "ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        }
        if communication not in impl:
            raise ValueError(f"communication={communication!r} is not one of {tuple(impl)}")
        options = tf.distribute.experimental.CommunicationOptions(implementation=impl[communication])
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    # name == "tpu"
    return tpu_strategy(tpu if tpu is not None else (tpu_address_from_env() or ""))


def _detect(tpu: str | None) -> str:
    if tpu or tpu_address_from_env() or _local_tpu_present():
        return "tpu"
    if cluster_workers() > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def task_info(strategy: tf.distribute.Strategy | None = None) -> tuple[str | None, int | None]:
    """(task_type, task_id) of this process in a multi-worker cluster; (None, None) otherwise."""
    resolver = getattr(strategy, "cluster_resolver", None) if strategy is not None else None
    if resolver is not None and getattr(resolver, "task_type", None) is not None:
        return resolver.task_type, resolver.task_id
    config = json.loads(os.environ.get("TF_CONFIG", "") or "{}")
    task = config.get("task", {})
    if not task:
        return None, None
    return task.get("type"), int(task.get("index", 0))


def is_chief(strategy: tf.distribute.Strategy | None = None) -> bool:
    """True for the process that should write checkpoints, summaries and exports.

    That is: any single-process job; in a cluster, the 'chief' task, or worker 0 when the cluster
    has no chief. Non-chief workers still run saves (they may involve collectives) into
    throw-away directories.
    """
    if strategy is not None and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # Mirrored / TPU / default strategies run in one Python process (the TPU host is the chief).
        return True
    task_type, task_id = task_info(strategy)
    if task_type is None:
        return True
    if task_type == "chief":
        return True
    config = json.loads(os.environ.get("TF_CONFIG", "") or "{}")
    has_chief = bool(config.get("cluster", {}).get("chief"))
    return task_type == "worker" and task_id == 0 and not has_chief
