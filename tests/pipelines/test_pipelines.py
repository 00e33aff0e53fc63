"""Local end-to-end pipelines (TFX LocalDagRunner + sqlite ML Metadata), small budgets."""

import json
import os

import numpy as np
import pytest
from helpers import run_fresh_python

from rlops.pipelines.config import ConfigError, load_config
from rlops.pipelines.local import artifact_property, lineage, metadata_store_of, run_local

pytestmark = pytest.mark.slow

SMALL_BANDIT = [
    "experience_gen.source.num_records=6000",
    "trainer.train_steps=200",
    "trainer.steps_per_run=100",
    "evaluator.num_bootstrap=200",
]

LOAD_AND_ACT = """
import json, sys, numpy as np, tensorflow as tf
assert "rlops" not in sys.modules
policy = tf.saved_model.load(sys.argv[1])
obs = np.asarray(json.loads(sys.argv[2]), np.float32)
n = len(obs)
out = policy.signatures["action"](step_type=tf.zeros([n], tf.int32), reward=tf.zeros([n]),
                                  discount=tf.ones([n]), observation=tf.constant(obs))
print(json.dumps(out["action"].numpy().tolist()))
"""


def act_in_fresh_process(saved_model_dir, observations):
    return np.asarray(run_fresh_python(LOAD_AND_ACT, saved_model_dir, json.dumps(observations.tolist()), timeout=120))


def serving_versions(config):
    return sorted(int(v) for v in os.listdir(config.serving_dir) if v.isdigit())


@pytest.fixture(scope="module")
def bandit_runs(tmp_path_factory):
    """First run (pushes), then a deliberately worse candidate re-run on the same logs (so its
    ExperienceGen is the cached one: the re-run a night with unchanged data makes)."""
    root = str(tmp_path_factory.mktemp("bandit"))
    config = load_config("bandit", overrides=SMALL_BANDIT + [f"root={root}"])
    first = run_local(config)
    versions_after_first = serving_versions(config)
    worse_config = load_config(
        "bandit", overrides=SMALL_BANDIT + [f"root={root}", "warm_start=false", "trainer.learning_rate=0.0"]
    )  # an untrained policy
    worse = run_local(worse_config)
    return config, first, versions_after_first, worse


def test_bandit_pipeline_trains_evaluates_and_pushes(bandit_runs):
    config, first, versions, _ = bandit_runs
    assert first.components["ExperienceGen"] == "COMPLETE" and first.components["Pusher"] == "COMPLETE"
    assert first.blessed and first.pushed and len(versions) == 1
    assert first.pushed_destination.endswith(str(versions[0]))
    assert first.metrics["baseline"] == "logging_policy"
    assert "candidate_dr" in first.metrics and "improvement_ips" in first.metrics
    # The pushed policy loads with plain TensorFlow in a fresh process and picks the true digit
    # for most contexts (the digits bandit pays 1 for the true label).
    from sklearn.datasets import load_digits

    digits = load_digits()
    actions = act_in_fresh_process(first.pushed_destination, digits.data[:200] / 16.0)
    assert actions.shape == (200,) and set(actions) <= set(range(10))
    assert np.mean(actions == digits.target[:200]) > 0.6
    with open(os.path.join(first.pushed_destination, "policy_specs.json")) as f:
        assert json.load(f)["signatures"]["action"]["outputs"]
    # ... and a LiteRT twin beside it, answering the published version (tests/components/test_litert.py).
    with open(os.path.join(first.pushed_destination, "policy_litert.json")) as f:
        assert json.load(f)["policy_version"] == versions[0]
    assert os.path.getsize(os.path.join(first.pushed_destination, "policy.tflite")) > 0


def test_a_rerun_on_unchanged_logs_hits_the_cache(bandit_runs):
    _, _, _, worse = bandit_runs  # same experience_gen config and root; only the trainer's changed
    assert worse.components["ExperienceGen"] == "CACHED"


def test_worse_candidate_is_not_blessed_and_not_pushed(bandit_runs):
    config, _, versions_after_first, worse = bandit_runs
    assert worse.components["Trainer"] == "COMPLETE"
    assert worse.blessed is False and worse.pushed is False
    assert float(worse.metrics["improvement_dr"].split()[0]) < 0
    # The untrained candidate left the serving versions untouched.
    assert serving_versions(config) == versions_after_first


def test_lineage_traces_the_pushed_policy_to_its_data(bandit_runs):
    config, first, _, _ = bandit_runs
    lines = lineage(config, version=int(os.path.basename(first.pushed_destination)))
    assert (
        lines[0] == f"pushed policy version {os.path.basename(first.pushed_destination)} at {first.pushed_destination}"
    )

    # The walk goes back through the inputs: the Pusher's Model was produced by the Trainer, whose
    # Examples were produced by ExperienceGen; each input line names the recorded artifact.
    def producer_after(prefix: str) -> str:
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(prefix))
        return next(line for line in lines[at:] if "produced by" in line).split("produced by ")[1].split(" ")[0]

    assert lines[1].strip().startswith("<- produced by Pusher"), lines
    assert producer_after("Model ") == "Trainer", lines
    trainer_at = next(i for i, line in enumerate(lines) if "produced by Trainer" in line)
    examples_lines = [line.strip() for line in lines[trainer_at:] if line.strip().startswith("Examples ")]
    assert examples_lines, lines
    assert producer_after(examples_lines[0]) == "ExperienceGen", lines
    store = metadata_store_of(config)
    examples = [a for a in store.get_artifacts_by_type("Examples") if artifact_property(a, "records_read")]
    first_examples = min(examples, key=lambda a: a.id)
    assert f"Examples {first_examples.id}: {first_examples.uri}" in examples_lines


def test_retraining_on_new_data_warm_starts_and_pushes_only_if_better(bandit_runs):
    config, first, _, _ = bandit_runs
    before = serving_versions(config)
    retrain = load_config(
        "bandit", overrides=SMALL_BANDIT + [f"root={config.root}", "experience_gen.source.seed=7"]
    )  # new logs
    result = run_local(retrain)
    assert result.components["ExperienceGen"] == "COMPLETE"
    models = sorted(metadata_store_of(retrain).get_artifacts_by_type("Model"), key=lambda a: a.id)
    assert artifact_property(models[-1], "warm_started_from"), "the retrained model did not warm-start"
    text = result.metrics.get("improvement_dr", "")  # "v [lower, upper]"; absent when nothing is trusted
    lower = float(text.split("[")[1].split(",")[0]) if "[" in text else float("nan")
    value = float(text.split(" ")[0]) if "[" in text else float("nan")
    # The default gate: estimated better, and the lower bound above what the standing line says
    # it must clear (-5% of the baseline's value).
    standing = result.metrics.get("standing", "")
    bound = float(standing.rsplit("lower bound > ", 1)[1].split(";")[0]) if "lower bound > " in standing else 0.0
    assert bound < 0 or not standing
    assert result.blessed == (value > 0 and lower > bound)
    assert result.pushed == result.blessed
    assert len(serving_versions(retrain)) == len(before) + int(result.pushed)


def test_bad_config_fails_before_anything_runs(tmp_path):
    root = tmp_path / "never"
    cases = {
        "trainer.agent": ["trainer.agent=dqn"],
        "trainer.colour": ["trainer.colour=blue"],
        "evaluator.estimator": ["evaluator.estimator=magic"],
        "experience_gen.source.pattern": [
            "experience_gen.source={kind: file, pattern: /nonexistent/*.csv}",
            "experience_gen.bandit_columns.context_prefix=x_",
        ],
        "experience_gen.bandit_columns.context": [f"experience_gen.source={{kind: file, pattern: {__file__}}}"],
        "root": [f"root={__file__}/under-a-file"],
    }
    for key, overrides in cases.items():
        with pytest.raises(ConfigError) as err:
            load_config("bandit", overrides=[f"root={root}"] + overrides if key != "root" else overrides)
        assert str(err.value).startswith(key), (key, str(err.value))
    assert not root.exists()
    from rlops.pipelines.cli import main

    assert main(["run", "bandit", "--set", f"root={root}", "--set", "trainer.agent=dqn"]) == 2
    assert not root.exists()


def test_ppo_pipeline_end_to_end(tmp_path):
    config = load_config(
        "ppo", overrides=[f"root={tmp_path}", "trainer.ppo.total_env_steps=8000", "evaluator.num_episodes=10"]
    )
    result = run_local(config)
    assert result.components["Trainer"] == "COMPLETE"
    assert "candidate_mean_return" in result.metrics
    assert result.blessed and result.pushed  # 8k steps of PPO beat a random CartPole policy
    obs = np.random.default_rng(0).normal(scale=0.05, size=(5, 4))
    actions = act_in_fresh_process(result.pushed_destination, obs)
    assert set(actions) <= {0, 1}
    assert os.path.getsize(os.path.join(result.pushed_destination, "policy.tflite")) > 0  # LiteRT twin


def test_ppo_pipeline_without_an_environment_fails_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^trainer\.ppo\.env_id"):
        load_config("ppo", overrides=[f"root={tmp_path}", "trainer.ppo.env_id=null"])
