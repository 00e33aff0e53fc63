"""A known-reward policy for Evaluator tests: reward P(r=1 | x, a) = sigmoid(x . theta[a] - 1),
greedy over it, saved as the Trainer would (a serving SavedModel under a Model directory)."""

import numpy as np
import tensorflow as tf

from rlops.components.common.model import serving_dir


class LinearRewards(tf.Module):
    def __init__(self, theta):
        super().__init__()
        self.w = tf.Variable(np.asarray(theta, np.float32).T)

    def __call__(self, obs):
        return tf.sigmoid(obs @ self.w - 1.0)


def save_linear_policy(model_uri: str, theta: np.ndarray, emit_predicted_rewards: bool = False) -> str:
    """theta [K, D]; `emit_predicted_rewards` exports the network's rewards as policy info (what
    the `network` reward model reads)."""
    from rlops.agents import specs
    from rlops.agents.bandits.neural_epsilon_greedy import GreedyRewardPredictionPolicy
    from rlops.agents.trajectories import time_step_spec
    from rlops.train.policy_saver import PolicySaver

    k, d = np.shape(theta)
    policy = GreedyRewardPredictionPolicy(
        time_step_spec(tf.TensorSpec([d], tf.float32, "observation")),
        specs.BoundedTensorSpec((), tf.int32, 0, k - 1, name="action"),
        LinearRewards(theta),
        emit_policy_info=("predicted_rewards_mean",) if emit_predicted_rewards else (),
    )
    PolicySaver(policy).save(serving_dir(model_uri))
    return model_uri
