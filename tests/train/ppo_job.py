"""PPO through the Learner in one process of a MultiWorkerMirroredStrategy cluster (TF_CONFIG).

Trains lt.make_ppo_agent on `--iterations` deterministic global batches (each built from the
agent's current collect policy, as on-policy collection would) and writes the final weights,
train step and adaptive beta to `--out`.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from rlops.train import strategy as strategy_lib  # noqa: E402

# Multi-worker collectives must be configured before anything else touches the TF runtime.
STRATEGY = strategy_lib.get_strategy("auto")

import learner_testlib as lt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from rlops.train import Learner  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    agent = lt.make_ppo_agent(STRATEGY, **lt.PPO_OPTIONS)
    learner = Learner(
        args.root, agent.train_step_counter, agent, strategy=STRATEGY, checkpoint_interval=-1, summary_interval=0
    )
    print(
        json.dumps(
            {
                "replicas": STRATEGY.num_replicas_in_sync,
                "multi_worker": isinstance(STRATEGY, tf.distribute.MultiWorkerMirroredStrategy),
            }
        ),
        flush=True,
    )
    losses = [float(learner.run_on_batch(lt.ppo_mixed_experience(agent, seed)).loss) for seed in range(args.iterations)]
    np.savez(
        args.out,
        *[v.numpy() for v in agent.trainable_weights],
        step=learner.train_step_numpy,
        beta=agent.adaptive_kl_beta.numpy(),
        losses=np.array(losses),
    )
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
