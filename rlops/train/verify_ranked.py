"""Draw checks for a ranking SavedModel's `serving_ranked`, as a server sees it: two fresh processes
each load the SavedModel with plain TensorFlow and call the signature repeatedly at batch 1 and at
batch N; this process then holds their slates to the exact numpy probabilities
(rlops.agents.ranking.propensities, on the scores the model returned):

- every slate shows allowed candidates only, none twice; `greedy_slate` and `scores` are the same
  on every call and in both processes, and `greedy_slate` is the top L by score;
- the reported `propensity_item_position` is the exact marginal of the shown item at its slot and
  `propensity_cascade` the exact prefix probability (PROPENSITY_TOLERANCE, relative for the cascade);
- per slot, the items' frequencies match the exact marginals (Pearson chi-square, cells expecting
  fewer than 5 pooled, Bonferroni over the L slots);
- draws repeat no more often than independent draws do, between calls in a process and between the
  two processes at the same call (per slot, Bonferroni over the slots).

Each of the 8 tests (2 batch sizes x frequencies, repeats in each process, repeats across them)
fails at rlops.features.serving_head.SIGNIFICANCE = 1e-3 / 16, the serving head's budget for 16
tests a push (a LiteRT twin checked the same way makes 16): an honest push fails one with
probability < 1e-3, and such a failure is drawn again before it stands (serving_head.confirmed), so
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
PROPENSITY_TOLERANCE = 1e-6
CASCADE_RTOL = 1e-5  # float32 outputs: prefix probabilities reach 1e-9 and below


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


# ---- the parent: the checks --------------------------------------------------------------------
def slate_policy_from_metadata(metadata: Mapping[str, Any]) -> Any:
    """The numpy slate policy (rlops.agents.ranking.propensities) a `get_metadata` describes."""
    from rlops.agents.ranking import propensities as props

    kind = metadata.get("slate_policy")
    if kind == "plackett_luce":
        return props.PlackettLuce(float(metadata["temperature"]), float(metadata["quadrature_step"]))
    if kind == "epsilon_per_slot":
        return props.EpsilonPerSlot(float(metadata["epsilon"]))
    if kind == "uniform":
        return props.UniformWithoutReplacement()
    if kind == "greedy":
        return props.Greedy()
    raise ValueError(f"get_metadata names no slate policy this check knows: slate_policy={kind!r}")


def ranked_draws_error(
    draws: Sequence[Mapping[str, np.ndarray]], metadata: Mapping[str, Any], name: str = SERVING_RANKED
) -> str | None:
    """`draws`: one `draw` output per process (`name` the artifact, for the messages). The first
    failed check (see the module docstring), or None."""
    from rlops.features.serving_head import SIGNIFICANCE, ChanceFailure, allowed_mask

    policy = slate_policy_from_metadata(metadata)
    num_slots = int(metadata["num_slots"])
    feeds = {k[len("feed_") :]: v for k, v in draws[0].items() if k.startswith("feed_")}
    for part in ("one", "many"):
        scores = np.asarray(draws[0][f"{part}_scores"][0], np.float64)  # [B, K]
        batch, k = scores.shape
        what = f"{name} at batch {batch}"
        for i, d in enumerate(draws):
            if np.abs(d[f"{part}_scores"] - scores[None]).max() > 1e-5 * max(1.0, np.abs(scores).max()):
                return f"{what}: scores change from call to call or between processes (process {i})"
        allowed = allowed_mask(batch, k, _rows(feeds.get(ACTION_MASK), batch), _rows(feeds.get("num_actions"), batch))
        greedy = _greedy(scores, allowed, num_slots)
        if any((d[f"{part}_greedy_slate"] != greedy[None]).any() for d in draws):
            return f"{what}: greedy_slate is not the top {num_slots} allowed candidates by score on every call"
        marginals = policy.marginals(scores, num_slots, allowed)  # [B, K, L]
        slates = []
        for i, d in enumerate(draws):
            slate = d[f"{part}_slate"].astype(np.int64)  # [C, B, L]
            error = _slate_error(slate, allowed, f"{what}, process {i}")
            error = error or _propensity_error(
                policy, scores, allowed, slate, d, part, marginals, f"{what}, process {i}"
            )
            if error:
                return error
            slates.append(slate)
        p = slot_frequency_pvalue(np.concatenate(slates), marginals)
        if p < SIGNIFICANCE:
            return ChanceFailure(
                f"{what}: the items' frequencies at some slot do not match the reported marginals "
                f"(chi-square, Bonferroni p={p:.2g})"
            )
        for i, s in enumerate(slates):
            half = len(s) // 2
            p = slot_repeat_pvalue(s[0::2][:half], s[1::2][:half], marginals)
            if p < SIGNIFICANCE:
                return ChanceFailure(f"{what}: process {i} repeats its slates from call to call (p={p:.2g})")
        for i in range(1, len(slates)):
            m = min(len(slates[0]), len(slates[i]))
            p = slot_repeat_pvalue(slates[0][:m], slates[i][:m], marginals)
            if p < SIGNIFICANCE:
                return ChanceFailure(f"{what}: two fresh processes draw the same slates (p={p:.2g})")
    return None


def _rows(value: np.ndarray | None, batch: int) -> np.ndarray | None:
    return None if value is None else np.asarray(value)[:batch]


def _greedy(scores: np.ndarray, allowed: np.ndarray, num_slots: int) -> np.ndarray:
    from rlops.agents.ranking.propensities import Greedy

    return Greedy().sample(np.random.default_rng(0), scores, num_slots, allowed)


def _slate_error(slate: np.ndarray, allowed: np.ndarray, what: str) -> str | None:
    """An item outside the candidates, a masked one, or one shown twice in a slate."""
    k = allowed.shape[1]
    outside = (slate < 0) | (slate >= k)
    if outside.any():
        call, row, slot = np.argwhere(outside)[0]
        return f"{what}: call {call} row {row} slot {slot} shows item {slate[call, row, slot]}, not a candidate index"
    rows = np.arange(slate.shape[1])[None, :, None]
    masked = ~allowed[rows, slate]
    if masked.any():
        call, row, slot = np.argwhere(masked)[0]
        return f"{what}: call {call} row {row} slot {slot} shows item {slate[call, row, slot]}, which is masked"
    ordered = np.sort(slate, axis=-1)
    twice = (ordered[..., 1:] == ordered[..., :-1]).any(-1)
    if twice.any():
        call, row = np.argwhere(twice)[0]
        return f"{what}: call {call} row {row} shows an item twice: {slate[call, row].tolist()}"
    return None


def _propensity_error(
    policy: Any,
    scores: np.ndarray,
    allowed: np.ndarray,
    slate: np.ndarray,
    d: Mapping[str, np.ndarray],
    part: str,
    marginals: np.ndarray,
    what: str,
) -> str | None:
    """Reported propensities against the exact numpy ones for the same scores and slates."""
    calls, batch, num_slots = slate.shape
    rows = np.arange(batch)[None, :, None]
    exact = marginals[rows, slate, np.arange(num_slots)[None, None, :]]
    reported = d[f"{part}_propensity_item_position"]
    wrong = np.abs(reported - exact) > PROPENSITY_TOLERANCE
    if wrong.any():
        call, row, slot = np.argwhere(wrong)[0]
        return (
            f"{what}: call {call} row {row} slot {slot} reports propensity_item_position "
            f"{reported[call, row, slot]:.8f}, the exact marginal is {exact[call, row, slot]:.8f}"
        )
    flat = slate.reshape(calls * batch, num_slots)
    cascade = policy.prefix_probs(
        np.repeat(scores[None], calls, 0).reshape(-1, scores.shape[1]),
        flat,
        np.repeat(allowed[None], calls, 0).reshape(-1, allowed.shape[1]),
    )
    cascade = cascade.reshape(calls, batch, num_slots)
    reported = d[f"{part}_propensity_cascade"]
    wrong = np.abs(reported - cascade) > CASCADE_RTOL * cascade + 1e-12
    if wrong.any():
        call, row, slot = np.argwhere(wrong)[0]
        return (
            f"{what}: call {call} row {row} slot {slot} reports propensity_cascade "
            f"{reported[call, row, slot]:.6g}, the exact prefix probability is {cascade[call, row, slot]:.6g}"
        )
    return None


def slot_frequency_pvalue(slates: np.ndarray, marginals: np.ndarray) -> float:
    """Bonferroni-corrected (x L) smallest per-slot p-value of Pearson chi-square tests: slates
    [R, B, L] drawn R times on B rows against marginals [B, K, L]; per slot the cells are the items,
    counts summed over rows and calls, cells expecting < 5 pooled. (Rows differ, so counts vary
    less than a multinomial's: conservative.)"""
    from rlops.features.serving_head import pearson_pvalue

    calls, _, num_slots = slates.shape
    k = marginals.shape[1]
    worst = min(
        pearson_pvalue(
            np.bincount(slates[:, :, slot].ravel(), minlength=k).astype(np.float64),
            calls * marginals[:, :, slot].sum(0),
        )
        for slot in range(num_slots)
    )
    return min(1.0, worst * num_slots)


def slot_repeat_pvalue(a: np.ndarray, b: np.ndarray, marginals: np.ndarray) -> float:
    """Bonferroni-corrected (x L) smallest per-slot p-value of 'slates a and b [R, B, L] show the
    same item at a slot this often' for independent draws (rlops.features.serving_head.repeat_pvalue
    with that slot's marginals)."""
    from rlops.features.serving_head import repeat_pvalue

    num_slots = marginals.shape[2]
    worst = min(
        (repeat_pvalue(a[:, :, slot], b[:, :, slot], marginals[:, :, slot]) for slot in range(num_slots)), default=1.0
    )
    return min(1.0, worst * num_slots)


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
    from rlops.features.serving_head import confirmed

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
