"""Process set-up for rlops' entry points (the CLI, container entry points): the Keras mode, the
start-up quiet and the cycle collector's thresholds are set there, never on `import rlops` (a
library does not change its host's environment, warning filters or collector).

Keras mode, chosen deliberately: rlops builds no tf.keras models (networks are tf.Modules,
optimizers come from tf_keras), but TensorFlow Probability 0.24 -- the newest that supports
TF 2.16 -- only imports in Keras 3 mode, while tensorflow_transform (pulled in by TFX) flips
TensorFlow to legacy Keras 2 unless TF_USE_LEGACY_KERAS is already set. Setting it before TFX
is imported keeps TFP importable in pipeline processes. The Dockerfiles set the same.

Filtered: google-api-core's FutureWarnings that Python 3.10 is unsupported, past its end of
life or soon unsupported (one per Google client library imported: api_core, bigquery,
bigquery_storage, pubsub, aiplatform; rlops' pipelines layer stays on Python 3.10 because TFX
1.16 requires it), and TensorFlow
Transform's absl warning that TF_USE_LEGACY_KERAS=0 is set (rlops sets it on purpose, see
above, and uses no tf.Transform Keras code).
"""

from __future__ import annotations

import gc
import logging
import os
import warnings

_ABSL_NOISE = ("TF_USE_LEGACY_KERAS is set to 0",)


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(s in msg for s in _ABSL_NOISE)


def entry_point_setup() -> None:
    """What every process rlops starts does first, before TensorFlow or TFX is imported."""
    use_keras3()
    quiet_startup()
    collect_cycles_less_often()


# Young-generation collections every this many container allocations (CPython's default: 700).
GC_THRESHOLD = 50_000


def collect_cycles_less_often() -> None:
    """Raise CPython's cycle-collector thresholds. Building and loading TensorFlow graphs
    allocates millions of short-lived Python objects, and at the default thresholds the
    collector runs thousands of times in one Trainer or test process, walking the young and
    older generations each time (seconds of a pipeline run; docs/benchmarks.md, "Local bandit
    pipeline"). Reference counting still frees acyclic garbage at once; only cycles wait."""
    young, older, oldest = gc.get_threshold()
    if young:  # 0: the host turned the collector off; leave it so
        gc.set_threshold(max(young, GC_THRESHOLD), max(older, 20), max(oldest, 20))


def use_keras3() -> None:
    """Keras 3 mode for this process (and the processes it starts), unless the user chose one."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")


def quiet_startup() -> None:
    """Install the filters; call before the noisy libraries are imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up lines
    # google-api-core's three wordings: unsupported, past end of life, will stop supporting
    warnings.filterwarnings(
        "ignore", message=r"You are using a (non-supported )?Python version", category=FutureWarning
    )
    logger = logging.getLogger("absl")
    if not any(isinstance(f, _DropNoise) for f in logger.filters):
        logger.addFilter(_DropNoise())
