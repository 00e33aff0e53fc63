"""Acting with an exported policy SavedModel through its `action` signature only (what a
server does), batched; no rlops objects needed inside the SavedModel."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlops.agents.trajectories import PolicyStep, TimeStep


class SavedPolicy:
    def __init__(self, saved_model_dir: str):
        self.path = saved_model_dir
        self._loaded = tf.saved_model.load(saved_model_dir)
        self._action = self._loaded.signatures["action"]
        _, self._inputs = self._action.structured_input_signature

    def actions(self, observations: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """Greedy actions for a batch of (single-tensor) observations."""
        out = []
        for start in range(0, len(observations), batch_size):
            obs = observations[start:start + batch_size]
            out.append(self.action(TimeStep(np.zeros(len(obs), np.int32), np.zeros(len(obs), np.float32),
                                            np.ones(len(obs), np.float32), obs)).action.numpy())
        return np.concatenate(out) if out else np.zeros((0,), np.int32)

    def action(self, time_step: TimeStep, policy_state=()) -> PolicyStep:
        feeds = {"step_type": time_step.step_type, "reward": time_step.reward, "discount": time_step.discount,
                 "observation": time_step.observation}
        feeds = {k: tf.cast(v, self._inputs[k].dtype) for k, v in feeds.items()}
        return PolicyStep(self._action(**feeds)["action"], (), ())
