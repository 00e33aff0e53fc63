"""The bandit training path: an agent trained offline from an Examples artifact of logged
feedback, by passes over its train split (trainer.passes: LinUCB / LinTS one pass, so their
statistics are the sums over every record; NeuralEpsilonGreedy `num_epochs` passes), through the
shared training loop; it reports the records consumed (`train_records`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from rlops.components.common import records
from rlops.components.common.decision_kinds import BANDIT
from rlops.components.trainer import masks
from rlops.components.trainer.bandit_records import (
    checked_action,
    fit_info,
    mask_parse_spec,
    per_arm_preprocessor,
    per_arm_trajectory,
)
from rlops.components.trainer.bandit_schema import model_schema
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.export import export_policies
from rlops.components.trainer.loop import train_passes
from rlops.components.trainer.result import TrainResult
from rlops.components.trainer.warm_start import base_mismatch, start_agent
from rlops.features import FeatureSchema, Preprocessor
from rlops.features.export import FeaturePolicy, PerArmFeaturePolicy
from rlops.features.item_catalog import ItemCatalog, read_item_catalog
from rlops.features.per_arm import PerArmPreprocessor
from rlops.train import by_id


@dataclass(frozen=True)
class FeedbackRecords:
    """What the train split's records hold, read from its first record, and how to parse them."""

    pattern: str  # the train split's files
    schema: FeatureSchema
    arm_pre: PerArmPreprocessor | None  # per-arm records: each candidate's features
    preprocessor: Preprocessor | None  # raw named context features (None: legacy dense or per-arm)
    feature_spec: dict[str, Any]  # the tf.io parse spec
    masked: bool  # the agent trains and acts with the logged action masks
    weighted: bool  # logged per-record weights weight each row's loss

    @property
    def per_arm(self) -> tuple[int, int, int] | None:
        """(global dim, K, arm dim) for per-arm agents, else None."""
        a = self.arm_pre
        return None if a is None else (a.global_dim, a.num_arms, a.arm_dim)


def read_records(examples_uri: str, config: TrainerConfig, base_model_uri: str | None) -> FeedbackRecords:
    """The train split's layout, from its first record, and the schema the model is built on."""
    pattern = records.split_file_pattern(examples_uri, "train")
    first = records.first_example(pattern)
    present = first.features.feature
    # Logged masks: the agent trains and acts with them (trainer/masks.py); ignore_action_mask opts out.
    masked = records.ACTION_MASK in present and not config.ignore_action_mask
    # A base model that cannot seed this run (another agent or action spec) lends it nothing, not
    # even its vocabularies: start_agent says why and trains from scratch.
    base = base_model_uri if base_model_uri and base_mismatch(config, base_model_uri) is None else None
    schema = model_schema(examples_uri, first, base)
    arm_pre = per_arm_preprocessor(schema, first, config) if schema.per_arm else None
    preprocessor = None if schema.is_legacy or arm_pre is not None else Preprocessor(schema)
    weighted = records.WEIGHT in present
    feature_spec = records.bandit_feature_spec(1, None, propensity=records.PROPENSITY in present, weight=weighted)
    del feature_spec[records.CONTEXT]  # the context features come from the schema, by name
    feature_spec.update(records.feature_parse_spec(schema))
    if arm_pre is not None:
        feature_spec.update(records.per_arm_parse_spec(schema, arm_pre.num_arms))
    if masked:
        assert config.num_actions is not None  # TrainerConfig.validate: bandits set it
        feature_spec[records.ACTION_MASK] = mask_parse_spec(first, config.num_actions)
    return FeedbackRecords(pattern, schema, arm_pre, preprocessor, feature_spec, masked, weighted)


def train_bandit(
    examples_uri: str | None,
    model_uri: str,
    model_run_uri: str,
    config: TrainerConfig,
    base_model_uri: str | None = None,
) -> TrainResult:
    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.train.learner import create_train_step_counter
    from rlops.train.strategy import get_strategy

    if not examples_uri:
        raise ValueError(f"trainer: agent '{config.agent}' trains offline and needs an examples input")
    if config.train_steps == 0 and not base_model_uri:
        raise ValueError(
            "trainer.train_steps: 0 re-exports a warm-started model and needs a base model; "
            "without one there is nothing to export"
        )
    # First: MultiWorkerMirroredStrategy configures collectives, which must precede any TF op.
    strategy = get_strategy(config.strategy)
    logs = read_records(examples_uri, config, base_model_uri)
    context_dim = logs.schema.observation_dim
    tf.random.set_seed(config.seed)

    def build() -> tuple[Any, tf.Variable]:
        with strategy.scope():
            step = create_train_step_counter()
            agent = make_bandit_agent(config, context_dim, step, per_arm=logs.per_arm, masked=logs.masked)
            return agent, step

    origin = start_agent(build, config, base_model_uri)
    agent, train_step, warm = origin.agent, origin.train_step, origin.warm_started_from
    if config.train_steps == 0 and warm is None:
        raise ValueError(
            f"trainer.train_steps: 0 re-exports the base model, but it cannot seed this run: "
            f"{origin.cold_start_reason}; unset train_steps (or give > 0) to train from scratch"
        )
    if warm and config.forgetting_factor != 1.0:  # LinUCB / LinTS only (the config checks)
        with strategy.scope():
            agent.forget(config.forgetting_factor)
    linear = getattr(agent, "train_step_counts_examples", False)  # order-free sums: no shuffle
    run = train_passes(
        agent,
        train_step,
        strategy,
        config,
        model_uri,
        model_run_uri,
        logs.pattern,
        logs.feature_spec,
        _trajectory_fn(logs, agent),
        shuffle=not linear,
        weighted=logs.weighted,
    )
    trained = run.trained
    greedy, collect = _raw_feature_policies(serving_policy(agent), agent.collect_policy, logs, config)
    export_policies(
        greedy,
        collect,
        train_step,
        model_uri,
        BANDIT,
        serving_epsilon=config.exploration_epsilon,
        schema=logs.schema,
        item_catalog=_served_catalog(examples_uri, greedy, logs),
    )
    return trained.result(
        warm,
        {
            "train_records": run.records,
            # The bandits' rate: a LinUCB / LinTS step sums a batch of 4,096 records, so steps per
            # second (0.5 on 10k records, tracing included) says nothing; records per second does.
            "records_per_sec": run.records_per_sec,
            "batch_size": config.train_batch_size,
            "num_epochs": config.epochs,
            "context_dim": context_dim,
            "num_actions": config.num_actions,
            "features": logs.schema.names,
            "resumed_from_step": trained.resumed,
            "action_mask": logs.masked,
            **origin.cold_note(),
        },
    )


def _trajectory_fn(logs: FeedbackRecords, agent: Any) -> Any:
    """Parsed batches -> the agent's experience (with the logged weights, when there are some)."""
    action_spec = agent.action_spec
    info_spec = agent.training_data_spec.policy_info

    def to_trajectory(p: dict[str, tf.Tensor]) -> Any:
        if logs.arm_pre is not None:
            experience = per_arm_trajectory(p, logs.arm_pre, action_spec)
        else:
            observation = p[records.CONTEXT] if logs.preprocessor is None else logs.preprocessor(p)
            experience = records.bandit_trajectory(p, action_spec, observation)
        experience = experience._replace(
            policy_info=fit_info(experience.policy_info, info_spec),
            action=checked_action(experience.action, action_spec),
        )
        if logs.masked:  # the agent's observation: {'observation', 'action_mask'}
            experience = experience._replace(
                observation={masks.OBSERVATION: experience.observation, masks.MASK: p[records.ACTION_MASK]}
            )
        return {"experience": experience, "weights": p[records.WEIGHT]} if logs.weighted else experience

    return to_trajectory


def _served_catalog(examples_uri: str, served: Any, logs: FeedbackRecords) -> ItemCatalog | None:
    """The item table ExperienceGen wrote beside the splits, for a per-arm policy that can score any
    candidates by their features (serving_default then takes candidate ids); else None."""
    if logs.arm_pre is None or logs.masked or by_id.find_scorer(served) is None:
        return None
    catalog = read_item_catalog(examples_uri)
    if catalog is None:
        return None
    missing = [f.name for f in logs.schema.per_arm if f.name not in catalog.columns]
    if len(missing) == len(logs.schema.per_arm):  # no item feature comes from the table
        return None
    return catalog


def _raw_feature_policies(greedy: Any, collect: Any, logs: FeedbackRecords, config: TrainerConfig) -> tuple[Any, Any]:
    """The trained policies as exported: they take the raw logged features, not model inputs."""
    if logs.masked:  # raw features + action_mask in (the mask is part of the exported observation)
        k = config.num_actions
        assert k is not None  # TrainerConfig.validate: bandits set it
        encoder = logs.arm_pre or logs.preprocessor or masks.DenseContext(records.CONTEXT, logs.schema.observation_dim)
        return masks.MaskedFeaturePolicy(greedy, encoder, k), masks.MaskedFeaturePolicy(collect, encoder, k)
    if logs.preprocessor is not None:  # the exported policies take raw named features
        return FeaturePolicy(greedy, logs.preprocessor), FeaturePolicy(collect, logs.preprocessor)
    if logs.arm_pre is not None:  # ... plus per_arm/<name> [K] and num_actions
        return PerArmFeaturePolicy(greedy, logs.arm_pre), PerArmFeaturePolicy(collect, logs.arm_pre)
    return greedy, collect
