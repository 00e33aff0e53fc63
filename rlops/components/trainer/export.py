"""Exports a trained agent's two policies into the Model artifact (see trainer.layout)."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from rlops.components.common.model import serving_dir
from rlops.components.trainer.layout import COLLECT_POLICY_DIR
from rlops.features import FeatureSchema
from rlops.features.item_catalog import ItemCatalog


def export_policies(
    serving_policy: Any,
    collect_policy: Any | None,
    train_step: tf.Variable,
    model_uri: str,
    decision_kind: str,
    serving_epsilon: float | None = None,
    schema: FeatureSchema | None = None,
    item_catalog: ItemCatalog | None = None,
) -> None:
    """Both SavedModels share one variable list, so a checkpoint-only update of either loads
    into both (rlops.train.policy_saver). With `serving_epsilon`, the serving SavedModel gets
    `serving_default` (both get the same metadata, so their checkpoints stay interchangeable);
    the feature schema goes beside it. `collect_policy` None: the served policy is the one that
    explores (a ranking policy's pages), and only the serving SavedModel is written. Both name
    `decision_kind` in their specs and get_metadata: what the Pusher and the LiteRT converter read.
    `item_catalog` (a per-arm serving policy): baked into the serving SavedModel, whose
    serving_default then takes candidate ids (rlops.train.by_id)."""
    from rlops.train.policy_saver import PolicySaver
    from rlops.train.strategy import is_chief, task_info

    # Multi-worker: every worker runs the save (it may involve collectives), only the chief's
    # lands in the artifact; the others write into a throw-away directory.
    chief = is_chief()
    out = model_uri if chief else os.path.join(model_uri, f".workertemp_{task_info()[1] or 0}")
    collect_variables = [] if collect_policy is None else list(collect_policy.variables)
    shared = list({id(v): v for v in list(serving_policy.variables) + collect_variables}.values())
    meta = {} if serving_epsilon is None else {"serving_epsilon": float(serving_epsilon)}
    PolicySaver(
        serving_policy,
        train_step=train_step,
        variables=shared,
        serving_epsilon=serving_epsilon,
        decision_kind=decision_kind,
        item_catalog=item_catalog,
    ).save(serving_dir(out))
    if collect_policy is not None:
        PolicySaver(
            collect_policy, train_step=train_step, variables=shared, metadata=meta, decision_kind=decision_kind
        ).save(os.path.join(out, COLLECT_POLICY_DIR))
    if schema is not None:
        schema.save(serving_dir(out))
    if not chief:
        tf.io.gfile.rmtree(out)
