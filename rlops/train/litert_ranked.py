"""The LiteRT twin of a ranking policy's `serving_ranked`: `policy.tflite` with one signature,
`serving_ranked`, that runs under ai-edge-litert alone (TFLite builtin ops only).

    model = convert_ranked(loaded)          # rlops.train.litert.convert_policy calls it for ranking exports

Inputs: `serving_ranked_masked`'s (the raw named features, `num_actions`, `action_mask` [B, K]; all
ones when nothing is masked). Outputs: `slate`, `propensity_item_position`, `propensity_cascade`,
`greedy_slate` [B, L], `scores` [B, K] and `policy_version` [B], as serving_ranked's; no `seed`
(the file draws its own randomness, see below, so a LiteRT draw is not replayable).

Why a head of its own: TFLite builtins have no float64 arithmetic and no 64-bit bitwise ops (the
row-seed hash), and no Assert. The converter takes the SavedModel's `ranked_scores` (the scores and
the allowed mask, preprocessing included) and puts on it the slate head's float32 twin
(rlops.heads.slate.head.litert_slate_head, on rlops.heads.slate.tf_probabilities): Gumbel-top-L / epsilon per slot draws, the exact marginals
(PL: the same quadrature and Poisson-binomial tree, stable in float32 because every product is of
non-negative terms, the grid's left tail cut at 1e-9 for float32; 1 - e^(-x) by its series below 1/2 since TFLite has no EXPM1; the cascade's
running product unrolled since it has no CUMPROD).

Randomness: one builtin RANDOM_UNIFORM op whose seeds are pinned to (0, 0) (rlops.heads.
epsilon_greedy's contract): LiteRT seeds it from OS entropy when the op is prepared and advances it on
every call, so draws are fresh on every call and independent across processes. A nonzero seed baked
in would repeat, and the Pusher's draw checks refuse it. The uniforms are float32 (2^-24 cells,
kept off 0 so every Gumbel key is finite): ties between two of the top L + 1 keys (which the
float64 SavedModel avoids; the lower index wins) happen here of the order of once in 10^5 to 10^6
draws at K = 100, a change of the slate distribution far below the propensity tolerance.

A request with fewer than L allowed candidates cannot raise (no Assert op): its slots past the
allowed count hold -1 with propensities 0 (serving_ranked fails such a request instead).

Accuracy against the float64 SavedModel: scores as TFLite's float32 kernels compute them (within
SCORES_RTOL of the SavedModel's), marginals within 5e-7 relative of the exact ones (measured at
K = 100, L = 5, logit spreads up to 30; float32 carries 6e-8 per operation), so the Pusher holds the file to the SavedModel's own
tolerances (rlops.train.verify_ranked: 1e-6 absolute, 1e-5 relative for the cascade).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from rlops.heads.slate.head import (
    GREEDY_SLATE,
    PROPENSITY_CASCADE,
    PROPENSITY_ITEM_POSITION,
    SLATE,
    head_parameters,
    litert_slate_head,
)
from rlops.train.litert_standalone import VERSION_SENTINEL, run_standalone_jobs
from rlops.train.processes import at_once

SIGNATURE = "serving_ranked"
SOURCE_SIGNATURE = "serving_ranked_masked"
SCORES, ALLOWED, POLICY_VERSION = "scores", "allowed", "policy_version"
RANKED_SCORES = "ranked_scores"  # rlops.train.ranked_serving.RANKED_SCORES
SCORES_RTOL = 1e-5  # TFLite's float32 kernels against TensorFlow's, relative to the largest |score|


def ranked_serving_function(loaded: Any, version: tf.Tensor) -> tuple[Any, dict]:
    """The concrete function to convert for a loaded ranking SavedModel (it must have
    `ranked_scores`), and the metadata it was built from."""
    from rlops.train.verify_ranked import read_metadata

    metadata = read_metadata(loaded)
    kind, num_slots, parameter, step = head_parameters(metadata)
    specs = loaded.signatures[SOURCE_SIGNATURE].structured_input_signature[1]
    scores_of = getattr(loaded, RANKED_SCORES)

    def serve(**features: tf.Tensor) -> dict[str, tf.Tensor]:
        out = scores_of(**features)
        head = litert_slate_head(out[SCORES], out[ALLOWED], num_slots, kind, parameter, step)
        return {**head, SCORES: out[SCORES], POLICY_VERSION: tf.fill(tf.shape(out[SCORES])[:1], version)}

    named = {k: tf.TensorSpec(s.shape, s.dtype, name=k) for k, s in specs.items()}
    return tf.function(serve, autograph=False).get_concrete_function(**named), metadata


def has_ranked_scores(loaded: Any) -> bool:
    return hasattr(loaded, RANKED_SCORES) and SOURCE_SIGNATURE in loaded.signatures


# ---- verification: the file against its SavedModel ---------------------------------------------
def compare_ranked(loaded: Any, model_path: str, inputs: Mapping[str, Any]) -> str | None:
    """The LiteRT file, run in two fresh processes under ai-edge-litert alone, against the loaded
    ranking SavedModel on the verification rows (any keys verify_ranked.serving_inputs takes):
    its scores within SCORES_RTOL and its greedy slates equal to serving_ranked_masked's, the
    policy version the SavedModel reports, then serving_ranked's draw checks on its pages
    (verify_ranked.ranked_draws_error: allowed items only, none twice, exact propensities,
    per-slot frequencies at batch 1 and at batch N, no repeats across calls or processes; a chance
    failure confirmed on fresh draws). Returns an error, or None."""
    from rlops.heads.draws import confirmed
    from rlops.train import verify_ranked as vr

    serve = loaded.signatures[SOURCE_SIGNATURE]
    specs = serve.structured_input_signature[1]
    feeds = ranked_feeds(vr.serving_inputs(inputs), specs)
    if isinstance(feeds, str):
        return feeds
    want = {k: v.numpy() for k, v in serve(**{k: tf.constant(v, specs[k].dtype) for k, v in feeds.items()}).items()}
    metadata = vr.read_metadata(loaded)
    jobs = [({k: v[:1] for k, v in feeds.items()}, vr.CALLS_ONE), (feeds, vr.CALLS_MANY)]
    stored = {f"feed_{k}": v for k, v in feeds.items()}

    def check() -> str | None:
        processes = at_once(lambda: run_standalone_jobs(model_path, jobs))
        for p in processes:
            if bool(p[1]["modules_tensorflow"]) or bool(p[1]["modules_rlops"]):
                return "LiteRT check: the standalone runner imported TensorFlow or rlops"
        got = processes[0][1]
        scale = max(1.0, float(np.abs(want[SCORES]).max()))
        off = np.abs(got[SCORES][0] - want[SCORES]).max(axis=1) > SCORES_RTOL * scale
        if off.any():
            return f"LiteRT scores differ from the SavedModel's beyond {SCORES_RTOL:g} (relative) on row {int(np.argmax(off))}"
        wrong = (got[GREEDY_SLATE][0] != want[GREEDY_SLATE]).any(axis=1)
        if wrong.any():
            row = int(np.argmax(wrong))
            return (
                f"LiteRT greedy_slate {got[GREEDY_SLATE][0][row].tolist()} != the SavedModel's "
                f"{want[GREEDY_SLATE][row].tolist()} on verification row {row}"
            )
        version, expected = got[POLICY_VERSION][0], want[POLICY_VERSION]
        unpublished = np.all(version == VERSION_SENTINEL) and np.all(expected == -1)
        if not unpublished and not np.all(version == expected):
            return f"LiteRT policy_version {version[:3]} != the SavedModel's {expected[:3]}"
        draws = [
            {**stored, **{f"{part}_{k}": p[i][k] for i, part in enumerate(("one", "many")) for k in DRAWN}}
            for p in processes
        ]
        return vr.ranked_draws_error(draws, metadata, name="LiteRT")

    return confirmed(check)


DRAWN = (SLATE, PROPENSITY_ITEM_POSITION, PROPENSITY_CASCADE, GREEDY_SLATE, SCORES)


def ranked_feeds(inputs: Mapping[str, np.ndarray], specs: Mapping[str, Any]) -> dict[str, np.ndarray] | str:
    """The verification rows for serving_ranked_masked's inputs (at most verify_ranked.ROWS_MANY):
    `num_actions` every candidate slot where not given, `action_mask` all ones where not given.
    An error naming the input when one is missing."""
    from rlops.train.verify_ranked import ACTION_MASK, ROWS_MANY

    data = dict(inputs)
    rows = min((len(v) for v in data.values()), default=0)
    num_items = int(specs[ACTION_MASK].shape[-1]) if ACTION_MASK in specs else None
    if num_items and "num_actions" in specs and "num_actions" not in data:
        data["num_actions"] = np.full(rows, num_items, np.int64)
    if num_items and ACTION_MASK not in data:
        data[ACTION_MASK] = np.ones((rows, num_items), np.int64)
    missing = sorted(set(specs) - set(data))
    if missing:
        return f"LiteRT check: no verification input for {missing}"
    rows = min(ROWS_MANY, rows)
    return {k: np.asarray(data[k])[:rows] for k in specs}


__all__ = [
    "SIGNATURE",
    "compare_ranked",
    "ranked_feeds",
    "litert_slate_head",
    "ranked_serving_function",
    "head_parameters",
    "has_ranked_scores",
]
