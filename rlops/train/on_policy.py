"""On-policy PPO training against Gymnasium: collect with the collect policy from vectorized
environments, train, repeat. One call with an environment id and a config.

The collect -> train loop stays in Python (the environments are Python); each `agent.train`
is a single tf.function call that runs all epochs and minibatches in-graph.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from rlops.agents.networks import ActorNetwork, ValueNetwork
from rlops.agents.ppo import PPOAgent
from rlops.envs.gym_env import GymVectorEnv, ReturnScaler, VectorDriver, evaluate_policy

log = logging.getLogger(__name__)


@dataclass
class PPOConfig:
    """Hyperparameters of an on-policy PPO run (defaults: CartPole, CleanRL/TF-Agents-like)."""

    # Gymnasium environment id to train in (offline, from logged trajectories: optional, it only gives the specs)
    env_id: str = "CartPole-v1"
    num_envs: int = 8  # environments stepped in parallel; each iteration collects num_envs x num_steps steps
    num_steps: int = 32  # per env per iteration
    # Environment steps of the whole run, over all envs (iterations = this / (num_envs x num_steps))
    total_env_steps: int = 100_000
    # Passes over each iteration's batch of collected steps (in minibatches) before collecting again
    num_epochs: int = 20
    minibatch_size: int | None = None  # None: the full batch of num_envs * num_steps rows
    learning_rate: float = 1e-3  # adam's step size (annealed to 0 over the run when anneal_lr)
    anneal_lr: bool = True  # linearly to 0 over the run
    discount_factor: float = 0.98  # gamma: the per-step discount of future rewards in returns and advantages
    lambda_value: float = 0.8  # GAE lambda: 0 gives one-step TD advantages, 1 Monte Carlo returns
    # PPO's clip epsilon: the new / old policy probability ratio is clipped to [1 - this, 1 + this]
    importance_ratio_clipping: float = 0.2
    entropy_regularization: float = 0.0  # weight of the entropy bonus in the loss (more exploration); 0: none
    value_pred_loss_coef: float = 0.5  # weight of the value network's loss in the total loss
    # Clip each value prediction's change to +-this around the old one; null or 0: no clipping
    value_clipping: float | None = None
    gradient_clipping: float | None = 0.5  # clip gradients to this global norm (0.5 as CleanRL); null or 0: no clipping
    # Normalize observations by a running mean and variance (clipped to +-observation_clip_value)
    normalize_observations: bool = False
    observation_clip_value: float = 5.0  # normalized observations clipped to +-this (TF-Agents 5, CleanRL 10)
    observation_variance_epsilon: float = 1e-3  # sqrt(var + this) (TF-Agents 1e-3, CleanRL 1e-8)
    normalize_advantages: bool | str = True  # True/"batch" (TF-Agents) | "minibatch" (CleanRL) | False
    normalize_rewards: bool = False  # TF-Agents' normalizer in the agent: rewards / std of rewards
    scale_rewards_by_return: bool = False  # CleanRL / SB3: rewards / std of the discounted return, at collection
    adaptive_kl_beta: float = 0.0  # > 0 enables the adaptive KL penalty
    # > 0: a quadratic penalty on the mean KL above this factor x the adaptive KL target; 0: none
    kl_cutoff_factor: float = 0.0
    hidden_sizes: Sequence[int] = (64, 64)  # layer widths of the actor network, and of the separate value network
    initial_log_std: float = 0.0  # continuous actions: the Gaussian policy's initial log standard deviation (0: std 1)
    seed: int = 0  # seeds the networks, the environments and collection (the Trainer passes trainer.seed)
    eval_episodes: int = 20  # episodes of the trained (greedy) policy evaluated after training; 0 skips the evaluation
    target_return: float | None = 475.0  # for `steps_to_target` (mean of last 20 train episodes)
    log_every: int = 10  # iterations between progress lines; 0 silences them
    vector_env: str = "auto"  # collection backend: auto | sync | async | envpool (rlops.envs.gym_env)

    @property
    def iterations(self) -> int:
        return max(1, self.total_env_steps // (self.num_envs * self.num_steps))


@dataclass
class PPOResult:
    agent: PPOAgent
    env_steps: int
    train_wall_s: float
    eval_returns: np.ndarray
    steps_to_target: int | None
    first_train_s: float = 0.0  # the first update: tracing + XLA compilation included
    episode_returns: list[float] = field(default_factory=list)
    episode_env_steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    reward_scaler: ReturnScaler | None = None  # with config.scale_rewards_by_return

    @property
    def eval_mean_return(self) -> float:
        return float(np.mean(self.eval_returns))

    def summary(self) -> dict:
        return {
            "env_steps": self.env_steps,
            "train_wall_s": round(self.train_wall_s, 2),
            "env_steps_per_s": round(self.env_steps / max(self.train_wall_s, 1e-9), 1),
            "env_steps_per_s_after_compile": round(
                self.env_steps / max(self.train_wall_s - self.first_train_s, 1e-9), 1
            ),
            "steps_to_target": self.steps_to_target,
            "eval_mean_return": self.eval_mean_return,
        }


class _ReturnScalerState(tf.Module):
    """A ReturnScaler's running statistics as variables, for the Learner's checkpoint. The
    scaler itself stays numpy (it runs on every collection step); copies go both ways once per
    iteration."""

    def __init__(self):
        super().__init__(name="reward_scaler")
        self.count = tf.Variable(1e-4, dtype=tf.float64, trainable=False, name="count")
        self.mean = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="mean")
        self.var = tf.Variable(1.0, dtype=tf.float64, trainable=False, name="var")

    def save_from(self, scaler: ReturnScaler) -> None:
        for variable, value in zip((self.count, self.mean, self.var), scaler.statistics()):
            variable.assign(value)

    def load_into(self, scaler: ReturnScaler) -> None:
        scaler.load_statistics(self.count.numpy(), self.mean.numpy(), self.var.numpy())


def _saving_scale_first(train: Callable, scaler: ReturnScaler, state: _ReturnScalerState) -> Callable:
    """`train` that first copies the scaler into its variables: what a checkpoint written by
    that train call holds."""

    def train_saving_scale(experience):
        state.save_from(scaler)
        return train(experience)

    return train_saving_scale


def build_ppo_agent(config: PPOConfig, env: GymVectorEnv) -> PPOAgent:
    tf.random.set_seed(config.seed)
    lr = config.learning_rate
    if config.anneal_lr:
        lr = tf_keras.optimizers.schedules.PolynomialDecay(
            config.learning_rate,
            decay_steps=config.iterations * config.num_epochs * _minibatches(config),
            end_learning_rate=0.0,
        )
    optimizer = tf_keras.optimizers.Adam(learning_rate=lr, epsilon=1e-5)
    actor = ActorNetwork(
        env.observation_spec,
        env.action_spec,
        config.hidden_sizes,
        initial_log_std=config.initial_log_std,
        seed=config.seed,
    )
    value = ValueNetwork(env.observation_spec, config.hidden_sizes, seed=config.seed + 1)
    return PPOAgent(
        env.time_step_spec,
        env.action_spec,
        optimizer,
        actor,
        value,
        importance_ratio_clipping=config.importance_ratio_clipping,
        lambda_value=config.lambda_value,
        discount_factor=config.discount_factor,
        entropy_regularization=config.entropy_regularization,
        value_pred_loss_coef=config.value_pred_loss_coef,
        num_epochs=config.num_epochs,
        minibatch_size=config.minibatch_size,
        use_gae=True,
        use_td_lambda_return=True,  # CleanRL's value target
        normalize_rewards=config.normalize_rewards,
        normalize_observations=config.normalize_observations,
        observation_clip_value=config.observation_clip_value,
        observation_variance_epsilon=config.observation_variance_epsilon,
        normalize_advantages=config.normalize_advantages,
        initial_adaptive_kl_beta=config.adaptive_kl_beta,
        kl_cutoff_factor=config.kl_cutoff_factor,
        gradient_clipping=config.gradient_clipping,
        value_clipping=config.value_clipping,
        seed=config.seed,
    )


def _minibatches(config: PPOConfig) -> int:
    rows = config.num_envs * (config.num_steps + 1)  # the agent's rows include each env's bootstrap row
    return 1 if config.minibatch_size is None else -(-rows // min(config.minibatch_size, rows))


def train_steps_per_iteration(config: PPOConfig) -> int:
    """agent.train advances the train step once per gradient step (TF-Agents): epochs x minibatches."""
    return config.num_epochs * _minibatches(config)


def train_ppo(
    config: PPOConfig,
    agent: PPOAgent | None = None,
    on_iteration: Callable[[int, PPOAgent, dict], None] | None = None,
    root_dir: str | None = None,
    summary_dir: str | None = None,
    checkpoint_interval: int = 50,
    triggers: Sequence[Callable[[int], None]] = (),
) -> PPOResult:
    """Trains PPO on `config.env_id`; returns the agent, learning curve and greedy evaluation.

    Without `root_dir` each iteration calls `agent.train` directly (the fastest path, for
    notebooks and benchmarks). With `root_dir` the batches feed a `Learner`: checkpoints every
    `checkpoint_interval` train steps (gradient steps: `train_steps_per_iteration` per iteration) under root_dir (a restarted job resumes where it
    stopped), TensorBoard summaries in `summary_dir`, and `triggers` (e.g. policy export).
    `on_iteration(iteration, agent, metrics)` runs after each train step; `agent` warm-starts
    from an existing agent.
    """
    if config.scale_rewards_by_return and config.normalize_rewards:
        raise ValueError("PPOConfig: scale_rewards_by_return and normalize_rewards both rescale rewards; set one")
    env = GymVectorEnv(config.env_id, config.num_envs, seed=config.seed, vector_env=config.vector_env)
    agent = agent or build_ppo_agent(config, env)
    scaler = ReturnScaler(config.num_envs, config.discount_factor) if config.scale_rewards_by_return else None
    train: Callable[..., Any] = agent.train
    first_iteration = 0
    if root_dir is not None:
        from rlops.train.learner import Learner

        step_before = int(agent.train_step_counter.numpy())
        # The reward scale is collection state: checkpointed with the agent, or a resumed job
        # would scale rewards from scratch and shift every value target.
        scaler_state = _ReturnScalerState() if scaler is not None else None
        learner = Learner(
            root_dir,
            agent.train_step_counter,
            agent,
            triggers=list(triggers),
            checkpoint_interval=checkpoint_interval,
            summary_interval=1,
            summary_root_dir=summary_dir,
            checkpoint_extras=None if scaler_state is None else {"reward_scaler": scaler_state},
        )
        # > 0 after a restart
        first_iteration = (int(learner.train_step_numpy) - step_before) // train_steps_per_iteration(config)
        train = learner.run_on_batch
        if scaler_state is not None:
            assert scaler is not None  # the state exists only with a scaler
            scaler_state.load_into(scaler)
            train = _saving_scale_first(learner.run_on_batch, scaler, scaler_state)
        if first_iteration:
            log.info("ppo: resumed at iteration %d from %s", first_iteration, root_dir)
    driver = VectorDriver(
        env, agent.collect_policy, config.num_steps, seed=config.seed + first_iteration, reward_scaler=scaler
    )
    driver.total_env_steps = first_iteration * config.num_envs * config.num_steps
    losses, steps_to_target, first_train_s = [], None, 0.0
    start = time.perf_counter()
    for it in range(first_iteration, config.iterations):
        experience = driver.run()
        train_start = time.perf_counter()
        loss = train(agent.preprocess_sequence(experience))  # identity unless values are stored at collection
        losses.append(float(loss.loss))
        if it == first_iteration:  # tracing + XLA compilation happen here, once
            first_train_s = time.perf_counter() - train_start
        recent = driver.stats.returns[-20:]
        if (
            steps_to_target is None
            and config.target_return is not None
            and len(recent) == 20
            and np.mean(recent) >= config.target_return
        ):
            steps_to_target = driver.total_env_steps
        metrics = {
            "iteration": it + 1,
            "env_steps": driver.total_env_steps,
            "loss": losses[-1],
            "mean_return_20": float(np.mean(recent)) if recent else float("nan"),
        }
        if on_iteration is not None:
            on_iteration(it, agent, metrics)
        if config.log_every and (it + 1) % config.log_every == 0:
            log.info("ppo %s", json.dumps(metrics))
    train_wall_s = time.perf_counter() - start
    if root_dir is not None:
        learner.save_checkpoint()
    env.close()
    eval_returns = (
        evaluate_policy(config.env_id, agent.policy, config.eval_episodes, seed=config.seed + 10_000)
        if config.eval_episodes
        else np.array([])
    )
    return PPOResult(
        agent=agent,
        env_steps=driver.total_env_steps,
        train_wall_s=train_wall_s,
        first_train_s=first_train_s,
        eval_returns=eval_returns,
        steps_to_target=steps_to_target,
        episode_returns=list(driver.stats.returns),
        episode_env_steps=list(driver.stats.env_steps),
        losses=losses,
        reward_scaler=scaler,
    )


def config_dict(config: PPOConfig) -> dict:
    d = asdict(config)
    d["hidden_sizes"] = list(config.hidden_sizes)
    return d


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m rlops.train.on_policy [--env-id X] [--total-env-steps N] [--out DIR]`."""
    import argparse
    import os

    parser = argparse.ArgumentParser(description="Train PPO on a Gymnasium environment.")
    defaults = PPOConfig()
    parser.add_argument("--env-id", default=defaults.env_id)
    parser.add_argument("--total-env-steps", type=int, default=defaults.total_env_steps)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", default="out/ppo", help="where the learning curve and summary go")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config = PPOConfig(env_id=args.env_id, total_env_steps=args.total_env_steps, seed=args.seed)
    result = train_ppo(config)
    os.makedirs(args.out, exist_ok=True)
    from rlops.envs.plots import plot_learning_curve

    plot = plot_learning_curve(
        result.episode_env_steps,
        result.episode_returns,
        os.path.join(args.out, "learning_curve.png"),
        title=f"PPO {config.env_id}",
        target=config.target_return,
    )
    summary = {**result.summary(), "learning_curve": plot, "config": config_dict(config)}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
