"""The Trainer's work as a plain function (TFX executor, KFP component and TFX `run_fn` call it).

Model artifact layout (TFX conventions where they exist):
    <model>/Format-Serving/      greedy policy SavedModel (what the Pusher ships; TFX path_utils)
    <model>/collect_policy/      exploring policy SavedModel (logs propensities for the next round)
    <model>/train/checkpoints/   Learner checkpoints (warm start and preemption resume)
    <model>/trainer_config.json
ModelRun artifact: TensorBoard event files, metrics.json and learning_curve.png.

Modes: bandits train offline from an Examples artifact of feedback, by passes over its train
split (trainer.passes: LinUCB / LinTS one pass, so their statistics are the sums over every record;
NeuralEpsilonGreedy `num_epochs` passes), and report the records consumed (`train_records`);
PPO trains offline from an
Examples artifact of logged trajectories when one is given (trainer.episodes turns episodes into
PPO's [B, T+1] batches), else online against the Gymnasium env trainer.ppo.env_id.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import tensorflow as tf

from rlops.agents import specs
from rlops.components.common.keys import MODEL_KEY, MODEL_RUN_KEY
from rlops.components.common.model import SERVING_DIR as SERVING_DIR, serving_dir
from rlops.components.trainer import masks, passes
from rlops.components.trainer.config import PPOOfflineConfig, TrainerConfig
from rlops.features import SCHEMA_FILE, FeatureSchema, Preprocessor, load as load_feature_schema
from rlops.features.export import FeaturePolicy, PerArmFeaturePolicy

if TYPE_CHECKING:
    from rlops.components.trainer.episodes import LoggedFeatures

log = logging.getLogger(__name__)

COLLECT_POLICY_DIR = "collect_policy"
CONFIG_FILE = "trainer_config.json"
METRICS_FILE = "metrics.json"


@dataclass
class TrainResult:
    train_steps: int
    final_loss: float
    steps_per_sec: float
    wall_s: float
    warm_started_from: str | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "train_steps": self.train_steps,
            "final_loss": self.final_loss,
            "steps_per_sec": round(self.steps_per_sec, 1),
            "wall_s": round(self.wall_s, 2),
            "warm_started_from": self.warm_started_from,
            **self.extra,
        }

    def properties(self) -> dict[str, dict[str, Any]]:
        """The output artifacts' properties by output key, as both faces write them (TFX custom
        properties, KFP metadata; a non-finite number, e.g. the loss when no step ran, is left
        out): the Model's train steps, final loss, warm start (or why a given base model could not
        seed it) and, for bandits, the records consumed (to check against the split); the
        ModelRun's speed and records consumed."""
        model: dict[str, Any] = {
            "train_steps": self.train_steps,
            "final_loss": self.final_loss,
            "warm_started_from": self.warm_started_from or "",
        }
        run: dict[str, Any] = {"steps_per_sec": self.steps_per_sec}
        if "train_records" in self.extra:
            model["train_records"] = run["train_records"] = int(self.extra["train_records"])
        if "records_per_sec" in self.extra:
            run["records_per_sec"] = float(self.extra["records_per_sec"])
        if self.extra.get("cold_start_reason"):
            model["cold_start_reason"] = self.extra["cold_start_reason"]
        return {MODEL_KEY: model, MODEL_RUN_KEY: run}


class WarmStartError(ValueError):
    """The base model's checkpoint does not fit the agent being trained."""


@dataclass(frozen=True)
class Start:
    """The agent a run trains, and where it started: `warm_started_from` (a checkpoint) or, when a
    base model was given but could not seed this agent, `cold_start_reason`."""

    agent: Any
    train_step: tf.Variable
    warm_started_from: str | None = None
    cold_start_reason: str | None = None


def _base_mismatch(config: TrainerConfig, base_model_uri: str) -> str | None:
    """Why the base model cannot seed this run, from its trainer_config.json: another agent, or
    another action spec (the number of actions or the first id). None when it may."""
    path = os.path.join(base_model_uri, CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        return None  # no config beside it: the checkpoint check decides
    with tf.io.gfile.GFile(path) as f:
        base = json.load(f)
    if base.get("agent", config.agent) != config.agent:
        return f"it is a '{base['agent']}' model and this run trains '{config.agent}'"
    from rlops.features.fit import action_misfit

    ours = (config.num_actions, config.action_minimum)
    why = action_misfit((base.get("num_actions", ours[0]), base.get("action_minimum", ours[1])), ours)
    return None if why is None else f"{why} (trainer.num_actions / action_minimum)"


def start_agent(
    build: Callable[[], tuple[Any, tf.Variable]], config: TrainerConfig, base_model_uri: str | None
) -> Start:
    """`build()` -> (agent, train step), warm-started from `base_model_uri` when there is one.

    A base model of another agent, action spec or network shape (the config changed since it was
    blessed) is not an error: the run trains from scratch and says why in one line, so a nightly
    job survives a config change. (A base model without a checkpoint, or whose features today's
    data lacks, still fails: that is broken input, not a new config.)"""
    agent, step = build()
    if not base_model_uri:
        return Start(agent, step)
    why = _base_mismatch(config, base_model_uri)
    if why is None:
        try:
            return Start(agent, step, warm_started_from=_warm_start(agent, step, base_model_uri))
        except WarmStartError as e:
            why = f"its checkpoint does not fit {type(agent).__name__} ({e.detail})"
            agent, step = build()  # a failed restore may have assigned some variables: start clean
    log.warning(
        "trainer: warm_start skipped, training from scratch: the base model %s does not fit this run: "
        "%s (set warm_start: false to start from scratch without this note)",
        base_model_uri,
        why,
    )
    return Start(agent, step, cold_start_reason=why)


def _warm_start(agent, train_step: tf.Variable, base_model_uri: str) -> str:
    """Restores the agent and train step from the base model's latest checkpoint. Strict: every
    variable the agent has now must come from the checkpoint (values the checkpoint has beyond
    them, such as optimizer slots not created yet, are fine); a checkpoint of another agent or
    network shape fails here, naming both, instead of reporting a warm start that restored nothing."""
    from rlops.train.learner import CHECKPOINT_DIR, TRAIN_DIR

    ckpt_dir = os.path.join(base_model_uri, TRAIN_DIR, CHECKPOINT_DIR)
    latest = tf.train.latest_checkpoint(ckpt_dir)
    if latest is None:
        raise FileNotFoundError(f"base_model: no Learner checkpoint under {ckpt_dir} to warm-start from")
    status = None
    try:
        status = tf.train.Checkpoint(agent=agent, train_step=train_step).read(latest)
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        if status is not None:
            status.expect_partial()  # no "value in checkpoint could not be found" warning per variable
        detail = _mismatch_detail(e)
        error = WarmStartError(
            f"base_model: checkpoint {latest} does not match agent '{type(agent).__name__}' "
            f"(a different agent or network shape?): {detail}"
        )
        error.detail = detail
        raise error from None
    status.expect_partial()
    log.info("warm-started from %s (train step %d)", latest, int(train_step.numpy()))
    return latest


def _mismatch_detail(e: Exception) -> str:
    """TF's checkpoint error in one short line: its first sentence, without the variables' values
    (TF lists every unmatched variable with its whole array)."""
    text = " ".join(str(e).split()) or type(e).__name__
    for cut in (" Showing ", " [<tf.Variable", ": [<"):
        text = text.split(cut)[0]
    return text[:200]


# --- the budget and the training loop ------------------------------------------------------------


def check_budget_kind(config: TrainerConfig, train_steps: Any = None, total_env_steps: Any = None) -> None:
    """A run's budget override is the kind its agent takes: `train_steps` for bandits,
    `total_env_steps` for PPO. Empty values (None, 0: a KFP parameter's default) override nothing;
    a RuntimeParameter (compile time) counts as given."""
    if train_steps and not config.is_bandit:
        raise ValueError(
            "train_steps: PPO's budget is total_env_steps (online), or trainer.ppo_offline's "
            "num_passes / max_train_steps (from logged trajectories)"
        )
    if total_env_steps and config.is_bandit:
        raise ValueError(f"total_env_steps: agent '{config.agent}' trains offline; its budget is train_steps")


def apply_runtime_params(
    config: TrainerConfig, train_steps: int | None = None, total_env_steps: int | None = None
) -> TrainerConfig:
    """The Trainer's one budget rule for a run: the config with this run's `train_steps` (bandits:
    the cap on train steps; the passes, `num_epochs`, still end a run first) or `total_env_steps`
    (PPO online). Every face applies it: the TFX executor, the KFP entry point and TFX's `run_fn`."""
    import dataclasses

    check_budget_kind(config, train_steps, total_env_steps)
    if train_steps:
        config = dataclasses.replace(config, train_steps=int(train_steps))
    if total_env_steps:
        config = dataclasses.replace(config, ppo={**config.ppo, "total_env_steps": int(total_env_steps)})
    return config


@dataclass
class Trained:
    """What the training loop did: train steps done in this model directory (a resumed job's
    earlier ones included), how many of them were done before this run (`resumed`), the loss after
    each Learner call, and the wall time."""

    steps: int
    resumed: int
    curve: list[tuple[int, float]]
    wall_s: float

    def result(self, warm_started_from: str | None, extra: dict) -> TrainResult:
        return TrainResult(
            train_steps=self.steps,
            final_loss=self.curve[-1][1] if self.curve else float("nan"),
            steps_per_sec=(self.steps - self.resumed) / max(self.wall_s, 1e-9),
            wall_s=self.wall_s,
            warm_started_from=warm_started_from,
            curve=self.curve,
            extra=extra,
        )


def train_loop(
    learner: Any,
    done: int,
    cap: int | None,
    steps_per_run: int,
    passes: bool,
    note: Callable[[], str] = lambda: "",
) -> Trained:
    """The Trainer's training loop: Learner calls of `steps_per_run` train steps (one tf.function
    each) from `done` (> 0 when a preempted job resumes) up to `cap`, then a checkpoint.

    `passes`: the dataset is finite (passes over a split): `Learner.run_available`, and a call
    that runs fewer steps than asked means the passes are over; `cap` None trains until then.
    Otherwise the dataset repeats (`Learner.run`) and `cap` is needed. `note()` adds to each
    progress line."""
    if cap is None and not passes:
        raise ValueError("train_loop: a repeating dataset needs a cap on train steps")
    resumed, curve, start = done, [], time.perf_counter()
    while cap is None or done < cap:
        n = steps_per_run if cap is None else min(steps_per_run, cap - done)
        if passes:
            loss, ran = learner.run_available(iterations=n)
        else:
            loss, ran = learner.run(iterations=n), n
        if ran:
            done += ran
            curve.append((done, float(loss.loss)))
            log.info("trainer: %d steps%s, loss %.4f", done, note(), curve[-1][1])
        if ran < n:  # the passes are over
            break
    wall = time.perf_counter() - start
    learner.save_checkpoint()
    return Trained(done, resumed, curve, wall)


def train_bandit(
    examples_uri: str, model_uri: str, model_run_uri: str, config: TrainerConfig, base_model_uri: str | None = None
) -> TrainResult:
    from rlops.components.common import records
    from rlops.components.trainer.agents import make_bandit_agent, serving_policy
    from rlops.train.learner import Learner, create_train_step_counter
    from rlops.train.strategy import get_strategy

    if config.train_steps == 0 and not base_model_uri:
        raise ValueError(
            "trainer.train_steps: 0 re-exports a warm-started model and needs a base model; "
            "without one there is nothing to export"
        )
    # First: MultiWorkerMirroredStrategy configures collectives, which must precede any TF op.
    strategy = get_strategy(config.strategy)
    pattern = records.split_file_pattern(examples_uri, "train")
    first = records.first_example(pattern)
    has_propensity = records.PROPENSITY in first.features.feature
    # Logged masks: the agent trains and acts with them (trainer/masks.py); ignore_action_mask opts out.
    masked = records.ACTION_MASK in first.features.feature and not config.ignore_action_mask
    # A base model that cannot seed this run (another agent or action spec) lends it nothing, not
    # even its vocabularies: start_agent below says why and trains from scratch.
    fits = base_model_uri and _base_mismatch(config, base_model_uri) is None
    schema = _feature_schema(examples_uri, first, base_model_uri if fits else None)
    arm_pre = _per_arm_preprocessor(schema, first, config) if schema.per_arm else None
    preprocessor = None if schema.is_legacy or arm_pre is not None else Preprocessor(schema)
    context_dim = schema.observation_dim
    # Logged per-record weights (e.g. sampling weights) weight each row's loss, as in OPE.
    has_weight = records.WEIGHT in first.features.feature
    feature_spec = records.bandit_feature_spec(1, None, propensity=has_propensity, weight=has_weight)
    del feature_spec[records.CONTEXT]  # the context features come from the schema, by name
    feature_spec.update(records.feature_parse_spec(schema))
    if arm_pre is not None:
        feature_spec.update(records.per_arm_parse_spec(schema, arm_pre.num_arms))
    if masked:
        feature_spec[records.ACTION_MASK] = _mask_parse_spec(first, config.num_actions)
    tf.random.set_seed(config.seed)
    per_arm = None if arm_pre is None else (arm_pre.global_dim, arm_pre.num_arms, arm_pre.arm_dim)

    def build():
        with strategy.scope():
            step = create_train_step_counter()
            return make_bandit_agent(config, context_dim, step, per_arm=per_arm, masked=masked), step

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
    action_spec = agent.action_spec
    info_spec = agent.training_data_spec.policy_info

    def to_trajectory(p: dict):
        if arm_pre is not None:
            experience = per_arm_trajectory(p, arm_pre, action_spec)
        else:
            observation = p[records.CONTEXT] if preprocessor is None else preprocessor(p)
            experience = records.bandit_trajectory(p, action_spec, observation)
        experience = experience._replace(
            policy_info=_fit_info(experience.policy_info, info_spec),
            action=_checked_action(experience.action, action_spec),
        )
        if masked:  # the agent's observation: {'observation', 'action_mask'}
            experience = experience._replace(
                observation={masks.OBSERVATION: experience.observation, masks.MASK: p[records.ACTION_MASK]}
            )
        return {"experience": experience, "weights": p[records.WEIGHT]} if has_weight else experience

    progress = _progress(strategy)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        # Called after the Learner restored its checkpoint: a resumed job skips what it trained on.
        ds = passes.pass_dataset(
            pattern,
            feature_spec,
            config.train_batch_size,
            ctx,
            epochs=config.epochs,
            shuffle=not linear,
            seed=config.seed,
            skip_batches=int(progress.steps.numpy()),
        )
        return ds.map(to_trajectory, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)

    linear = getattr(agent, "train_step_counts_examples", False)  # order-free sums: no shuffle
    learner = Learner(
        model_uri,
        train_step,
        agent,
        dataset_fn,
        checkpoint_interval=config.checkpoint_interval,
        summary_interval=config.summary_interval,
        max_checkpoints_to_keep=config.max_checkpoints_to_keep,
        strategy=strategy,
        summary_root_dir=model_run_uri,
        use_kwargs_in_agent_train=has_weight,
        after_train_strategy_step_fn=progress.count,
        checkpoint_extras={"progress": progress},
    )
    # A preempted run of this job resumes: its checkpoint holds the steps and records already done.
    records_before = int(progress.records.numpy())
    trained = train_loop(
        learner,
        int(progress.steps.numpy()),
        config.max_train_steps,
        config.steps_per_run,
        passes=True,
        note=lambda: f", {int(progress.records.numpy())} records",
    )
    greedy, collect = serving_policy(agent), agent.collect_policy
    if masked:  # raw features + action_mask in (the mask is part of the exported observation)
        encoder = arm_pre or preprocessor or masks.DenseContext(records.CONTEXT, context_dim)
        greedy, collect = (masks.MaskedFeaturePolicy(p, encoder, config.num_actions) for p in (greedy, collect))
    elif preprocessor is not None:  # the exported policies take raw named features
        greedy, collect = FeaturePolicy(greedy, preprocessor), FeaturePolicy(collect, preprocessor)
    elif arm_pre is not None:  # ... plus per_arm/<name> [K] and num_actions
        greedy, collect = PerArmFeaturePolicy(greedy, arm_pre), PerArmFeaturePolicy(collect, arm_pre)
    _export_policies(greedy, collect, train_step, model_uri, serving_epsilon=config.exploration_epsilon, schema=schema)
    records_done = int(progress.records.numpy())
    return trained.result(
        warm,
        {
            "train_records": records_done,
            # The bandits' rate: a LinUCB / LinTS step sums a batch of 4,096 records, so steps per
            # second (0.5 on 10k records, tracing included) says nothing; records per second does.
            "records_per_sec": round((records_done - records_before) / max(trained.wall_s, 1e-9), 1),
            "batch_size": config.train_batch_size,
            "num_epochs": config.epochs,
            "context_dim": context_dim,
            "num_actions": config.num_actions,
            "features": schema.names,
            "resumed_from_step": trained.resumed,
            "action_mask": masked,
            **_cold(origin),
        },
    )


def _progress(strategy: tf.distribute.Strategy) -> passes.TrainProgress:
    with strategy.scope():
        return passes.TrainProgress()


def _cold(start: Start) -> dict:
    """TrainResult.extra's note of a skipped warm start (metrics.json, the Model's properties)."""
    return {"cold_start_reason": start.cold_start_reason} if start.cold_start_reason else {}


def _fit_info(info, spec):
    """The logged policy info the agent's data spec has room for: LinTS logs no propensity (it has
    no closed form), so a logged one is dropped rather than failing the spec check."""
    if not isinstance(info, dict):
        return info
    kept = {k: v for k, v in info.items() if isinstance(spec, dict) and k in spec}
    return kept or ()


def _checked_action(action: tf.Tensor, action_spec) -> tf.Tensor:
    """Logged actions outside the agent's ids fail naming the settings, not as a gather index
    error deep in train (or, on a GPU, a gather that silently reads zeros)."""
    lo, hi = int(action_spec.minimum), int(action_spec.maximum)
    message = (
        f"examples: a logged action is outside [{lo}, {hi}], the ids the agent was built for "
        f"(trainer.action_minimum {lo}, trainer.num_actions {hi - lo + 1}; a pipeline takes both from "
        f"experience_gen.action_spec)"
    )  # no apostrophes: the Assert op escapes them
    checks = [
        tf.debugging.assert_greater_equal(action, tf.cast(lo, action.dtype), message=message),
        tf.debugging.assert_less_equal(action, tf.cast(hi, action.dtype), message=message),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(action)


def _mask_parse_spec(first: tf.train.Example, num_actions: int) -> tf.io.FixedLenFeature:
    width = len(first.features.feature[masks.MASK].int64_list.value)
    if width != num_actions:
        raise ValueError(
            f"examples: '{masks.MASK}' has {width} entries per record, but trainer.num_actions is "
            f"{num_actions}; the mask needs one entry per action"
        )
    return tf.io.FixedLenFeature([num_actions], tf.int64)


def _per_arm_preprocessor(schema: FeatureSchema, first: tf.train.Example, config: TrainerConfig):
    """K (the candidates per record) from the first record; trainer.num_actions must agree."""
    from rlops.features.per_arm import PerArmPreprocessor, per_arm_key

    for f in schema.per_arm:
        if per_arm_key(f.name) not in first.features.feature:
            raise ValueError(
                f"examples: the schema has per-arm feature '{f.name}' but the records have no '{per_arm_key(f.name)}'"
            )
    f = schema.per_arm[0]
    feat = first.features.feature[per_arm_key(f.name)]
    kind = feat.WhichOneof("kind")
    k = len(getattr(feat, kind).value) // (f.dim if f.multivalent else 1)  # a category list: K * dim values
    if config.num_actions != k:
        raise ValueError(
            f"trainer.num_actions: {config.num_actions}, but the per-arm records have {k} candidate "
            f"arms (K) each; set num_actions to {k}"
        )
    return PerArmPreprocessor(schema, k)


def per_arm_trajectory(parsed: dict, arm_pre, action_spec):
    """Parsed per-arm records -> the [B, 1] trajectory per-arm agents train on: observation
    {'global', 'num_actions'}, the chosen arm's features in policy_info (TF-Agents' layout)."""
    from rlops.agents import trajectories
    from rlops.components.common import records

    obs = arm_pre(parsed)
    action = tf.cast(parsed[records.ACTION], tf.int32)
    info = {"chosen_arm_features": tf.gather(obs["per_arm"], action, batch_dims=1)}
    if records.PROPENSITY in parsed:
        info["propensity"] = parsed[records.PROPENSITY]
    observation = {"global": obs["global"], "num_actions": obs["num_actions"]}
    return trajectories.single_step_trajectory(
        observation, tf.cast(action, action_spec.dtype), parsed[records.REWARD], info
    )


def _feature_schema(examples_uri: str, first: tf.train.Example, base_model_uri: str | None) -> FeatureSchema:
    """The schema the model is built on: the Examples' (legacy records without one: their dense
    `context`), or at warm start the base model's own, so the vocabularies -- and with them the
    meaning of every input weight -- stay those it was trained with (new values go to OOV
    buckets). A feature the base model needs that the new data lacks or retypes is an error."""
    from rlops.components.common import records

    data = load_feature_schema(examples_uri)
    if data is None:
        if records.CONTEXT not in first.features.feature:
            raise ValueError(f"examples: no {SCHEMA_FILE} and no dense '{records.CONTEXT}' feature in {examples_uri}")
        data = FeatureSchema.legacy(len(first.features.feature[records.CONTEXT].float_list.value))
    base = load_feature_schema(serving_dir(base_model_uri)) if base_model_uri else None
    if base is None:
        return data
    what = f"examples at {examples_uri} (warm start from {base_model_uri})"
    extra = base.check_compatible(data, what=what)
    extra += [f"per_arm/{n}" for n in _check_per_arm_compatible(base, data, what)]
    if extra:
        log.info("trainer: the base model has no use for new feature(s) %s; they are ignored at warm start", extra)
    _log_vocabulary_drift(base, data)
    return base


def _check_per_arm_compatible(base: FeatureSchema, data: FeatureSchema, what: str) -> list[str]:
    """The per-arm counterpart of FeatureSchema.check_compatible: every arm feature the base model
    scores must be in the data with the same kind; returns the data's extra arm features. Without
    this a missing, renamed or retyped arm feature failed deep in tf.data parsing."""
    from rlops.features import FeatureSchemaError

    if bool(base.per_arm) != bool(data.per_arm):
        has, lacks = ("the base model", f"the {what}") if base.per_arm else (f"the {what}", "the base model")
        names = [f.name for f in (base.per_arm or data.per_arm)]
        raise FeatureSchemaError(
            f"per-arm features {names}: {has} has them, {lacks} has none; a per-arm model "
            f"warm-starts only from per-arm data and back"
        )
    ours = {f.name: f for f in data.per_arm}
    for f in base.per_arm:
        g = ours.get(f.name)
        if g is None:
            raise FeatureSchemaError(
                f"per-arm feature '{f.name}' ({f.describe()}) is missing from the {what}; "
                f"it has per-arm features {sorted(ours)}"
            )
        if f.signature != g.signature:
            raise FeatureSchemaError(
                f"per-arm feature '{f.name}' is {f.describe()} in the base model but {g.describe()} in the {what}"
            )
    return [n for n in ours if n not in {f.name for f in base.per_arm}]


def _log_vocabulary_drift(base: FeatureSchema, data: FeatureSchema) -> None:
    """A vocabulary that changed since the base model is kept as the base's (its input weights mean
    those values; the nightly loop must survive a new category): say which feature, and how many
    of today's values now go to OOV buckets."""
    ours = {f.name: f for f in data.features} | {f"per_arm/{f.name}": f for f in data.per_arm}
    for name, f in [(f.name, f) for f in base.features] + [(f"per_arm/{f.name}", f) for f in base.per_arm]:
        g = ours.get(name)
        if g is None or not f.vocabulary or f.hash_buckets:
            continue
        unseen = len(set(g.vocabulary) - set(f.vocabulary))
        if unseen or len(g.vocabulary) != len(f.vocabulary):
            log.warning(
                "trainer: feature '%s' has a vocabulary of %d values in the data, %d in the base model; "
                "warm start keeps the base model's (%d value(s) new since then go to its %d OOV bucket(s))",
                name,
                len(g.vocabulary),
                len(f.vocabulary),
                unseen,
                f.num_oov_buckets,
            )


def train_ppo_online(
    model_uri: str, model_run_uri: str, config: TrainerConfig, base_model_uri: str | None = None
) -> TrainResult:
    import dataclasses

    from rlops.envs.gym_env import GymVectorEnv
    from rlops.train.on_policy import PPOConfig, build_ppo_agent, train_ppo

    ppo_config = dataclasses.replace(PPOConfig(seed=config.seed), **config.ppo)
    env = GymVectorEnv(ppo_config.env_id, ppo_config.num_envs, seed=ppo_config.seed)

    def build():
        agent = build_ppo_agent(ppo_config, env)
        return agent, agent.train_step_counter

    origin = start_agent(build, config, base_model_uri)
    env.close()
    agent, warm = origin.agent, origin.warm_started_from
    writer = tf.summary.create_file_writer(model_run_uri)

    def on_iteration(it: int, _agent, metrics: dict) -> None:
        with writer.as_default(step=metrics["env_steps"]):
            tf.summary.scalar("Metrics/AverageReturn", metrics["mean_return_20"])

    # The Learner checkpoints under <model>/train/checkpoints: a preempted Trainer resumes there,
    # and the next scheduled run warm-starts from it.
    result = train_ppo(
        ppo_config,
        agent=agent,
        on_iteration=on_iteration,
        root_dir=model_uri,
        summary_dir=model_run_uri,
        checkpoint_interval=config.checkpoint_interval,
    )
    writer.flush()
    _export_policies(agent.policy, agent.collect_policy, agent.train_step_counter, model_uri)
    curve = list(zip(result.episode_env_steps, result.episode_returns))
    return TrainResult(
        train_steps=int(agent.train_step_counter.numpy()),
        final_loss=result.losses[-1] if result.losses else float("nan"),
        steps_per_sec=result.env_steps / max(result.train_wall_s, 1e-9),
        wall_s=result.train_wall_s,
        warm_started_from=warm,
        curve=curve,
        extra={
            "env_steps": result.env_steps,
            "env_id": ppo_config.env_id,
            "train_eval_mean_return": result.eval_mean_return,
            **_cold(origin),
        },
    )


def train_ppo_offline(
    examples_uri: str, model_uri: str, model_run_uri: str, config: TrainerConfig, base_model_uri: str | None = None
) -> TrainResult:
    """PPO from logged trajectories: episodes -> [B, T+1] windows (trainer.episodes) -> Learner.

    One train step is one PPOAgent.train call on `ppo_offline.batch_size` windows (all its epochs
    and minibatches); `num_passes` passes over the train split set the budget."""
    import dataclasses

    from rlops.agents.trajectories import time_step_spec
    from rlops.components.common import records
    from rlops.components.trainer import episodes
    from rlops.train.learner import Learner
    from rlops.train.on_policy import PPOConfig, build_ppo_agent, train_steps_per_iteration

    offline = config.offline_ppo
    pattern = records.split_file_pattern(examples_uri, "train")
    logged = episodes.inspect_logs(pattern)
    observation_spec, action_spec = _offline_specs(logged, config)
    info_spec, complete_info = episodes.policy_info_reader(logged, action_spec)
    if _derives_uniform(logged, action_spec):
        episodes.check_uniform(pattern, specs.num_actions(action_spec))
    num_episodes, train_rows, windows = episodes.count_windows(pattern, offline.window_length)
    total = _offline_budget(offline, windows, train_rows)
    # The batch [B, T+1] is what B envs x T steps are online: the same PPOConfig sizes it (and the
    # learning-rate schedule, when asked for). Annealing is off unless set: a schedule keyed on
    # the optimizer's step count would already be spent in a warm-started retraining run.
    ppo_config = dataclasses.replace(
        PPOConfig(seed=config.seed),
        **{
            "anneal_lr": False,
            **config.ppo,
            "num_envs": offline.batch_size,
            "num_steps": offline.window_length,
            "total_env_steps": total * offline.batch_size * offline.window_length,
        },
    )
    strategy = _single_replica_strategy(config.strategy)

    def build():
        with strategy.scope():
            agent = build_ppo_agent(ppo_config, _Specs(observation_spec, action_spec, time_step_spec(observation_spec)))
        return agent, agent.train_step_counter

    origin = start_agent(build, config, base_model_uri)
    agent, warm = origin.agent, origin.warm_started_from

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
    _export_policies(agent.policy, agent.collect_policy, agent.train_step_counter, model_uri)
    return trained.result(
        warm,
        {
            "offline": True,
            "episodes": num_episodes,
            "train_rows": train_rows,
            "windows": windows,
            "observation_dim": logged.observation_dim,
            **_cold(origin),
        },
    )


@dataclass(frozen=True)
class _Specs:
    """What build_ppo_agent reads from an environment, without one."""

    observation_spec: tf.TensorSpec
    action_spec: tf.TensorSpec
    time_step_spec: object


def _derives_uniform(logged: LoggedFeatures, action_spec: tf.TensorSpec) -> bool:
    """Only log-probabilities for more than two actions: the logs must show a uniform logger."""
    from rlops.components.trainer import episodes

    return (
        specs.is_discrete(action_spec)
        and episodes.LOGITS not in logged.policy_info
        and specs.num_actions(action_spec) > 2
    )


def _offline_specs(logged: LoggedFeatures, config: TrainerConfig) -> tuple[tf.TensorSpec, tf.TensorSpec]:
    """Observation and action specs: from trainer.ppo.env_id when given (checked against the
    logs), else from the logs, with trainer.num_actions where the logs don't say how many."""
    from rlops.components.trainer import episodes

    logits = logged.policy_info.get(episodes.LOGITS)
    env_id = config.ppo.get("env_id")
    if env_id:
        observation_spec, action_spec = _env_specs(env_id)
        dim = int(np.prod(observation_spec.shape.as_list()))
        if dim != logged.observation_dim:
            raise ValueError(
                f"trainer.ppo.env_id: {env_id} observations have {dim} values, the logged ones {logged.observation_dim}"
            )
        if specs.is_discrete(action_spec) != logged.discrete:
            kind = lambda discrete: "discrete" if discrete else "continuous"  # noqa: E731
            raise ValueError(
                f"trainer.ppo.env_id: {env_id} has {kind(not logged.discrete)} actions, the logs "
                f"{kind(logged.discrete)} ones"
            )
        if config.num_actions is not None and logged.discrete and config.num_actions != specs.num_actions(action_spec):
            raise ValueError(
                f"trainer.num_actions: {config.num_actions}, but {env_id} has {specs.num_actions(action_spec)} actions"
            )
        return observation_spec, action_spec
    observation_spec = tf.TensorSpec((logged.observation_dim,), tf.float32, "observation")
    if not logged.discrete:
        return observation_spec, tf.TensorSpec((logged.action_dim,), tf.float32, "action")
    if logits is not None and config.num_actions is not None and logits != config.num_actions:
        raise ValueError(
            f"trainer.num_actions: {config.num_actions}, but the logged {episodes.LOGITS} have {logits} values per step"
        )
    k = logits or config.num_actions
    if k is None:
        raise ValueError(
            f"trainer.num_actions: the logged actions are discrete and the logs have no "
            f"{episodes.LOGITS} to tell how many there are; set trainer.num_actions (or "
            f"trainer.ppo.env_id)"
        )
    return observation_spec, specs.BoundedTensorSpec((), tf.int32, 0, k - 1, name="action")


def _env_specs(env_id: str) -> tuple[tf.TensorSpec, tf.TensorSpec]:
    import gymnasium as gym

    from rlops.envs.gym_env import space_to_spec

    env = gym.make(env_id)
    try:
        return space_to_spec(env.observation_space, "observation"), space_to_spec(env.action_space, "action")
    finally:
        env.close()


def _offline_budget(offline: PPOOfflineConfig, windows: int, train_rows: int) -> int:
    batches = windows // offline.batch_size
    if batches == 0:
        raise ValueError(
            f"trainer.ppo_offline.batch_size: the train split gives {windows} windows "
            f"({train_rows} training steps, window_length {offline.window_length}), fewer than one "
            f"batch of {offline.batch_size}; lower batch_size or window_length, or log more episodes"
        )
    total = offline.num_passes * batches
    return min(total, offline.max_train_steps) if offline.max_train_steps else total


def _single_replica_strategy(name: str) -> tf.distribute.Strategy:
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


def _export_policies(
    serving_policy,
    collect_policy,
    train_step: tf.Variable,
    model_uri: str,
    serving_epsilon: float | None = None,
    schema: FeatureSchema | None = None,
) -> None:
    """Both SavedModels share one variable list, so a checkpoint-only update of either loads
    into both (rlops.train.policy_saver). With `serving_epsilon`, the serving SavedModel gets
    `serving_default` (both get the same metadata, so their checkpoints stay interchangeable);
    the feature schema goes beside it."""
    from rlops.train.policy_saver import PolicySaver
    from rlops.train.strategy import is_chief, task_info

    # Multi-worker: every worker runs the save (it may involve collectives), only the chief's
    # lands in the artifact; the others write into a throw-away directory.
    chief = is_chief()
    out = model_uri if chief else os.path.join(model_uri, f".workertemp_{task_info()[1] or 0}")
    shared = list({id(v): v for v in list(serving_policy.variables) + list(collect_policy.variables)}.values())
    meta = {} if serving_epsilon is None else {"serving_epsilon": float(serving_epsilon)}
    PolicySaver(serving_policy, train_step=train_step, variables=shared, serving_epsilon=serving_epsilon).save(
        serving_dir(out)
    )
    PolicySaver(collect_policy, train_step=train_step, variables=shared, metadata=meta).save(
        os.path.join(out, COLLECT_POLICY_DIR)
    )
    if schema is not None:
        schema.save(serving_dir(out))
    if not chief:
        tf.io.gfile.rmtree(out)


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
    tf.io.gfile.makedirs(model_uri)
    tf.io.gfile.makedirs(model_run_uri)
    if config.is_bandit:
        result = train_bandit(examples_uri, model_uri, model_run_uri, config, base_model_uri)
    elif examples_uri:  # logged trajectories: PPO offline
        result = train_ppo_offline(examples_uri, model_uri, model_run_uri, config, base_model_uri)
    else:
        result = train_ppo_online(model_uri, model_run_uri, config, base_model_uri)
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

    path = os.path.join(model_run_uri, "learning_curve.png")
    if config.is_bandit or result.extra.get("offline"):
        plot_curves(
            {f"{config.agent} loss": [loss for _, loss in result.curve]},
            path,
            xlabel=f"x{config.steps_per_run} train steps",
            ylabel="loss",
            title="Trainer loss",
        )
    else:
        steps, returns = zip(*result.curve)
        plot_learning_curve(np.asarray(steps), np.asarray(returns), path, title=f"PPO {config.ppo.get('env_id')}")
