"""The Evaluator's PPO path: returns of N episodes of each policy in the environment, the
candidate against the baseline model (first run: a uniform random policy), paired."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlops.agents.policies import Policy
from rlops.components.common.model import serving_dir
from rlops.components.evaluator.bootstrap import difference_interval, mean_confidence_interval
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate
from rlops.train.policy_saver import SavedPolicy


def _episode_returns(env_id: str, policy: Policy, episodes: int, seed: int) -> np.ndarray:
    from rlops.envs.gym_env import evaluate_policy

    return evaluate_policy(env_id, policy, episodes, seed=seed)


def evaluate_ppo(
    config: EvaluatorConfig, model_uri: str, baseline_model_uri: str | None
) -> tuple[dict[str, Any], Estimate]:
    """(metrics, the improvement in mean return that blesses) of the model at `model_uri`."""
    from rlops.agents.policies import RandomPolicy
    from rlops.envs.gym_env import GymVectorEnv

    env_id = config.env_id
    assert env_id, "EvaluatorConfig checks that PPO evaluation has an env_id"
    candidate = _episode_returns(env_id, SavedPolicy(serving_dir(model_uri)), config.num_episodes, config.seed)
    baseline_policy: Policy
    if baseline_model_uri:
        baseline_policy = SavedPolicy(serving_dir(baseline_model_uri))
    else:
        env = GymVectorEnv(env_id, 1)
        baseline_policy = RandomPolicy(env.time_step_spec, env.action_spec)
        env.close()
    baseline = _episode_returns(env_id, baseline_policy, config.num_episodes, config.seed)
    cand = mean_confidence_interval(candidate, config.confidence, seed=config.seed)
    base = mean_confidence_interval(baseline, config.confidence, seed=config.seed)
    diff = difference_interval(candidate, baseline, config.confidence, seed=config.seed, min_episodes=5)
    metrics = {
        "env_id": config.env_id,
        "num_episodes": config.num_episodes,
        "baseline": baseline_model_uri or "random_policy",
        "candidate": {"mean_return": cand.as_dict()},
        "baseline_estimates": {"mean_return": base.as_dict()},
        "improvement": {"mean_return": diff.as_dict()},
        "candidate_returns": candidate.tolist(),
        "baseline_returns": baseline.tolist(),
    }
    return metrics, diff
