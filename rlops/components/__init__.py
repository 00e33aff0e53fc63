"""rlops' TFX components, as `tfx.v1.components` exports TFX's own:

    from rlops.components import ExperienceGen, Trainer, Evaluator, Pusher

Their KFP v2 faces are `rlops.components.kfp.load(name)`. The classes import TFX, so they load on
first use: `import rlops.components.common` (the shared record and model layout) stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.components.evaluator.component import Evaluator
    from rlops.components.experience_gen.component import ExperienceGen
    from rlops.components.pusher.component import Pusher
    from rlops.components.trainer.component import Trainer

_COMPONENTS = {
    "ExperienceGen": "rlops.components.experience_gen.component",
    "Trainer": "rlops.components.trainer.component",
    "Evaluator": "rlops.components.evaluator.component",
    "Pusher": "rlops.components.pusher.component",
}

__all__ = ["ExperienceGen", "Trainer", "Evaluator", "Pusher"]  # the order of _COMPONENTS


def __getattr__(name: str) -> Any:
    if name in _COMPONENTS:
        return getattr(import_module(_COMPONENTS[name]), name)
    raise AttributeError(f"module 'rlops.components' has no attribute '{name}'")
