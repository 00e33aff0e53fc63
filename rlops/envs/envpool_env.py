"""EnvPool (C++ thread-pool environments) behind the Gymnasium vector-env surface rlops uses.

EnvPool's sync mode autoresets like Gymnasium 1.x's NEXT_STEP mode (checked against envpool
0.8.4 here, and by tests/envs/test_vector_backends.py): the step after `terminated | truncated`
ignores its action, resets that env and returns its first observation with reward 0 and both
flags False (`info["elapsed_step"] == 0`). So `GymVectorEnv` maps it onto TF-Agents' boundary
rows with no special case; this adapter only converts spaces and dtypes and handles seeding.
EnvPool has its own env ids and RNG: the same seed does not give Gymnasium's trajectories.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import gymnasium as gym
import numpy as np

INSTALL_HINT = (
    "pip install 'rlops[envpool]' (envpool==0.8.4, which needs gym==0.26.2 and dm-env); "
    "or use vector_env='async' (subprocesses) or 'sync'"
)


def import_envpool():
    """The envpool module, or an ImportError that names the option and how to get it."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # gym 0.26's deprecation banner
            import envpool
    except ImportError as e:
        raise ImportError(f"vector_env='envpool' but envpool is not installed ({e}); {INSTALL_HINT}") from e
    return envpool


def to_gymnasium_space(space: Any) -> gym.Space:
    """envpool 0.8 returns gym (0.26) spaces even with env_type='gymnasium'."""
    name = type(space).__name__
    if name == "Box":
        return gym.spaces.Box(space.low, space.high, space.shape, space.dtype)
    if name == "Discrete":
        return gym.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    raise ValueError(f"envpool space {space} has no Gymnasium twin rlops supports (Box, Discrete)")


class EnvPoolVectorEnv:
    """The subset of `gymnasium.vector.VectorEnv` that `GymVectorEnv` calls, over one envpool."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, **kwargs: Any):
        envpool = import_envpool()
        known = envpool.list_all_envs()
        if env_id not in known:
            family = sorted(e for e in known if e.split("-")[0] == env_id.split("-")[0])
            raise ValueError(
                f"vector_env='envpool': envpool {envpool.__version__} has no env {env_id!r}"
                f" (same family: {family or 'none'}); use vector_env='async' or 'sync'"
            )
        self._make = lambda s: envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=s, **kwargs)
        self.num_envs = num_envs
        self._pool, self._seed, self._stepped = self._make(seed), seed, False
        self.single_observation_space = to_gymnasium_space(self._pool.observation_space)
        self.single_action_space = to_gymnasium_space(self._pool.action_space)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._action_dtype = self._pool.action_space.dtype

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        # envpool seeds only at construction: a seeded reset of a used pool rebuilds it, so
        # reset(seed=s) starts the same episodes every time, as in Gymnasium.
        if seed is not None and (self._stepped or seed != self._seed):
            self.close()
            self._pool, self._seed = self._make(seed), seed
        self._stepped = False
        return self._pool.reset()

    def step(self, action: np.ndarray):
        self._stepped = True
        return self._pool.step(np.asarray(action, self._action_dtype))

    def close(self) -> None:
        close = getattr(self._pool, "close", None)
        if close is not None:
            close()
