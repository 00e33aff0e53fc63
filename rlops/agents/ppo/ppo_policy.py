"""PPO's collect policy when values are computed outside train (TF-Agents' PPOPolicy with
`compute_value_and_advantage_in_train=False`).

Acting also runs the value network on the (normalized) observation and stores its output as
`policy_info["value_prediction"]`: `PPOAgent.preprocess_sequence` turns those stored values into
returns and advantages, and `train` reads them instead of re-running the value network.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from rlops.agents.networks import ValueNetwork
from rlops.agents.policies import ActorPolicy
from rlops.agents.trajectories import PolicyStep, TimeStep


class PPOCollectPolicy(ActorPolicy):
    """An ActorPolicy whose policy_info also holds the value network's prediction."""

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        actor_network: Any,
        value_network: ValueNetwork,
        observation_normalizer: Any = None,
        clip_actions: bool = False,
        **kwargs: Any,
    ):
        super().__init__(
            time_step_spec,
            action_spec,
            actor_network,
            observation_normalizer=observation_normalizer,
            clip_actions=clip_actions,
            **kwargs,
        )
        self.value_network = value_network
        self.info_spec = self._no_dependency(
            {**self.info_spec, "value_prediction": tf.TensorSpec((), tf.float32, "value_prediction")}
        )

    def value_prediction(self, time_step: TimeStep) -> tf.Tensor:
        obs, _ = self._split(time_step.observation)
        if self.observation_normalizer is not None:
            obs = self.observation_normalizer.normalize(obs)
        return tf.cast(self.value_network(obs), tf.float32)

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        step = super()._action(time_step, seed)
        return step._replace(info={**step.info, "value_prediction": self.value_prediction(time_step)})

    def numpy_sampler(
        self, seed: int | None = None
    ) -> Callable[[np.ndarray[Any, Any]], tuple[np.ndarray[Any, Any], dict[str, Any]]]:
        sample = super().numpy_sampler(seed)
        value_forward = self.value_network.mlp.numpy_forward()
        normalize = self.observation_normalizer.numpy_normalize() if self.observation_normalizer else None

        def sample_with_value(observation: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
            action, info = sample(observation)
            x = observation.reshape(observation.shape[0], -1).astype(np.float32)
            if normalize is not None:
                x = normalize(x).astype(np.float32)
            return action, {**info, "value_prediction": value_forward(x)[:, 0].astype(np.float32)}

        return sample_with_value
