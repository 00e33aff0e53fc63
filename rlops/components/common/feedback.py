"""Logged bandit feedback as numpy: what the Evaluator estimates from and the Pusher verifies on.

`load_logged_feedback` reads an Examples split (rlops.components.common.records) into a validated
`LoggedFeedback`: contexts, actions as indices 0..K-1, rewards, propensities, the optional record
weights and action masks, raw named features, stable record keys (record_keys.py) and, for per-arm
records whose candidate sets vary, each slot's item identity and the items' dense arm features.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlops.components.common import records
from rlops.components.common.record_keys import file_record_keys, unit_record_keys
from rlops.features.serving_names import NUM_ACTIONS, PER_ARM_PREFIX

Array = np.ndarray[Any, Any]


def first_bad(message: str, values: Array, bad: Array) -> None:
    """A ValueError naming the first row where `bad` holds, and its value."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{message}; row {i} has {values[i]}")


@dataclass(frozen=True)
class LoggedFeedback:
    contexts: Array  # [N, D]
    actions: Array  # [N] int
    rewards: Array  # [N]
    propensities: Array  # [N] in (0, 1]
    weights: Array | None = None  # [N] >= 0, per-record weights (None: all 1)
    action_mask: Array | None = None  # [N, K] 1 = allowed; the target policy gives masked actions 0
    features: dict[str, Array] | None = (
        None  # raw named context features (policies exported with preprocessing act on them)
    )
    # Per-arm records with varying candidates: item index of each candidate slot [N, K] (-1 =
    # padding) and the items' dense arm features [M, Da] (what the shared reward model fits on).
    items: Array | None = None
    item_features: Array | None = None
    # Stable per-record ids [N] uint64 (record_keys.py: of each record's split unit, or of its
    # file and index): the bootstrap's weights, the reward-model sample and its folds are hashes
    # of them, so records sharing a key are resampled together. None: the row index.
    keys: Array | None = None
    # Beside `keys` when they are content hashes (records.SPLIT_CONTENT): each copy's own key
    # [N] uint64 (its file and index); the bootstrap then resamples the content and the copy.
    copy_keys: Array | None = None

    def __post_init__(self) -> None:
        n = len(self.actions)
        for name in ("contexts", "rewards", "propensities", "weights", "action_mask", "keys", "copy_keys"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"LoggedFeedback.{name} has {len(value)} rows, actions has {n}")
        if n == 0:
            raise ValueError("LoggedFeedback is empty: no eval records to estimate from")
        first_bad(
            "propensity must be in (0, 1]", self.propensities, ~((self.propensities > 0) & (self.propensities <= 1))
        )
        first_bad("reward must be finite", self.rewards, ~np.isfinite(self.rewards))
        if (self.actions < 0).any():
            first_bad("action must be >= 0", self.actions, self.actions < 0)
        if self.weights is not None:
            first_bad(
                "weight must be finite and >= 0", self.weights, ~(np.isfinite(self.weights) & (self.weights >= 0))
            )
            if not (self.weights > 0).any():
                raise ValueError("weight: every record has weight 0; nothing to estimate from")
        if self.action_mask is not None:
            mask = self.action_mask
            if mask.ndim != 2 or (self.actions >= mask.shape[1]).any():
                raise ValueError(f"action_mask must be [N, K] covering every logged action; got shape {mask.shape}")
            first_bad("action_mask excludes the logged action", self.actions, mask[np.arange(n), self.actions] == 0)
        if self.items is not None:
            self._check_items(n)

    def _check_items(self, n: int) -> None:
        items, feats = self.items, self.item_features
        assert items is not None
        if items.ndim != 2 or len(items) != n or (self.actions >= items.shape[1]).any():
            raise ValueError(f"items must be [N, K] covering every logged action; got shape {items.shape}")
        first_bad(
            "the logged action is a padding slot (beyond the record's candidates)",
            self.actions,
            items[np.arange(n), self.actions] < 0,
        )
        if feats is None or feats.ndim != 2 or len(feats) <= items.max():
            raise ValueError(
                f"item_features must be [M, Da] with a row for every item index in items "
                f"(max {items.max()}); got {None if feats is None else feats.shape}"
            )
        if self.action_mask is not None and ((self.action_mask > 0) != (items >= 0)).any():
            raise ValueError("action_mask and items disagree on which slots are candidates")

    @property
    def record_weights(self) -> Array:
        return np.ones(len(self.actions)) if self.weights is None else np.asarray(self.weights, float)

    @property
    def record_keys(self) -> Array:
        return np.arange(len(self.actions), dtype=np.uint64) if self.keys is None else np.asarray(self.keys, np.uint64)

    @property
    def bootstrap_keys(self) -> Array:
        """What the bootstrap weights are drawn from: record_keys [N], or with copy keys [2, N]
        (rlops.components.evaluator.bootstrap.poisson_weights)."""
        if self.copy_keys is None:
            return self.record_keys
        return np.stack([self.record_keys, np.asarray(self.copy_keys, np.uint64)])


def load_logged_feedback(
    examples_uri: str, split: str = "eval", max_records: int | None = None, action_minimum: int | None = 0
) -> LoggedFeedback:
    """The split's logged feedback as numpy (the first `max_records` only, when given), with the
    optional `weight` and `action_mask` columns when the records carry them. Actions become
    indices 0..K-1 (logged id - `action_minimum`, the action spec's first id): OPE indexes
    probabilities and masks by them. None: raw ids, for readers of the inputs only."""
    cat = records.read_logged_bandit(examples_uri, split, max_records)
    if records.PROPENSITY not in cat:
        raise ValueError(
            f"examples: the {split} split has no 'propensity' feature; off-policy evaluation needs the "
            "logging policy's probability of each logged action"
        )
    arms = per_arm_candidates(cat.get(records.FEATURES), examples_uri)
    actions = cat[records.ACTION].astype(int) - int(action_minimum or 0)
    if action_minimum is not None and len(actions) and actions.min() < 0:
        i = int(np.argmax(actions < 0))
        raise ValueError(
            f"examples: action {actions[i] + action_minimum} in record {i} of the {split} split is below "
            f"the action spec's minimum {action_minimum}"
        )
    return LoggedFeedback(
        cat[records.CONTEXT],
        actions,
        cat[records.REWARD].astype(float),
        cat[records.PROPENSITY].astype(float),
        weights=cat[records.WEIGHT].astype(float) if records.WEIGHT in cat else None,
        action_mask=arms.get("action_mask", cat.get(records.ACTION_MASK)),
        features=cat.get(records.FEATURES),
        items=arms.get("items"),
        item_features=arms.get("item_features"),
        **feedback_keys(cat, examples_uri, split, len(actions)),
    )


def feedback_keys(cat: dict[str, Any], examples_uri: str, split: str, count: int) -> dict[str, Array]:
    """LoggedFeedback's keys (and copy keys) of a split's records (record_keys.py): of their
    split unit or content hash when they carry one, else of their file and index."""
    if records.SPLIT_UNIT in cat:
        return {"keys": unit_record_keys(cat[records.SPLIT_UNIT])}
    files = split_record_keys(examples_uri, split, count)
    if records.SPLIT_CONTENT in cat:
        return {"keys": unit_record_keys(cat[records.SPLIT_CONTENT]), "copy_keys": files}
    return {"keys": files}


def split_files(examples_uri: str, split: str) -> list[str]:
    """The split's TFRecord shards in the order every reader takes them (sorted)."""
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(records.split_file_pattern(examples_uri, split)))


def split_record_keys(examples_uri: str, split: str, count: int) -> Array:
    """Stable keys of the split's first `count` records as read_logged_bandit reads them (files
    in sorted order, records in file order): file_record_keys of (file basename, index)."""
    import tensorflow as tf

    keys, done = [], 0
    for path in split_files(examples_uri, split):
        if done >= count:
            break
        n = int(
            tf.data.TFRecordDataset(path, compression_type="GZIP")
            .take(count - done)
            .reduce(np.int64(0), lambda c, _: c + 1)
            .numpy()
        )
        keys.append(file_record_keys(os.path.basename(path), 0, n))
        done += n
    return np.concatenate(keys) if keys else np.zeros(0, np.uint64)


# --- per-arm records whose candidates vary ------------------------------------------------------
# An item is a distinct combination of arm feature values (records carry features, not ids): per
# feature its code among the feature's sorted distinct values over the whole split, then one key
# per combination (mixed radix while it fits in int64), then the item index is the key's rank
# among the split's keys. The Evaluator's Beam engine gathers the same sorted distinct values and
# keys in its first pass (beam.ArmCatalogCombineFn) and calls the same functions, so both number
# items alike.


def per_arm_candidates(features: dict[str, Array] | None, examples_uri: str) -> dict[str, Array]:
    """Per-arm records whose candidates vary (arm k is a different item in each record): the
    candidate mask from num_actions, each slot's item identity and the items' dense arm features,
    for the shared [global, arm] reward model. Fixed candidate sets (every record the same items
    in the same order, e.g. ExperienceGen's default: every item of the table) keep the per-action
    models -- index a IS one item there -- and give {} (the numbers of before)."""
    if not features or not per_arm_varies(features):
        return {}
    arm_keys = per_arm_feature_keys(features)
    candidate = candidate_mask(features, examples_uri)
    valid = candidate.reshape(-1)
    slots = {name: arm_slot_values(features, name, valid) for name in arm_keys}
    uniques = {name: sorted_uniques(values) for name, values in slots.items()}
    key = item_keys(slots, uniques, examples_uri)
    catalog, first = np.unique(key, return_index=True)
    raw = {name[len(PER_ARM_PREFIX) :]: values[first] for name, values in slots.items()}  # one slot per item
    return {
        "items": slot_items(key, catalog, candidate),
        "item_features": encode_arms(raw, examples_uri),
        "action_mask": candidate.astype(np.float32),
    }


def per_arm_feature_keys(features: dict[str, Array]) -> list[str]:
    return sorted(k for k in features if k.startswith(PER_ARM_PREFIX))


def per_arm_varies(features: dict[str, Array]) -> bool:
    """Do the records' per-arm features or num_actions differ from the first record's?"""
    if NUM_ACTIONS not in features:
        return False
    return any(
        len(features[k]) > 0 and bool((features[k] != features[k][:1]).any())
        for k in per_arm_feature_keys(features) + [NUM_ACTIONS]
    )


def candidate_mask(features: dict[str, Array], examples_uri: str, first_record: int = 0) -> Array:
    """[N, K] bool: slot k < the record's num_actions; a num_actions outside [1, K] is named."""
    num_actions = np.asarray(features[NUM_ACTIONS]).astype(int)
    k = features[per_arm_feature_keys(features)[0]].shape[1]
    bad = (num_actions < 1) | (num_actions > k)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"examples at {examples_uri}: record {first_record + i} has num_actions {num_actions[i]}, outside "
            f"[1, {k}] (the per-arm features' width)"
        )
    return np.arange(k)[None, :] < num_actions[:, None]


def arm_slot_values(features: dict[str, Array], name: str, valid: Array) -> Array:
    """One per-arm feature's values on the candidate slots: [S] (or [S, dim] when multivalent)."""
    values = np.asarray(features[name])
    n, k = values.shape[:2]
    return values.reshape(n * k, *values.shape[2:])[valid]


def _rows(values: Array) -> Array:
    """[S, dim] rows as one structured scalar each: np.unique(axis=0)'s lexicographic order."""
    a = np.ascontiguousarray(values)
    return a.view([(f"f{i}", a.dtype) for i in range(a.shape[1])]).reshape(-1)


def sorted_uniques(values: Array) -> Array:
    """A per-arm feature's sorted distinct values ([S] or [S, dim] rows)."""
    return np.unique(values[:, 0] if values.ndim == 2 and values.shape[1] == 1 else values, axis=0)


def _codes(values: Array, uniq: Array) -> Array:
    """Each value's index in the sorted distinct values `uniq` (all of them must be there)."""
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim == 2:
        dtype = np.result_type(values.dtype, uniq.dtype)  # bytes of two widths: the wider
        values, uniq = _rows(values.astype(dtype)), _rows(uniq.astype(dtype))
    code = np.minimum(np.searchsorted(uniq, values), max(len(uniq) - 1, 0))
    if len(values) and not (uniq[code] == values).all():
        raise ValueError("a per-arm feature value is missing from the split's distinct values")
    return code


def item_keys(slots: dict[str, Array], uniques: dict[str, Array], examples_uri: str) -> Array:
    """The item key (int64) of each candidate slot: mixed radix of its per-feature codes among
    `uniques` (each feature's sorted distinct values over the whole split)."""
    names = sorted(slots)
    key = np.zeros(len(slots[names[0]]) if names else 0, np.int64)
    radix = 1
    for name in names:
        uniq = uniques[name]
        radix *= len(uniq)
        if radix >= 2**62:
            raise ValueError(
                f"examples at {examples_uri}: too many distinct per-arm feature combinations to identify items"
            )
        key = key * len(uniq) + _codes(slots[name], uniq)
    return key


def slot_items(key: Array, catalog: Array, candidate: Array) -> Array:
    """[N, K] item index (the key's rank among the split's sorted keys `catalog`), -1 on padding."""
    items = np.full(candidate.size, -1, np.int64)
    items[candidate.reshape(-1)] = np.searchsorted(catalog, key)
    return items.reshape(candidate.shape)


def encode_arms(raw: dict[str, Array], examples_uri: str) -> Array:
    """[M, Da] dense arm features through the Examples' own per-arm preprocessing."""
    from rlops.features import FeatureSchema, Preprocessor, load as load_schema

    schema = load_schema(examples_uri)
    if schema is None:
        raise ValueError(f"examples at {examples_uri}: per-arm records but no feature schema beside them")
    pre = Preprocessor(FeatureSchema(schema.per_arm), name="arm_preprocessor")
    return np.asarray(pre({f.name: raw[f.name] for f in schema.per_arm}).numpy()).astype(float)
