"""The feature schema a bandit model is built on: the Examples' own, or at warm start the base
model's, checked against the data (per-arm features included) and with vocabulary drift noted."""

from __future__ import annotations

import logging

import tensorflow as tf

from rlops.components.common import records
from rlops.components.common.model import serving_dir
from rlops.features import SCHEMA_FILE, FeatureSchema, FeatureSchemaError, load as load_feature_schema

log = logging.getLogger(__name__)


def model_schema(examples_uri: str, first: tf.train.Example, base_model_uri: str | None) -> FeatureSchema:
    """The schema the model is built on: the Examples' (legacy records without one: their dense
    `context`), or at warm start the base model's own, so the vocabularies -- and with them the
    meaning of every input weight -- stay those it was trained with (new values go to OOV
    buckets). A feature the base model needs that the new data lacks or retypes is an error."""
    data = load_feature_schema(examples_uri)
    if data is None:
        if records.CONTEXT not in first.features.feature:
            raise ValueError(f"examples: no {SCHEMA_FILE} and no dense '{records.CONTEXT}' feature in {examples_uri}")
        data = FeatureSchema.legacy(len(first.features.feature[records.CONTEXT].float_list.value))
    base = load_feature_schema(serving_dir(base_model_uri)) if base_model_uri else None
    if base is None:
        return data
    what = f"examples at {examples_uri} (warm start from {base_model_uri})"
    extra = base.check_compatible(data, what=what)
    extra += [f"per_arm/{n}" for n in _check_per_arm_compatible(base, data, what)]
    if extra:
        log.info("trainer: the base model has no use for new feature(s) %s; they are ignored at warm start", extra)
    _log_vocabulary_drift(base, data)
    return base


def _check_per_arm_compatible(base: FeatureSchema, data: FeatureSchema, what: str) -> list[str]:
    """The per-arm counterpart of FeatureSchema.check_compatible: every arm feature the base model
    scores must be in the data with the same kind; returns the data's extra arm features. Without
    this a missing, renamed or retyped arm feature failed deep in tf.data parsing."""
    if bool(base.per_arm) != bool(data.per_arm):
        has, lacks = ("the base model", f"the {what}") if base.per_arm else (f"the {what}", "the base model")
        names = [f.name for f in (base.per_arm or data.per_arm)]
        raise FeatureSchemaError(
            f"per-arm features {names}: {has} has them, {lacks} has none; a per-arm model "
            f"warm-starts only from per-arm data and back"
        )
    ours = {f.name: f for f in data.per_arm}
    for f in base.per_arm:
        g = ours.get(f.name)
        if g is None:
            raise FeatureSchemaError(
                f"per-arm feature '{f.name}' ({f.describe()}) is missing from the {what}; "
                f"it has per-arm features {sorted(ours)}"
            )
        if f.signature != g.signature:
            raise FeatureSchemaError(
                f"per-arm feature '{f.name}' is {f.describe()} in the base model but {g.describe()} in the {what}"
            )
    return [n for n in ours if n not in {f.name for f in base.per_arm}]


def _log_vocabulary_drift(base: FeatureSchema, data: FeatureSchema) -> None:
    """A vocabulary that changed since the base model is kept as the base's (its input weights mean
    those values; the nightly loop must survive a new category): say which feature, and how many
    of today's values now go to OOV buckets."""
    ours = {f.name: f for f in data.features} | {f"per_arm/{f.name}": f for f in data.per_arm}
    for name, f in [(f.name, f) for f in base.features] + [(f"per_arm/{f.name}", f) for f in base.per_arm]:
        g = ours.get(name)
        if g is None or not f.vocabulary or f.hash_buckets:
            continue
        unseen = len(set(g.vocabulary) - set(f.vocabulary))
        if unseen or len(g.vocabulary) != len(f.vocabulary):
            log.warning(
                "trainer: feature '%s' has a vocabulary of %d values in the data, %d in the base model; "
                "warm start keeps the base model's (%d value(s) new since then go to its %d OOV bucket(s))",
                name,
                len(g.vocabulary),
                len(f.vocabulary),
                unseen,
                f.num_oov_buckets,
            )
