"""Logs whose action ids start at 1 (`action_spec.minimum: 1`, as many catalogues number them):
the bandit pipeline trains, evaluates and pushes a policy that answers in those ids. Before,
the Trainer built its agent on ids 0..K-1 and failed on the last id with
`indices[0] = 4 is not in [0, 4)` (a GPU gather would have read zeros instead), and the
Evaluator indexed probabilities by the raw ids."""

import numpy as np
import pytest
import tensorflow as tf
from feature_logs import FEATURES, NUM_ACTIONS, make_logs, pipeline_config, write_csv

from rlops.components.common import feedback
from rlops.components.evaluator import on_logs
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.pipelines.local import run_local

pytestmark = pytest.mark.slow
FIRST = 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("action_ids")
    cols, _ = make_logs(4000, seed=1)
    cols["action"] = cols["action"] + FIRST
    write_csv(d / "logs.csv", cols)
    config = pipeline_config(d / "root", d / "logs.csv", "lin_ucb", action_minimum=FIRST)
    assert config.trainer.action_minimum == FIRST  # from experience_gen.action_spec
    return run_local(config), d


def serve(result, features):
    serving = tf.saved_model.load(result.pushed_destination).signatures["serving_default"]
    specs = serving.structured_input_signature[1]
    out = serving(**{f: tf.constant(np.asarray(features[f]).reshape(-1), specs[f].dtype) for f in FEATURES})
    return out["greedy_action"].numpy(), out["action"].numpy()


def test_pipeline_on_ids_from_one_pushes_a_policy_that_answers_in_them(run):
    result, d = run
    assert result.blessed and result.pushed, result.blessing_reason
    cols, best = make_logs(600, seed=7)  # fresh users
    greedy, action = serve(result, cols)
    assert set(action) <= set(range(FIRST, FIRST + NUM_ACTIONS)) and FIRST + NUM_ACTIONS - 1 in set(action)
    assert np.mean(greedy == best + FIRST) > 0.8  # it learned which id is best, in the logs' ids
    # The Evaluator scored the policy in the same ids: its IPS estimate is the numpy one over the
    # eval split's raw logged ids and the pushed policy's own answers (read one id off, it would
    # count the wrong records).
    logged = feedback.load_logged_feedback(_examples_uri(d))  # raw ids: no offset
    chosen, _ = serve(result, logged.features)
    greedy_ips = np.mean((logged.actions == chosen) * logged.rewards / logged.propensities)
    assert greedy_ips > 0.3  # the policy matches the logging choice on ~1/K of the records, mostly rewarded
    # The Evaluator scores the served policy (issue 20): epsilon-greedy over the ids.
    eps = float(tf.saved_model.load(result.pushed_destination).signatures["get_metadata"]()["serving_epsilon"])
    served = (1 - eps) * (logged.actions == chosen) + eps / NUM_ACTIONS
    reference = np.mean(served * logged.rewards / logged.propensities)
    assert float(result.metrics["candidate_ips"].split()[0]) == pytest.approx(reference, abs=1e-4)


def test_rlops_evaluate_reads_ids_from_one(run):
    result, d = run
    examples = _examples_uri(d)
    config = EvaluatorConfig(kind="bandit", num_bootstrap=100)
    trained = on_logs.evaluate_on_logs(config, examples, result.pushed_destination)
    assert trained["num_actions"] == NUM_ACTIONS
    assert trained["estimates"]["dr"]["value"] == pytest.approx(
        float(result.metrics["candidate_dr"].split()[0]), abs=1e-3
    )
    # Uniform over ids 1..K is the logging policy: the observed mean, 0.6/K + 0.1(K-1)/K.
    uniform = on_logs.evaluate_on_logs(config, examples, "uniform", action_minimum=FIRST)
    assert uniform["num_actions"] == NUM_ACTIONS
    assert uniform["estimates"]["ips"]["value"] == pytest.approx(trained["observed_mean_reward"], abs=1e-9)
    with pytest.raises(ValueError, match="disagrees with the policy's action spec"):
        on_logs.evaluate_on_logs(config, examples, result.pushed_destination, action_minimum=0)
    below = _examples_with_action_zero(d, examples)
    with pytest.raises(
        ValueError,
        match=r"action 0 in record 3 of the eval split is below the action spec's "
        r"minimum 1",
    ):
        on_logs.evaluate_on_logs(config, below, "uniform", action_minimum=FIRST)


def test_trainer_names_the_settings_when_logged_ids_are_outside_its_agents(run, tmp_path):
    """The Trainer run by hand with the default action_minimum 0 on ids 1..K: an error that
    names trainer.action_minimum, not a gather index deep inside train."""
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    _, d = run
    config = TrainerConfig(agent="lin_ucb", num_actions=NUM_ACTIONS, train_steps=20, steps_per_run=10, batch_size=64)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"outside \[0, 3\], the ids the agent was built for \(trainer.action_minimum 0",
    ):
        run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), _examples_uri(d))


def _examples_uri(d):
    import glob
    import os

    splits = glob.glob(str(d / "root" / "**" / "Split-eval"), recursive=True)
    assert splits, "no Examples eval split under the pipeline root"
    return os.path.dirname(sorted(splits)[-1])


def _examples_with_action_zero(d, examples):
    """A copy of the Examples (schema included) whose eval split has record 3's action set to 0."""
    import glob
    import os
    import shutil

    from rlops.components.common import records

    out = str(d / "bad_examples")
    shutil.copytree(examples, out)
    split = records.split_dir(out, "eval")
    shards = sorted(glob.glob(os.path.join(split, "*.gz")))
    rows = list(tf.data.TFRecordDataset(shards, compression_type="GZIP").as_numpy_iterator())
    for shard in shards:
        os.remove(shard)
    with tf.io.TFRecordWriter(os.path.join(split, "data-00000-of-00001.gz"), options="GZIP") as w:
        for i, raw in enumerate(rows):
            example = tf.train.Example.FromString(raw)
            if i == 3:
                example.features.feature[records.ACTION].int64_list.value[:] = [0]
            w.write(example.SerializeToString())
    return out
