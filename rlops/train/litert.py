"""A LiteRT (TFLite) twin of an exported policy: `policy.tflite` + `policy_litert.json` beside the SavedModel.

    model = convert_policy("export/policy")            # TFLite builtin ops only, or LiteRTConversionError
    model = model.with_version(7)                       # the Pusher bakes in the published version

A ranking policy's file is serving_ranked's twin instead (rlops.train.litert_ranked: its own
float32 head on the SavedModel's scores). Otherwise the LiteRT file has the SavedModel's
`serving_default` contract: one signature, `serving_default`,
whose inputs are the SavedModel's serving inputs under the same names (rlops.features.serving_names;
raw features, strings included) and whose outputs are `action` (drawn from the exploring policy
inside the graph by rlops.heads.epsilon_greedy: TFLite's builtin RANDOM_UNIFORM with seeds (0, 0),
fresh on every call and in every process), `propensity`, `greedy_action` and `policy_version`. A policy exported without `serving_default` (PPO's greedy policy) converts
from its `action` signature: its observation inputs in, the action (also `greedy_action`;
`propensity` 1: a deterministic policy) out.

What converts to builtins here (tensorflow 2.16 converter, ai-edge-litert 2.3 interpreter), found
by experiment: string vocabulary lookups (StaticHashTable with a key/value initializer -> HASHTABLE,
HASHTABLE_IMPORT, HASHTABLE_FIND; but one int64 -> int64 table stops the converter legalizing any
table, so rlops.features matches int64 vocabularies with EQUAL), string EQUAL, normalization,
one-/multi-hot, the exploring head (RANDOM_UNIFORM, CUMSUM, ONE_HOT, ARG_MAX). What does not: every op that
reads a string's bytes (StringToHashBucketFast, StringLength, Substr, DecodePaddedRaw,
UnicodeDecode, StringSplit, StringToNumber) -- no TFLite builtin exposes a string's bytes, so no
string hash can be written in builtins. The default schema needs none: with one OOV bucket every
unseen value lands in it, and rlops.features does not hash for it. A
feature with `hash_buckets`, or more than one OOV bucket, needs the Flex delegate: conversion
fails with one line naming the op unless `allow_flex`.

The version: serving_default reads it from a SavedModel asset at load time (an asset-initialized
table LiteRT cannot initialize), so the LiteRT graph holds it as an int64 constant, written as
VERSION_SENTINEL at conversion and replaced by `with_version` (8 bytes at one place in the file).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf

from rlops.features import serving_candidates
from rlops.heads import draws, epsilon_greedy
from rlops.train import litert_ranked
from rlops.train.litert_standalone import VERSION_SENTINEL, last_line, run_standalone, run_standalone_jobs
from rlops.train.policy_files import LITERT_FILE, LITERT_SPEC_FILE, UNPUBLISHED_VERSION, features_signature
from rlops.train.processes import at_once

LITERT_FORMAT = "rlops.policy_litert/1"
SIGNATURE = "serving_default"
_TIME_STEP_INPUTS = ("step_type", "reward", "discount")
LOGITS = "info/dist_params/logits"  # a stochastic discrete policy's `action` output (PPO)


class LiteRTConversionError(ValueError):
    """The policy does not convert to a builtin-only LiteRT model (the message names the op)."""


@dataclasses.dataclass(frozen=True)
class LiteRTPolicy:
    model: bytes  # the .tflite flatbuffer
    description: dict  # what policy_litert.json holds: inputs, outputs, source signature, version
    version: int = VERSION_SENTINEL

    def with_version(self, version: int) -> "LiteRTPolicy":
        """The same model answering `policy_version` = version."""
        return dataclasses.replace(
            self,
            model=set_version(self.model, version, self.version),
            version=int(version),
            description={**self.description, "policy_version": int(version)},
        )

    def save(self, directory: str) -> None:
        """Writes policy.tflite and policy_litert.json into `directory`."""
        with tf.io.gfile.GFile(os.path.join(directory, LITERT_FILE), "wb") as f:
            f.write(self.model)
        with tf.io.gfile.GFile(os.path.join(directory, LITERT_SPEC_FILE), "w") as f:
            json.dump(self.description, f, indent=1)


def set_version(model: bytes, version: int, current: int = VERSION_SENTINEL) -> bytes:
    """Replaces the version constant `current` (8 little-endian bytes, exactly once in the file)."""
    old = int(current).to_bytes(8, "little", signed=True)
    if model.count(old) != 1:
        raise ValueError(f"the LiteRT model holds its version constant {model.count(old)} times, expected once")
    return model.replace(old, int(version).to_bytes(8, "little", signed=True))


def published(model: bytes, description: dict, version: int) -> tuple[bytes, dict]:
    """The model and its description answering `version`: a fresh conversion holds VERSION_SENTINEL,
    a published one (a rollback re-publishes it) the number its description records."""
    current = (
        VERSION_SENTINEL
        if model.count(VERSION_SENTINEL.to_bytes(8, "little", signed=True)) == 1
        else int(description["policy_version"])
    )
    return set_version(model, version, current), {**description, "policy_version": int(version)}


def convert_policy(saved_model_dir: str, allow_flex: bool = False, loaded: Any = None) -> LiteRTPolicy:
    """The SavedModel at `saved_model_dir` as a LiteRT policy (see the module docstring); `loaded`:
    that SavedModel, when the caller has loaded it already."""
    loaded = tf.saved_model.load(saved_model_dir) if loaded is None else loaded
    concrete, kind = _conversion(saved_model_dir).function(loaded)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], _captured_state(loaded))
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS] + ([tf.lite.OpsSet.SELECT_TF_OPS] if allow_flex else [])
    converter.target_spec.supported_ops = ops
    try:
        model = converter.convert()
    except Exception as e:  # the converter's message lists each op it could not lower
        missing = flex_ops(str(e))
        if missing:
            raise LiteRTConversionError(
                f"the policy needs TensorFlow (Flex) op(s) {', '.join(missing)} that no TFLite builtin covers; "
                "the standalone LiteRT runtime cannot run them (set pusher litert_allow_flex: true to publish a "
                "Flex model anyway)"
            ) from None
        raise LiteRTConversionError(f"LiteRT conversion failed: {last_line(str(e))}") from e
    inputs = {
        k: {"shape": s.shape.as_list(), "dtype": s.dtype.name}
        for k, s in concrete.structured_input_signature[1].items()
    }
    outputs = {k: {"shape": v.shape.as_list(), "dtype": v.dtype.name} for k, v in concrete.structured_outputs.items()}
    description = {
        "format": LITERT_FORMAT,
        "signature": SIGNATURE,
        "source_signature": kind,
        "inputs": inputs,
        "outputs": outputs,
        "flex": bool(allow_flex),
        "policy_version": UNPUBLISHED_VERSION,
    }
    return LiteRTPolicy(model, description)  # version: VERSION_SENTINEL until with_version


def _captured_state(loaded: Any) -> tf.Module:
    """What the converted function may capture of `loaded`: its variables and resources (lookup
    tables with their vocabulary assets). The converter saves and reloads the object it is given
    before converting; given the loaded SavedModel it would also save and reload every signature
    (a ranking policy's six), which costs its conversion a fifth of its CPU."""
    from tensorflow.python.trackable.resource import CapturableResource

    # Serving by id's item table (rlops.train.by_id): no converted function reads it, and TFLite's
    # hash tables cannot hold its int64 -> row map, so its initializer must stay out of the model.
    by_id = getattr(loaded, "item_table", None)
    state = tf.Module()
    state.resources = [
        obj
        for obj in tf.train.TrackableView(loaded).descendants()
        if isinstance(obj, (tf.Variable, CapturableResource)) and obj is not by_id
    ]
    return state


def flex_ops(message: str) -> list[str]:
    """Op names (without `tf.`) the converter reported as not lowering to builtins."""
    return sorted(set(re.findall(r"\btf\.([A-Z][A-Za-z0-9]*)\(", message)))


def _ranked_function(loaded: Any) -> tuple[Any, str]:
    """A ranking policy's function to convert: its pages (rlops.train.litert_ranked)."""
    if not litert_ranked.has_ranked_scores(loaded):
        raise LiteRTConversionError(
            "this ranking SavedModel was exported before LiteRT support (no ranked_scores "
            "function); re-export it with this rlops (retrain it)"
        )
    concrete, _ = litert_ranked.ranked_serving_function(loaded, tf.constant(VERSION_SENTINEL, tf.int64))
    return concrete, litert_ranked.SOURCE_SIGNATURE


def _serving_function(loaded: Any) -> tuple[Any, str]:
    """The function to convert: serving_default's core (no version lookup) with the version as a
    constant, or the `action` signature of a policy without one."""
    version = tf.constant(VERSION_SENTINEL, tf.int64)
    if hasattr(loaded, "serving_core") and "serving_default" in loaded.signatures:
        # the feature-array signature (serving_features where serving_default takes candidate ids)
        specs = loaded.signatures[features_signature(loaded.signatures)].structured_input_signature[1]
        core = loaded.serving_core

        def serve(**features: Any) -> dict[str, Any]:
            out = core(**features)
            batch = tf.shape(out["action"])[:1]
            return {
                "action": out["action"],
                "propensity": out["propensity"],
                "greedy_action": out["greedy_action"],
                "policy_version": tf.fill(batch, version),
            }

        return _concrete(serve, specs), "serving_default"
    if "serving_default" in loaded.signatures:
        raise LiteRTConversionError(
            "this SavedModel was exported before LiteRT support (no serving_core "
            "function); re-export it with this rlops (retrain or warm-start with "
            "train_steps: 0)"
        )
    action = loaded.signatures["action"]
    all_specs = action.structured_input_signature[1]
    specs = {k: s for k, s in all_specs.items() if k not in _TIME_STEP_INPUTS}
    if any(k.startswith("policy_state") for k in specs):
        raise LiteRTConversionError("a stateful policy (policy_state inputs) has no LiteRT serving contract yet")

    def act(**observation: Any) -> dict[str, Any]:
        batch = tf.shape(next(iter(observation.values())))[:1]
        filler = {"step_type": tf.zeros, "reward": tf.zeros, "discount": tf.ones}
        feeds = dict(observation)
        for k in _TIME_STEP_INPUTS:
            if k in all_specs:
                feeds[k] = filler[k](batch, all_specs[k].dtype)
        step = action(**feeds)
        chosen = step["action"]
        out = {"action": chosen, "greedy_action": chosen, "policy_version": tf.fill(batch, version)}
        if LOGITS in step:  # a stochastic policy (PPO's collect policy): its mode is the greedy action
            logits = step[LOGITS]
            out["greedy_action"] = tf.cast(tf.argmax(logits, axis=-1), chosen.dtype)
            out["propensity"] = tf.gather(tf.nn.softmax(logits), tf.cast(chosen, tf.int32), batch_dims=1)
        elif chosen.dtype.is_integer:
            out["propensity"] = tf.ones(batch, tf.float32)  # a deterministic policy
        return out

    return _concrete(act, specs), "action"


def _concrete(fn: Any, specs: dict) -> Any:
    named = {k: tf.TensorSpec(s.shape, s.dtype, name=k) for k, s in specs.items()}
    return tf.function(fn, autograph=False).get_concrete_function(**named)


# ---- verification: the LiteRT file against its SavedModel ------------------------------------------
PROPENSITY_TOLERANCE = draws.PROPENSITY_TOLERANCE
DRAW_ROWS = 64  # the larger batch the draws are checked at
DRAW_CALLS_MANY = 8  # calls at DRAW_ROWS (batch 1: rlops.heads.draws.draw_calls)


def compare(saved_model_dir: str, model_path: str, inputs: Mapping[str, np.ndarray], loaded: Any = None) -> str | None:
    """The LiteRT file (run standalone) against the SavedModel on `inputs` (keyed by serving input
    name): greedy actions identical, each sampled action allowed and its propensity within 1e-6 of
    the exploring policy's probability, the policy version the SavedModel reports; then its draws
    (check_draws). Returns an error naming the first input row that differs, or None. A ranking
    policy's file is held to serving_ranked's checks instead (litert_ranked.compare_ranked).
    `loaded`: the SavedModel, when the caller has loaded it already."""
    loaded = tf.saved_model.load(saved_model_dir) if loaded is None else loaded
    return _conversion(saved_model_dir).compare(saved_model_dir, loaded, model_path, inputs)


def _compare_ranked(saved_model_dir: str, loaded: Any, model_path: str, inputs: Mapping[str, np.ndarray]) -> str | None:
    return litert_ranked.compare_ranked(loaded, model_path, inputs)


def _compare_decisions(
    saved_model_dir: str, loaded: Any, model_path: str, inputs: Mapping[str, np.ndarray]
) -> str | None:
    """One decision per row (serving_default, or `action`): see `compare`."""
    concrete, kind = _serving_function(loaded)
    specs = concrete.structured_input_signature[1]
    if len(specs) == 1 and set(specs).isdisjoint(inputs) and "observation" in inputs:
        inputs = {next(iter(specs)): inputs["observation"]}  # one dense observation, named by its spec
    missing = sorted(set(specs) - set(inputs))
    if missing:
        return f"LiteRT check: no input data for input '{missing[0]}'"
    feeds = {k: np.asarray(inputs[k]) for k in specs}
    want = _saved_model_outputs(saved_model_dir, loaded, kind, feeds, specs)
    got = {k: v[0] for k, v in run_standalone(model_path, feeds).items() if not k.startswith("modules_")}
    bad = np.flatnonzero(np.asarray(got["greedy_action"]) != want["greedy_action"])
    if bad.size:
        return _row_error(
            feeds,
            bad[0],
            f"greedy action {got['greedy_action'][bad[0]]} (LiteRT) != {want['greedy_action'][bad[0]]} (SavedModel)",
        )
    if "probabilities" in want:
        probs, minimum = want["probabilities"], want["minimum"]
        rows = np.arange(len(probs))
        expected = probs[rows, np.asarray(got["action"]).astype(np.int64) - minimum]
        bad = np.flatnonzero((expected <= 0) | (np.abs(expected - got["propensity"]) > PROPENSITY_TOLERANCE))
        if bad.size:
            i = bad[0]
            return _row_error(
                feeds,
                i,
                f"action {got['action'][i]} with propensity {got['propensity'][i]:.8f} "
                f"(LiteRT) where the exploring policy gives it {expected[i]:.8f}",
            )
    if "probabilities" in want:
        error = check_draws(model_path, feeds, want["probabilities"], want["minimum"])
        if error:
            return error
    unpublished = np.all(got["policy_version"] == VERSION_SENTINEL) and np.all(want.get("policy_version", -1) == -1)
    if "policy_version" in want and not unpublished and not np.all(got["policy_version"] == want["policy_version"]):
        return f"LiteRT policy_version {got['policy_version'][:3]} != the SavedModel's {want['policy_version'][:3]}"
    return None


def check_draws(model_path: str, feeds: Mapping[str, np.ndarray], probs: np.ndarray, minimum: int) -> str | None:
    """The LiteRT file's draws against `probs` [B, K] (the exploring policy's, for the rows of
    `feeds`): the first row at batch 1 and the first DRAW_ROWS rows, each called repeatedly in two
    fresh processes (epsilon_greedy.draws_error: frequencies, repeats across calls and processes, each
    propensity; a chance failure confirmed on fresh draws). Returns an error, or None."""
    sizes = (1, min(DRAW_ROWS, len(probs)))
    jobs = [
        ({k: np.asarray(v)[:rows] for k, v in feeds.items()}, calls) for rows, calls in zip(sizes, draw_calls(probs))
    ]

    def check() -> str | None:
        processes = at_once(lambda: run_standalone_jobs(model_path, jobs))
        for i, rows in enumerate(sizes):
            actions = [np.asarray(p[i]["action"]).astype(np.int64) - minimum for p in processes]
            propensities = [np.asarray(p[i]["propensity"]) for p in processes]
            error = epsilon_greedy.draws_error(actions, probs[:rows], f"LiteRT at batch {rows}", propensities)
            if error:
                return error
        return None

    return draws.confirmed(check)


def draw_calls(probs: np.ndarray) -> tuple[int, int]:
    """Calls at batch 1 (the first row) and at DRAW_ROWS: draws.draw_calls for the row's
    exploration, DRAW_CALLS_MANY."""
    return draws.draw_calls(1.0 - float(probs[0].max())), DRAW_CALLS_MANY


def _saved_model_outputs(saved_model_dir: str, loaded: Any, kind: str, feeds: dict, specs: dict) -> dict:
    tensors = {
        k: tf.constant(v, specs[k].dtype) if specs[k].dtype == tf.string else tf.cast(v, specs[k].dtype)
        for k, v in feeds.items()
    }
    if kind == "action":
        step = loaded.signatures["action"]
        names = step.structured_input_signature[1]
        batch = len(next(iter(feeds.values())))
        filler: dict[str, Callable[[int], np.ndarray]] = {
            "step_type": np.zeros,
            "reward": np.zeros,
            "discount": np.ones,
        }
        extra = {k: tf.constant(filler[k](batch), names[k].dtype) for k in _TIME_STEP_INPUTS if k in names}
        out = {k: v.numpy() for k, v in step(**tensors, **extra).items()}
        if LOGITS not in out:
            return {"greedy_action": out["action"]}
        logits = out[LOGITS].astype(np.float64)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        return {"greedy_action": logits.argmax(-1), "probabilities": probs / probs.sum(-1, keepdims=True), "minimum": 0}
    out = {k: v.numpy() for k, v in loaded.signatures[features_signature(loaded.signatures)](**tensors).items()}
    epsilon = float(loaded.signatures["get_metadata"]()["serving_epsilon"].numpy())
    from rlops.train.policy_saver import load_specs

    spec = load_specs(saved_model_dir)["action_spec"]
    minimum, k = int(spec.minimum), int(spec.maximum) - int(spec.minimum) + 1
    allowed = serving_candidates.allowed_actions(feeds, k)
    probs = epsilon_greedy.epsilon_greedy_probs(np.asarray(out["greedy_action"]) - minimum, epsilon, allowed)
    return {
        "greedy_action": out["greedy_action"],
        "policy_version": out["policy_version"],
        "probabilities": probs,
        "minimum": minimum,
    }


def _row_error(feeds: Mapping[str, np.ndarray], row: int, what: str) -> str:
    shown = {k: _short(v[row]) for k, v in sorted(feeds.items())}
    return f"LiteRT policy disagrees with the SavedModel on verification input row {row} {shown}: {what}"


def _short(value: Any) -> Any:
    value = np.asarray(value)
    if value.dtype.kind == "S":
        value = value.astype(str)
    flat = value.ravel().tolist()
    return flat[0] if value.ndim == 0 else (flat[:6] + ["..."] if len(flat) > 6 else flat)


def convert_to_dir(
    saved_model_dir: str, out_dir: str | None = None, allow_flex: bool = False, version: int = UNPUBLISHED_VERSION
) -> str:
    """Converts and writes the two files (into the SavedModel's directory by default), answering
    `policy_version` = version; returns the .tflite path."""
    out_dir = out_dir or saved_model_dir
    convert_policy(saved_model_dir, allow_flex).with_version(version).save(out_dir)
    return os.path.join(out_dir, LITERT_FILE)


__all__ = [
    "LITERT_FILE",
    "LITERT_SPEC_FILE",
    "LiteRTConversionError",
    "LiteRTPolicy",
    "convert_policy",
    "convert_to_dir",
    "flex_ops",
    "set_version",
]


@dataclasses.dataclass(frozen=True)
class Conversion:
    """How a decision kind's policy becomes its LiteRT file, and how the file is checked."""

    function: Callable[[Any], tuple[Any, str]]  # the loaded SavedModel -> (function to convert, its source)
    # (SavedModel dir, loaded, file, inputs) -> an error, or None
    compare: Callable[[str, Any, str, Mapping[str, np.ndarray]], str | None]


# Keyed by the export's decision kind (policy_saver.model_decision_kind; the names of
# rlops.components.common.decision_kinds, which this layer sits below).
CONVERSIONS: dict[str, Conversion] = {
    "bandit": Conversion(_serving_function, _compare_decisions),
    "trajectory": Conversion(_serving_function, _compare_decisions),
    "slate": Conversion(_ranked_function, _compare_ranked),
}


def _conversion(saved_model_dir: str) -> Conversion:
    from rlops.train.policy_saver import model_decision_kind

    kind = model_decision_kind(saved_model_dir)
    if kind not in CONVERSIONS:
        raise LiteRTConversionError(f"a {kind} policy has no LiteRT form yet")
    return CONVERSIONS[kind]
