"""The baseline model: loaded (a corrupt one is a BaselineModelError naming it), and checked
against the eval split (one that cannot score it -- other features, actions or per-arm-ness,
rlops.features.fit -- is replaced by the logging policy with a one-line note)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.common.model import serving_dir
from rlops.components.evaluator.action_ids import policy_action_minimum, spec_actions

if TYPE_CHECKING:
    from rlops.features import FeatureSchema
    from rlops.train.policy_saver import SavedPolicy

log = logging.getLogger(__name__)


class BaselineModelError(ValueError):
    """The baseline model cannot be loaded at all (a corrupt or incomplete Model): broken input,
    named by its URI. (A baseline that loads but does not fit the eval split is not an error.)"""


def load_baseline(baseline_model_uri: str) -> SavedPolicy:
    from rlops.train.policy_saver import SavedPolicy

    try:
        return SavedPolicy(serving_dir(baseline_model_uri))
    except Exception as e:  # noqa: BLE001 - any load failure is the same user-facing fact
        detail = " ".join(str(e).split())[:200] or type(e).__name__
        raise BaselineModelError(f"baseline model {baseline_model_uri} cannot be loaded: {detail}") from None


def _records_schema(examples_uri: str, data: LoggedFeedback) -> FeatureSchema:
    """The eval records' feature schema (legacy records without one: their dense context)."""
    from rlops.features import FeatureSchema, load as load_schema

    return load_schema(examples_uri) or FeatureSchema.legacy(int(np.asarray(data.contexts).shape[-1]))


def baseline_misfit(
    baseline: SavedPolicy,
    baseline_model_uri: str,
    candidate: SavedPolicy,
    num_actions: int,
    examples_uri: str,
    data: LoggedFeedback,
) -> str | None:
    """Why the baseline model cannot score the eval split as the candidate does (rlops.features.fit,
    the Trainer's warm-start notion): other actions, other features, per-arm or not. None: it fits."""
    from rlops.features import load as load_schema
    from rlops.features.fit import action_misfit, schema_misfit

    why = action_misfit(spec_actions(baseline), (num_actions, policy_action_minimum(candidate)))
    if why is not None:
        return why
    model_schema = load_schema(serving_dir(baseline_model_uri))
    if model_schema is not None:
        return schema_misfit(model_schema, _records_schema(examples_uri, data))
    # Exported without a schema: its observation spec is the only record of what it scores.
    spec = baseline.time_step_spec.observation
    if hasattr(spec, "shape") and data.features is None and spec.shape[-1:] != np.asarray(data.contexts).shape[-1:]:
        return (
            f"it scores {spec.shape[-1]} context values and the eval records have {np.asarray(data.contexts).shape[-1]}"
        )
    return None


def fitting_baseline(
    baseline: SavedPolicy | None,
    baseline_model_uri: str | None,
    candidate: SavedPolicy,
    num_actions: int,
    examples_uri: str,
    data: LoggedFeedback,
) -> tuple[SavedPolicy | None, str | None]:
    """(the baseline policy, None), or (None, why) when it cannot score the eval split: the run
    then compares against the logging policy and says so in one line (a config change since the
    baseline was blessed -- other features, actions or per-arm-ness -- is not an error)."""
    if baseline is None:
        return None, None
    assert baseline_model_uri is not None  # a loaded baseline came from its URI
    why = baseline_misfit(baseline, baseline_model_uri, candidate, num_actions, examples_uri, data)
    if why is None:
        return baseline, None
    reason = f"baseline {baseline_model_uri} does not fit the eval split: {why}"
    log.warning("evaluator: %s; comparing against the logging policy instead", reason)
    return None, reason
