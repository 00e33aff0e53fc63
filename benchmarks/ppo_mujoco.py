"""PPO on MuJoCo (HalfCheetah-v5, Hopper-v5): final return over seeds, throughput, and where the
time goes (collection vs update).

Configs (--config):
  cleanrl    CleanRL's ppo_continuous_action: 1 env x 2048 steps, 10 epochs, 32 minibatches (64),
             Adam 3e-4 annealed to 0, gamma 0.99, GAE lambda 0.95, clip 0.2, value clipping 0.2,
             value loss 0.25 x squared error (CleanRL's vf_coef 0.5 on half the squared error),
             no entropy, grad norm 0.5, advantages normalized per minibatch, observations
             normalized (epsilon 1e-8, clipped at 10), rewards scaled by the return's std, 64-64
             tanh nets. --num-envs N keeps the 2048-row batch (2048 // N steps per env).
  realistic  the issue's throughput configuration: 8 envs x 256 steps, 10 epochs, minibatches of
             64, observation + reward normalization, 64-64 nets, value loss 0.5 x squared error
             (SB3's), other settings as cleanrl.
Published at 1M steps: CleanRL HalfCheetah 1,442 +- 46, Hopper 2,383 +- 272; TF-Agents
HalfCheetah 4,239, Hopper 2,530.

Prints one JSON line: final_return (mean of each seed's last 10 training episodes, as CleanRL
reports; mean and std over seeds), eval_return (greedy policy), env_steps_per_s (whole loop,
first update's compilation included) and after compilation, collect_s / update_s (update =
`agent.train` calls, timed separately; collect = the rest of the loop: stepping the envs and the
policy), and the collection backend that ran (--vector-env auto|sync|async|envpool).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import emit, peak_rss_mb  # noqa: E402

from rlops.envs.gym_env import VECTOR_ENVS, GymVectorEnv  # noqa: E402
from rlops.train.on_policy import PPOConfig, build_ppo_agent, train_ppo  # noqa: E402

PUBLISHED_1M = {
    "HalfCheetah-v5": {"cleanrl": "1442 +- 46", "tf_agents": 4239},
    "Hopper-v5": {"cleanrl": "2383 +- 272", "tf_agents": 2530},
}


def make_config(name: str, env_id: str, steps: int, seed: int, vector_env: str, num_envs: int | None) -> PPOConfig:
    # Rewards scaled as CleanRL and SB3 do (by the running std of the discounted return, at
    # collection: PPOConfig.scale_rewards_by_return), not by TF-Agents' normalizer (the std of single
    # rewards), which makes MuJoCo value targets O(100): with CleanRL's value clipping (0.2 per
    # update) that froze the value function (Hopper-v5 seed 0, 1M steps: final return 467), and
    # without it Hopper plateaued at ~1,500 (seeds 0, 1). `--set scale_rewards_by_return=false --set
    # normalize_rewards=true` gives the TF-Agents scaling back.
    common = dict(
        env_id=env_id,
        total_env_steps=steps,
        seed=seed,
        vector_env=vector_env,
        num_epochs=10,
        minibatch_size=64,
        learning_rate=3e-4,
        anneal_lr=True,
        discount_factor=0.99,
        lambda_value=0.95,
        importance_ratio_clipping=0.2,
        entropy_regularization=0.0,
        value_pred_loss_coef=0.5,
        value_clipping=0.2,
        gradient_clipping=0.5,
        normalize_observations=True,
        normalize_rewards=False,
        scale_rewards_by_return=True,
        normalize_advantages="minibatch",
        observation_clip_value=10.0,
        observation_variance_epsilon=1e-8,
        hidden_sizes=(64, 64),
        initial_log_std=0.0,
        target_return=None,
        log_every=0,
    )
    if name == "cleanrl":
        n = num_envs or 1
        return PPOConfig(num_envs=n, num_steps=2048 // n, **{**common, "value_pred_loss_coef": 0.25})
    if name == "realistic":
        return PPOConfig(num_envs=num_envs or 8, num_steps=256, **common)
    raise ValueError(f"--config {name!r}: expected cleanrl or realistic")


def apply_overrides(config: PPOConfig, overrides: list[str]) -> PPOConfig:
    """`--set field=value` on PPOConfig (value parsed as JSON; `none` for None), for ablations."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not hasattr(config, key):
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE with a PPOConfig field")
        try:
            value = None if raw.lower() == "none" else json.loads(raw)
        except json.JSONDecodeError:
            value = raw  # a bare string, e.g. vector_env=async
        setattr(config, key, value)
    return config


def write_curve(path: str, result) -> None:
    """One seed's learning curve: env step at which each training episode ended, and its return."""
    with open(path, "w") as f:
        f.write("env_step,return\n")
        f.writelines(f"{s},{r:.2f}\n" for s, r in zip(result.episode_env_steps, result.episode_returns))


def run_seed(config: PPOConfig, eval_episodes: int, curve_path: str | None = None) -> dict:
    """One training run; agent.train is wrapped so update time is measured apart from collection."""
    spec_env = GymVectorEnv(config.env_id, 1, seed=config.seed)
    agent = build_ppo_agent(config, spec_env)
    spec_env.close()
    update_s, train = [], agent.train

    def timed_train(*args, **kwargs):
        start = time.perf_counter()
        out = train(*args, **kwargs)
        float(out.loss)  # wait for the update to finish
        update_s.append(time.perf_counter() - start)
        return out

    agent.train = timed_train
    config.eval_episodes = eval_episodes
    backend = GymVectorEnv(config.env_id, config.num_envs, seed=config.seed, vector_env=config.vector_env)
    backend_name = backend.backend
    backend.close()
    result = train_ppo(config, agent=agent)
    if curve_path:
        write_curve(curve_path, result)
    curve = (result.episode_env_steps, result.episode_returns)
    update, wall = float(np.sum(update_s)), result.train_wall_s
    final = result.episode_returns[-10:]
    return {
        "final_return": float(np.mean(final)) if final else float("nan"),
        "episodes": len(result.episode_returns),
        "eval_return": result.eval_mean_return if eval_episodes else None,
        "env_steps": result.env_steps,
        "wall_s": wall,
        "update_s": update,
        "first_update_s": update_s[0],
        "collect_s": wall - update,
        "backend": backend_name,
        "curve": curve,
    }


def collect_only(config: PPOConfig) -> dict:
    """Collection alone (the untrained collect policy, numpy path): the backends compared."""
    from rlops.envs.gym_env import VectorDriver

    env = GymVectorEnv(config.env_id, config.num_envs, seed=config.seed, vector_env=config.vector_env)
    driver = VectorDriver(env, build_ppo_agent(config, env).collect_policy, config.num_steps, seed=config.seed)
    driver.run()  # warm-up: first policy snapshot, env caches
    start, steps = time.perf_counter(), driver.total_env_steps
    while driver.total_env_steps - steps < config.total_env_steps:
        driver.run()
    wall = time.perf_counter() - start
    env.close()
    return {"backend": env.backend, "env_steps": driver.total_env_steps - steps, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5", help="HalfCheetah-v5 or Hopper-v5 (any Box-action env)")
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--vector-env", default="auto", choices=VECTOR_ENVS)
    parser.add_argument("--config", default="cleanrl", choices=["cleanrl", "realistic"])
    parser.add_argument("--num-envs", type=int, help="override the config's number of envs")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a PPOConfig field (e.g. value_clipping=none)",
    )
    parser.add_argument("--curve-dir", help="write each seed's learning curve as CSV here")
    parser.add_argument("--plot", help="write every seed's learning curve into this PNG")
    parser.add_argument("--collect-only", action="store_true", help="time collection alone (no updates)")
    args = parser.parse_args()
    if args.collect_only:
        config = make_config(args.config, args.env, args.steps, args.seeds[0], args.vector_env, args.num_envs)
        r = collect_only(config)
        emit(
            "ppo_mujoco_collect",
            env=args.env,
            config=args.config,
            backend=r["backend"],
            num_envs=config.num_envs,
            env_steps=r["env_steps"],
            collect_env_steps_per_s=round(r["env_steps"] / r["wall_s"], 1),
            wall_s=round(r["wall_s"], 1),
            peak_rss_mb=round(peak_rss_mb(), 1),
        )
        return
    if args.curve_dir:
        os.makedirs(args.curve_dir, exist_ok=True)
    runs = [
        run_seed(
            apply_overrides(
                make_config(args.config, args.env, args.steps, s, args.vector_env, args.num_envs), args.set
            ),
            args.eval_episodes,
            args.curve_dir and os.path.join(args.curve_dir, f"{args.env}_{args.config}_seed{s}.csv"),
        )
        for s in args.seeds
    ]
    if args.plot:
        from rlops.envs.plots import plot_learning_curves

        plot_learning_curves(
            {f"seed {seed}": run["curve"] for seed, run in zip(args.seeds, runs)},
            args.plot,
            f"PPO {args.env} ({args.config} config)",
        )
    finals = np.array([r["final_return"] for r in runs])
    steps, wall = sum(r["env_steps"] for r in runs), sum(r["wall_s"] for r in runs)
    update, collect, first = (sum(r[k] for r in runs) for k in ("update_s", "collect_s", "first_update_s"))
    sps = steps / wall
    emit(
        "ppo_mujoco",
        env=args.env,
        config=args.config,
        overrides=args.set,
        backend=runs[0]["backend"],
        vector_env=args.vector_env,
        num_envs=make_config(args.config, args.env, 0, 0, args.vector_env, args.num_envs).num_envs,
        env_steps_per_seed=runs[0]["env_steps"],
        seeds=args.seeds,
        final_return_mean=round(float(finals.mean()), 1),
        final_return_std=round(float(finals.std()), 1),
        final_returns=[round(float(f), 1) for f in finals],
        eval_return=[None if r["eval_return"] is None else round(r["eval_return"], 1) for r in runs],
        env_steps_per_s=round(sps, 1),
        env_steps_per_s_after_compile=round(steps / (wall - first), 1),
        collect_s=round(collect, 1),
        update_s=round(update, 1),
        first_update_s=round(first, 1),
        collect_env_steps_per_s=round(steps / collect, 1),
        update_share=round(update / wall, 3),
        est_hours_1M_x3_seeds=round(3e6 / sps / 3600, 2),
        published_1M=PUBLISHED_1M.get(args.env),
        wall_s=round(wall, 1),
        peak_rss_mb=round(peak_rss_mb(), 1),
    )


if __name__ == "__main__":
    main()
