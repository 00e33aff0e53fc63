"""Per-arm bandit regret: NeuralEpsilonGreedy and LinUCB with per-arm features vs without.

PerArmBandit: each decision shows a global context and K fresh candidate arms (their own
features; a variable number of them available). With per-arm features the agents score
concat(global, arm) per arm (LinUCB: one shared ridge model; neural: a common-tower network);
without them they see only the global context and an arm index, which says nothing about
fresh arms. Each run starts fresh, interacts for --steps steps of --batch-size decisions, and
reports the mean regret per decision over the last quarter of the run, the cumulative regret,
and the uniform-random policy's expected regret on the same decisions.

Prints ONE JSON line.

    .venv/bin/python benchmarks/bandit_per_arm.py [--steps 400 --batch-size 16 --seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from _common import emit  # noqa: E402

from rlops.agents import trajectories  # noqa: E402
from rlops.agents.bandits import LinUCBAgent, NeuralEpsilonGreedyAgent, PerArmRewardNetwork  # noqa: E402
from rlops.agents.networks import RewardNetwork  # noqa: E402
from rlops.envs.bandit_envs import PerArmBandit  # noqa: E402
from rlops.envs.regret import regret  # noqa: E402


def make_agent(kind: str, env: PerArmBandit, per_arm: bool, args, seed: int):
    ts_spec, action_spec = env.time_step_spec, env.action_spec
    splitter = None
    if not per_arm and env.variable_num_actions:
        splitter = lambda o: (o["context"], o["mask"])  # noqa: E731
    context_spec = env.observation_spec["context"] if splitter else env.observation_spec
    if kind == "linucb":
        return LinUCBAgent(
            ts_spec,
            action_spec,
            alpha=args.alpha,
            add_bias=True,
            accepts_per_arm_features=per_arm,
            observation_and_action_constraint_splitter=splitter,
        )
    if per_arm:
        net = PerArmRewardNetwork(env.observation_spec, common_layers=(64, 32), seed=seed)
    else:
        net = RewardNetwork(context_spec, env.num_actions, hidden_sizes=(64, 32), seed=seed)
    return NeuralEpsilonGreedyAgent(
        ts_spec,
        action_spec,
        net,
        tf_keras.optimizers.Adam(args.learning_rate),
        epsilon=args.epsilon,
        accepts_per_arm_features=per_arm,
        observation_and_action_constraint_splitter=splitter,
    )


def run(kind: str, per_arm: bool, seed: int, args) -> dict:
    tf.random.set_seed(seed)
    env = PerArmBandit(
        args.global_dim, args.arm_dim, args.num_actions, noise_std=args.noise_std, observe_arms=per_arm, seed=seed
    )
    agent = make_agent(kind, env, per_arm, args, seed)

    @tf.function(autograph=False)
    def step():
        batch = env.sample(args.batch_size)
        policy_step = agent.collect_policy.action(env.time_step(batch))
        reward = env.rewards(batch, policy_step.action)
        agent.train(trajectories.single_step_trajectory(batch.contexts, policy_step.action, reward, policy_step.info))
        return (
            tf.reduce_mean(regret(batch.expected_rewards, policy_step.action)),
            tf.reduce_mean(PerArmBandit.uniform_regret(batch)),
        )

    start = time.perf_counter()
    out = np.array([[float(v) for v in step()] for _ in range(args.steps)])
    wall = time.perf_counter() - start
    tail = out[-max(1, args.steps // 4) :]
    return {
        "final_regret_per_decision": float(tail[:, 0].mean()),
        "cumulative_regret": float(out[:, 0].sum() * args.batch_size),
        "random_regret_per_decision": float(tail[:, 1].mean()),
        "decisions_per_s": args.steps * args.batch_size / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--global-dim", type=int, default=4)
    parser.add_argument("--arm-dim", type=int, default=4)
    parser.add_argument("--num-actions", type=int, default=8)
    parser.add_argument("--noise-std", type=float, default=0.1)
    parser.add_argument("--epsilon", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    results = {}
    for kind in ("neural_epsilon_greedy", "linucb"):
        for per_arm in (True, False):
            runs = [run("linucb" if kind == "linucb" else "neural", per_arm, s, args) for s in args.seeds]
            key = f"{kind}_{'per_arm' if per_arm else 'global_only'}"
            results[key] = {m: round(statistics.mean(r[m] for r in runs), 4) for m in runs[0]}
            results[key]["final_regret_per_decision_seeds"] = [round(r["final_regret_per_decision"], 4) for r in runs]
    for kind in ("neural_epsilon_greedy", "linucb"):
        with_f, without = results[f"{kind}_per_arm"], results[f"{kind}_global_only"]
        results[f"{kind}_regret_reduction_vs_global_only"] = round(
            1 - with_f["final_regret_per_decision"] / without["final_regret_per_decision"], 3
        )
    emit(
        "bandit_per_arm",
        steps=args.steps,
        batch_size=args.batch_size,
        seeds=args.seeds,
        num_actions=args.num_actions,
        global_dim=args.global_dim,
        arm_dim=args.arm_dim,
        epsilon=args.epsilon,
        alpha=args.alpha,
        **results,
    )


if __name__ == "__main__":
    main()
