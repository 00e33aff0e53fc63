"""ExperienceGen's encoders: validated columns -> the records of the shared layout.

The layout itself (feature names, per-arm keys, the split directories) and the readers the other
components use live in rlops.components.common.records (slates: rlops.components.common.slates);
import those names from there.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from rlops.components.common.records import (
    ACTION,
    ACTION_MASK,
    BANDIT_ORDER,
    CONTEXT,
    DECISION_ID,
    EPISODE_ID,
    LENGTH,
    NEXT_STEP_TYPE,
    NUM_ACTIONS,
    PROPENSITY,
    REWARD,
    SPLIT_CONTENT,
    SPLIT_HASHES,
    SPLIT_UNIT,
    STEP_TYPE,
    TIMESTAMP,
    WEIGHT,
)
from rlops.components.common.slates import PROPENSITY_CASCADE, SLATE, SLATE_LENGTH, SLATE_ORDER

# --- bandit: encode ---------------------------------------------------------------------------


def _as_list_array(values: np.ndarray, pad: Any = None) -> pa.ListArray:
    """[N], [N, W] or [N, K, W] values -> an Arrow list array of N lists (what RecordBatchToExamples
    takes). `pad` (multivalent [N, W], values first): each list ends at its first padding value."""
    n = values.shape[0]
    width = int(np.prod(values.shape[1:], dtype=np.int64)) if values.ndim > 1 else 1
    if pad is not None:
        keep = values != pad
        counts = keep.sum(1)
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        flat = values[keep]
    else:
        offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
        flat = np.ascontiguousarray(values).reshape(-1)
    # Strings go in as binary: RecordBatchToExamples writes bytes_list from binary, not string.
    inner = pa.array(flat, pa.string()).cast(pa.binary()) if values.dtype == object else pa.array(flat)
    return pa.ListArray.from_arrays(offsets, inner)


_BANDIT_DTYPES = {
    CONTEXT: np.float32,
    ACTION: np.int64,
    REWARD: np.float32,
    PROPENSITY: np.float32,
    ACTION_MASK: np.int64,
    WEIGHT: np.float32,
    TIMESTAMP: np.int64,
    SPLIT_UNIT: np.int64,
    SPLIT_CONTENT: np.int64,
}


def _feature_dtype(values: np.ndarray) -> Any:
    """Raw context features keep their kind: strings -> bytes, ints -> int64, numbers -> float."""
    if values.dtype == object or values.dtype.kind in "SU":
        return object
    return np.int64 if values.dtype.kind in "iu" else np.float32


def encode_bandit(
    columns: Mapping[str, np.ndarray],
    features: Sequence[str] | None = None,
    multivalent: Mapping[str, Any] | None = None,
) -> list[bytes]:
    """Validated bandit columns (numpy, one row per decision) -> serialized tf.Examples.

    `features`: the context features, each stored under its own name (default: the legacy
    dense float `context`). `multivalent`: {feature: its padding value}; those [N, W] padded
    columns are written as variable-length lists (0..W values, padding dropped), the form TFX's
    Schema describes with value_count {min: 0, max: W}."""
    multivalent = multivalent or {}
    from tfx_bsl.coders import example_coder

    features = [CONTEXT] if features is None else list(features)
    trailing = (*BANDIT_ORDER, DECISION_ID, *SPLIT_HASHES)
    names = [k for k in features if k in columns] + [k for k in trailing if k in columns and k != CONTEXT]
    arrays = []
    for k in names:
        v = np.asarray(columns[k])
        arrays.append(
            _as_list_array(
                np.asarray(v, _BANDIT_DTYPES[k] if k in _BANDIT_DTYPES and k not in features else _feature_dtype(v)),
                multivalent.get(k),
            )
        )
    return example_coder.RecordBatchToExamples(pa.RecordBatch.from_arrays(arrays, names))


# --- slates: encode ---------------------------------------------------------------------------

_SLATE_DTYPES = {
    SLATE: np.int64,
    SLATE_LENGTH: np.int64,
    REWARD: np.float32,
    PROPENSITY: np.float32,
    PROPENSITY_CASCADE: np.float32,
    NUM_ACTIONS: np.int64,
    TIMESTAMP: np.int64,
    SPLIT_UNIT: np.int64,
}


def encode_slates(columns: Mapping[str, np.ndarray], features: Sequence[str] = ()) -> list[bytes]:
    """Assembled slates (numpy, one row per slate: [N, L] slot columns, [N] scalars) ->
    serialized tf.Examples in rlops.components.common.slates' layout."""
    from tfx_bsl.coders import example_coder

    trailing = (*SLATE_ORDER, TIMESTAMP, SPLIT_UNIT)
    names = [k for k in features if k in columns] + [k for k in trailing if k in columns]
    arrays = [
        _as_list_array(np.asarray(columns[k], _SLATE_DTYPES[k] if k in _SLATE_DTYPES else _feature_dtype(columns[k])))
        for k in names
    ]
    return example_coder.RecordBatchToExamples(pa.RecordBatch.from_arrays(arrays, names))


# --- trajectories: encode ---------------------------------------------------------------------


def step_types(length: int) -> tuple[np.ndarray, np.ndarray]:
    """step_type / next_step_type of an episode's `length` decisions: FIRST then MID, and the
    transition out of the last decision ends the episode (LAST)."""
    from rlops.agents.trajectories import StepType

    st = np.full(length, StepType.MID, np.int64)
    st[0] = StepType.FIRST
    nst = np.full(length, StepType.MID, np.int64)
    nst[-1] = StepType.LAST
    return st, nst


def encode_episode(episode_id: str, steps: Mapping[str, np.ndarray]) -> bytes:
    """One episode's steps (arrays with a leading [T] axis, in step order) -> SequenceExample.

    `steps` holds observation, action, reward, discount and any policy_info/... arrays;
    step_type and next_step_type are derived from the order.
    """
    import tensorflow as tf

    length = len(steps[REWARD])
    st, nst = step_types(length)
    ex = tf.train.SequenceExample()
    ex.context.feature[EPISODE_ID].bytes_list.value.append(episode_id.encode("utf-8"))
    ex.context.feature[LENGTH].int64_list.value.append(length)
    lists = ex.feature_lists.feature_list
    columns = dict(steps)
    columns[STEP_TYPE], columns[NEXT_STEP_TYPE] = st, nst
    for key in sorted(columns):
        values = np.asarray(columns[key])
        flat = values.reshape(length, -1)
        fl = lists[key]
        if values.dtype.kind in "iub":
            for row in flat.tolist():
                fl.feature.add().int64_list.value.extend(row)
        else:
            for row in flat.astype(np.float32).tolist():
                fl.feature.add().float_list.value.extend(row)
    return ex.SerializeToString()
