"""Learner throughput: `run(iterations=N)` (one tf.function loop) vs N calls of `run(1)`.

Cases: the neural epsilon-greedy bandit at batch 32 and 1,024 (64-dim contexts, 10 arms, the
digits bandit's shape) and a PPO update on CartPole-shaped experience (8 envs x 32 steps, 20
epochs on the full batch per train step, PPOConfig's defaults). Data is one in-memory batch
repeated, so the figures are the Learner + agent, not an input pipeline. Default strategy.

Prints ONE JSON line: per case and mode, `steps_per_s` (train steps) and `samples_per_s`
(experience rows per second: batch x time steps trained on).

    .venv/bin/python benchmarks/learner_throughput.py [--iterations 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from rlops.agents import specs  # noqa: E402
from rlops.agents.bandits import NeuralEpsilonGreedyAgent  # noqa: E402
from rlops.agents.networks import RewardNetwork  # noqa: E402
from rlops.agents.ppo import PPOAgent  # noqa: E402
from rlops.agents.trajectories import StepType, TimeStep, Trajectory, single_step_trajectory, time_step_spec  # noqa: E402
from rlops.train import Learner, create_train_step_counter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit  # noqa: E402


def bandit_case(batch: int):
    obs_spec = specs.TensorSpec([64], tf.float32, "observation")
    action_spec = specs.BoundedTensorSpec((), tf.int32, 0, 9, name="action")
    step = create_train_step_counter()
    agent = NeuralEpsilonGreedyAgent(
        time_step_spec(obs_spec),
        action_spec,
        RewardNetwork(obs_spec, 10, (64,)),
        tf_keras.optimizers.Adam(1e-3),
        epsilon=0.1,
        train_step_counter=step,
    )
    rng = np.random.default_rng(0)
    experience = single_step_trajectory(
        tf.constant(rng.normal(size=(batch, 64)), tf.float32),
        tf.constant(rng.integers(0, 10, batch), tf.int32),
        tf.constant(rng.integers(0, 2, batch), tf.float32),
    )
    info = tf.nest.map_structure(
        lambda s: tf.ones([batch, 1] + s.shape.as_list(), s.dtype), agent.collect_data_spec.policy_info
    )
    return agent, step, experience._replace(policy_info=info), batch


def ppo_case(num_envs: int = 8, num_steps: int = 32, num_epochs: int = 20):
    high = np.array([4.8, np.finfo(np.float32).max, 0.41887903, np.finfo(np.float32).max], np.float32)
    obs_spec = specs.BoundedTensorSpec([4], tf.float32, -high, high, name="observation")
    action_spec = specs.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
    step = create_train_step_counter()
    agent = PPOAgent(
        time_step_spec(obs_spec),
        action_spec,
        tf_keras.optimizers.Adam(1e-3, epsilon=1e-5),
        importance_ratio_clipping=0.2,
        num_epochs=num_epochs,
        use_gae=True,
        lambda_value=0.8,
        discount_factor=0.98,
        normalize_observations=False,
        normalize_rewards=False,
        initial_adaptive_kl_beta=0.0,
        kl_cutoff_factor=0.0,
        train_step_counter=step,
    )
    b, t = num_envs, num_steps + 1
    obs = tf.random.stateless_normal([b * t, 4], [0, 1], stddev=0.1)
    flat_ts = TimeStep(tf.fill([b * t], StepType.MID), tf.zeros([b * t]), tf.ones([b * t]), obs)
    policy_step = agent.collect_policy.action(flat_ts)
    unflat = lambda x: tf.reshape(x, [b, t] + x.shape.as_list()[1:])  # noqa: E731
    experience = Trajectory(
        step_type=unflat(flat_ts.step_type),
        observation=unflat(obs),
        action=unflat(policy_step.action),
        policy_info=tf.nest.map_structure(unflat, policy_step.info),
        next_step_type=unflat(flat_ts.step_type),
        reward=tf.ones([b, t]),
        discount=tf.ones([b, t]),
    )
    return agent, step, experience, b * num_steps


def measure(name: str, agent, step, experience, rows_per_step: int, iterations: int, repeats: int, root: str) -> dict:
    learner = Learner(
        os.path.join(root, name),
        step,
        agent,
        lambda: tf.data.Dataset.from_tensors(experience).repeat(),
        checkpoint_interval=-1,
        summary_interval=1000,
    )
    learner.run(iterations=2)  # trace once; `iterations` is a tensor, so no retrace below
    out = {}
    for mode, calls, per_call in (("run_n", 1, iterations), ("run_1_x_n", iterations, 1)):
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                learner.run(iterations=per_call)
            # agent.train calls per second: PPO's train step counts gradient steps (epochs), not calls
            rates.append(calls * per_call / (time.perf_counter() - start))
        steps_per_s = statistics.median(rates)
        out[mode] = {"steps_per_s": round(steps_per_s, 1), "samples_per_s": round(steps_per_s * rows_per_step)}
    out["speedup"] = round(out["run_n"]["steps_per_s"] / out["run_1_x_n"]["steps_per_s"], 2)
    out["rows_per_step"] = rows_per_step
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100, help="N in run(N) vs N x run(1)")
    parser.add_argument(
        "--ppo-iterations",
        type=int,
        default=None,
        help="N for the PPO case (default: --iterations); each PPO step is 20 epochs",
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tf.random.set_seed(0)
    cases = {}
    with tempfile.TemporaryDirectory() as root:
        for batch in (32, 1024):
            cases[f"neural_bandit_b{batch}"] = measure(
                f"bandit_{batch}", *bandit_case(batch), args.iterations, args.repeats, root
            )
        cases["ppo_cartpole_update"] = measure(
            "ppo", *ppo_case(), args.ppo_iterations or args.iterations, args.repeats, root
        )
    emit(
        "learner_throughput",
        iterations=args.iterations,
        ppo_iterations=args.ppo_iterations or args.iterations,
        repeats=args.repeats,
        strategy="default",
        cases=cases,
        load_avg_1m=round(os.getloadavg()[0], 2),
    )


if __name__ == "__main__":
    main()
