"""Trainer's TFX executor: artifacts in, `run_trainer` out, results onto artifact properties."""

from __future__ import annotations

import dataclasses
from typing import Any

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from rlops.components.properties import set_custom_properties  # finite or absent (issue 20)
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer


def apply_runtime_params(
    config: TrainerConfig, train_steps: int | None = None, total_env_steps: int | None = None
) -> TrainerConfig:
    """The config with this run's budget: `train_steps` (bandits) or `total_env_steps` (PPO).
    Empty (None/0) values change nothing; the other kind's budget is an error, not a no-op."""
    if train_steps:
        if not config.is_bandit:
            raise ValueError("train_steps: PPO trains online; its budget is total_env_steps")
        config = dataclasses.replace(config, train_steps=int(train_steps))
    if total_env_steps:
        if config.is_bandit:
            raise ValueError(f"total_env_steps: agent '{config.agent}' trains offline; its budget is train_steps")
        config = dataclasses.replace(config, ppo={**config.ppo, "total_env_steps": int(total_env_steps)})
    return config


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        examples = input_dict.get("examples") or []
        base = input_dict.get("base_model") or []
        model = artifact_utils.get_single_instance(output_dict["model"])
        model_run = artifact_utils.get_single_instance(output_dict["model_run"])
        config = apply_runtime_params(
            TrainerConfig.from_json(exec_properties["config"]),
            exec_properties.get("train_steps"),
            exec_properties.get("total_env_steps"),
        )
        result = run_trainer(
            config,
            model.uri,
            model_run.uri,
            examples_uri=examples[0].uri if examples else None,
            base_model_uri=base[0].uri if base else None,
        )
        model.set_int_custom_property("train_steps", result.train_steps)
        if "train_records" in result.extra:  # bandits: the records consumed, to check against the split
            model.set_int_custom_property("train_records", int(result.extra["train_records"]))
            model_run.set_int_custom_property("train_records", int(result.extra["train_records"]))
        set_custom_properties(model, {"final_loss": result.final_loss})  # NaN when no step ran: absent
        model.set_string_custom_property("warm_started_from", result.warm_started_from or "")
        if result.extra.get("cold_start_reason"):  # a base model was given but could not seed this run
            model.set_string_custom_property("cold_start_reason", result.extra["cold_start_reason"])
        set_custom_properties(model_run, {"steps_per_sec": result.steps_per_sec})
