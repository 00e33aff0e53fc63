"""The Trainer's KFP face: KFP artifacts and parameters in, the core (`apply_runtime_params`,
`run_trainer`) run, `TrainResult.properties()` onto the artifacts' metadata."""

from __future__ import annotations

from typing import Any

from rlops.components.common.keys import MODEL_KEY, MODEL_RUN_KEY
from rlops.components.common.kfp_io import given, record


def trainer(
    config: str,
    model: Any,
    model_run: Any,
    examples: Any = None,
    base_model: Any = None,
    train_steps: int = 0,
    total_env_steps: int = 0,
) -> None:
    """The Trainer on KFP artifacts: this run's budget (`train_steps` / `total_env_steps`; 0: the
    config's) applied by the core's one rule; `base_model` (warm start) unless unresolved."""
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import apply_runtime_params, run_trainer

    cfg = apply_runtime_params(TrainerConfig.from_json(config), train_steps or None, total_env_steps or None)
    base_model = given(base_model)
    result = run_trainer(
        cfg,
        model.uri,
        model_run.uri,
        examples_uri=examples.uri if examples else None,
        base_model_uri=base_model.uri if base_model else None,
    )
    properties = result.properties()
    record(model, properties[MODEL_KEY])
    record(model_run, properties[MODEL_RUN_KEY])
