"""Start-up quiet for rlops' entry points (the CLI, container entry points): library warnings
the user cannot act on are filtered there, not on `import rlops` (a library should not change
its host's warning filters).

Filtered: google-api-core's FutureWarnings that Python 3.10 will lose support (one per Google
client library imported: api_core, bigquery, bigquery_storage, pubsub), and TensorFlow
Transform's absl warning that TF_USE_LEGACY_KERAS=0 is set (rlops sets it on purpose, see
rlops/__init__.py, and uses no tf.Transform Keras code).
"""
from __future__ import annotations

import logging
import os
import warnings

_ABSL_NOISE = ("TF_USE_LEGACY_KERAS is set to 0",)


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(s in msg for s in _ABSL_NOISE)


def quiet_startup() -> None:
    """Install the filters; call before the noisy libraries are imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up lines
    warnings.filterwarnings("ignore", message=r"You are using a non-supported Python version",
                            category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*Python version .* past its end of life", category=FutureWarning)
    logger = logging.getLogger("absl")
    if not any(isinstance(f, _DropNoise) for f in logger.filters):
        logger.addFilter(_DropNoise())
