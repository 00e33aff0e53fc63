"""The Evaluator and `rlops evaluate` on real Examples and SavedModels: blessing needs a
trustworthy interval, weights / masks in the records are honoured, every estimator is reported."""

import collections
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from linear_policies import save_linear_policy

from rlops.components.common import feedback, records
from rlops.components.evaluator import core, estimators, on_logs
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.experience_gen.records import encode_bandit

D, K = 3, 4
THETA = np.array([[1.5, 0.0, -1.0], [-1.0, 1.5, 0.0], [0.0, -1.0, 1.5], [-0.5, -0.5, -0.5]])


def true_means(contexts):
    return 1 / (1 + np.exp(-(contexts @ THETA.T - 1.0)))


def write_examples(root, n, seed=0, weight=None, action_mask=None, split="eval", columns=None):
    """Uniformly logged Bernoulli rewards as a TFX Examples split."""
    rng = np.random.default_rng(seed)
    if columns is None:
        x = rng.normal(size=(n, D)).astype(np.float32)
        a = rng.integers(0, K, n)
        r = (rng.random(n) < true_means(x)[np.arange(n), a]).astype(np.float32)
        columns = {
            records.CONTEXT: x,
            records.ACTION: a,
            records.REWARD: r,
            records.PROPENSITY: np.full(n, 1 / K, np.float32),
        }
    columns = dict(columns)
    if weight is not None:
        columns[records.WEIGHT] = weight
    if action_mask is not None:
        columns[records.ACTION_MASK] = action_mask
    os.makedirs(records.split_dir(root, split), exist_ok=True)
    with tf.io.TFRecordWriter(
        os.path.join(records.split_dir(root, split), "data-00000-of-00001.gz"), options="GZIP"
    ) as w:
        for ex in encode_bandit(columns):
            w.write(ex)
    return columns


def save_policy(model_uri, theta):
    return save_linear_policy(model_uri, theta, emit_predicted_rewards=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("ope_eval")
    examples = str(root / "examples")
    cols = write_examples(examples, 3000)
    return {
        "root": root,
        "examples": examples,
        "columns": cols,
        "good": save_policy(str(root / "good"), THETA),
        "bad": save_policy(str(root / "bad"), -THETA),
    }


def run(world, tmp, model, examples=None, baseline=None, **config):
    cfg = EvaluatorConfig(kind="bandit", num_bootstrap=200, **config)
    return core.run_evaluator(
        cfg,
        world[model],
        str(tmp / "evaluation"),
        str(tmp / "blessing"),
        examples_uri=examples or world["examples"],
        num_actions=K,
        baseline_model_uri=world[baseline] if baseline else None,
    )


def test_good_policy_blessed_with_every_estimator_and_true_improvement_inside(world, tmp_path):
    result = run(world, tmp_path, "good")
    assert result.blessed, result.reason
    m = result.metrics
    assert set(m["candidate"]) == set(estimators.ESTIMATORS) and m["trust"]["trusted"]
    assert m["reward_model"] == "logistic"  # auto: 0/1 rewards
    x, r = world["columns"][records.CONTEXT], world["columns"][records.REWARD]
    truth = true_means(x.astype(float))
    true_gain = truth.max(1).mean() - truth.mean()  # greedy vs uniform logging, on these contexts
    for name in ("dr", "sndr", "switch_dr", "dr_os", "ips"):
        imp = m["improvement"][name]
        assert imp["lower"] <= true_gain + 0.02 and imp["upper"] >= true_gain - 0.02, (name, imp, true_gain)
    assert m["trust"]["ess"]["candidate"] == pytest.approx(len(r) / K, rel=0.1)
    assert os.path.exists(tmp_path / "blessing" / "BLESSED")
    with open(tmp_path / "evaluation" / "metrics.json") as f:
        assert json.load(f)["improvement"]["dr"]["lower"] > 0


def test_bad_policy_against_good_baseline_is_not_blessed(world, tmp_path):
    result = run(world, tmp_path, "bad", baseline="good")
    assert not result.blessed and result.metrics["improvement"]["dr"]["upper"] < 0
    assert "<=" in result.reason


def test_one_bandit_run_reads_the_eval_split_once(world, tmp_path, monkeypatch):
    """Candidate and baseline scored, the reward model fitted, the engine chosen and the record
    checks made, all on one read of the eval split: each of its files opened once (a dataset of
    file names counts as a read of every file)."""
    files = tf.io.gfile.glob(records.split_file_pattern(world["examples"], "eval"))
    reads = collections.Counter()
    real = tf.data.TFRecordDataset

    def counting(filenames, *args, **kwargs):
        names = [filenames] if isinstance(filenames, (str, bytes)) else filenames
        if isinstance(names, (list, tuple)):
            reads.update(os.fsdecode(f) for f in names if os.fsdecode(f) in files)
        else:  # a dataset of file names (tf.data.Dataset.list_files)
            reads.update(files)
        return real(filenames, *args, **kwargs)

    monkeypatch.setattr(tf.data, "TFRecordDataset", counting)
    result = run(world, tmp_path, "good", baseline="bad")
    assert result.metrics["baseline"] == world["bad"] and result.metrics["engine"] == "memory"
    assert reads == {f: 1 for f in files}


def test_one_logged_click_is_not_blessed_through_the_evaluator(world, tmp_path):
    """Issue 11's reproduction, end to end: before, the DR interval was [9, 9] and it was blessed."""
    examples = str(tmp_path / "one")
    x = np.zeros((1, D), np.float32)
    x[0, 0] = 3.0  # the good policy picks action 0 here
    write_examples(
        examples,
        1,
        columns={
            records.CONTEXT: x,
            records.ACTION: np.array([0]),
            records.REWARD: np.array([1.0], np.float32),
            records.PROPENSITY: np.array([0.1], np.float32),
        },
    )
    result = run(world, tmp_path, "good", examples=examples, reward_model="ridge")
    assert not result.blessed
    assert "only 1 eval records" in result.reason and "min_eval_records" in result.reason
    # untrusted: no value, no bounds (null in metrics.json); the raw number kept apart
    assert result.metrics["improvement"]["ips"]["value"] is None
    assert result.metrics["improvement"]["ips"]["untrusted_value"] == pytest.approx(9.0)
    assert result.metrics["improvement"]["dr"]["lower"] is None
    with open(tmp_path / "blessing" / "NOT_BLESSED") as f:
        assert "min_eval_records" in f.read()
    # Configurable: a stricter ESS minimum refuses the otherwise blessed policy, saying why.
    result = run(world, tmp_path, "good", min_ess=5000.0)
    assert not result.blessed and "min_ess" in result.reason


def test_record_weights_and_action_masks_in_the_records_are_honoured(world, tmp_path):
    cols = world["columns"]
    n = len(cols[records.ACTION])
    weight = np.where(np.arange(n) % 2 == 0, 1.0, 0.0).astype(np.float32)
    weighted = str(tmp_path / "weighted")
    write_examples(weighted, n, weight=weight, columns=cols)
    half = str(tmp_path / "half")
    write_examples(half, n // 2, columns={k: v[::2] for k, v in cols.items()})
    data = feedback.load_logged_feedback(weighted)
    np.testing.assert_array_equal(data.weights, weight)
    a = run(world, tmp_path / "a", "good", examples=weighted, reward_model="ridge", dr_os_lambda=10.0, switch_tau=3.0)
    b = run(world, tmp_path / "b", "good", examples=half, reward_model="ridge", dr_os_lambda=10.0, switch_tau=3.0)
    for name in ("ips", "snips"):  # model-free: exactly the estimates on the weight-1 rows
        assert a.metrics["candidate"][name]["value"] == pytest.approx(b.metrics["candidate"][name]["value"], rel=1e-6)
    assert a.metrics["trust"]["num_records"] == n // 2
    # Action mask: action 3 unavailable everywhere; the uniform policy spreads over 3 actions.
    mask = np.tile([1, 1, 1, 0], (n, 1))
    keep = cols[records.ACTION] != 3
    masked = str(tmp_path / "masked")
    sub = {k: v[keep] for k, v in cols.items()}
    sub[records.PROPENSITY] = np.full(keep.sum(), 1 / 3, np.float32)
    write_examples(masked, int(keep.sum()), action_mask=mask[keep], columns=sub)
    out = on_logs.evaluate_on_logs(EvaluatorConfig(num_bootstrap=100), masked, "uniform")
    assert out["estimates"]["ips"]["value"] == pytest.approx(float(sub[records.REWARD].mean()), rel=1e-6)
    assert out["num_actions"] == 4 and out["ess"] == pytest.approx(keep.sum(), rel=1e-6)


def test_network_reward_model_uses_the_candidates_predictions(world, tmp_path):
    result = run(world, tmp_path, "good", reward_model="network")
    x = world["columns"][records.CONTEXT].astype(float)
    truth = true_means(x)
    # The network predicts the true means, so DM is the true value of the greedy policy.
    assert result.metrics["candidate"]["dm"]["value"] == pytest.approx(truth.max(1).mean(), rel=1e-5)
    assert result.metrics["reward_model"] == "network"


def test_rlops_evaluate_cli_table_json_and_plot(world, tmp_path, capsys):
    from rlops.pipelines.cli import main

    plot = str(tmp_path / "est.png")
    for policy in (world["good"], "uniform", "logging"):
        assert (
            main(
                [
                    "evaluate",
                    "--examples",
                    world["examples"],
                    "--policy",
                    policy,
                    "--num-bootstrap",
                    "100",
                    "--plot",
                    plot,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out.strip().splitlines()
        result = json.loads(out[-1])
        assert set(result["estimates"]) == set(estimators.ESTIMATORS) and result["trusted"]
        assert out[0].split()[:3] == ["estimator", "value", "95%"]
        assert all(any(line.startswith(name + " ") for line in out) for name in estimators.ESTIMATORS)
        assert os.path.getsize(plot) > 1000
        r = world["columns"][records.REWARD]
        if policy == "logging":
            assert result["estimates"]["dr"]["value"] == pytest.approx(float(r.mean()), rel=1e-6)
            assert result["improvement_over_logging"]["dr"]["value"] == 0
        if policy == "uniform":  # uniform logging: IPS of the uniform policy is the observed mean
            assert result["estimates"]["ips"]["value"] == pytest.approx(float(r.mean()), rel=1e-6)
        if policy == world["good"]:
            assert result["improvement_over_logging"]["dr"]["lower"] > 0
    # Too little data: the table says why, the JSON carries nulls, exit 0 (a report, not a failure).
    assert (
        main(
            [
                "evaluate",
                "--examples",
                world["examples"],
                "--policy",
                "uniform",
                "--num-bootstrap",
                "100",
                "--min-eval-records",
                "10000",
                "--plot",
                plot,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].startswith("no estimate: only 3000 eval records") and "more eval records" in out[-2]
    assert not out[0].startswith("estimator")  # no table of untrusted numbers
    dr = json.loads(out[-1])["estimates"]["dr"]  # strict JSON: null, with the reason
    assert dr["value"] is None and dr["lower"] is None and "min_eval_records" in dr["reason"]
    # Clear errors naming the flag or the path.
    assert main(["evaluate", "--examples", world["examples"], "--policy", "uniform", "--num-bootstrap", "3"]) == 2
    assert "--num-bootstrap" in capsys.readouterr().err
    assert main(["evaluate", "--examples", world["examples"], "--policy", str(tmp_path / "nope")]) == 2
    assert "neither a policy SavedModel" in capsys.readouterr().err
    assert main(["evaluate", "--examples", world["examples"], "--policy", "uniform", "--split", "train"]) == 2
    assert "no 'train' split" in capsys.readouterr().err


def test_rlops_evaluate_writes_a_plot_only_when_asked_and_sets_balancing(world, tmp_path, capsys, monkeypatch):
    """Issue 20: evaluate.png appeared in the current directory unasked, and the reward model's
    balancing could not be set from the CLI."""
    from rlops.pipelines.cli import main

    monkeypatch.chdir(tmp_path)
    results = {}
    for flag in ("--reward-model-balance", "--no-reward-model-balance"):
        assert (
            main(
                [
                    "evaluate",
                    "--examples",
                    world["examples"],
                    "--policy",
                    "uniform",
                    "--num-bootstrap",
                    "100",
                    "--reward-model",
                    "ridge",
                    "--dm-refits",
                    "10",
                    flag,
                ]
            )
            == 0
        )
        results[flag] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert os.listdir(tmp_path) == []  # nothing written unasked
    config = EvaluatorConfig(num_bootstrap=100, reward_model="ridge", dm_refits=10)
    for flag, balance in (("--reward-model-balance", True), ("--no-reward-model-balance", False)):
        want = on_logs.evaluate_on_logs(
            dataclasses.replace(config, reward_model_balance=balance), world["examples"], "uniform"
        )
        assert results[flag]["estimates"]["dm"]["value"] == pytest.approx(want["estimates"]["dm"]["value"], rel=1e-12)
        assert results[flag]["reward_model_balance"] is balance
    assert main(["evaluate", "--examples", world["examples"], "--policy", "uniform", "--dm-refits", "3"]) == 2
    assert "--dm-refits" in capsys.readouterr().err
