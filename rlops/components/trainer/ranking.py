"""The ranking training path (decision kind `slate`): a RankingAgent trained offline from an Examples
artifact of logged slates, by passes over its train split through the shared training loop, and
exported with PolicySaver so the SavedModel serves pages (`serving_ranked`, exact propensities).

Each record is one logged page (rlops.components.common.slates): its context features, the shown
items' indices in display order (-1 past a shorter page's end) and each slot's reward. The agent
sees every item of the K as a candidate, known by its one-hot index (rlops.features.item_index), so
the exported policy takes the context's raw features and `num_actions` and ranks the K items in
index order (the item table's row order, or the logs' item ids 0..K-1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from rlops.components.common import decision_kinds, records
from rlops.components.common.records import NUM_ACTIONS, REWARD
from rlops.components.common.slates import SLATE, SLATE_LENGTH, slate_record_spec
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.export import export_policies
from rlops.components.trainer.loop import train_passes
from rlops.components.trainer.result import TrainResult
from rlops.components.trainer.warm_start import base_mismatch, start_agent
from rlops.features import FeatureSchema
from rlops.features.item_index import ItemIndexPreprocessor


@dataclass(frozen=True)
class SlateRecords:
    """What the train split's slate records hold, read from its first record, and how to parse them."""

    pattern: str  # the train split's files
    schema: FeatureSchema
    preprocessor: ItemIndexPreprocessor
    num_slots: int  # L
    feature_spec: dict[str, Any]  # the tf.io parse spec

    @property
    def num_items(self) -> int:
        return self.preprocessor.num_arms


def read_slate_records(examples_uri: str, base_model_uri: str | None, config: TrainerConfig) -> SlateRecords:
    """The train split's layout and the feature schema the model is built on (at warm start the base
    model's, so its vocabularies keep their meaning)."""
    from rlops.components.trainer.bandit_schema import model_schema
    from rlops.features import load as load_feature_schema

    spec = slate_record_spec(examples_uri, "train")  # one error when the split holds no slates
    pattern = records.split_file_pattern(examples_uri, "train")
    first = records.first_example(pattern)
    if load_feature_schema(examples_uri) is None:
        raise ValueError(
            f"examples: the slates at {examples_uri} have no context features to rank by; map the request's "
            "features with experience_gen.slate_columns.features"
        )
    base = base_model_uri if base_model_uri and base_mismatch(config, base_model_uri) is None else None
    schema = model_schema(examples_uri, first, base)
    num_items = int(first.features.feature[NUM_ACTIONS].int64_list.value[0])
    if spec.slate_length > num_items:
        raise ValueError(
            f"experience_gen.slate_length: {spec.slate_length} slots, but the slates' items number {num_items}: "
            "no page can be filled"
        )
    length = spec.slate_length
    feature_spec: dict[str, Any] = {
        SLATE: tf.io.FixedLenFeature([length], tf.int64),
        SLATE_LENGTH: tf.io.FixedLenFeature([], tf.int64),
        REWARD: tf.io.FixedLenFeature([length], tf.float32),
        **records.feature_parse_spec(schema),
    }
    return SlateRecords(pattern, schema, ItemIndexPreprocessor(schema, num_items), length, feature_spec)


def make_ranking_agent(config: TrainerConfig, logs: SlateRecords, train_step: tf.Variable) -> Any:
    """The registered ranking agent for the records' specs."""
    from rlops.components.trainer.agents.base import BuildInputs
    from rlops.components.trainer.agents.ranking import ranking_specs

    spec = config.registered
    ts_spec, action_spec = ranking_specs(
        logs.preprocessor.global_dim, logs.num_items, logs.num_slots, config.ranking.cascading
    )
    inputs = BuildInputs(ts_spec, action_spec, ts_spec.observation, train_step, per_arm=True)
    return spec.build(spec.options_from(config), inputs)


def slate_trajectory(parsed: dict[str, tf.Tensor], logs: SlateRecords, cascading: bool) -> Any:
    """Parsed slate records [B] -> the RankingAgent's experience: per_arm holds the L shown items in
    display order, num_actions the page's filled slots (TF-Agents' layout)."""
    from rlops.agents import trajectories
    from rlops.agents.ranking.ranking_agent import cascading_feedback, order_items_from_action

    observation = logs.preprocessor(parsed)
    slates = parsed[SLATE]
    shown = tf.cast(tf.where(slates >= 0, slates, 0), tf.int32)  # padding gathers item 0, weight 0
    train_obs = order_items_from_action(observation, shown)
    train_obs["num_actions"] = tf.cast(parsed[SLATE_LENGTH], tf.int32)
    rewards = parsed[REWARD]
    batch = tf.shape(slates)[0]
    return trajectories.Trajectory(
        step_type=tf.fill([batch], trajectories.StepType.FIRST),
        observation=train_obs,
        action=shown,
        policy_info=(),
        next_step_type=tf.fill([batch], trajectories.StepType.LAST),
        reward=cascading_feedback(rewards) if cascading else rewards,
        discount=tf.zeros([batch], tf.float32),
    )


def train_ranking(
    examples_uri: str | None,
    model_uri: str,
    model_run_uri: str,
    config: TrainerConfig,
    base_model_uri: str | None = None,
) -> TrainResult:
    from rlops.features.export import FeaturePolicy
    from rlops.train.learner import create_train_step_counter
    from rlops.train.strategy import get_strategy

    if not examples_uri:
        raise ValueError(f"trainer: agent '{config.agent}' trains offline and needs an examples input")
    if config.train_steps == 0:
        raise ValueError("trainer.train_steps: 0 (re-export only) is for bandit agents; give > 0 or leave it unset")
    # First: MultiWorkerMirroredStrategy configures collectives, which must precede any TF op.
    strategy = get_strategy(config.strategy)
    logs = read_slate_records(examples_uri, base_model_uri, config)
    cascading = config.ranking.cascading
    tf.random.set_seed(config.seed)

    def build() -> tuple[Any, tf.Variable]:
        with strategy.scope():
            step = create_train_step_counter()
            return make_ranking_agent(config, logs, step), step

    origin = start_agent(build, config, base_model_uri)
    agent, train_step = origin.agent, origin.train_step
    run = train_passes(
        agent,
        train_step,
        strategy,
        config,
        model_uri,
        model_run_uri,
        logs.pattern,
        logs.feature_spec,
        lambda p: slate_trajectory(p, logs, cascading),
        shuffle=True,
        unit="slates",
    )
    trained = run.trained
    # What servers call: the exploring page (serving_ranked), on the context's raw features.
    served = FeaturePolicy(agent.collect_policy, logs.preprocessor)
    export_policies(served, None, train_step, model_uri, decision_kinds.SLATE, schema=logs.schema)
    return trained.result(
        origin.warm_started_from,
        {
            "train_records": run.records,
            "records_per_sec": run.records_per_sec,
            "batch_size": config.train_batch_size,
            "num_epochs": config.epochs,
            "num_items": logs.num_items,
            "slate_length": logs.num_slots,
            "slate_policy": config.ranking.slate_policy,
            "features": logs.schema.names,
            "resumed_from_step": trained.resumed,
            **origin.cold_note(),
        },
    )
