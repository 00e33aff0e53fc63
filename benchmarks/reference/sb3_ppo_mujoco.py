"""Reference: Stable-Baselines3 PPO on HalfCheetah-v5, measured on this machine (issue 12).

Runs in its own venv (benchmarks/reference/requirements-sb3.txt), not in rlops' one:

    nice -n 10 /work/sb3-venv/bin/python benchmarks/reference/sb3_ppo_mujoco.py [--config realistic|cleanrl]

Configs (--config), matching benchmarks/ppo_mujoco.py's:
  realistic  the issue's throughput configuration: 8 envs (DummyVecEnv, in-process) x 256 steps,
             10 epochs, minibatches of 64 (32 per epoch), VecNormalize (observations + rewards).
  cleanrl    1 env x 2048 steps, 10 epochs, 32 minibatches of 64, VecNormalize.
Both: SB3's default MlpPolicy (separate 64-64 tanh actor and critic, orthogonal init, state-
independent log std starting at 0), Adam 3e-4, gamma 0.99, GAE lambda 0.95, clip 0.2, no
entropy, value coefficient 0.5, gradient norm 0.5, torch.set_num_threads(1). rlops'
benchmark also anneals the learning rate and clips the value loss (0.2); SB3 does neither by
default: --anneal-lr and --clip-range-vf 0.2 turn them on (they change returns, not speed).

Prints one JSON line: env_steps_per_s (the whole learn() call: setup of the first rollout,
collection and updates), collect_s / update_s (rollouts timed by a callback; update = the rest
of learn()), final_return (mean of the last 10 training episodes, raw rewards from the Monitor
under VecNormalize, as CleanRL reports), versions, load average, machine, date.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import emit, peak_rss_mb  # noqa: E402  (stdlib only: runs in any venv)

CONFIGS = {"realistic": {"n_envs": 8, "n_steps": 256}, "cleanrl": {"n_envs": 1, "n_steps": 2048}}


class RolloutTimer(BaseCallback):
    """Sums wall time spent in collect_rollouts; learn() time minus this is the update."""

    def __init__(self) -> None:
        super().__init__()
        self.collect_s, self._start = 0.0, 0.0

    def _on_rollout_start(self) -> None:
        self._start = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.collect_s += time.perf_counter() - self._start

    def _on_step(self) -> bool:
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--config", default="realistic", choices=sorted(CONFIGS))
    parser.add_argument("--steps", type=int, default=51_200, help="env steps (rounded up to whole rollouts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--anneal-lr", action="store_true", help="decay the learning rate linearly to 0 (as rlops)")
    parser.add_argument("--clip-range-vf", type=float, default=None, help="value clipping (rlops: 0.2)")
    args = parser.parse_args()
    if args.steps <= 0:
        parser.error(f"--steps must be positive, got {args.steps}")
    torch.set_num_threads(args.threads)
    cfg = CONFIGS[args.config]
    load_before = os.getloadavg()[0]

    venv = make_vec_env(args.env, n_envs=cfg["n_envs"], seed=args.seed, vec_env_cls=DummyVecEnv)
    venv = VecNormalize(venv, norm_obs=True, norm_reward=True, gamma=0.99)
    lr = (lambda progress_remaining: 3e-4 * progress_remaining) if args.anneal_lr else 3e-4
    model = PPO("MlpPolicy", venv, n_steps=cfg["n_steps"], batch_size=64, n_epochs=10, learning_rate=lr,
                gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=args.clip_range_vf, ent_coef=0.0,
                vf_coef=0.5, max_grad_norm=0.5, seed=args.seed, device="cpu", verbose=0)
    timer = RolloutTimer()
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=timer)
    wall = time.perf_counter() - start
    venv.close()

    episodes = [info["r"] for info in model.ep_info_buffer]  # deque of the last 100 episodes
    final = float(np.mean(episodes[-10:])) if episodes else None
    steps = int(model.num_timesteps)
    emit("sb3_ppo_mujoco", env=args.env, config=args.config, num_envs=cfg["n_envs"], num_steps=cfg["n_steps"],
         seed=args.seed, env_steps=steps, env_steps_per_s=round(steps / wall, 1), wall_s=round(wall, 1),
         collect_s=round(timer.collect_s, 1), update_s=round(wall - timer.collect_s, 1),
         update_share=round((wall - timer.collect_s) / wall, 3),
         final_return=None if final is None else round(final, 1), episodes_in_buffer=len(episodes),
         anneal_lr=args.anneal_lr, clip_range_vf=args.clip_range_vf, torch_threads=torch.get_num_threads(),
         versions={"python": platform.python_version(), "stable_baselines3": version("stable_baselines3"),
                   "torch": torch.__version__, "gymnasium": version("gymnasium"), "mujoco": version("mujoco"),
                   "numpy": np.__version__},
         load_avg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)], peak_rss_mb=round(peak_rss_mb(), 1))


if __name__ == "__main__":
    main()
