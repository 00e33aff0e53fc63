"""Bandit training resumed after preemption continues the budget instead of redoing it.

Reported: a restarted bandit Trainer job restored its checkpoint and then ran the whole budget
again (measured before the fix: LinUCB's counter at 1,920 examples = 60 steps of 32 for a budget
of 40 steps, NeuralEpsilonGreedy's at 60 steps)."""
import pytest
import tensorflow as tf

from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer, serving_dir


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory):
    from rlops.components.experience_gen import ExperienceGenConfig, SimulationSource, SpecConfig, run_experience_gen
    root = tmp_path_factory.mktemp("gen")
    config = ExperienceGenConfig(source=SimulationSource(env="digits", num_records=1500),
                                 action_spec=SpecConfig.discrete(10))
    run_experience_gen(config, str(root / "examples"), str(root / "quarantine"), ["--runner=DirectRunner"])
    return str(root / "examples")


@pytest.mark.parametrize("agent,per_step", [("lin_ucb", 32), ("neural_epsilon_greedy", 1)])
def test_restarted_job_resumes_from_its_checkpoint(examples_uri, tmp_path, agent, per_step):
    model = str(tmp_path / "model")

    def config(steps):
        return TrainerConfig(agent=agent, num_actions=10, train_steps=steps, steps_per_run=10, batch_size=32,
                             checkpoint_interval=10)

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
