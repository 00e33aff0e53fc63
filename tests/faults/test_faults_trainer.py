"""Fault suite, Trainer: warm start fails clearly when the checkpoint does not fit, and only the
chief of a multi-worker job exports policies and writes metrics."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common.decision_kinds import BANDIT
from rlops.components.common.model import SERVING_DIR, serving_dir
from rlops.components.trainer import core, warm_start
from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.export import export_policies
from rlops.components.trainer.layout import COLLECT_POLICY_DIR, CONFIG_FILE, METRICS_FILE
from rlops.components.trainer.result import TrainResult
from rlops.train.learner import CHECKPOINT_DIR, TRAIN_DIR, create_train_step_counter

D, K = 5, 3


def agent_with(hidden: tuple[int, ...], seed: int = 0):
    config = TrainerConfig(agent="neural_epsilon_greedy", num_actions=K, hidden_sizes=hidden, seed=seed)
    step = create_train_step_counter()
    return make_bandit_agent(config, D, step), step


def save_checkpoint(base: str, **objects) -> None:
    tf.train.Checkpoint(**objects).save(os.path.join(base, TRAIN_DIR, CHECKPOINT_DIR, "ckpt"))


def test_warm_start_restores_every_variable_when_it_fits(tmp_path):
    source, step = agent_with((8,), seed=1)
    step.assign(42)
    save_checkpoint(str(tmp_path), agent=source, train_step=step)
    target, target_step = agent_with((8,), seed=2)
    assert not all(np.allclose(a.numpy(), b.numpy()) for a, b in zip(target.policy.variables, source.policy.variables))
    assert warm_start.restore(target, target_step, str(tmp_path)).endswith("ckpt-1")
    assert int(target_step.numpy()) == 42
    for a, b in zip(target.policy.variables, source.policy.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_warm_start_from_a_checkpoint_that_matches_nothing_fails(tmp_path):
    save_checkpoint(str(tmp_path), something_else=tf.Variable([1.0, 2.0]))
    agent, step = agent_with((8,))
    with pytest.raises(warm_start.WarmStartError, match=r"base_model: checkpoint .*ckpt-1 does not match agent"):
        warm_start.restore(agent, step, str(tmp_path))


def test_warm_start_from_another_network_shape_fails(tmp_path):
    source, step = agent_with((8,))
    save_checkpoint(str(tmp_path), agent=source, train_step=step)
    agent, step = agent_with((16,))
    with pytest.raises(warm_start.WarmStartError, match="does not match agent"):
        warm_start.restore(agent, step, str(tmp_path))


CLUSTER = {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"]}


@pytest.mark.parametrize(
    "tf_config, chief",
    [
        ({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}, False),
        ({"cluster": CLUSTER, "task": {"type": "chief", "index": 0}}, True),
        ({"cluster": {"worker": ["h1:1", "h2:1"]}, "task": {"type": "worker", "index": 1}}, False),
        ({"cluster": {"worker": ["h1:1", "h2:1"]}, "task": {"type": "worker", "index": 0}}, True),
    ],
)
def test_only_the_chief_exports_and_writes_metrics(tmp_path, monkeypatch, tf_config, chief):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    agent, step = agent_with((4,))
    model, run = str(tmp_path / "model"), str(tmp_path / "run")

    def fake_train(examples_uri, model_uri, model_run_uri, config, base_model_uri=None):
        # The real export of the real bandit path, minus the data and the training loop.
        export_policies(serving_policy(agent), agent.collect_policy, step, model_uri, "bandit")
        return TrainResult(train_steps=1, final_loss=0.5, steps_per_sec=1.0, wall_s=0.1, curve=[(1, 0.5)])

    monkeypatch.setitem(core.TRAINING_PATHS, BANDIT, dataclasses.replace(core.TRAINING_PATHS[BANDIT], train=fake_train))
    config = TrainerConfig(agent="neural_epsilon_greedy", num_actions=K, hidden_sizes=(4,))
    core.run_trainer(config, model, run, examples_uri=str(tmp_path / "examples"))
    written = sorted(os.listdir(model)) + sorted(os.listdir(run))
    if chief:
        assert set(written) >= {SERVING_DIR, COLLECT_POLICY_DIR, CONFIG_FILE, METRICS_FILE}
        assert not [w for w in written if w.startswith(".workertemp")]
        assert json.load(open(os.path.join(run, METRICS_FILE)))["train_steps"] == 1
        loaded = tf.saved_model.load(serving_dir(model))
        assert "action" in loaded.signatures
    else:
        assert written == []  # nothing, not even the throw-away export directory
