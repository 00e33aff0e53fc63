"""The Trainer's work as a plain function (TFX executor, KFP component and TFX `run_fn` call it):
`run_trainer` picks the training path by the agent's decision kind (TRAINING_PATHS), runs it and
writes the Model and ModelRun artifacts' files (trainer.layout); `apply_runtime_params` is every
face's one budget rule."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Callable

import tensorflow as tf

from rlops.components.common import decision_kinds
from rlops.components.common.keys import TOTAL_ENV_STEPS_KEY, TRAIN_STEPS_KEY
from rlops.components.trainer.bandit import train_bandit
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.layout import CONFIG_FILE, CURVE_FILE, METRICS_FILE
from rlops.components.trainer.ppo import train_ppo
from rlops.components.trainer.ranking import train_ranking
from rlops.components.trainer.result import RETURN, TrainResult

# (examples_uri or None, model_uri, model_run_uri, config, base_model_uri or None) -> the result
Train = Callable[[str | None, str, str, TrainerConfig, str | None], TrainResult]


@dataclass(frozen=True)
class TrainingPath:
    """How the Trainer trains the agents of one decision kind."""

    train: Train
    budget: str  # the run parameter that overrides its budget: TRAIN_STEPS_KEY or TOTAL_ENV_STEPS_KEY
    budget_rule: str  # its budget in words ({agent}: the agent's name), for a run that gives the other parameter


TRAINING_PATHS: dict[str, TrainingPath] = {
    decision_kinds.BANDIT: TrainingPath(
        train_bandit, TRAIN_STEPS_KEY, "agent '{agent}' trains offline; its budget is train_steps"
    ),
    decision_kinds.TRAJECTORY: TrainingPath(
        train_ppo,
        TOTAL_ENV_STEPS_KEY,
        "PPO's budget is total_env_steps (online), or trainer.ppo_offline's num_passes / max_train_steps "
        "(from logged trajectories)",
    ),
    decision_kinds.SLATE: TrainingPath(
        train_ranking, TRAIN_STEPS_KEY, "agent '{agent}' trains offline on slates; its budget is train_steps"
    ),
}


def training_path(config: TrainerConfig) -> TrainingPath:
    """The path that trains `config.agent`, by the decision kind its AgentSpec names."""
    kind = config.registered.kind
    path = TRAINING_PATHS.get(kind)
    if path is None:
        raise ValueError(
            f"trainer.agent: '{config.agent}' trains on {kind} records, which the Trainer cannot train yet"
        )
    return path


def check_budget_kind(config: TrainerConfig, train_steps: object = None, total_env_steps: object = None) -> None:
    """A run's budget override is the kind its agent takes: `train_steps` for bandits and ranking,
    `total_env_steps` for PPO. Empty values (None, 0: a KFP parameter's default) override nothing;
    a RuntimeParameter (compile time) counts as given."""
    path = training_path(config)
    for name, value in ((TRAIN_STEPS_KEY, train_steps), (TOTAL_ENV_STEPS_KEY, total_env_steps)):
        if value and name != path.budget:
            raise ValueError(f"{name}: {path.budget_rule.format(agent=config.agent)}")


def apply_runtime_params(
    config: TrainerConfig, train_steps: int | None = None, total_env_steps: int | None = None
) -> TrainerConfig:
    """The Trainer's one budget rule for a run: the config with this run's `train_steps` (bandits:
    the cap on train steps; the passes, `num_epochs`, still end a run first) or `total_env_steps`
    (PPO online). Every face applies it: the TFX executor, the KFP entry point and TFX's `run_fn`."""
    check_budget_kind(config, train_steps, total_env_steps)
    if train_steps:
        config = dataclasses.replace(config, train_steps=int(train_steps))
    if total_env_steps:
        config = dataclasses.replace(config, ppo={**config.ppo, "total_env_steps": int(total_env_steps)})
    return config


def run_trainer(
    config: TrainerConfig | str,
    model_uri: str,
    model_run_uri: str,
    examples_uri: str | None = None,
    base_model_uri: str | None = None,
) -> TrainResult:
    """Trains, exports the policies into `model_uri` and writes metrics into `model_run_uri`."""
    if isinstance(config, str):
        config = TrainerConfig.from_json(config)
    config.check_inputs(bool(examples_uri))
    path = training_path(config)
    tf.io.gfile.makedirs(model_uri)
    tf.io.gfile.makedirs(model_run_uri)
    result = path.train(examples_uri, model_uri, model_run_uri, config, base_model_uri)
    from rlops.train.strategy import is_chief

    if not is_chief():  # only the chief (or worker 0 without one) writes the artifacts' files
        return result
    with tf.io.gfile.GFile(os.path.join(model_uri, CONFIG_FILE), "w") as f:
        f.write(config.to_json())
    with tf.io.gfile.GFile(os.path.join(model_run_uri, METRICS_FILE), "w") as f:
        json.dump({**result.as_dict(), "curve": result.curve}, f)
    _plot_curve(result, config, model_run_uri)
    return result


def _plot_curve(result: TrainResult, config: TrainerConfig, model_run_uri: str) -> None:
    if not result.curve or "://" in model_run_uri:
        return
    from rlops.envs.plots import plot_curves, plot_learning_curve

    path = os.path.join(model_run_uri, CURVE_FILE)
    if result.curve_of == RETURN:
        steps, returns = [s for s, _ in result.curve], [r for _, r in result.curve]
        plot_learning_curve(steps, returns, path, title=f"PPO {config.ppo.get('env_id')}")
    else:
        plot_curves(
            {f"{config.agent} loss": [loss for _, loss in result.curve]},
            path,
            xlabel=f"x{config.steps_per_run} train steps",
            ylabel="loss",
            title="Trainer loss",
        )
