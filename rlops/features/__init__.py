"""Feature schema and preprocessing: raw named features (strings included) -> model inputs.

The bottom layer beside agents (TensorFlow and NumPy only): ExperienceGen writes the schema,
the Trainer builds the Preprocessor from it and bakes it into the exported policy.
"""

from rlops.features.preprocessing import Preprocessor, input_spec, numpy_features
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
