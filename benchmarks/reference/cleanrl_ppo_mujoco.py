"""Reference: CleanRL's ppo_continuous_action, measured on this machine (issue 12).

The issue's Hopper and HalfCheetah targets are CleanRL's published 1M-step returns, which were
made on the -v4 environments with gymnasium 0.29. This script reruns that algorithm on the -v5
environments rlops' benchmark uses, with the same seeds and the same final-return figure (mean of
the last 10 training episodes), so the comparison is like for like. It is a faithful transcription
of CleanRL's single-file script (vwxyzjn/cleanrl, ppo_continuous_action.py), not a tuned variant:

  1 env x 2048 steps, 10 epochs, 32 minibatches, Adam 3e-4 (eps 1e-5) annealed per iteration,
  gamma 0.99, GAE lambda 0.95, advantages normalized per minibatch, clip 0.2, value loss clipped
  (0.2) and halved, vf_coef 0.5, no entropy, gradient norm 0.5; separate 64-64 tanh actor and
  critic, orthogonal init (sqrt 2; 0.01 actor head, 1.0 critic head), state-independent log std
  starting at 0; wrappers ClipAction, NormalizeObservation, obs clip 10, NormalizeReward(gamma),
  reward clip 10; truncation treated as termination (no bootstrap), as CleanRL does.

Runs in the Stable-Baselines3 venv (torch + gymnasium[mujoco]; see README.md), one torch thread:

    nice -n 10 /work/sb3-venv/bin/python benchmarks/reference/cleanrl_ppo_mujoco.py --env Hopper-v5 --seeds 0 1 2

Prints one JSON line: final_return per seed (and mean, std), env steps/s, versions, load average.
`--curve-dir` writes each seed's learning curve as CSV (env_step,return), the format of
benchmarks/ppo_mujoco.py's, so rlops.envs.plots can draw both.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from importlib.metadata import version
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.normal import Normal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import emit, peak_rss_mb  # noqa: E402  (stdlib only: runs in any venv)

NUM_STEPS, EPOCHS, MINIBATCHES = 2048, 10, 32
LR, GAMMA, GAE_LAMBDA, CLIP, VF_COEF, MAX_GRAD_NORM = 3e-4, 0.99, 0.95, 0.2, 0.5, 0.5


def make_env(env_id: str, gamma: float) -> gym.Env:
    env = gym.make(env_id)
    env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)  # raw returns, before reward normalization
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=gamma)
    return gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                    nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                        nn.Tanh(), layer_init(nn.Linear(64, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        mean = self.actor_mean(x)
        dist = Normal(mean, torch.exp(self.actor_logstd.expand_as(mean)))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)


def run_seed(env_id: str, total_steps: int, seed: int) -> tuple[list[int], list[float], float]:
    """One CleanRL run; returns (env step at each episode's end, its raw return, wall seconds)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = make_env(env_id, GAMMA)
    env.action_space.seed(seed)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    agent = Agent(obs_dim, act_dim)
    optimizer = torch.optim.Adam(agent.parameters(), lr=LR, eps=1e-5)
    batch = NUM_STEPS
    minibatch = batch // MINIBATCHES
    obs = torch.zeros((NUM_STEPS, obs_dim))
    actions = torch.zeros((NUM_STEPS, act_dim))
    logprobs, rewards, dones, values = (torch.zeros(NUM_STEPS) for _ in range(4))
    episode_steps, episode_returns = [], []
    global_step, start = 0, time.perf_counter()
    next_obs = torch.tensor(env.reset(seed=seed)[0], dtype=torch.float32)
    next_done = 0.0
    iterations = total_steps // batch
    for iteration in range(1, iterations + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / iterations) * LR
        for step in range(NUM_STEPS):
            global_step += 1
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs[None])
            values[step], actions[step], logprobs[step] = value.flatten()[0], action[0], logprob[0]
            raw_obs, reward, terminated, truncated, info = env.step(action[0].numpy())
            rewards[step] = float(reward)
            next_done = float(terminated or truncated)
            if terminated or truncated:
                episode_steps.append(global_step)
                episode_returns.append(float(info["episode"]["r"]))
                raw_obs, _ = env.reset()
            next_obs = torch.tensor(raw_obs, dtype=torch.float32)
        with torch.no_grad():  # GAE, truncation treated as termination
            next_value = agent.get_value(next_obs[None]).reshape(())
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0.0
            for t in reversed(range(NUM_STEPS)):
                if t == NUM_STEPS - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + GAMMA * GAE_LAMBDA * nextnonterminal * lastgaelam
            returns = advantages + values
        inds = np.arange(batch)
        for _ in range(EPOCHS):
            np.random.shuffle(inds)
            for lo in range(0, batch, minibatch):
                mb = inds[lo:lo + minibatch]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs[mb], actions[mb])
                ratio = (newlogprob - logprobs[mb]).exp()
                mb_adv = advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)).mean()
                newvalue = newvalue.view(-1)
                v_clipped = values[mb] + torch.clamp(newvalue - values[mb], -CLIP, CLIP)
                v_loss = 0.5 * torch.max((newvalue - returns[mb]) ** 2, (v_clipped - returns[mb]) ** 2).mean()
                loss = pg_loss + VF_COEF * v_loss  # ent_coef 0
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), MAX_GRAD_NORM)
                optimizer.step()
    env.close()
    return episode_steps, episode_returns, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--curve-dir", help="write each seed's learning curve as CSV here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    finals, steps, wall = [], 0, 0.0
    for seed in args.seeds:
        ends, rets, seconds = run_seed(args.env, args.steps, seed)
        finals.append(float(np.mean(rets[-10:])))
        steps, wall = steps + args.steps // NUM_STEPS * NUM_STEPS, wall + seconds
        if args.curve_dir:
            os.makedirs(args.curve_dir, exist_ok=True)
            with open(os.path.join(args.curve_dir, f"{args.env}_cleanrl_reference_seed{seed}.csv"), "w") as f:
                f.write("env_step,return\n")
                f.writelines(f"{s},{r:.2f}\n" for s, r in zip(ends, rets))
    emit("cleanrl_ppo_mujoco", env=args.env, seeds=args.seeds, env_steps_per_seed=args.steps // NUM_STEPS * NUM_STEPS,
         final_returns=[round(f, 1) for f in finals], final_return_mean=round(float(np.mean(finals)), 1),
         final_return_std=round(float(np.std(finals)), 1), env_steps_per_s=round(steps / wall, 1),
         torch=version("torch"), gymnasium=version("gymnasium"), mujoco=version("mujoco"),
         load_avg_1m=round(os.getloadavg()[0], 2), peak_rss_mb=round(peak_rss_mb(), 1))


if __name__ == "__main__":
    main()
