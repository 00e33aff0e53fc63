"""The names a policy's serving inputs go by: one function, used by the exporter (the policy's
observation keys), the Pusher's verifier, the Evaluator and the README.

A SavedModel signature names each input twice: the SignatureDef key (what TF Serving's REST API
and Vertex AI match request JSON keys against) and the tf.function parameter (what
`signatures[k].structured_input_signature` lists and what the `serving_default_<name>` placeholder
is called). TensorFlow rewrites a parameter name that is not a Python identifier (`per_arm/x`
-> `per_arm_x`) but keeps the spec's name as the key, so an input named `per_arm/x` answered to
two names and a caller reading the signature fed the wrong one. rlops names every input so that
TensorFlow leaves it alone -- ASCII letters, digits and `_`, starting with a letter -- and both
views agree:

    serving_input_name("user_a")                       -> "user_a"
    serving_input_name("item_category", per_arm=True)  -> "per_arm_item_category"
    serving_input_name("user-id.v2")                   -> "user_id_v2"

Records (tf.Examples, the Evaluator's columns) keep their own keys: the feature name, and
`per_arm/<name>` for an item feature (`record_key`); `serving_inputs_from_records` turns record
columns into serving inputs. The `action` signature prefixes each input with `observation_`.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, TypeVar

from rlops.features.schema import FeatureSchemaError

PER_ARM_PREFIX = "per_arm/"  # an item feature's key in records: per_arm/<name>
PER_ARM_INPUT_PREFIX = "per_arm_"  # ... and its serving input: per_arm_<name>
NUM_ACTIONS = "num_actions"
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_]")

V = TypeVar("V")


def serving_input_name(feature: str, per_arm: bool = False) -> str:
    """The serving input of feature `feature` (an item feature when `per_arm`): every character
    outside [A-Za-z0-9_] becomes `_`, and a name not starting with a letter gets `arg_` in front
    (TensorFlow's own rule for parameter names, so TensorFlow never renames it)."""
    name = _NOT_ALLOWED.sub("_", feature)
    if per_arm:
        name = PER_ARM_INPUT_PREFIX + name
    return name if name[:1].isascii() and name[:1].isalpha() else "arg_" + name


def record_key(feature: str, per_arm: bool = False) -> str:
    """The feature's key in records: its name, or `per_arm/<name>` for an item feature."""
    return PER_ARM_PREFIX + feature if per_arm else feature


def serving_input_for_record_key(key: str) -> str:
    """`per_arm/<name>` -> `per_arm_<name>`; a global feature's key -> its serving input."""
    if key.startswith(PER_ARM_PREFIX):
        return serving_input_name(key[len(PER_ARM_PREFIX) :], per_arm=True)
    return serving_input_name(key)


def serving_inputs(global_features: Iterable[str], per_arm_features: Iterable[str] = ()) -> dict[str, str]:
    """{serving input name: record key} for a model's features (plus `num_actions` for a per-arm
    model). Two features that would share an input name are an error naming both."""
    out: dict[str, str] = {}
    keys = [record_key(n) for n in global_features] + [record_key(n, True) for n in per_arm_features]
    if any(k.startswith(PER_ARM_PREFIX) for k in keys):
        keys.append(NUM_ACTIONS)
    for key in keys:
        name = serving_input_for_record_key(key)
        if name in out:
            raise FeatureSchemaError(
                f"features '{out[name]}' and '{key}' would both be served as input '{name}' "
                f"(inputs are named by rlops.features.serving_names.serving_input_name); rename one"
            )
        out[name] = key
    return out


def serving_inputs_from_records(columns: Mapping[str, V]) -> dict[str, V]:
    """Record columns (feature names, `per_arm/<name>`, `num_actions`, `action_mask`) keyed by
    their serving input names."""
    return {serving_input_for_record_key(k): v for k, v in columns.items()}
