"""Trainer core through TFX's standard `run_fn` interface, and warm start."""

import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common.model import serving_dir
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.layout import CONFIG_FILE
from rlops.components.trainer.run_fn import CONFIG_KEY, run_fn
from rlops.train.policy_saver import load_specs

# Slow: trains and warm-starts bandit policies on ingested digits logs; `make test` runs it.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def examples_uri(digits_examples):
    return digits_examples


def test_run_fn_trains_like_the_component(examples_uri, tmp_path):
    from tfx.components.trainer.fn_args_utils import FnArgs

    model = tmp_path / "model"
    config = {"agent": "lin_ucb", "num_actions": 10, "train_steps": 50, "batch_size": 32}
    fn_args = FnArgs(
        train_files=[os.path.join(examples_uri, "Split-train", "*")],
        serving_model_dir=str(model / "Format-Serving"),
        model_run_dir=str(tmp_path / "run"),
        custom_config={CONFIG_KEY: config},
        base_model=None,
        train_steps=40,
    )
    run_fn(fn_args)
    assert tf.io.gfile.exists(os.path.join(serving_dir(str(model)), "saved_model.pb"))
    assert TrainerConfig.from_json(open(model / CONFIG_FILE).read()).agent == "lin_ucb"
    import json

    assert json.load(open(tmp_path / "run" / "metrics.json"))["train_steps"] == 40  # TFX's budget wins
    with pytest.raises(ValueError, match=CONFIG_KEY):
        run_fn(
            FnArgs(
                train_files=[],
                serving_model_dir=str(model / "Format-Serving"),
                model_run_dir=str(tmp_path / "run"),
                custom_config={},
            )
        )


def test_warm_start_continues_from_the_base_model(examples_uri, tmp_path):
    from rlops.components.trainer.core import run_trainer

    config = TrainerConfig(agent="neural_epsilon_greedy", num_actions=10, train_steps=60, steps_per_run=30)
    first = run_trainer(config, str(tmp_path / "m1"), str(tmp_path / "r1"), examples_uri)
    second = run_trainer(
        config, str(tmp_path / "m2"), str(tmp_path / "r2"), examples_uri, base_model_uri=str(tmp_path / "m1")
    )
    assert first.warm_started_from is None and second.warm_started_from
    loaded = tf.saved_model.load(serving_dir(str(tmp_path / "m2")))
    assert int(loaded.signatures["get_train_step"]()["train_step"]) == 120  # 60 + 60: the counter continued
    assert loaded.signatures["get_metadata"]()["decision_kind"].numpy() == b"bandit"  # what the Pusher reads
    assert load_specs(serving_dir(str(tmp_path / "m2")))["decision_kind"] == "bandit"
    with pytest.raises(FileNotFoundError, match="base_model"):
        run_trainer(config, str(tmp_path / "m3"), str(tmp_path / "r3"), examples_uri, base_model_uri=str(tmp_path))


def test_every_face_applies_one_budget_rule(tmp_path):
    """A run's budget: train_steps for bandits, total_env_steps for PPO, by one rule that TFX's
    run_fn, the TFX component and its executor (and the KFP entry point) share. The other kind is
    an error naming the parameter, before anything trains -- also through run_fn, which used to
    drop a PPO run's train_steps without a word."""
    from tfx.components.trainer.fn_args_utils import FnArgs

    from rlops.components.trainer.component import Trainer
    from rlops.components.trainer.core import apply_runtime_params

    ppo = {"agent": "ppo", "ppo": {"env_id": "CartPole-v1"}}
    model = tmp_path / "model"
    with pytest.raises(ValueError, match="^train_steps: PPO.s budget"):
        run_fn(
            FnArgs(
                train_files=[],
                serving_model_dir=str(model / "Format-Serving"),
                model_run_dir=str(tmp_path / "run"),
                custom_config={CONFIG_KEY: ppo},
                base_model=None,
                train_steps=40,
            )
        )
    assert not model.exists()
    with pytest.raises(ValueError, match="^train_steps: PPO.s budget"):
        Trainer(config=TrainerConfig.from_dict(ppo), train_steps=40)
    bandit = TrainerConfig(agent="lin_ucb", num_actions=4, train_steps=10)
    with pytest.raises(ValueError, match="^total_env_steps: agent 'lin_ucb'"):
        Trainer(config=bandit, total_env_steps=5)
    assert apply_runtime_params(bandit, 0, 0) is bandit  # a KFP parameter's default 0: no override
    assert apply_runtime_params(bandit, train_steps=99).train_steps == 99


def test_unknown_agent_names_the_key():
    with pytest.raises(ValueError, match="trainer.agent"):
        TrainerConfig(agent="dqn")
    with pytest.raises(ValueError, match="trainer.num_actions"):
        TrainerConfig(agent="lin_ucb")


def test_logged_feedback_can_stop_after_the_first_records(examples_uri):
    from rlops.components.common.feedback import load_logged_feedback

    full = load_logged_feedback(examples_uri)
    head = load_logged_feedback(examples_uri, max_records=10)
    assert len(head.actions) == 10 < len(full.actions)
    np.testing.assert_array_equal(head.contexts, full.contexts[:10])


@pytest.mark.parametrize("agent,per_step", [("lin_ucb", 32), ("neural_epsilon_greedy", 1)])
def test_restarted_job_resumes_from_its_checkpoint(examples_uri, tmp_path, agent, per_step):
    """Bandit training resumed after preemption continues the budget instead of redoing it.
    Reported: a restarted job restored its checkpoint and then ran the whole budget again (before
    the fix: LinUCB's counter at 1,920 examples = 60 steps of 32 for a 40-step budget)."""
    from rlops.components.trainer.core import run_trainer

    model = str(tmp_path / "model")

    def config(steps):
        return TrainerConfig(
            agent=agent, num_actions=10, train_steps=steps, steps_per_run=10, batch_size=32, checkpoint_interval=10
        )

    first = run_trainer(config(20), model, str(tmp_path / "run1"), examples_uri)  # "preempted" after 20 steps
    assert first.train_steps == 20 and first.extra["resumed_from_step"] == 0
    second = run_trainer(config(40), model, str(tmp_path / "run2"), examples_uri)  # the restarted job
    assert second.extra["resumed_from_step"] == 20
    assert [step for step, _ in second.curve] == [30, 40]  # only the 20 missing steps ran
    exported = tf.saved_model.load(serving_dir(model))
    assert int(exported.signatures["get_train_step"]()["train_step"]) == 40 * per_step
    if agent == "lin_ucb":  # a job that restarts after finishing trains no further
        third = run_trainer(config(40), model, str(tmp_path / "run3"), examples_uri)
        assert third.extra["resumed_from_step"] == 40 and third.curve == []
