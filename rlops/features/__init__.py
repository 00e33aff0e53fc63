"""Feature schema and preprocessing: raw named features (strings included) -> model inputs.

The bottom layer beside agents (TensorFlow and NumPy only): ExperienceGen writes the schema,
the Trainer builds the Preprocessor from it and bakes it into the exported policy.
"""

from typing import TYPE_CHECKING, Any

from rlops.features.schema import (
    CATEGORICAL,
    FLOAT,
    FLOAT_LIST,
    INT64,
    RESERVED,
    SCHEMA_FILE,
    STRING,
    FeatureSchema,
    FeatureSchemaError,
    FeatureSpec,
    load,
)

if TYPE_CHECKING:
    from rlops.features.preprocessing import Preprocessor, input_spec, numpy_features

_PREPROCESSING = ("Preprocessor", "input_spec", "numpy_features")


def __getattr__(name: str) -> Any:
    """The preprocessing names load TensorFlow, so they are imported on first use: the schema and
    the serving names (what the config loader and the CLI read) stay TensorFlow-free."""
    if name in _PREPROCESSING:
        from rlops.features import preprocessing

        return getattr(preprocessing, name)
    raise AttributeError(f"module 'rlops.features' has no attribute '{name}'")


__all__ = [
    "Preprocessor",
    "input_spec",
    "numpy_features",
    "FeatureSchema",
    "FeatureSpec",
    "FeatureSchemaError",
    "load",
    "SCHEMA_FILE",
    "RESERVED",
    "FLOAT",
    "FLOAT_LIST",
    "CATEGORICAL",
    "STRING",
    "INT64",
]
