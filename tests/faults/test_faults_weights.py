"""Fault suite, `weight` and `action_mask` end to end: logs with both columns go through
ExperienceGen (CSV file source), the Trainer core (NeuralEpsilonGreedy) and the Evaluator core,
and each column must change what comes out the way a numpy reference says it should.

The logs: a non-uniform logging policy over the allowed actions; action 0 is masked wherever
x0 > MASK_X0 (exactly where it would earn most); and POISON extra records that claim action 1
always pays 1 carry weight 0 (a down-weighted class of records). The same logs without the
poison rows are ingested too: with weights honoured, weight 0 must equal dropping the rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common import records

D, K, N, POISON, MASK_X0 = 3, 4, 3000, 3000, 0.3
THETA = np.array([[2.0, 0.0, -1.0], [-1.0, 2.0, 0.0], [0.0, -1.0, 2.0], [-0.5, -0.5, -0.5]])
LOGGING = np.array([0.4, 0.3, 0.2, 0.1])
TRAIN_STEPS = 400


def _logs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = N + POISON
    x = rng.normal(size=(n, D))
    poison = np.arange(n) >= N
    x[poison, 1] = -np.abs(x[poison, 1])  # where action 1 truly pays least
    mask = np.ones((n, K), int)
    mask[x[:, 0] > MASK_X0, 0] = 0
    probs = LOGGING * mask
    probs /= probs.sum(1, keepdims=True)
    a = np.array([rng.choice(K, p=p) for p in probs])
    r = (rng.random(n) < 1 / (1 + np.exp(-(x @ THETA.T)[np.arange(n), a]))).astype(int)
    w = np.ones(n)
    a[poison], r[poison], w[poison] = 1, 1, 0.0  # action 1 "always pays": weight 0
    p = probs[np.arange(n), a]
    return {"x": x, "mask": mask, "a": a, "r": r, "p": p, "w": w, "poison": poison}


def _write_csv(path: str, logs: dict, rows: np.ndarray) -> None:
    with open(path, "w") as f:
        f.write("rid,x0,x1,x2,m0,m1,m2,m3,action,reward,propensity,w\n")
        for i in np.flatnonzero(rows):
            x, m = logs["x"][i], logs["mask"][i]
            f.write(
                f"r{i},{x[0]:.5f},{x[1]:.5f},{x[2]:.5f},{m[0]},{m[1]},{m[2]},{m[3]},{logs['a'][i]},"
                f"{logs['r'][i]},{logs['p'][i]:.6f},{logs['w'][i]:g}\n"
            )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from rlops.components.experience_gen import BanditColumns, ExperienceGenConfig, FileSource, SpecConfig
    from rlops.components.experience_gen.config import Split, SplitConfig
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    root = tmp_path_factory.mktemp("weights")
    logs = _logs()
    out = {"logs": logs, "root": root}
    trainer = TrainerConfig(
        num_actions=K,
        hidden_sizes=(16,),
        batch_size=64,
        train_steps=TRAIN_STEPS,
        steps_per_run=100,
        checkpoint_interval=1000,
        learning_rate=1e-2,
    )
    for name, rows in (("weighted", np.ones(len(logs["a"]), bool)), ("dropped", ~logs["poison"])):
        csv = str(root / f"{name}.csv")
        _write_csv(csv, logs, rows)
        config = ExperienceGenConfig(
            source=FileSource(pattern=csv),
            action_spec=SpecConfig.discrete(K),
            bandit_columns=BanditColumns(context=("x0", "x1", "x2"), action_mask=("m0", "m1", "m2", "m3"), weight="w"),
            splits=SplitConfig(splits=(Split("train", 3), Split("eval", 1)), key="rid"),
        )  # same split either way
        examples = str(root / name / "examples")
        result = run_experience_gen(config, examples, str(root / name / "quarantine"))
        assert result.records_read == rows.sum() and result.records_quarantined == 0
        model = str(root / name / "model")
        run_trainer(trainer, model, str(root / name / "model_run"), examples_uri=examples)
        out[name] = {"examples": examples, "model": model}
    return out


def _serving(model_uri: str):
    from rlops.components.common.model import serving_dir

    return tf.saved_model.load(serving_dir(model_uri)).signatures["serving_default"]


def _probes(n: int = 512, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D)).astype(np.float32)


def _greedy(model_uri: str, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    fn = _serving(model_uri)
    names = set(fn.structured_input_signature[1])
    feeds = {"context": tf.constant(x)} if "context" in names else {f"x{i}": tf.constant(x[:, i]) for i in range(D)}
    if mask is None and records.ACTION_MASK in names:  # trained with masks: they are part of its input
        mask = np.ones((len(x), K), np.int64)
    if mask is not None:
        assert records.ACTION_MASK in names, (
            f"the exported policy takes no '{records.ACTION_MASK}' input (inputs: {sorted(names)}): a mask in the "
            "logs cannot be honoured when serving"
        )
        feeds[records.ACTION_MASK] = tf.constant(mask, fn.structured_input_signature[1][records.ACTION_MASK].dtype)
    return fn(**feeds)["greedy_action"].numpy().reshape(-1)


def test_ingested_examples_carry_weight_and_mask(world):
    """The columns reach the Examples (so what follows is about their use, not their transport)."""
    from rlops.components.common.feedback import load_logged_feedback

    data = load_logged_feedback(world["weighted"]["examples"], "eval")
    assert data.weights is not None and data.action_mask is not None
    assert set(np.unique(data.weights)) == {0.0, 1.0}
    masked = data.action_mask[:, 0] == 0
    np.testing.assert_array_equal(masked, data.contexts[:, 0] > MASK_X0)


def test_evaluator_weight_zero_equals_dropping_the_records_numpy_reference(world):
    """(b) OPE on the ingested logs: weight 0 on the poison rows gives the estimates of the logs
    without them, and both equal the numpy IPS / SNIPS of the mask-aware uniform policy."""
    from rlops.components.common.feedback import load_logged_feedback
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.evaluator.on_logs import evaluate_on_logs

    config = EvaluatorConfig(num_bootstrap=100, reward_model="ridge")
    est = {
        name: evaluate_on_logs(config, world[name]["examples"], "uniform", num_actions=K)["estimates"]
        for name in ("weighted", "dropped")
    }
    data = load_logged_feedback(world["dropped"]["examples"], "eval")
    pi = data.action_mask / data.action_mask.sum(1, keepdims=True)  # uniform over the allowed actions
    iw = pi[np.arange(len(data.actions)), data.actions] / data.propensities
    ips, snips = float(np.mean(iw * data.rewards)), float(np.sum(iw * data.rewards) / np.sum(iw))
    weighted_naive = load_logged_feedback(world["weighted"]["examples"], "eval")
    assert len(weighted_naive.actions) > len(data.actions)  # the poison rows are in the weighted eval split
    for name in ("weighted", "dropped"):
        assert est[name]["ips"]["value"] == pytest.approx(ips, rel=1e-5)
        assert est[name]["snips"]["value"] == pytest.approx(snips, rel=1e-5)


def test_trainer_weight_zero_records_do_not_move_the_reward_model(world):
    """(c) The poison rows (action 1 'always pays' where x1 < 0, weight 0) must not make the policy
    pick action 1 there: the weighted model picks it about as rarely as the model trained without them."""
    x = _probes(2000)
    x = x[x[:, 1] < -0.5]  # action 1 is the worst action here (logit 2 x1 - x0)
    picks = {name: _greedy(world[name]["model"], x) for name in ("weighted", "dropped")}
    share = {name: round(float((p == 1).mean()), 3) for name, p in picks.items()}
    print("share of action 1 where it pays least:", share)
    assert share["dropped"] < 0.1  # the model trained without the poison learned to avoid it
    assert share["weighted"] < share["dropped"] + 0.1, share


def test_trained_greedy_policy_never_picks_a_masked_action(world):
    """(a) Where the logs mask action 0 (x0 > MASK_X0, where it would earn most), the trained
    greedy policy, given the mask, never picks it; the greedy_action of serving_default and the
    `action` signature agree (one masked policy behind every signature)."""
    x = _probes()
    mask = np.ones((len(x), K), np.int64)
    mask[x[:, 0] > MASK_X0, 0] = 0
    picks = _greedy(world["weighted"]["model"], x, mask)
    assert not (picks[mask[np.arange(len(x)), picks] == 0]).size, "picked a masked action"
    assert (picks[mask[:, 0] == 1] == 0).any()  # action 0 is still chosen where it is allowed
    from rlops.components.common.model import serving_dir

    loaded = tf.saved_model.load(serving_dir(world["weighted"]["model"]))
    n = len(x)
    acted = loaded.signatures["action"](
        step_type=tf.zeros([n], tf.int32),
        reward=tf.zeros([n]),
        discount=tf.ones([n]),
        observation_context=tf.constant(x),
        observation_action_mask=tf.constant(mask),
    )["action"].numpy()
    np.testing.assert_array_equal(acted, picks)


@pytest.mark.slow  # trains LinUCB on the masked logs and serves the export (~75 s with its world)
def test_trained_lin_ucb_greedy_policy_never_picks_a_masked_action(world, tmp_path):
    """The same for LinUCB (closed-form, per-arm ridge models) trained on the same ingested logs."""
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    model = str(tmp_path / "m")
    run_trainer(
        TrainerConfig(agent="lin_ucb", num_actions=K, batch_size=64, train_steps=40, steps_per_run=40),
        model,
        str(tmp_path / "r"),
        examples_uri=world["dropped"]["examples"],
    )
    x = _probes()
    mask = np.ones((len(x), K), np.int64)
    mask[x[:, 0] > MASK_X0, 0] = 0
    picks = _greedy(model, x, mask)
    assert not (picks[mask[np.arange(len(x)), picks] == 0]).size, "picked a masked action"
    unmasked = _greedy(model, x)  # all allowed: the same model does want action 0 there
    assert (unmasked[mask[:, 0] == 0] == 0).mean() > 0.3


def test_ignore_action_mask_opts_out_and_then_the_greedy_policy_picks_masked_actions(world, tmp_path):
    """trainer.ignore_action_mask=true trains as before masks were honoured: the model takes no
    mask, and its greedy policy picks the masked action 0 where it would earn most."""
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    model = str(tmp_path / "m")
    result = run_trainer(
        TrainerConfig(
            num_actions=K,
            hidden_sizes=(16,),
            batch_size=64,
            train_steps=TRAIN_STEPS,
            steps_per_run=TRAIN_STEPS,
            learning_rate=1e-2,
            ignore_action_mask=True,
        ),
        model,
        str(tmp_path / "r"),
        examples_uri=world["dropped"]["examples"],
    )
    assert result.extra["action_mask"] is False
    assert records.ACTION_MASK not in _serving(model).structured_input_signature[1]
    x = _probes()
    masked_rows = x[:, 0] > MASK_X0
    share = float((_greedy(model, x)[masked_rows] == 0).mean())
    print("unmasked model: share of masked rows where greedy picks the masked action 0:", round(share, 3))
    assert share > 0.3


def test_pipeline_config_takes_a_mapped_mask_without_an_opt_in(tmp_path):
    from rlops.pipelines.config import load_config

    csv = tmp_path / "logs.csv"
    csv.write_text("x0,a,r,p,m0,m1\n0.1,0,1,0.5,1,1\n")
    sets = [
        f"experience_gen.source={{kind: file, pattern: '{csv}', format: csv}}",
        "experience_gen.bandit_columns={context: [x0], action: a, reward: r, propensity: p, action_mask: [m0, m1]}",
        "experience_gen.action_spec={shape: [], dtype: int32, minimum: 0, maximum: 1}",
        f"root={tmp_path / 'root'}",
    ]
    assert not load_config("bandit", None, sets).trainer.ignore_action_mask
