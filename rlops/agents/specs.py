"""Tensor specs: what a policy observes, emits and stores.

`TensorSpec` is TensorFlow's own; `BoundedTensorSpec` is the bounded variant TensorFlow ships
(the one TF-Agents uses), so specs nest, serialize into SavedModels and compare like TF's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.tensor_spec import BoundedTensorSpec  # noqa: F401  (re-export)
from tensorflow.python.util import nest as _nest

TensorSpec = tf.TensorSpec

__all__ = [
    "TensorSpec",
    "BoundedTensorSpec",
    "is_discrete",
    "is_bounded",
    "num_actions",
    "check_nest_matches_spec",
    "flatten_with_paths",
    "spec_to_json",
    "spec_from_json",
]


def is_bounded(spec: tf.TensorSpec) -> bool:
    return isinstance(spec, BoundedTensorSpec)


def is_discrete(spec: tf.TensorSpec) -> bool:
    return spec.dtype.is_integer


def num_actions(spec: BoundedTensorSpec) -> int:
    """Number of actions of a scalar discrete action spec with minimum 0."""
    return int(np.max(spec.maximum)) - int(np.min(spec.minimum)) + 1


def check_nest_matches_spec(
    value_nest: Any, spec_nest: Any, name: str = "value", num_outer_dims: int | None = None
) -> None:
    """Raise a ValueError/TypeError naming the field whose structure, dtype or shape is wrong.

    `num_outer_dims` (e.g. 2 for [batch, time]) is checked when given; otherwise any outer
    dimensions are accepted as long as the inner shape matches the spec.
    """
    try:
        tf.nest.assert_same_structure(value_nest, spec_nest, check_types=False)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"{name}: structure does not match the spec.\n  spec: {spec_nest}\n"
            f"  got: {tf.nest.map_structure(lambda v: getattr(v, 'dtype', type(v)), value_nest)}"
        ) from e
    paths = flatten_with_paths(spec_nest)
    values = tf.nest.flatten(value_nest)
    for (path, spec), value in zip(paths, values):
        field = f"{name}.{path}" if path else name
        # Only fall back to numpy for Python values: np.asarray fails on symbolic tensors.
        dtype = tf.as_dtype(value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype)
        if dtype != spec.dtype:
            raise TypeError(f"{field}: dtype {dtype.name} does not match spec dtype {spec.dtype.name}")
        shape = tf.TensorShape(value.shape if hasattr(value, "shape") else np.shape(value))
        if shape.rank is None:
            continue
        inner_rank = spec.shape.rank
        outer = shape.rank - inner_rank
        if outer < 0 or not spec.shape.is_compatible_with(shape[outer:]):
            raise ValueError(f"{field}: shape {shape} does not end with spec shape {spec.shape}")
        if num_outer_dims is not None and outer != num_outer_dims:
            raise ValueError(
                f"{field}: expected {num_outer_dims} outer dims before spec shape {spec.shape}, got shape {shape}"
            )


def flatten_with_paths(structure: Any) -> list[tuple[str, Any]]:
    """[("policy_info.dist_params.logits", leaf), ...] for error messages that name fields."""
    return list(_nest.flatten_with_joined_string_paths(structure, separator="."))


def spec_to_json(spec: tf.TensorSpec) -> dict[str, Any]:
    out = {"shape": spec.shape.as_list(), "dtype": spec.dtype.name, "name": spec.name}
    if is_bounded(spec):
        out["minimum"] = np.asarray(spec.minimum).tolist()
        out["maximum"] = np.asarray(spec.maximum).tolist()
    return out


def spec_from_json(d: dict[str, Any]) -> tf.TensorSpec:
    if "minimum" in d:
        return BoundedTensorSpec(d["shape"], tf.as_dtype(d["dtype"]), d["minimum"], d["maximum"], name=d.get("name"))
    return tf.TensorSpec(d["shape"], tf.as_dtype(d["dtype"]), name=d.get("name"))
