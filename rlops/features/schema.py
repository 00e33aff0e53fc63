"""The feature schema: each context feature's name and kind, with what preprocessing needs.

Stored as `rlops_feature_schema.json` in the Examples artifact root (ExperienceGen writes it) and
in the exported Model's `Format-Serving/` dir (the Trainer copies the one it trained with), so a
model and the data it meets can be compared feature by feature, by name.

    float       one number; normalized by mean/std when they are set
    float_list  `dim` numbers (the legacy dense `context` is a float_list without mean/std)
    categorical a string or int64 id (or up to `dim` of them when `multivalent`): a vocabulary
                (top-k by frequency) plus `num_oov_buckets`, or `hash_buckets` > 0 for hashing
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

FLOAT, FLOAT_LIST, CATEGORICAL = "float", "float_list", "categorical"
KINDS = (FLOAT, FLOAT_LIST, CATEGORICAL)
STRING, INT64 = "string", "int64"
SCHEMA_FILE = "rlops_feature_schema.json"
TFMD_SCHEMA_FILE = "schema.pbtxt"
SCHEMA_FORMAT = "rlops.feature_schema/1"
LEGACY_CONTEXT = "context"
# Fields of the bandit record that are not context features.
RESERVED = ("action", "reward", "propensity", "action_mask", "weight", "timestamp", "split_unit", "split_content")
STD_FLOOR = 1e-6  # a constant column is centred, not blown up


class FeatureSchemaError(ValueError):
    """A feature is missing, renamed or retyped (the message names it)."""


def needs_string_hash(buckets: int) -> bool:
    """Whether `buckets` hash buckets (hash_buckets, or num_oov_buckets after a vocabulary) take a
    string hash op. One bucket takes none (every value lands in it), which keeps a policy with the
    default single OOV bucket convertible to TFLite builtins; more need TensorFlow's
    StringToHashBucketFast, a Flex op (rlops.train.litert)."""
    return buckets > 1


@dataclass(frozen=True)
class FeatureSpec:
    name: str
    kind: str
    dim: int = 1  # float_list width; multivalent categorical: max values per record
    dtype: str = "float"  # float kinds: "float"; categorical: "string" | "int64"
    vocabulary: tuple[Any, ...] = ()  # top-k values by frequency (str or int)
    num_oov_buckets: int = 1
    hash_buckets: int = 0  # > 0: hash into this many buckets instead of a vocabulary
    multivalent: bool = False
    mean: tuple[float, ...] | None = None  # per value (len dim); None: no normalization
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "vocabulary", tuple(self.vocabulary))
        for k in ("mean", "std"):
            v = getattr(self, k)
            if v is not None:
                object.__setattr__(self, k, tuple(float(x) for x in (v if isinstance(v, (list, tuple)) else [v])))
        self.validate()

    def validate(self) -> None:
        where = f"feature '{self.name}'"
        if not self.name:
            raise FeatureSchemaError("a feature has an empty name")
        if self.name in RESERVED:
            raise FeatureSchemaError(
                f"{where}: '{self.name}' is a reserved bandit field ({', '.join(RESERVED)}); rename the context feature"
            )
        if self.kind not in KINDS:
            raise FeatureSchemaError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.dim < 1:
            raise FeatureSchemaError(f"{where}: dim must be >= 1, got {self.dim}")
        if self.kind == CATEGORICAL:
            if self.dtype not in (STRING, INT64):
                raise FeatureSchemaError(f"{where}: a categorical dtype is 'string' or 'int64', got {self.dtype!r}")
            if self.hash_buckets < 0 or self.num_oov_buckets < 0:
                raise FeatureSchemaError(f"{where}: hash_buckets and num_oov_buckets must be >= 0")
            if self.hash_buckets == 0 and not self.vocabulary and self.num_oov_buckets == 0:
                raise FeatureSchemaError(f"{where}: no vocabulary, no OOV buckets and no hash buckets")
            if len(set(self.vocabulary)) != len(self.vocabulary):
                raise FeatureSchemaError(f"{where}: the vocabulary repeats values")
            if self.dim > 1 and not self.multivalent:
                raise FeatureSchemaError(f"{where}: dim {self.dim} > 1 needs multivalent=True")
        else:
            if self.dtype != "float":
                raise FeatureSchemaError(f"{where}: a {self.kind} feature has dtype 'float', got {self.dtype!r}")
            if self.kind == FLOAT and self.dim != 1:
                raise FeatureSchemaError(f"{where}: kind 'float' has dim 1 (use 'float_list'), got {self.dim}")
            for k in ("mean", "std"):
                v = getattr(self, k)
                if v is not None and len(v) != self.dim:
                    raise FeatureSchemaError(f"{where}: {k} has {len(v)} values, dim is {self.dim}")

    @property
    def output_dim(self) -> int:
        """Width of this feature in the model's dense observation."""
        if self.kind != CATEGORICAL:
            return self.dim
        return self.hash_buckets if self.hash_buckets else len(self.vocabulary) + self.num_oov_buckets

    @property
    def signature(self) -> tuple[Any, ...]:
        """What a model relies on when it meets this feature again (not vocab contents). Not a
        multivalent feature's dim: the model reads any padded width (its own first `dim` values),
        so a day whose inferred dim differs still warm-starts and is evaluated against it."""
        return self.kind, self.dtype, None if self.multivalent else self.dim, self.multivalent

    def describe(self) -> str:
        if self.kind == CATEGORICAL:
            return f"categorical {self.dtype}" + (f" x{self.dim} (multivalent)" if self.multivalent else "")
        return self.kind + (f"[{self.dim}]" if self.kind == FLOAT_LIST else "")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["vocabulary"] = list(self.vocabulary)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FeatureSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise FeatureSchemaError(f"feature '{d.get('name')}': unknown field(s) {unknown}")
        d = dict(d)
        if d.get("dtype") == INT64:
            d["vocabulary"] = [int(v) for v in d.get("vocabulary", ())]
        return cls(**d)


@dataclass(frozen=True)
class FeatureSchema:
    features: tuple[FeatureSpec, ...]
    per_arm: tuple[FeatureSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        object.__setattr__(self, "per_arm", tuple(self.per_arm))
        names = [f.name for f in self.features]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise FeatureSchemaError(f"feature '{dup[0]}' appears more than once in the schema")
        if not self.features:
            raise FeatureSchemaError("the feature schema has no context features")

    # --- queries --------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [f.name for f in self.features]

    def __getitem__(self, name: str) -> FeatureSpec:
        for f in self.features:
            if f.name == name:
                return f
        raise FeatureSchemaError(f"feature '{name}' is not in the schema; features: {self.names}")

    def __contains__(self, name: str) -> bool:
        return name in self.names

    @property
    def observation_dim(self) -> int:
        return sum(f.output_dim for f in self.features)

    @property
    def is_legacy(self) -> bool:
        """The dense float `context` of the original record format: the model's observation is
        the feature itself (no preprocessing), and the `action` signature keeps its input."""
        return (
            len(self.features) == 1
            and self.features[0].name == LEGACY_CONTEXT
            and self.features[0].kind in (FLOAT, FLOAT_LIST)
            and self.features[0].mean is None
        )

    @classmethod
    def legacy(cls, context_dim: int) -> "FeatureSchema":
        return cls((FeatureSpec(LEGACY_CONTEXT, FLOAT_LIST, dim=context_dim),))

    def check_compatible(self, other: "FeatureSchema", what: str = "data") -> list[str]:
        """Raises FeatureSchemaError naming the first feature this schema (a model's) needs that
        `other` (the data, or another model) lacks or types differently. Returns the names of
        `other`'s extra features, which a model simply ignores."""
        for f in self.features:
            if f.name not in other:
                raise FeatureSchemaError(
                    f"feature '{f.name}' ({f.describe()}) is missing from the {what}; it has {other.names}"
                )
            g = other[f.name]
            if f.signature != g.signature:
                raise FeatureSchemaError(
                    f"feature '{f.name}' is {f.describe()} in the model but {g.describe()} in the {what}"
                )
        return [n for n in other.names if n not in self]

    # --- JSON -----------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(
            {
                "format": SCHEMA_FORMAT,
                "features": [f.to_dict() for f in self.features],
                "per_arm": [f.to_dict() for f in self.per_arm],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> "FeatureSchema":
        d = json.loads(text) if isinstance(text, str) else text
        if d.get("format") != SCHEMA_FORMAT:
            raise FeatureSchemaError(
                f"not an rlops feature schema (format {d.get('format')!r}, expected {SCHEMA_FORMAT!r})"
            )
        return cls(
            tuple(FeatureSpec.from_dict(f) for f in d["features"]),
            tuple(FeatureSpec.from_dict(f) for f in d.get("per_arm", ())),
        )

    def save(self, directory: str, tfmd: bool = True) -> str:
        """Writes `rlops_feature_schema.json` (and TFX's `schema.pbtxt`) into `directory`."""
        import tensorflow as tf

        tf.io.gfile.makedirs(directory)
        path = os.path.join(directory, SCHEMA_FILE)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(self.to_json())
        if tfmd:
            pbtxt = self.to_tfmd_text()
            if pbtxt is not None:
                with tf.io.gfile.GFile(os.path.join(directory, TFMD_SCHEMA_FILE), "w") as f:
                    f.write(pbtxt)
        return path

    def to_tfmd_schema(self, reserved: Iterable[tuple[str, str]] = ()) -> Any:
        """TFX's Schema proto (tensorflow_metadata): one Feature per context feature (and per
        `reserved` (name, "float"|"int") record field), string domains holding the vocabularies."""
        from tensorflow_metadata.proto.v0 import schema_pb2

        schema = schema_pb2.Schema()
        for f in self.features:
            feat = schema.feature.add(name=f.name)
            if f.kind == CATEGORICAL:
                feat.type = schema_pb2.BYTES if f.dtype == STRING else schema_pb2.INT
                if f.dtype == INT64:
                    feat.int_domain.is_categorical = True
                elif f.vocabulary:  # ExampleValidator flags values outside it (they go to OOV here)
                    feat.string_domain.value.extend(str(v) for v in f.vocabulary)
            else:
                feat.type = schema_pb2.FLOAT
            if f.multivalent:
                feat.value_count.min, feat.value_count.max = 0, f.dim
            else:
                feat.shape.dim.add(size=f.dim)
                feat.presence.min_fraction = 1.0
        for f in self.per_arm:  # per_arm/<name>: one value per candidate arm (count varies with K)
            feat = schema.feature.add(name="per_arm/" + f.name)
            feat.type = (
                schema_pb2.FLOAT
                if f.kind != CATEGORICAL
                else (schema_pb2.BYTES if f.dtype == STRING else schema_pb2.INT)
            )
            if f.kind == CATEGORICAL and f.dtype == STRING and f.vocabulary:
                feat.string_domain.value.extend([""] + [str(v) for v in f.vocabulary])  # "": padding
            feat.value_count.min = 1
        if self.per_arm:
            feat = schema.feature.add(name="num_actions", type=schema_pb2.INT)
            feat.value_count.min, feat.value_count.max = 1, 1
        for name, kind in reserved:
            feat = schema.feature.add(name=name, type=schema_pb2.FLOAT if kind == "float" else schema_pb2.INT)
            feat.value_count.min, feat.value_count.max = 1, 1
        return schema

    def to_tfmd_text(self) -> str | None:
        try:
            from google.protobuf import text_format

            return text_format.MessageToString(self.to_tfmd_schema())
        except ImportError:  # tensorflow_metadata is optional for the bottom layer
            return None


def schema_path(directory: str) -> str:
    return os.path.join(directory, SCHEMA_FILE)


def load(directory: str) -> FeatureSchema | None:
    """The schema stored in `directory` (an Examples root or a SavedModel dir), or None."""
    import tensorflow as tf

    path = schema_path(directory)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return FeatureSchema.from_json(f.read())


def top_k(values: Sequence[Any], counts: Sequence[int], k: int) -> tuple[Any, ...]:
    """The k most frequent values; ties broken by value so the vocabulary is deterministic."""
    order = sorted(range(len(values)), key=lambda i: (-int(counts[i]), str(values[i])))
    return tuple(values[i] for i in order[:k])
