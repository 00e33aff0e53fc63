"""Latency of `serving_ranked` (rlops.train.ranked_serving) at K = 100 candidates, L = 5 slots,
batch 1, with the exact marginals, and of its LiteRT twin (policy.tflite under ai-edge-litert alone,
rlops.train.litert_ranked): Plackett-Luce (quadrature) and epsilon per slot (the dynamic
program's table), each a RankingPolicy over a per-arm network (random weights: latency does not
depend on training) exported by PolicySaver. A fresh process that imports only TensorFlow loads
each SavedModel and times the signature with ready-made tensor inputs: --calls calls after --warmup;
a fresh process that imports only ai-edge-litert and numpy does the same with each policy.tflite.
The parent checks one answer's propensities against the numpy module's exact numbers.

Prints ONE JSON line: `<policy>_p50_ms`, `<policy>_p90_ms`, `<policy>_cpu_ms_per_call` (the timer
process's CPU time per call, all its threads: less sensitive than wall time to other work on a
shared machine), `<policy>_max_abs_error` (reported propensity_item_position against
rlops.heads.slate.probabilities), the same as `litert_<policy>_*` for the LiteRT file, K, L,
calls, threads, and the machine's load average at the end.

    .venv/bin/python benchmarks/ranked_serving.py [--calls 2000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit  # noqa: E402

K, L, DG, DA = 100, 5, 8, 8

# The timing loop both timers share: `serve(**feeds)` --calls times after --warmup; `fetch`
# brings an answer's outputs to numpy.
LOOP = """
for _ in range(warmup):
    serve(**feeds)
times = []
cpu = time.process_time()
for _ in range(calls):
    t = time.perf_counter()
    out = fetch(serve(**feeds))
    times.append(time.perf_counter() - t)
cpu_ms = (time.process_time() - cpu) / calls * 1e3
ms = np.array(times) * 1e3
print(json.dumps({"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)), "cpu_ms": cpu_ms,
                  "answer": {k: v.tolist() for k, v in out.items()}}))
"""
SIZES = {"dg": DG, "da": DA, "k": K}

TIMER = (
    textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import tensorflow as tf
    saved, calls, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    rng = np.random.default_rng(0)
    serve = tf.saved_model.load(saved).signatures["serving_ranked"]
    feeds = {"arg_global": tf.constant(rng.normal(size=(1, %(dg)d)), tf.float32),
             "per_arm": tf.constant(rng.normal(size=(1, %(k)d, %(da)d)), tf.float32),
             "num_actions": tf.constant([%(k)d], tf.int64)}
    def fetch(out):
        return {k: v.numpy() for k, v in out.items()}
""")
    % SIZES
    + LOOP
)

# The LiteRT twin (rlops.train.litert_ranked) under ai-edge-litert alone: no TensorFlow, no rlops.
LITERT_TIMER = (
    textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    model, calls, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    serve = Interpreter(model_path=model, num_threads=threads or None).get_signature_runner("serving_default")
    rng = np.random.default_rng(0)
    feeds = {"arg_global": rng.normal(size=(1, %(dg)d)).astype(np.float32),
             "per_arm": rng.normal(size=(1, %(k)d, %(da)d)).astype(np.float32),
             "num_actions": np.array([%(k)d], np.int64), "action_mask": np.ones((1, %(k)d), np.int64)}
    def fetch(out):
        return out
""")
    % SIZES
    + LOOP
)


def export(directory: str) -> dict[str, str]:
    """Both policies' SavedModels, each with its LiteRT twin (policy.tflite) beside it."""
    import tensorflow as tf

    from rlops.agents import specs, trajectories
    from rlops.agents.bandits import PerArmRewardNetwork
    from rlops.agents.ranking import EpsilonPerSlot, PlackettLuce, RankingPolicy
    from rlops.train.litert import convert_to_dir
    from rlops.train.policy_saver import PolicySaver

    obs_spec = {
        "global": tf.TensorSpec([DG], tf.float32),
        "per_arm": tf.TensorSpec([K, DA], tf.float32),
        "num_actions": specs.BoundedTensorSpec((), tf.int64, 1, K),
    }
    tf.random.set_seed(0)
    net = PerArmRewardNetwork(obs_spec, common_layers=(32, 16), output_gain=1.0)
    time_step_spec = trajectories.time_step_spec(obs_spec, tf.TensorSpec([L], tf.float32))
    action_spec = specs.BoundedTensorSpec([L], tf.int32, 0, K - 1)
    out = {}
    for name, slate_policy in (("plackett_luce", PlackettLuce(0.5)), ("epsilon_per_slot", EpsilonPerSlot(0.1))):
        path = os.path.join(directory, name)
        PolicySaver(RankingPolicy(time_step_spec, action_spec, net, slate_policy)).save(path)
        convert_to_dir(path)
        out[name] = path
    return out


def max_abs_error(name: str, answer: dict) -> float:
    """The reported marginals of the timed answer against the numpy module's on its scores."""
    import numpy as np

    from rlops.agents.ranking import EpsilonPerSlot, PlackettLuce

    policy = PlackettLuce(0.5) if name == "plackett_luce" else EpsilonPerSlot(0.1)
    scores = np.asarray(answer["scores"], np.float64)
    slate = np.asarray(answer["slate"])
    exact = policy.marginals(scores, L)[np.arange(len(slate))[:, None], slate, np.arange(L)]
    return float(np.abs(np.asarray(answer["propensity_item_position"]) - exact).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--threads", type=int, default=1, help="TF intra/inter-op threads in the timer (0: TF's default)"
    )
    args = parser.parse_args()
    fields: dict[str, object] = {"K": K, "L": L, "batch": 1, "calls": args.calls, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in export(tmp).items():
            for artifact, timer, target in (
                ("", TIMER, path),
                ("litert_", LITERT_TIMER, os.path.join(path, "policy.tflite")),
            ):
                proc = subprocess.run(
                    [sys.executable, "-c", timer, target, str(args.calls), str(args.warmup), str(args.threads)],
                    capture_output=True,
                    text=True,
                    env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                    check=True,
                )
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                key = f"{artifact}{name}"
                fields[f"{key}_p50_ms"] = round(result["p50_ms"], 4)
                fields[f"{key}_p90_ms"] = round(result["p90_ms"], 4)
                fields[f"{key}_cpu_ms_per_call"] = round(result["cpu_ms"], 4)
                fields[f"{key}_max_abs_error"] = max_abs_error(name, result["answer"])
    fields["load_average"] = [round(x, 2) for x in os.getloadavg()]
    emit("ranked_serving", **fields)


if __name__ == "__main__":
    main()
