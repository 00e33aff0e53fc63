"""Reference: TF-Agents 0.19 PPO (PPOClipAgent) on CartPole-v1, measured on this machine (issue 12).

Runs in its own venv (benchmarks/reference/requirements-tf-agents.txt), not in rlops' one:

    nice -n 10 /work/golden-venv/bin/python benchmarks/reference/tf_agents_ppo_cartpole.py [--seeds 1]

The configuration of benchmarks/ppo_cartpole.py: 8 envs x 32 steps per iteration, 20 epochs on
the full batch (TF-Agents' PPO has no minibatches), Adam 1e-3 (epsilon 1e-5) decaying linearly
to 0 over all gradient steps, gamma 0.98, GAE lambda 0.8 with TD(lambda) value targets, clip
0.2, no entropy, value coefficient 0.5, gradient clipping 0.5, no observation or reward
normalization, 64-64 tanh actor and value networks (TF-Agents' default initializers).

Written the TF-Agents way: 8 `suite_gym` CartPoles (gym 0.23, the version tf-agents 0.19 pins)
in a BatchedPyEnvironment (its default thread pool; --no-multithreading steps them in turn)
under a TFPyEnvironment, a DynamicStepDriver feeding a TFUniformReplayBuffer, and collection
and `agent.train` each one `common.function`. PPO uses each env's last row only to bootstrap,
so each batch is [8, 33]: the previous batch's last (acted, not yet trained) row followed by 32
new steps. Every acted step is trained on exactly once, as with rlops' VectorDriver (one extra
row of 8 steps is collected before the loop).

steps_to_475 as benchmarks/ppo_cartpole.py defines it: the env steps after the first iteration
whose trailing 20-episode mean training return (at least 20 episodes finished) is >= 475;
null if never within the budget.

Prints one JSON line: steps_to_475 per seed and median, env_steps_per_s (median over seeds of
the whole loop's wall time, first-call tracing included) and after the first iteration,
collect_s / train_s, eval_mean_return (greedy, --eval-episodes), versions, load average.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import emit, peak_rss_mb  # noqa: E402  (stdlib only; sets TF_CPP_MIN_LOG_LEVEL before TF loads)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tf_agents.agents.ppo import ppo_clip_agent  # noqa: E402
from tf_agents.drivers import dynamic_episode_driver, dynamic_step_driver  # noqa: E402
from tf_agents.environments import batched_py_environment, suite_gym, tf_py_environment  # noqa: E402
from tf_agents.metrics import tf_metrics  # noqa: E402
from tf_agents.networks import actor_distribution_network, value_network  # noqa: E402
from tf_agents.replay_buffers import tf_uniform_replay_buffer  # noqa: E402
from tf_agents.utils import common  # noqa: E402

ENV_ID, NUM_ENVS, NUM_STEPS, NUM_EPOCHS = "CartPole-v1", 8, 32, 20


def make_env(seed: int, num_envs: int, multithreading: bool) -> tf_py_environment.TFPyEnvironment:
    envs = [suite_gym.load(ENV_ID) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.seed(seed * 1000 + i)
    return tf_py_environment.TFPyEnvironment(
        batched_py_environment.BatchedPyEnvironment(envs, multithreading=multithreading))


def build_agent(env: tf_py_environment.TFPyEnvironment, iterations: int, seed: int) -> ppo_clip_agent.PPOClipAgent:
    tf.random.set_seed(seed)
    obs_spec, action_spec = env.observation_spec(), env.action_spec()
    actor = actor_distribution_network.ActorDistributionNetwork(
        obs_spec, action_spec, fc_layer_params=(64, 64), activation_fn=tf.keras.activations.tanh)
    value = value_network.ValueNetwork(obs_spec, fc_layer_params=(64, 64), activation_fn=tf.keras.activations.tanh)
    # TF-Agents' PPO applies one gradient step per epoch (full batch): iterations * epochs in all.
    lr = tf.keras.optimizers.schedules.PolynomialDecay(1e-3, decay_steps=iterations * NUM_EPOCHS, end_learning_rate=0.0)
    agent = ppo_clip_agent.PPOClipAgent(
        env.time_step_spec(), action_spec, optimizer=tf.keras.optimizers.Adam(learning_rate=lr, epsilon=1e-5),
        actor_net=actor, value_net=value, importance_ratio_clipping=0.2, lambda_value=0.8, discount_factor=0.98,
        entropy_regularization=0.0, value_pred_loss_coef=0.5, num_epochs=NUM_EPOCHS, use_gae=True,
        use_td_lambda_return=True, normalize_rewards=False, normalize_observations=False, gradient_clipping=0.5,
        train_step_counter=tf.Variable(0, dtype=tf.int64))
    agent.initialize()
    return agent


def run_seed(seed: int, env_steps: int, multithreading: bool, eval_episodes: int) -> dict:
    iterations = max(1, env_steps // (NUM_ENVS * NUM_STEPS))
    env = make_env(seed, NUM_ENVS, multithreading)
    agent = build_agent(env, iterations, seed)
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(agent.collect_data_spec, batch_size=NUM_ENVS,
                                                            max_length=NUM_STEPS)
    returns = tf_metrics.AverageReturnMetric(batch_size=NUM_ENVS, buffer_size=20)
    episodes = tf_metrics.NumberOfEpisodes()
    observers = [buffer.add_batch, returns, episodes]
    first_driver = dynamic_step_driver.DynamicStepDriver(env, agent.collect_policy, observers, num_steps=NUM_ENVS)
    driver = dynamic_step_driver.DynamicStepDriver(env, agent.collect_policy, observers,
                                                   num_steps=NUM_ENVS * NUM_STEPS)

    def gather_and_clear():
        trajectories = buffer.gather_all()
        buffer.clear()
        return trajectories

    @common.function
    def first_row():
        first_driver.run()
        return tf.nest.map_structure(lambda t: t[:, 0], gather_and_clear())

    @common.function
    def collect(previous_last):
        driver.run()
        new = gather_and_clear()
        batch = tf.nest.map_structure(lambda p, n: tf.concat([p[:, None], n], axis=1), previous_last, new)
        return batch, tf.nest.map_structure(lambda t: t[:, -1], new)

    train = common.function(agent.train)
    collect_s = train_s = first_iteration_s = 0.0
    steps_to_475 = None
    start = time.perf_counter()
    last = first_row()
    total_steps = NUM_ENVS
    for it in range(iterations):
        t0 = time.perf_counter()
        batch, last = collect(last)
        t1 = time.perf_counter()
        loss = train(batch).loss.numpy()
        t2 = time.perf_counter()
        collect_s, train_s = collect_s + t1 - t0, train_s + t2 - t1
        if it == 0:  # tracing of both functions happens here, once
            first_iteration_s = t2 - start
        total_steps += NUM_ENVS * NUM_STEPS
        if (steps_to_475 is None and episodes.result().numpy() >= 20 and returns.result().numpy() >= 475.0):
            steps_to_475 = total_steps
    wall = time.perf_counter() - start
    if not np.isfinite(loss):
        raise FloatingPointError(f"seed {seed}: final loss {loss}")
    eval_return = None
    if eval_episodes:
        eval_env = make_env(seed + 10_000, 1, multithreading=False)
        eval_metric = tf_metrics.AverageReturnMetric(buffer_size=eval_episodes)
        common.function(dynamic_episode_driver.DynamicEpisodeDriver(
            eval_env, agent.policy, [eval_metric], num_episodes=eval_episodes).run)()
        eval_return = float(eval_metric.result().numpy())
    return {"steps_to_475": steps_to_475, "env_steps": total_steps, "wall_s": wall, "collect_s": collect_s,
            "train_s": train_s, "first_iteration_s": first_iteration_s, "episodes": int(episodes.result().numpy()),
            "eval_return": eval_return}


def _median_with_unsolved(steps: list) -> float | None:
    """As benchmarks/ppo_cartpole.py: an unsolved seed counts as infinitely many steps."""
    median = float(np.median([np.inf if s is None else s for s in steps]))
    return None if np.isinf(median) else median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=1, help="number of seeds, trained one after another")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--multithreading", action=argparse.BooleanOptionalAction, default=True,
                        help="BatchedPyEnvironment's thread pool (TF-Agents' default: on)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="greedy episodes after training (0: none)")
    args = parser.parse_args()
    if args.env_steps < NUM_ENVS * NUM_STEPS:
        parser.error(f"--env-steps must be at least one iteration ({NUM_ENVS * NUM_STEPS}), got {args.env_steps}")
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    load_before = os.getloadavg()[0]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs = [run_seed(s, args.env_steps, args.multithreading, args.eval_episodes) for s in seeds]
    rates = [r["env_steps"] / r["wall_s"] for r in runs]
    # After the first iteration (tracing): the remaining iterations' steps over their time.
    after = [(r["env_steps"] - NUM_ENVS - NUM_ENVS * NUM_STEPS) / (r["wall_s"] - r["first_iteration_s"]) for r in runs]
    steps = [r["steps_to_475"] for r in runs]
    emit("tf_agents_ppo_cartpole", agent="PPOClipAgent", env=ENV_ID, seeds=seeds, env_steps=runs[0]["env_steps"],
         steps_to_475=steps, steps_to_475_median=_median_with_unsolved(steps),
         solved=f"{sum(s is not None for s in steps)}/{len(steps)}",
         env_steps_per_s=round(float(np.median(rates)), 1),
         env_steps_per_s_after_first_iteration=round(float(np.median(after)), 1),
         first_iteration_s=[round(r["first_iteration_s"], 2) for r in runs],
         collect_s=[round(r["collect_s"], 1) for r in runs], train_s=[round(r["train_s"], 1) for r in runs],
         wall_s=[round(r["wall_s"], 1) for r in runs], episodes=[r["episodes"] for r in runs],
         eval_mean_return=[None if r["eval_return"] is None else round(r["eval_return"], 1) for r in runs],
         batched_multithreading=args.multithreading,
         versions={"python": platform.python_version(), "tf_agents": version("tf-agents"),
                   "tensorflow": tf.__version__, "tensorflow_probability": version("tensorflow-probability"),
                   "gym": version("gym"), "numpy": np.__version__},
         load_avg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)], peak_rss_mb=round(peak_rss_mb(), 1))


if __name__ == "__main__":
    main()
