"""Training infrastructure: strategy-aware Learner, checkpoints, triggers, policy export.

The names below load TensorFlow, so they are imported on first use (`from rlops.train import
Learner` works): `rlops.train.policy_files`, the exported policy's file names, stays
TensorFlow-free for the Pusher's publisher and rollback. (`rlops.train.on_policy`, the PPO
collect/train loop, is imported on its own: it pulls in Gymnasium.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.train.checkpointer import Checkpointer
    from rlops.train.learner import (
        CHECKPOINT_DIR,
        POLICY_SAVED_MODEL_DIR,
        TRAIN_DIR,
        Learner,
        batch_dataset_fn,
        create_train_step_counter,
    )
    from rlops.train.policy_saver import PolicySaver, latest_checkpoint, load, load_specs, restore_checkpoint
    from rlops.train.strategy import get_strategy, is_chief
    from rlops.train.triggers import IntervalTrigger, PolicySavedModelTrigger, StepPerSecondLogTrigger

# Each public name and the module that defines it.
_HOMES = {
    "Checkpointer": "checkpointer",
    "Learner": "learner",
    "create_train_step_counter": "learner",
    "batch_dataset_fn": "learner",
    "TRAIN_DIR": "learner",
    "CHECKPOINT_DIR": "learner",
    "POLICY_SAVED_MODEL_DIR": "learner",
    "PolicySaver": "policy_saver",
    "load": "policy_saver",
    "restore_checkpoint": "policy_saver",
    "latest_checkpoint": "policy_saver",
    "load_specs": "policy_saver",
    "get_strategy": "strategy",
    "is_chief": "strategy",
    "IntervalTrigger": "triggers",
    "PolicySavedModelTrigger": "triggers",
    "StepPerSecondLogTrigger": "triggers",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rlops.train' has no attribute '{name}'")
    return getattr(importlib.import_module(f"rlops.train.{home}"), name)


__all__ = [
    "Learner",
    "create_train_step_counter",
    "batch_dataset_fn",
    "Checkpointer",
    "PolicySaver",
    "load",
    "restore_checkpoint",
    "latest_checkpoint",
    "load_specs",
    "get_strategy",
    "is_chief",
    "IntervalTrigger",
    "PolicySavedModelTrigger",
    "StepPerSecondLogTrigger",
    "TRAIN_DIR",
    "CHECKPOINT_DIR",
    "POLICY_SAVED_MODEL_DIR",
]
