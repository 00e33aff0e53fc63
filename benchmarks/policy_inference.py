"""Latency and throughput of an exported CartPole policy served by plain TensorFlow.

Exports the greedy policy of a CartPole PPO agent (random weights unless --saved-model points
at an export: latency does not depend on training), then a fresh process that imports only
TensorFlow loads the SavedModel and times its `action` signature: --calls calls after
--warmup calls, at batch 1 and batch 1024. A call converts NumPy inputs to tensors and the
action back to NumPy, as a serving process would.

Prints ONE JSON line: p50_ms_b1, p50_ms_b1024, actions_per_s_b1024, load_s, plus, measured
interleaved in the same process: ready-made tensor inputs, NumPy handed to the signature,
the nested `policy.action(time_step)` path (how TF-Agents users call saved policies), and
`tf_call_floor`, a SavedModel with the same signature that does no work (TF's call cost).

    .venv/bin/python benchmarks/policy_inference.py [--saved-model DIR] [--calls 1000]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

# A namedtuple with TimeStep's name and fields is what the SavedModel's nested function expects.
_TimeStep = collections.namedtuple("TimeStep", ["step_type", "reward", "discount", "observation"])


def export_cartpole_policy(export_dir: str, normalize_observations: bool) -> None:
    import gymnasium as gym
    import tf_keras

    from rlops.agents.ppo import PPOAgent
    from rlops.agents.trajectories import time_step_spec
    from rlops.envs.gym_env import space_to_spec
    from rlops.train import PolicySaver

    env = gym.make("CartPole-v1")
    obs_spec = space_to_spec(env.observation_space, "observation")
    action_spec = space_to_spec(env.action_space, "action")
    agent = PPOAgent(time_step_spec(obs_spec), action_spec, tf_keras.optimizers.Adam(1e-3),
                     normalize_observations=normalize_observations)
    PolicySaver(agent.policy, train_step=agent.train_step_counter).save(export_dir)


def _inputs(batch: int, rng: np.random.Generator) -> dict:
    return dict(step_type=np.ones([batch], np.int32), reward=np.zeros([batch], np.float32),
                discount=np.ones([batch], np.float32),
                observation=rng.normal(scale=0.05, size=(batch, 4)).astype(np.float32))


def _time_interleaved(fns: dict, calls: int, warmup: int, rounds: int = 10) -> dict:
    """ms per call for each fn; variants alternate in rounds so load changes on a shared machine
    hit them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    out = {k: [] for k in fns}
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(per_round):
                start = time.perf_counter()
                fn()
                out[name].append(time.perf_counter() - start)
    return {k: np.asarray(v) * 1e3 for k, v in out.items()}


def measure(saved_dir: str, floor_dir: str, calls: int, warmup: int) -> dict:
    """Runs in a fresh process: TensorFlow only."""
    import tensorflow as tf

    start = time.perf_counter()
    policy = tf.saved_model.load(saved_dir)
    action = policy.signatures["action"]
    load_s = time.perf_counter() - start
    floor = tf.saved_model.load(floor_dir).signatures["action"]
    rng = np.random.default_rng(0)
    results = {"load_s": round(load_s, 3)}
    start = time.perf_counter()
    action(**{k: tf.constant(v) for k, v in _inputs(1, rng).items()})
    results["first_call_ms"] = round((time.perf_counter() - start) * 1e3, 2)

    def serve(fn, inputs):  # the serving path: NumPy in, NumPy out
        return lambda: fn(**{k: tf.constant(v) for k, v in inputs.items()})["action"].numpy()

    b1, b1024 = _inputs(1, rng), _inputs(1024, rng)
    tensors = {k: tf.constant(v) for k, v in b1.items()}
    nested_time_step = _TimeStep(**tensors)
    for batch, inputs in ((1, b1), (1024, b1024)):
        actions = serve(action, inputs)()
        assert actions.shape == (batch,) and set(np.unique(actions)) <= {0, 1}, actions
    ms = _time_interleaved({
        "b1": serve(action, b1),
        "b1024": serve(action, b1024),
        "b1_tensor_inputs": lambda: action(**tensors),
        "b1_numpy_inputs": lambda: action(**b1)["action"].numpy(),  # TF converts: slower
        "b1_nested_fn": lambda: policy.action(nested_time_step, ()),  # TF-Agents style call
        "b1_tf_call_floor": serve(floor, b1),  # same signature, returns its input: TF's own cost
    }, calls, warmup)
    for name, values in ms.items():
        results[f"p50_ms_{name}"] = round(float(np.median(values)), 4)
    results["p90_ms_b1"] = round(float(np.percentile(ms["b1"], 90)), 4)
    results["actions_per_s_b1024"] = round(1024 * len(ms["b1024"]) / (ms["b1024"].sum() / 1e3))
    results["rlops_imported"] = any(m == "rlops" or m.startswith("rlops.") for m in sys.modules)
    return results


def export_call_floor(export_dir: str) -> None:
    """A SavedModel with the same `action` signature that does no work: the cost of calling."""
    import tensorflow as tf

    specs = [tf.TensorSpec([None], tf.int32, "step_type"), tf.TensorSpec([None], tf.float32, "reward"),
             tf.TensorSpec([None], tf.float32, "discount"), tf.TensorSpec([None, 4], tf.float32, "observation")]
    fn = tf.function(lambda step_type, reward, discount, observation: {"action": step_type}, input_signature=specs)
    module = tf.Module()
    module.action = fn
    tf.saved_model.save(module, export_dir, signatures={"action": fn})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", help="an exported policy dir (default: export a fresh one)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--normalize-observations", action="store_true",
                        help="export a policy with an observation normalizer (more ops per call)")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)  # internal: the fresh process
    args = parser.parse_args()

    if args.measure:
        print(json.dumps(measure(*args.measure, args.calls, args.warmup)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        saved = args.saved_model
        if saved is None:
            saved = os.path.join(tmp, "greedy_policy")
            export_cartpole_policy(saved, args.normalize_observations)
        floor = os.path.join(tmp, "call_floor")
        export_call_floor(floor)
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", saved, floor,
                               "--calls", str(args.calls), "--warmup", str(args.warmup)],
                              capture_output=True, text=True, check=False)
    if proc.returncode:
        sys.exit(f"measuring process failed:\n{proc.stderr[-3000:]}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import emit
    emit("policy_inference", policy="CartPole PPO greedy_policy" if args.saved_model is None else args.saved_model,
         normalize_observations=args.normalize_observations, calls=args.calls, **results,
         load_avg_1m=round(os.getloadavg()[0], 2),
         reference={"tf_agents_policy_saver_p50_ms_b1": "0.43-0.63", "sb3_predict_p50_ms_b1": "0.16-0.26"})


if __name__ == "__main__":
    main()
