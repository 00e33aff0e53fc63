"""PPO on CartPole-v1: throughput and sample efficiency.

Config (the issue's): 8 envs x 32 steps, 20 epochs on the full batch of 256, Adam 1e-3
decaying linearly to 0, gamma 0.98, GAE lambda 0.8, clip 0.2, no entropy, 100k env steps.
Prints one JSON line: env_steps_per_s (wall time of the whole training loop, the first update's
tracing and XLA compilation included), env_steps_per_s_after_compile (without that one-off
cost, first_train_call_s), steps_to_475, eval_mean_return, train_wall_s, peak_rss_mb.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, peak_rss_mb  # noqa: E402

from rlops.train.on_policy import PPOConfig, train_ppo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", help="write the learning curve PNG here")
    args = parser.parse_args()
    config = PPOConfig(total_env_steps=args.env_steps, seed=args.seed, log_every=0)
    result = train_ppo(config)
    if args.plot:
        from rlops.envs.plots import plot_learning_curve
        plot_learning_curve(result.episode_env_steps, result.episode_returns, args.plot,
                            title="PPO CartPole-v1", target=475.0)
    emit("ppo_cartpole", env_steps=result.env_steps,
         env_steps_per_s=round(result.env_steps / result.train_wall_s, 1),
         env_steps_per_s_after_compile=result.summary()["env_steps_per_s_after_compile"],
         first_train_call_s=round(result.first_train_s, 2),
         steps_to_475=result.steps_to_target, eval_mean_return=round(result.eval_mean_return, 1),
         train_wall_s=round(result.train_wall_s, 2), peak_rss_mb=round(peak_rss_mb(), 1), seed=args.seed)


if __name__ == "__main__":
    main()
