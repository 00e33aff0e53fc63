"""LinUCB, LinTS and NeuralEpsilonGreedy trained by the Learner in a worker process (the
MultiWorkerMirrored test).

The strategy is `get_strategy('auto')`: MultiWorkerMirroredStrategy when TF_CONFIG names
several workers (one CPU replica each). Every worker builds the same global batches from
`--seed`; `Learner.run_on_batch` gives each replica its rows. Writes every agent's statistics,
weights, counters and reported losses to `--out` (.npz).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from rlops.train import strategy as strategy_lib  # noqa: E402

# Multi-worker collectives must be configured before anything else touches the TF runtime.
STRATEGY = strategy_lib.get_strategy("auto")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from rlops.agents import specs, trajectories  # noqa: E402
from rlops.agents.bandits import LinearThompsonSamplingAgent, LinUCBAgent, NeuralEpsilonGreedyAgent  # noqa: E402
from rlops.agents.networks import RewardNetwork  # noqa: E402
from rlops.train import Learner, create_train_step_counter  # noqa: E402

K, D = 4, 3
OBS_SPEC = tf.TensorSpec([D], tf.float32)
ACTION_SPEC = specs.BoundedTensorSpec((), tf.int32, 0, K - 1)


def global_batches(seed: int, n: int = 3, size: int = 32) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(size=(size, D)).astype(np.float32)
        a = rng.integers(0, K, size).astype(np.int32)
        r = rng.normal(size=size).astype(np.float32)
        w = rng.uniform(0.5, 2.0, size).astype(np.float32)
        out.append((x, a, r, w))
    return out


def make_agents(step_fn) -> dict:
    return {
        "linucb": LinUCBAgent(
            trajectories.time_step_spec(OBS_SPEC), ACTION_SPEC, gamma=0.9, add_bias=True, train_step_counter=step_fn()
        ),
        "lints": LinearThompsonSamplingAgent(
            trajectories.time_step_spec(OBS_SPEC), ACTION_SPEC, gamma=0.95, train_step_counter=step_fn()
        ),
        "neural": NeuralEpsilonGreedyAgent(
            trajectories.time_step_spec(OBS_SPEC),
            ACTION_SPEC,
            RewardNetwork(OBS_SPEC, K, hidden_sizes=(8,), seed=1),
            tf_keras.optimizers.SGD(0.1),
            epsilon=0.1,
            train_step_counter=step_fn(),
        ),
    }


def train_all(strategy, root: str, seed: int) -> dict:
    """Trains each agent on the batches through the Learner; returns name -> arrays."""
    with strategy.scope():
        agents = make_agents(create_train_step_counter)
    out = {}
    for name, agent in agents.items():
        learner = Learner(
            os.path.join(root, name),
            agent.train_step_counter,
            agent,
            checkpoint_interval=-1,
            summary_interval=0,
            strategy=strategy,
            use_kwargs_in_agent_train=True,
        )
        losses = []
        for x, a, r, w in global_batches(seed):
            info = (
                {"propensity": np.ones(len(r), np.float32)}
                if "propensity" in agent.collect_data_spec.policy_info
                else ()
            )
            exp = trajectories.single_step_trajectory(x, a, r, info)
            losses.append(float(learner.run_on_batch(dict(experience=exp, weights=w)).loss))
        out[f"{name}_losses"] = np.array(losses)
        out[f"{name}_step"] = np.array(agent.train_step_counter.numpy())
        if name == "neural":
            for i, v in enumerate(agent.reward_network.trainable_variables):
                out[f"neural_var{i}"] = v.numpy()
        else:
            for key in ("cov_matrix", "data_vector", "num_samples", "theta"):
                out[f"{name}_{key}"] = getattr(agent, key).numpy()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = train_all(STRATEGY, args.root, args.seed)
    out["replicas"] = np.array(STRATEGY.num_replicas_in_sync)
    out["multi_worker"] = np.array(isinstance(STRATEGY, tf.distribute.MultiWorkerMirroredStrategy))
    np.savez(args.out, **out)
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
