"""Latency and throughput of an exported CartPole policy served by plain TensorFlow.

Exports the greedy policy of a CartPole PPO agent (random weights unless --saved-model points
at an export: latency does not depend on training), then a fresh process that imports only
TensorFlow loads the SavedModel and times its `action` signature: --calls calls after
--warmup calls, at batch 1 and batch 1024. A call converts NumPy inputs to tensors and the
action back to NumPy, as a serving process would.

LiteRT rows (`litert`, unless --no-litert): the CartPole policy, the digits bandit's served policy
and a 34-item per-arm policy with string features, each converted to policy.tflite
(rlops.train.litert) and timed beside its SavedModel in one fresh process: p50 at batch 1 and
actions/s at batch 1024 for both, and `litert_fixed_shape_p50_ms_b1`: the same file called through
set_tensor / invoke / get_tensor at a shape allocated once (fixed_shape_call), without the
SignatureRunner's per-call resize and allocation.

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
import shutil
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
    agent = PPOAgent(
        time_step_spec(obs_spec),
        action_spec,
        tf_keras.optimizers.Adam(1e-3),
        normalize_observations=normalize_observations,
    )
    PolicySaver(agent.policy, train_step=agent.train_step_counter).save(export_dir)


def _inputs(batch: int, rng: np.random.Generator) -> dict:
    return dict(
        step_type=np.ones([batch], np.int32),
        reward=np.zeros([batch], np.float32),
        discount=np.ones([batch], np.float32),
        observation=rng.normal(scale=0.05, size=(batch, 4)).astype(np.float32),
    )


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
    ms = _time_interleaved(
        {
            "b1": serve(action, b1),
            "b1024": serve(action, b1024),
            "b1_tensor_inputs": lambda: action(**tensors),
            "b1_numpy_inputs": lambda: action(**b1)["action"].numpy(),  # TF converts: slower
            "b1_nested_fn": lambda: policy.action(nested_time_step, ()),  # TF-Agents style call
            "b1_tf_call_floor": serve(floor, b1),  # same signature, returns its input: TF's own cost
        },
        calls,
        warmup,
    )
    for name, values in ms.items():
        results[f"p50_ms_{name}"] = round(float(np.median(values)), 4)
    results["p90_ms_b1"] = round(float(np.percentile(ms["b1"], 90)), 4)
    results["actions_per_s_b1024"] = round(1024 * len(ms["b1024"]) / (ms["b1024"].sum() / 1e3))
    results["rlops_imported"] = any(m == "rlops" or m.startswith("rlops.") for m in sys.modules)
    return results


def export_call_floor(export_dir: str) -> None:
    """A SavedModel with the same `action` signature that does no work: the cost of calling."""
    import tensorflow as tf

    specs = [
        tf.TensorSpec([None], tf.int32, "step_type"),
        tf.TensorSpec([None], tf.float32, "reward"),
        tf.TensorSpec([None], tf.float32, "discount"),
        tf.TensorSpec([None, 4], tf.float32, "observation"),
    ]
    fn = tf.function(lambda step_type, reward, discount, observation: {"action": step_type}, input_signature=specs)
    module = tf.Module()
    module.action = fn
    tf.saved_model.save(module, export_dir, signatures={"action": fn})


# ---- LiteRT beside the SavedModel -------------------------------------------------------------------
DIGITS_CONTEXT, DIGITS_ACTIONS, PER_ARM_ITEMS = 64, 10, 34


def export_digits_policy(export_dir: str) -> None:
    """The digits bandit's served policy: NeuralEpsilonGreedy over a 64-float context, 10 actions,
    serving_default exploring at epsilon 0.1 (random weights: latency does not depend on training)."""
    import tensorflow as tf

    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.components.trainer.config import TrainerConfig
    from rlops.features.export import FeaturePolicy
    from rlops.features.preprocessing import Preprocessor
    from rlops.features.schema import FeatureSchema, FeatureSpec
    from rlops.train import PolicySaver

    pre = Preprocessor(FeatureSchema([FeatureSpec("context", "float_list", dim=DIGITS_CONTEXT)]))
    agent = make_bandit_agent(
        TrainerConfig(num_actions=DIGITS_ACTIONS), pre.observation_dim, tf.Variable(0, dtype=tf.int64)
    )
    PolicySaver(FeaturePolicy(serving_policy(agent), pre), serving_epsilon=0.1).save(export_dir)


def export_per_arm_policy(export_dir: str) -> None:
    """A 34-item per-arm LinUCB policy with string features: 4 string user columns (vocabularies
    of 50 + the OOV bucket), a float, and 3 string item features per candidate."""
    import tensorflow as tf

    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.components.trainer.config import TrainerConfig
    from rlops.features.export import PerArmFeaturePolicy
    from rlops.features.per_arm import PerArmPreprocessor
    from rlops.features.schema import FeatureSchema, FeatureSpec
    from rlops.train import PolicySaver

    users = [
        FeatureSpec(f"user_{i}", "categorical", dtype="string", vocabulary=[f"u{i}_{j}" for j in range(50)])
        for i in range(4)
    ]
    items = [
        FeatureSpec(f"item_feature_{i}", "categorical", dtype="string", vocabulary=[f"c{i}_{j}" for j in range(20)])
        for i in range(3)
    ]
    schema = FeatureSchema(users + [FeatureSpec("age", "float", mean=30.0, std=10.0)], per_arm=items)
    pre = PerArmPreprocessor(schema, PER_ARM_ITEMS)
    agent = make_bandit_agent(
        TrainerConfig(agent="lin_ucb", num_actions=PER_ARM_ITEMS),
        pre.global_dim,
        tf.Variable(0, dtype=tf.int64),
        per_arm=(pre.global_dim, PER_ARM_ITEMS, pre.arm_dim),
    )
    PolicySaver(PerArmFeaturePolicy(serving_policy(agent), pre), serving_epsilon=0.1).save(export_dir)


def _serving_inputs(description: dict, batch: int, rng: np.random.Generator) -> dict:
    """Raw inputs for a policy's serving inputs (policy_litert.json): vocabulary or unseen strings."""
    out = {}
    for name, spec in description["inputs"].items():
        shape = [batch] + spec["shape"][1:]
        if spec["dtype"] == "string":
            prefix = f"c{name[-1]}_" if name.startswith("per_arm_") else f"u{name[-1]}_"
            out[name] = rng.choice(np.asarray([f"{prefix}{j}" for j in range(60)], object), size=shape)
        elif name == "num_actions":
            out[name] = rng.integers(1, PER_ARM_ITEMS + 1, batch).astype(np.int64)
        else:
            out[name] = rng.normal(size=shape).astype(np.float32)
    return out


def fixed_shape_call(model: str, inputs: dict):
    """A LiteRT call at one batch shape: inputs resized and tensors allocated once, then per call
    set_tensor / invoke / get_tensor -- skipping the SignatureRunner's per-call resize and
    allocation (most of a call's cost for a policy with many inputs)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=model)
    runner = interpreter.get_signature_runner("serving_default")
    ins, outs = runner.get_input_details(), runner.get_output_details()
    del runner  # it holds the interpreter: resize / invoke refuse while it lives
    for name, value in inputs.items():
        interpreter.resize_tensor_input(ins[name]["index"], value.shape)
    interpreter.allocate_tensors()
    action = outs["action"]["index"]

    def call():
        for name, value in inputs.items():
            interpreter.set_tensor(ins[name]["index"], value)
        interpreter.invoke()
        return interpreter.get_tensor(action)

    return call


def measure_litert(policies: dict, calls: int, warmup: int) -> dict:
    """Runs in a fresh process: per policy, the SavedModel (serving_default, or `action` for PPO)
    and its policy.tflite under ai-edge-litert, NumPy in and out, interleaved."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(0)
    out = {}
    for label, path in policies.items():
        with open(os.path.join(path, "policy_litert.json")) as f:
            description = json.load(f)
        loaded = tf.saved_model.load(path)
        dense = description["source_signature"] == "action"
        sig = loaded.signatures["action" if dense else "serving_default"]
        specs = sig.structured_input_signature[1]
        model = os.path.join(path, "policy.tflite")
        # Batch 1: one thread (threads cost more than they give); batch 1024: every core, as TF uses.
        runners = {
            1: Interpreter(model_path=model).get_signature_runner("serving_default"),
            1024: Interpreter(model_path=model, num_threads=os.cpu_count()).get_signature_runner("serving_default"),
        }
        fns = {}
        for batch in (1, 1024):
            runner = runners[batch]
            raw = _serving_inputs(description, batch, rng)
            feeds = dict(_inputs(batch, rng)) if dense else raw
            lite = {k: v.astype(np.bytes_).astype(object) if v.dtype == object else v for k, v in raw.items()}
            fns[f"saved_model_b{batch}"] = lambda f=feeds, fn=sig, sp=specs: fn(
                **{k: tf.constant(v, sp[k].dtype) for k, v in f.items()}
            )["action"].numpy()
            fns[f"litert_b{batch}"] = lambda f=lite, r=runner: r(**f)["action"]
            if batch == 1:
                fns["litert_fixed_shape_b1"] = fixed_shape_call(model, lite)
        ms = _time_interleaved(fns, calls, warmup)
        row = {}
        for kind in ("saved_model", "litert"):
            row[f"{kind}_p50_ms_b1"] = round(float(np.median(ms[f"{kind}_b1"])), 4)
            b = ms[f"{kind}_b1024"]
            row[f"{kind}_actions_per_s_b1024"] = round(1024 * len(b) / (b.sum() / 1e3))
        row["litert_fixed_shape_p50_ms_b1"] = round(float(np.median(ms["litert_fixed_shape_b1"])), 4)
        row["litert_speedup_b1"] = round(row["saved_model_p50_ms_b1"] / row["litert_p50_ms_b1"], 1)
        row["litert_file_kb"] = round(os.path.getsize(os.path.join(path, "policy.tflite")) / 1024, 1)
        out[label] = row
    out["tensorflow_in_process"] = True  # both artifacts measured side by side in one process
    return out


def export_litert_policies(tmp: str, cartpole_dir: str) -> dict:
    """CartPole PPO (given), the digits bandit and the per-arm string policy, each with its LiteRT twin."""
    from rlops.train import litert

    policies = {
        "cartpole_ppo": cartpole_dir,
        "digits_bandit": os.path.join(tmp, "digits"),
        "per_arm_34_items_strings": os.path.join(tmp, "per_arm"),
    }
    export_digits_policy(policies["digits_bandit"])
    export_per_arm_policy(policies["per_arm_34_items_strings"])
    for label, path in policies.items():
        if not os.path.exists(os.path.join(path, litert.LITERT_FILE)):
            if not path.startswith(tmp):  # --saved-model: convert a copy, leave the user's directory alone
                policies[label] = path = shutil.copytree(path, os.path.join(tmp, label))
            litert.convert_to_dir(path)
    return policies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", help="an exported policy dir (default: export a fresh one)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--normalize-observations",
        action="store_true",
        help="export a policy with an observation normalizer (more ops per call)",
    )
    parser.add_argument("--no-litert", action="store_true", help="skip the LiteRT rows")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)  # internal: the fresh process
    parser.add_argument("--measure-litert", help=argparse.SUPPRESS)  # internal: JSON {label: dir}
    args = parser.parse_args()

    if args.measure:
        print(json.dumps(measure(*args.measure, args.calls, args.warmup)))
        return
    if args.measure_litert:
        print(json.dumps(measure_litert(json.loads(args.measure_litert), args.calls, args.warmup)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        saved = args.saved_model
        if saved is None:
            saved = os.path.join(tmp, "greedy_policy")
            export_cartpole_policy(saved, args.normalize_observations)
        floor = os.path.join(tmp, "call_floor")
        export_call_floor(floor)
        proc = subprocess.run(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--measure",
                saved,
                floor,
                "--calls",
                str(args.calls),
                "--warmup",
                str(args.warmup),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode:
            sys.exit(f"measuring process failed:\n{proc.stderr[-3000:]}")
        results = json.loads(proc.stdout.strip().splitlines()[-1])
        if not args.no_litert:
            policies = export_litert_policies(tmp, saved)
            lite = subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--measure-litert",
                    json.dumps(policies),
                    "--calls",
                    str(args.calls),
                    "--warmup",
                    str(args.warmup),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if lite.returncode:
                sys.exit(f"LiteRT measuring process failed:\n{lite.stderr[-3000:]}")
            results["litert"] = json.loads(lite.stdout.strip().splitlines()[-1])

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import emit

    emit(
        "policy_inference",
        policy="CartPole PPO greedy_policy" if args.saved_model is None else args.saved_model,
        normalize_observations=args.normalize_observations,
        calls=args.calls,
        **results,
        load_avg_1m=round(os.getloadavg()[0], 2),
        reference={"tf_agents_policy_saver_p50_ms_b1": "0.43-0.63", "sb3_predict_p50_ms_b1": "0.16-0.26"},
    )


if __name__ == "__main__":
    main()
