"""The model layout every component shares: where a Model artifact keeps its policy, and how a
ModelBlessing says yes.

The Trainer writes the served policy SavedModel under `serving_dir(model_uri)`; the Evaluator loads
it from there and writes TFX's blessing convention (a `BLESSED` or `NOT_BLESSED` file in the
blessing's directory, and the `blessed` property); the Pusher (both faces) reads the verdict with
`is_blessed`, the one reading of that convention. A bandit blessing also says which serving epsilon
it certified (`SERVING_EPSILON_PROPERTY`), and the Pusher publishes the policy serving that one.
"""

from __future__ import annotations

import os
from typing import Any

SERVING_DIR = "Format-Serving"  # the policy SavedModel inside a Model artifact (TFX's Trainer name)
BLESSED_FILE, NOT_BLESSED_FILE = "BLESSED", "NOT_BLESSED"
BLESSED_PROPERTY = "blessed"  # TFX Evaluator's int property: 1 blessed, 0 not
# A bandit blessing's float property: the serving epsilon the Evaluator certified, which the
# Pusher publishes the policy serving (it may be above the one the Trainer exported).
SERVING_EPSILON_PROPERTY = "serving_epsilon"


def serving_dir(model_uri: str) -> str:
    """The policy SavedModel's directory inside the Model artifact at `model_uri`."""
    return os.path.join(model_uri, SERVING_DIR)


def is_blessed(blessing_uri: str, blessed: Any = None) -> bool:
    """The blessing's verdict: its `blessed` property when the artifact carries one (`blessed`,
    an int or a numeric string, as TFX and KFP metadata hold it), else TFX's BLESSED marker file in
    its directory."""
    if blessed is not None and blessed != "":
        return bool(int(blessed))
    import tensorflow as tf

    return bool(tf.io.gfile.exists(os.path.join(blessing_uri, BLESSED_FILE)))
