"""The Pusher publishes what the Evaluator certified: a bandit blessing names the serving epsilon
it certified (common.model.SERVING_EPSILON_PROPERTY), which may be above the one the Trainer
exported (evaluator.serving_epsilons). The policy is then published from a local copy serving that
epsilon (rlops.train.serving_epsilon: one value of its variables changed), so the staged copy the
verifier's draw checks run on, the LiteRT twin converted from it and the version servers load all
explore at exactly the certified rate."""

from __future__ import annotations

import logging
import os
from typing import Any

from rlops.components.pusher.storage import open_store

log = logging.getLogger(__name__)

# The exported epsilon is a float32 (0.1 reads back as 0.10000000149): within this it is the same.
SAME_EPSILON = 1e-6


def certified_epsilon(blessing: Any) -> float | None:
    """The serving epsilon a blessing's properties certify (None: none named, e.g. PPO)."""
    from rlops.components.common.model import SERVING_EPSILON_PROPERTY

    value = blessing.get(SERVING_EPSILON_PROPERTY) if blessing else None
    if value is None or value == "":
        return None
    epsilon = float(value)
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"model_blessing.{SERVING_EPSILON_PROPERTY} must be in [0, 1], got {value!r}")
    return epsilon


def serving_at(policy_dir: str, epsilon: float, scratch: str, gcs_client: Any = None) -> str:
    """`policy_dir` itself when its SavedModel already serves `epsilon`; else a copy of it under
    the local directory `scratch` rewritten to serve `epsilon`, whose path is returned."""
    from rlops.train.serving_epsilon import read_serving_epsilon, set_serving_epsilon

    own = read_serving_epsilon(policy_dir)
    if own is None:
        raise ValueError(
            f"the blessing certifies serving epsilon {epsilon:g}, but {policy_dir} has no serving_default "
            "epsilon to set (exported without trainer.serving_epsilon)"
        )
    if abs(own - epsilon) <= SAME_EPSILON:
        return policy_dir
    source = open_store(policy_dir, gcs_client)
    local = os.path.join(scratch, "certified")
    for key in source.list_files(""):
        source.get_file(key, os.path.join(local, *key.split("/")))
    set_serving_epsilon(local, epsilon)
    log.info("publishing at the certified serving epsilon %g (trained %g)", epsilon, own)
    return local
