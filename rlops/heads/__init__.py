"""Heads: per decision kind, the rule that turns scores into a served decision and everything
that must agree with it -- the TensorFlow head, its numpy twin (the exact probabilities the
Evaluator needs), the candidate/mask rule, the draw statistics and the Pusher's verifier.

The layer sits below agents, features and train and imports tensorflow, tensorflow-probability
and numpy only, so every reader (PolicySaver, the LiteRT converter, the Evaluator's scoring, the
Pusher's verifiers, the agents' collect policies, the log simulator) uses one definition.

HEADS names each kind's module; `head_module(kind)` imports it on demand (TensorFlow loads only
when a graph is built, so numpy-only readers such as the Beam engine stay light).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# decision kind -> its head's module. A trajectory (PPO) samples from its actor network's own
# distribution and logs its log-probability: there is no head to share.
HEADS: dict[str, str | None] = {
    "bandit": "rlops.heads.epsilon_greedy",
    "slate": "rlops.heads.slate",
    "trajectory": None,
}


def head_module(kind: str) -> ModuleType | None:
    """The head module of decision kind `kind` (None: the kind has none); an unknown kind is a
    KeyError naming the known ones."""
    if kind not in HEADS:
        raise KeyError(f"no head for decision kind {kind!r} (known: {sorted(HEADS)})")
    name = HEADS[kind]
    return None if name is None else importlib.import_module(name)
