"""The PPO training path: offline from an Examples artifact of logged trajectories when one is
given (trainer.episodes turns episodes into PPO's [B, T+1] batches; the shared training loop runs
them), else online against the Gymnasium environment trainer.ppo.env_id."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from rlops.agents import specs
from rlops.components.common import records
from rlops.components.common.decision_kinds import TRAJECTORY
from rlops.components.trainer import episodes
from rlops.components.trainer.agents.base import BuildInputs
from rlops.components.trainer.agents.ppo import PPOOfflineConfig, PPOOptions
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.export import export_policies
from rlops.components.trainer.loop import train_loop
from rlops.components.trainer.result import RETURN, TrainResult
from rlops.components.trainer.trajectory_specs import derives_uniform, offline_specs
from rlops.components.trainer.warm_start import start_agent


def train_ppo(
    examples_uri: str | None,
    model_uri: str,
    model_run_uri: str,
    config: TrainerConfig,
    base_model_uri: str | None = None,
) -> TrainResult:
    """Offline from logged trajectories when there are examples, else online in the environment."""
    if examples_uri:
        return train_ppo_offline(examples_uri, model_uri, model_run_uri, config, base_model_uri)
    return train_ppo_online(model_uri, model_run_uri, config, base_model_uri)


def train_ppo_online(
    model_uri: str, model_run_uri: str, config: TrainerConfig, base_model_uri: str | None = None
) -> TrainResult:
    from rlops.envs.gym_env import GymVectorEnv
    from rlops.train import on_policy

    ppo_config = PPOOptions.from_trainer(config).ppo_config()
    env = GymVectorEnv(ppo_config.env_id, ppo_config.num_envs, seed=ppo_config.seed)

    def build() -> tuple[Any, tf.Variable]:
        agent = on_policy.build_ppo_agent(ppo_config, env)
        return agent, agent.train_step_counter

    origin = start_agent(build, config, base_model_uri)
    env.close()
    agent = origin.agent
    writer = tf.summary.create_file_writer(model_run_uri)

    def on_iteration(it: int, _agent: Any, metrics: dict[str, Any]) -> None:
        with writer.as_default(step=metrics["env_steps"]):
            tf.summary.scalar("Metrics/AverageReturn", metrics["mean_return_20"])

    # The Learner checkpoints under <model>/train/checkpoints: a preempted Trainer resumes there,
    # and the next scheduled run warm-starts from it.
    result = on_policy.train_ppo(
        ppo_config,
        agent=agent,
        on_iteration=on_iteration,
        root_dir=model_uri,
        summary_dir=model_run_uri,
        checkpoint_interval=config.checkpoint_interval,
    )
    writer.flush()
    export_policies(agent.policy, agent.collect_policy, agent.train_step_counter, model_uri, TRAJECTORY)
    return TrainResult(
        train_steps=int(agent.train_step_counter.numpy()),
        final_loss=result.losses[-1] if result.losses else float("nan"),
        steps_per_sec=result.env_steps / max(result.train_wall_s, 1e-9),
        wall_s=result.train_wall_s,
        warm_started_from=origin.warm_started_from,
        curve=[(int(s), float(r)) for s, r in zip(result.episode_env_steps, result.episode_returns)],
        extra={
            "env_steps": result.env_steps,
            "env_id": ppo_config.env_id,
            "train_eval_mean_return": result.eval_mean_return,
            **origin.cold_note(),
        },
        curve_of=RETURN,
    )


def train_ppo_offline(
    examples_uri: str, model_uri: str, model_run_uri: str, config: TrainerConfig, base_model_uri: str | None = None
) -> TrainResult:
    """PPO from logged trajectories: episodes -> [B, T+1] windows (trainer.episodes) -> Learner.

    One train step is one PPOAgent.train call on `ppo_offline.batch_size` windows (all its epochs
    and minibatches); `num_passes` passes over the train split set the budget."""
    from rlops.agents.trajectories import time_step_spec
    from rlops.train.learner import Learner
    from rlops.train.on_policy import PPOConfig, build_ppo_agent, train_steps_per_iteration

    options = PPOOptions.from_trainer(config)
    offline = options.offline
    pattern = records.split_file_pattern(examples_uri, "train")
    logged = episodes.inspect_logs(pattern)
    observation_spec, action_spec = offline_specs(logged, config)
    info_spec, complete_info = episodes.policy_info_reader(logged, action_spec)
    if derives_uniform(logged, action_spec):
        episodes.check_uniform(pattern, specs.num_actions(action_spec))
    num_episodes, train_rows, windows = episodes.count_windows(pattern, offline.window_length)
    total = offline_budget(offline, windows, train_rows)
    # The batch [B, T+1] is what B envs x T steps are online: the same PPOConfig sizes it (and the
    # learning-rate schedule, when asked for). Annealing is off unless set: a schedule keyed on
    # the optimizer's step count would already be spent in a warm-started retraining run.
    ppo_config = dataclasses.replace(
        PPOConfig(seed=options.seed),
        **{
            "anneal_lr": False,
            **options.ppo,
            "num_envs": offline.batch_size,
            "num_steps": offline.window_length,
            "total_env_steps": total * offline.batch_size * offline.window_length,
        },
    )
    strategy = single_replica_strategy(config.strategy)
    inputs = BuildInputs(time_step_spec(observation_spec), action_spec, observation_spec)

    def build() -> tuple[Any, tf.Variable]:
        with strategy.scope():
            agent = build_ppo_agent(ppo_config, inputs)  # type: ignore[arg-type]  # it reads only the specs
        return agent, agent.train_step_counter

    origin = start_agent(build, config, base_model_uri)
    agent = origin.agent

    def dataset_fn() -> tf.data.Dataset:
        ds = episodes.windows_dataset(
            pattern, observation_spec, action_spec, info_spec, complete_info, offline.window_length
        )
        ds = ds.shuffle(offline.shuffle_buffer, seed=config.seed, reshuffle_each_iteration=True)
        return ds.batch(offline.batch_size, drop_remainder=True).repeat().prefetch(2)

    step_before = int(agent.train_step_counter.numpy())
    learner = Learner(
        model_uri,
        agent.train_step_counter,
        agent,
        dataset_fn,
        use_kwargs_in_agent_train=True,
        checkpoint_interval=config.checkpoint_interval,
        summary_interval=config.summary_interval,
        max_checkpoints_to_keep=config.max_checkpoints_to_keep,
        strategy=strategy,
        summary_root_dir=model_run_uri,
    )
    # PPOAgent advances the train step per gradient step (TF-Agents): `done` counts train calls.
    done = (learner.train_step_numpy - step_before) // train_steps_per_iteration(ppo_config)  # > 0 on resume
    # The windows repeat (shuffled) for the `total` train steps the passes come to.
    trained = train_loop(
        learner, done, total, config.steps_per_run, passes=False, note=lambda: f"/{total} (ppo offline)"
    )
    export_policies(agent.policy, agent.collect_policy, agent.train_step_counter, model_uri, TRAJECTORY)
    return trained.result(
        origin.warm_started_from,
        {
            "offline": True,
            "episodes": num_episodes,
            "train_rows": train_rows,
            "windows": windows,
            "observation_dim": logged.observation_dim,
            **origin.cold_note(),
        },
    )


def offline_budget(offline: PPOOfflineConfig, windows: int, train_rows: int) -> int:
    """Train steps from logged trajectories: `num_passes` over the batches the windows make."""
    batches = windows // offline.batch_size
    if batches == 0:
        raise ValueError(
            f"trainer.ppo_offline.batch_size: the train split gives {windows} windows "
            f"({train_rows} training steps, window_length {offline.window_length}), fewer than one "
            f"batch of {offline.batch_size}; lower batch_size or window_length, or log more episodes"
        )
    total = offline.num_passes * batches
    return min(total, offline.max_train_steps) if offline.max_train_steps else total


def single_replica_strategy(name: str) -> tf.distribute.Strategy:
    """PPOAgent.train runs on one replica (see its docstring): 'auto' means the default strategy."""
    if name == "auto":
        return tf.distribute.get_strategy()
    from rlops.train.strategy import get_strategy

    strategy = get_strategy(name)
    if strategy.num_replicas_in_sync > 1:
        raise ValueError(
            f"trainer.strategy: PPO trains on one replica, '{name}' has "
            f"{strategy.num_replicas_in_sync}; use 'auto', 'default' or 'one_device'"
        )
    return strategy
