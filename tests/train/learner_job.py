"""A small training job for the subprocess tests (preemption, multi-worker).

Trains lt.RegressionAgent with the Learner on step-keyed deterministic data until
`--steps`, in runs of `--run-size`, printing "step N" after each run (flushed, so a parent can
kill it mid-training), then writes the final variables to `--out`. The strategy is
`get_strategy('auto')`: MultiWorkerMirroredStrategy when TF_CONFIG names several workers.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from rlops.train import strategy as strategy_lib  # noqa: E402

# Multi-worker collectives must be configured before anything else touches the TF runtime.
STRATEGY = strategy_lib.get_strategy("auto")

import learner_testlib as lt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from rlops.train import Learner, create_train_step_counter  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--run-size", type=int, default=5)
    parser.add_argument("--checkpoint-interval", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to pause after each run")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    with STRATEGY.scope():
        step = create_train_step_counter()
        agent = lt.RegressionAgent(tf_keras.optimizers.Adam(0.05), step)
    learner = Learner(
        args.root,
        step,
        agent,
        lt.step_keyed_dataset_fn(step, args.global_batch),
        strategy=STRATEGY,
        checkpoint_interval=args.checkpoint_interval,
        summary_interval=5,
    )
    restored = learner.train_step_numpy
    print(
        json.dumps(
            {
                "restored_step": restored,
                "replicas": STRATEGY.num_replicas_in_sync,
                "multi_worker": isinstance(STRATEGY, tf.distribute.MultiWorkerMirroredStrategy),
            }
        ),
        flush=True,
    )
    while learner.train_step_numpy < args.steps:
        learner.run(iterations=min(args.run_size, args.steps - learner.train_step_numpy))
        print(f"step {learner.train_step_numpy}", flush=True)
        time.sleep(args.sleep)
    learner.save_checkpoint()
    np.savez(args.out, *lt.agent_weights(agent), step=learner.train_step_numpy)
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
