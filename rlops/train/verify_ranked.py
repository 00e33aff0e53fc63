"""Draw checks for a ranking SavedModel's `serving_ranked`, as a server sees it: two fresh processes
each load the SavedModel with plain TensorFlow and call the signature repeatedly at batch 1 and at
batch N; this process then holds their slates to the exact numpy probabilities
(rlops.heads.slate.verifier, on the scores the model returned):

- every slate shows allowed candidates only, none twice; `greedy_slate` and `scores` are the same
  on every call and in both processes, and `greedy_slate` is the top L by score;
- the reported `propensity_item_position` is the exact marginal of the shown item at its slot and
  `propensity_cascade` the exact prefix probability (PROPENSITY_TOLERANCE, relative for the cascade);
- per slot, the items' frequencies match the exact marginals (Pearson chi-square, cells expecting
  fewer than 5 pooled, Bonferroni over the L slots);
- draws repeat no more often than independent draws do, between calls in a process and between the
  two processes at the same call (per slot, Bonferroni over the slots).

Each of the 8 tests (2 batch sizes x frequencies, repeats in each process, repeats across them)
fails at rlops.heads.draws.SIGNIFICANCE = 1e-3 / 16, the serving head's budget for 16
tests a push (a LiteRT twin checked the same way makes 16): an honest push fails one with
probability < 1e-3, and such a failure is drawn again before it stands (rlops.heads.draws.confirmed), so
a push fails by chance with probability < 1e-6. A head whose random ops carry baked-in seeds repeats
across processes (or, stateless, across calls) and fails at p far below that, both times.

    verify_ranked(saved_model_dir, inputs)   # raises RuntimeError naming the failed check
    ranked_verifier(inputs)                  # the same as a Pusher `verifier(local_dir)`

`inputs` are the verification rows: keyed by serving input name (`per_arm_<name>`, `num_actions`
(default: every candidate slot in use), global features; optional `action_mask` [N, K] selects `serving_ranked_masked`), by record key
(`per_arm/<name>`), or as the `action` signature's feeds (`observation_<name>`). The child runs as
`python -m rlops.train.verify_ranked DIR INPUTS.npz OUT.npz CALLS_ONE CALLS_MANY ROWS_MANY`, imports
TensorFlow, numpy and json only, and prints one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlops.train.processes import at_once

# The Pusher's interpreter for fresh-process checks (rlops.components.pusher.core.VERIFY_PYTHON_ENV;
# this layer cannot import the components).
VERIFY_PYTHON_ENV = "RLOPS_VERIFY_PYTHON"
SERVING_RANKED, SERVING_RANKED_MASKED = "serving_ranked", "serving_ranked_masked"  # ranked_serving's names
ACTION_MASK = "action_mask"
DRAWN = ("slate", "propensity_item_position", "propensity_cascade", "greedy_slate", "scores")
CALLS_ONE, CALLS_MANY, ROWS_MANY = 1000, 16, 64


# ---- the child: plain TensorFlow ---------------------------------------------------------------
def draw(saved_model_dir: str, inputs_npz: str, out_npz: str, calls_one: int, calls_many: int, rows_many: int) -> dict:
    """Loads the SavedModel, calls serving_ranked(_masked) `calls_one` times on the first row and
    `calls_many` times on the first `rows_many` rows, and writes the outputs [calls, rows, ...] as
    `one_<output>` / `many_<output>` plus the feeds (`feed_<name>`) to `out_npz`. Returns the
    signature's metadata (JSON-ready)."""
    import tensorflow as tf

    data = dict(np.load(inputs_npz))
    policy = tf.saved_model.load(saved_model_dir)
    name = SERVING_RANKED_MASKED if ACTION_MASK in data else SERVING_RANKED
    if name not in policy.signatures:
        return {"ok": False, "error": f"{saved_model_dir} has no {name} signature: {sorted(policy.signatures)}"}
    serve = policy.signatures[name]
    specs = serve.structured_input_signature[1]
    arms = [v for k, v in data.items() if k.startswith("per_arm") and np.ndim(v) >= 2]
    if "num_actions" in specs and "num_actions" not in data and arms:  # every candidate slot in use
        data["num_actions"] = np.full(len(arms[0]), arms[0].shape[1], np.int64)
    missing = sorted(set(specs) - set(data))
    if missing:
        return {"ok": False, "error": f"{name}: no verification input for {missing}"}
    rows = min(int(rows_many), min(len(data[k]) for k in specs))
    feeds = {k: tf.constant(data[k][:rows], specs[k].dtype) for k in specs}
    out: dict[str, Any] = {}
    for prefix, batch, calls in (("one", 1, int(calls_one)), ("many", rows, int(calls_many))):
        part = {k: v[:batch] for k, v in feeds.items()}
        answers = [serve(**part) for _ in range(calls)]
        for key in DRAWN:
            out[f"{prefix}_{key}"] = np.stack([a[key].numpy() for a in answers])
    for k, v in feeds.items():
        value = v.numpy()
        out[f"feed_{k}"] = value.astype(np.bytes_) if value.dtype == object else value  # no pickles
    np.savez(out_npz, **out)
    return {"ok": True, "signature": name, "rows": rows, "metadata": read_metadata(policy)}


def read_metadata(loaded: Any) -> dict[str, Any]:
    """A loaded SavedModel's `get_metadata` as JSON-ready Python values (strings decoded)."""
    values = {k: v.numpy() for k, v in loaded.signatures["get_metadata"]().items()}
    return {k: v.decode() if isinstance(v, bytes) else v.item() for k, v in values.items()}


# ---- the parent: the checks (rlops.heads.slate.verifier) ---------------------------------------
def ranked_draws_error(
    draws: Sequence[Mapping[str, np.ndarray]], metadata: Mapping[str, Any], name: str = SERVING_RANKED
) -> str | None:
    """`draws`: one `draw` output per process (`name` the artifact, for the messages). The first
    failed check of the slate head's verifier (see the module docstring), or None: the allowed
    candidates are the verification rows' `action_mask` and `num_actions`."""
    from rlops.heads.epsilon_greedy import allowed_mask
    from rlops.heads.slate import verifier

    feeds = {k[len("feed_") :]: v for k, v in draws[0].items() if k.startswith("feed_")}

    def allowed(batch: int, k: int) -> np.ndarray:
        return allowed_mask(batch, k, _rows(feeds.get(ACTION_MASK), batch), _rows(feeds.get("num_actions"), batch))

    return verifier.draws_error(
        draws, verifier.policy_from_metadata(metadata), int(metadata["num_slots"]), allowed, name
    )


def _rows(value: np.ndarray | None, batch: int) -> np.ndarray | None:
    return None if value is None else np.asarray(value)[:batch]


# ---- running it --------------------------------------------------------------------------------
def serving_inputs(inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Verification rows keyed by serving input name, whatever their keys were (see the module
    docstring); strings as bytes (an object array would need pickling)."""
    from rlops.features.serving_names import serving_input_for_record_key

    out = {}
    for key, value in inputs.items():
        key = key[len("observation_") :] if key.startswith("observation_") else key
        value = np.asarray(value)
        out[serving_input_for_record_key(key)] = value.astype(np.bytes_) if value.dtype.kind in "OU" else value
    return out


def run_draws(
    saved_model_dir: str,
    inputs: Mapping[str, Any],
    calls_one: int = CALLS_ONE,
    calls_many: int = CALLS_MANY,
    rows_many: int = ROWS_MANY,
    python: str | None = None,
    timeout_s: float = 600,
) -> tuple[dict[str, np.ndarray], dict]:
    """One fresh process's draws (`draw`) and its JSON answer; RuntimeError when it fails."""
    python = python or os.environ.get(VERIFY_PYTHON_ENV) or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        npz, out = os.path.join(tmp, "inputs.npz"), os.path.join(tmp, "draws.npz")
        np.savez(npz, **serving_inputs(inputs))
        proc = subprocess.run(
            [
                python,
                "-m",
                "rlops.train.verify_ranked",
                saved_model_dir,
                npz,
                out,
                str(calls_one),
                str(calls_many),
                str(rows_many),
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"serving_ranked verifier exited {proc.returncode}: {proc.stderr[-2000:]}")
        answer = json.loads(lines[-1])
        if not answer.get("ok"):
            raise RuntimeError(f"serving_ranked failed in a fresh process: {answer.get('error')}")
        with np.load(out) as f:
            return {k: f[k] for k in f.files}, answer


def verify_ranked(saved_model_dir: str, inputs: Mapping[str, Any], processes: int = 2, **kwargs: Any) -> None:
    """Draws from `serving_ranked` in `processes` fresh processes and checks them
    (`ranked_draws_error`, a chance failure confirmed on fresh draws); RuntimeError naming the
    failed check. kwargs: `run_draws`'."""
    from rlops.heads.draws import confirmed

    def check() -> str | None:
        results = at_once(lambda: run_draws(saved_model_dir, inputs, **kwargs), processes)
        return ranked_draws_error([d for d, _ in results], results[0][1]["metadata"])

    error = confirmed(check)
    if error:
        raise RuntimeError(f"pushed ranking policy failed verification in {processes} fresh processes: {error}")


def ranked_verifier(inputs: Mapping[str, Any], **kwargs: Any) -> Callable[[str], None]:
    """`verify_ranked` on `inputs` as a Pusher verifier: called with the staged SavedModel's dir."""
    return lambda local_dir: verify_ranked(local_dir, inputs, **kwargs)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        saved, inputs, out = sys.argv[1:4]
        calls_one, calls_many, rows_many = (int(a) for a in sys.argv[4:7])
        result = draw(saved, inputs, out, calls_one, calls_many, rows_many)
    except Exception as e:  # report, don't traceback: the parent turns this into its error
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
