"""Where a Trainer run starts: the agent it builds, warm-started from a base model's checkpoint
when one is given and fits, else from scratch with one line saying why."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

import tensorflow as tf

from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.layout import CONFIG_FILE

log = logging.getLogger(__name__)


class WarmStartError(ValueError):
    """The base model's checkpoint does not fit the agent being trained."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail  # TF's reason in one short line


@dataclass(frozen=True)
class Start:
    """The agent a run trains, and where it started: `warm_started_from` (a checkpoint) or, when a
    base model was given but could not seed this agent, `cold_start_reason`."""

    agent: Any
    train_step: tf.Variable
    warm_started_from: str | None = None
    cold_start_reason: str | None = None

    def cold_note(self) -> dict[str, str]:
        """TrainResult.extra's note of a skipped warm start (metrics.json, the Model's properties)."""
        return {"cold_start_reason": self.cold_start_reason} if self.cold_start_reason else {}


def base_mismatch(config: TrainerConfig, base_model_uri: str) -> str | None:
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
    theirs = (base.get("num_actions", ours[0]), base.get("action_minimum", ours[1]))
    # PPO may leave num_actions None on both sides (its environment or logs size the actions):
    # action_misfit compares and names the pairs as they are, None included; its hint says int.
    why = action_misfit(theirs, ours)
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
    why = base_mismatch(config, base_model_uri)
    if why is None:
        try:
            return Start(agent, step, warm_started_from=restore(agent, step, base_model_uri))
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


def restore(agent: Any, train_step: tf.Variable, base_model_uri: str) -> str:
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
        raise WarmStartError(
            f"base_model: checkpoint {latest} does not match agent '{type(agent).__name__}' "
            f"(a different agent or network shape?): {detail}",
            detail,
        ) from None
    status.expect_partial()
    log.info("warm-started from %s (train step %d)", latest, int(train_step.numpy()))
    return str(latest)


def _mismatch_detail(e: Exception) -> str:
    """TF's checkpoint error in one short line: its first sentence, without the variables' values
    (TF lists every unmatched variable with its whole array)."""
    text = " ".join(str(e).split()) or type(e).__name__
    for cut in (" Showing ", " [<tf.Variable", ": [<"):
        text = text.split(cut)[0]
    return text[:200]
