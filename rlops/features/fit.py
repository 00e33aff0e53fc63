"""Can a trained model score these records? The notion the Trainer's warm-start check applies to a
base model (trainer/warm_start.py: same action ids; FeatureSchema.check_compatible and its per-arm
counterpart), here in the features layer so that the Evaluator checks its baseline (the last
blessed model) the same way without importing the Trainer. A model fits when the records carry
every feature its schema scores, with the same kind/dtype/width signature (global and per-arm),
per-arm or not alike, and when it answers in the same action ids. Extra features in the records
are fine: a model ignores them.

Each check returns why it does not fit, in words a user can act on, or None when it fits.
"""

from __future__ import annotations

from rlops.features.schema import FeatureSchema, FeatureSpec

MAX_NAMED = 5  # names listed in a reason before "..."


def _names(names: list[str]) -> str:
    return ", ".join(names[:MAX_NAMED]) + (", ..." if len(names) > MAX_NAMED else "")


def _missing_and_retyped(
    model: tuple[FeatureSpec, ...], data: tuple[FeatureSpec, ...], prefix: str = ""
) -> tuple[list[str], list[str]]:
    ours = {f.name: f for f in data}
    missing = [prefix + f.name for f in model if f.name not in ours]
    retyped = [
        f"{prefix}{f.name} ({f.describe()} in the model, {ours[f.name].describe()} here)"
        for f in model
        if f.name in ours and f.signature != ours[f.name].signature
    ]
    return missing, retyped


def schema_misfit(model: FeatureSchema, data: FeatureSchema) -> str | None:
    """Why a model built on `model`'s features cannot score records of `data`'s, else None."""
    if bool(model.per_arm) != bool(data.per_arm):
        return (
            "it is a per-arm model and these records have no per-arm features"
            if model.per_arm
            else "it has no per-arm features and these records are per-arm"
        )
    missing, retyped = _missing_and_retyped(model.features, data.features)
    arm_missing, arm_retyped = _missing_and_retyped(model.per_arm, data.per_arm, prefix="per_arm/")
    missing, retyped = missing + arm_missing, retyped + arm_retyped
    if not (missing or retyped):
        return None
    parts = ([f"missing: {_names(missing)}"] if missing else []) + (
        [f"typed differently: {_names(retyped)}"] if retyped else []
    )
    return f"it was trained on other features ({'; '.join(parts)})"


def action_misfit(model: tuple[int | None, int], ours: tuple[int | None, int]) -> str | None:
    """(number of actions, first id) of a model vs this run's: why they differ, else None (PPO's
    continuous actions have no number of actions: None)."""
    if tuple(model) == tuple(ours):
        return None
    return f"its actions are {model[0]} ids from {model[1]}, this run's {ours[0]} ids from {ours[1]}"
