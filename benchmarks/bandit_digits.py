"""Digits contextual bandit: NeuralEpsilonGreedy and LinUCB vs a plain-NumPy LinUCB.

Each agent interacts with DigitsBandit (1797 contexts, 10 arms, reward 1 for the true label)
for --steps steps of --batch-size contexts. One fresh run per agent gives cumulative regret and
greedy accuracy (over all 1797 digits); then --repeats more calls of the already traced /
compiled loop give steady-state throughput (interactions = contexts acted on and trained on).

Prints ONE JSON line. `--plot PATH` also writes a cumulative-regret PNG.

    .venv/bin/python benchmarks/bandit_digits.py [--plot regret.png]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402  (ships with scikit-learn)

from rlops.agents.bandits import LinUCBAgent, NeuralEpsilonGreedyAgent  # noqa: E402
from rlops.agents.networks import RewardNetwork  # noqa: E402
from rlops.envs.bandit_envs import DigitsBandit, make_interaction_loop  # noqa: E402
from rlops.envs.regret import regret_numpy  # noqa: E402


def greedy_accuracy(env: DigitsBandit, policy) -> float:
    batch = env.all_contexts()
    actions = policy.action(env.time_step(batch)).action.numpy()
    return float(np.mean(actions == env.labels.numpy()))


def run_tf_agent(env: DigitsBandit, agent, greedy_policy, args, jit_compile: bool) -> tuple[dict, np.ndarray]:
    loop = make_interaction_loop(env, agent, args.batch_size, jit_compile=jit_compile)
    steps = tf.constant(args.steps, tf.int32)  # same value every call: one trace, one XLA compile
    start = time.perf_counter()
    per_step = loop(steps).numpy()  # fresh agent: regret and accuracy come from this run
    first = time.perf_counter() - start
    accuracy = greedy_accuracy(env, greedy_policy)
    times = []
    for _ in range(args.repeats):  # the agent keeps learning; per-step work is the same
        start = time.perf_counter()
        loop(steps).numpy()
        times.append(time.perf_counter() - start)
    n = args.steps * args.batch_size
    return {
        "cumulative_regret": float(per_step.sum()),
        "greedy_accuracy": accuracy,
        "interactions_per_s": n / statistics.median(times),
        "interactions_per_s_runs": [round(n / t) for t in times],
        "interactions_per_s_incl_tracing": n / first,
        "jit_compile": jit_compile,
    }, per_step


def run_numpy_linucb(args) -> tuple[dict, np.ndarray]:
    """Textbook LinUCB in NumPy (float64): same model (ridge 1.0, alpha), batch protocol and
    context stream as the TF LinUCBAgent run, so the two regrets should agree closely. Contexts
    are drawn before the clock starts (which favours NumPy slightly)."""
    env = DigitsBandit(seed=args.seed)
    stream = [env.sample(args.batch_size) for _ in range(args.steps)]
    stream = [(b.contexts.numpy().astype(np.float64), b.expected_rewards.numpy()) for b in stream]
    x_all, y_all = env.features.numpy().astype(np.float64), env.labels.numpy()
    k, d = env.num_actions, x_all.shape[1]
    a_mat = np.tile(np.eye(d), (k, 1, 1))  # A_k + lambda I with lambda = 1
    b_vec = np.zeros((k, d))
    per_step = np.zeros(args.steps)
    start = time.perf_counter()
    for t, (x, expected) in enumerate(stream):
        a_inv = np.linalg.inv(a_mat)
        theta = (a_inv @ b_vec[..., None])[..., 0]
        var = ((x[None] @ a_inv) * x[None]).sum(-1).T  # [B, K] x^T A_k^-1 x
        actions = (x @ theta.T + args.alpha * np.sqrt(var)).argmax(1)
        rewards = expected[np.arange(len(x)), actions]
        per_step[t] = regret_numpy(expected, actions).sum()
        for arm in np.unique(actions):
            rows = actions == arm
            a_mat[arm] += x[rows].T @ x[rows]
            b_vec[arm] += x[rows].T @ rewards[rows]
    elapsed = time.perf_counter() - start
    theta = np.linalg.solve(a_mat, b_vec[..., None])[..., 0]
    accuracy = float(np.mean((x_all @ theta.T).argmax(1) == y_all))
    return {
        "cumulative_regret": float(per_step.sum()),
        "greedy_accuracy": accuracy,
        "interactions_per_s": args.steps * args.batch_size / elapsed,
    }, per_step


def plot(path: str, curves: dict[str, np.ndarray], batch_size: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, per_step), style in zip(curves.items(), ["-", "-", "--"]):
        ax.plot(np.arange(1, len(per_step) + 1) * batch_size, np.cumsum(per_step), style, label=name)
    ax.set_xlabel("interactions")
    ax.set_ylabel("cumulative regret")
    ax.set_title("Digits bandit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _rounded(value):
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 4) if abs(value) < 100 else round(value, 1)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--alpha", type=float, default=1.0, help="LinUCB width (TF-Agents default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after the first")
    parser.add_argument("--neural-jit", type=int, default=1, help="XLA for the neural loop (measured faster)")
    parser.add_argument(
        "--linucb-jit",
        type=int,
        default=0,
        help="XLA for the LinUCB loop (measured slower: XLA's CPU Cholesky is slow)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="TF intra/inter-op threads; 0 = TF default. Tiny ops: 1 was fastest here"
    )
    parser.add_argument(
        "--reward-output-gain",
        type=float,
        default=0.03,
        help="initial scale of the reward network's output layer (RewardNetwork's default)",
    )
    parser.add_argument("--plot", metavar="PATH", help="write a cumulative-regret PNG")
    args = parser.parse_args()

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.random.set_seed(args.seed)

    env = DigitsBandit(seed=args.seed)
    net = RewardNetwork(
        env.observation_spec, env.num_actions, hidden_sizes=(64,), output_gain=args.reward_output_gain, seed=args.seed
    )
    neural = NeuralEpsilonGreedyAgent(
        env.time_step_spec, env.action_spec, net, tf_keras.optimizers.Adam(1e-3), epsilon=args.epsilon
    )
    neural_result, neural_curve = run_tf_agent(env, neural, neural.policy, args, bool(args.neural_jit))

    env = DigitsBandit(seed=args.seed)
    linucb = LinUCBAgent(env.time_step_spec, env.action_spec, alpha=args.alpha)
    linucb_result, linucb_curve = run_tf_agent(env, linucb, linucb.greedy_policy, args, bool(args.linucb_jit))

    # Same thread budget for NumPy's BLAS as for TF, so the comparison is like for like.
    with threadpool_limits(limits=args.threads or None):
        numpy_result, numpy_curve = run_numpy_linucb(args)

    result = {
        "benchmark": "bandit_digits",
        "steps": args.steps,
        "batch_size": args.batch_size,
        "interactions": args.steps * args.batch_size,
        "epsilon": args.epsilon,
        "alpha": args.alpha,
        "seed": args.seed,
        "tf_threads": args.threads or "default",
        "reward_output_gain": args.reward_output_gain,
        "neural_epsilon_greedy": neural_result,
        "linucb": linucb_result,
        "numpy_linucb": numpy_result,
        "linucb_speedup_vs_numpy": linucb_result["interactions_per_s"] / numpy_result["interactions_per_s"],
    }
    if args.plot:
        plot(
            args.plot,
            {"NeuralEpsilonGreedy": neural_curve, "LinUCB": linucb_curve, "NumPy LinUCB": numpy_curve},
            args.batch_size,
        )
    print(json.dumps(_rounded(result)))


if __name__ == "__main__":
    main()
