"""PPO update cost on the HalfCheetah-like continuous-control configuration, without MuJoCo.

8 envs x 256 steps (+ each env's bootstrap row), 10 epochs, minibatches of 64, observation and
reward normalization, 64-64 tanh networks, observation dim 17, action dim 6 (HalfCheetah-v5's
shapes), on a synthetic batch acted by the collect policy. Isolates what the collection-bound
CartPole benchmark hides: many small minibatch steps.

Prints one JSON line: per-call and per-minibatch milliseconds (median of --calls calls, first
call's tracing/compilation separate) with and without XLA, and the update-only throughput in
env steps/s (2,048 env steps per update).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, peak_rss_mb  # noqa: E402

from rlops.agents import specs  # noqa: E402
from rlops.agents.networks import ActorNetwork, ValueNetwork  # noqa: E402
from rlops.agents.ppo import PPOAgent  # noqa: E402
from rlops.agents.trajectories import StepType, TimeStep, Trajectory, time_step_spec  # noqa: E402

OBS_DIM, ACT_DIM, ENVS, STEPS, EPOCHS, MINIBATCH = 17, 6, 8, 256, 10, 64


def make(jit: bool) -> tuple[PPOAgent, Trajectory]:
    obs_spec = tf.TensorSpec([OBS_DIM], tf.float32, "observation")
    act_spec = specs.BoundedTensorSpec([ACT_DIM], tf.float32, -1.0, 1.0, name="action")
    agent = PPOAgent(
        time_step_spec(obs_spec),
        act_spec,
        tf_keras.optimizers.Adam(3e-4, epsilon=1e-5),
        ActorNetwork(obs_spec, act_spec, (64, 64)),
        ValueNetwork(obs_spec, (64, 64)),
        importance_ratio_clipping=0.2,
        num_epochs=EPOCHS,
        minibatch_size=MINIBATCH,
        use_gae=True,
        use_td_lambda_return=True,
        lambda_value=0.95,
        entropy_regularization=0.0,
        initial_adaptive_kl_beta=0.0,
        kl_cutoff_factor=0.0,
        gradient_clipping=0.5,
        normalize_observations=True,
        normalize_rewards=True,
        jit_compile=jit,
    )
    b, t = ENVS, STEPS + 1
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(b * t, OBS_DIM)).astype(np.float32)
    step_type = np.full(b * t, StepType.MID, np.int32)
    policy_step = agent.collect_policy.action(
        TimeStep(step_type, np.zeros(b * t, np.float32), np.ones(b * t, np.float32), obs)
    )
    unflat = lambda x: tf.reshape(x, [b, t] + x.shape.as_list()[1:])  # noqa: E731
    st = unflat(tf.constant(step_type))
    experience = Trajectory(
        step_type=st,
        observation=unflat(tf.constant(obs)),
        action=unflat(policy_step.action),
        policy_info=tf.nest.map_structure(unflat, policy_step.info),
        next_step_type=st,
        reward=tf.constant(rng.normal(size=(b, t)).astype(np.float32)),
        discount=tf.ones([b, t]),
    )
    return agent, experience


def measure(jit: bool, calls: int) -> dict:
    agent, experience = make(jit)
    start = time.perf_counter()
    agent.train(experience)
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        agent.train(experience)
        times.append(time.perf_counter() - start)
    per_call = statistics.median(times)
    steps_per_call = EPOCHS * -(-ENVS * (STEPS + 1) // MINIBATCH)
    return {
        "first_call_s": round(first, 2),
        "call_ms": round(1000 * per_call, 1),
        "minibatch_ms": round(1000 * per_call / steps_per_call, 3),
        "gradient_steps_per_call": steps_per_call,
        "update_env_steps_per_s": round(ENVS * STEPS / per_call),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    emit(
        "ppo_update_cost",
        config=f"{ENVS}x{STEPS}, {EPOCHS} epochs, minibatch {MINIBATCH}, obs {OBS_DIM}, "
        f"act {ACT_DIM}, 64-64, obs+reward normalization",
        xla=measure(True, args.calls),
        no_xla=measure(False, args.calls),
        peak_rss_mb=round(peak_rss_mb(), 1),
    )


if __name__ == "__main__":
    main()
