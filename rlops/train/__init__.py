"""Training infrastructure: strategy-aware Learner, checkpoints, triggers, policy export.

(`rlops.train.on_policy` — the PPO collect/train loop — is imported on its own: it pulls in
Gymnasium.)
"""

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
