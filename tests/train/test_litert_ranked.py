"""The LiteRT twin of serving_ranked (rlops.train.litert_ranked): the float32 head reports the exact
propensities (numpy module, K = 100); a pushed ranking policy's policy.tflite, checked by the Pusher,
answers in a fresh process that imports neither TensorFlow nor rlops (docs/serving.md's client
block), with pages that show allowed items only, none twice, at their exact propensities; and the
Pusher refuses a file whose random op has a seed baked in."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs, trajectories
from rlops.agents.bandits import PerArmRewardNetwork
from rlops.agents.ranking import EpsilonPerSlot, Greedy, PlackettLuce, RankingPolicy, UniformWithoutReplacement
from rlops.agents.ranking.ranking_policy import policy_kind
from rlops.components.pusher import core
from rlops.features.export import PerArmFeaturePolicy
from rlops.features.per_arm import PerArmPreprocessor
from rlops.features.schema import FeatureSchema, FeatureSpec
from rlops.heads.slate import head as slate_head
from rlops.train import litert, litert_ranked
from rlops.train.policy_saver import PolicySaver

K, L, ROWS = 8, 3, 24
CATEGORIES = ["shoes", "books", "toys"]
DOCS_CLIENT = "pages = interpreter.Interpreter("  # docs/serving.md's block (tests/test_docs.py lists it)


def _docs_block(key: str) -> str:
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "serving.md")) as f:
        blocks = f.read().split("```")[1::2]
    [text] = [b.split("\n", 1)[1] for b in blocks if key in b]
    return text


@pytest.mark.parametrize(
    "policy",
    [PlackettLuce(0.5), EpsilonPerSlot(0.3), UniformWithoutReplacement(), Greedy()],
    ids=lambda p: type(p).__name__,
)
def test_the_float32_head_reports_the_exact_propensities(policy):
    """K = 100, L = 5, wide score spreads, masks; a request with 2 allowed items gets -1 slots."""
    kind, parameter = policy_kind(policy)
    rng = np.random.default_rng(0)
    scores = (rng.normal(size=(6, 100)) * np.array([[0.5], [2.0], [4.0], [8.0], [1.0], [1.0]])).astype(np.float32)
    allowed = rng.uniform(size=scores.shape) < 0.7
    allowed[5] = False
    allowed[5, [3, 40]] = True  # fewer than L allowed: no error op in LiteRT
    out = {k: v.numpy() for k, v in litert_ranked.litert_slate_head(scores, allowed, 5, kind, parameter, 0.25).items()}
    slate, ok = out["slate"][:5].astype(np.int64), allowed[:5]
    assert ok[np.arange(5)[:, None], slate].all() and all(len(set(s)) == 5 for s in slate.tolist())
    exact = policy.marginals(scores[:5].astype(np.float64), 5, ok)[np.arange(5)[:, None], slate, np.arange(5)]
    assert np.abs(out["propensity_item_position"][:5] - exact).max() < 2e-7
    cascade = policy.prefix_probs(scores[:5].astype(np.float64), slate, ok)
    np.testing.assert_allclose(out["propensity_cascade"][:5], cascade, rtol=1e-5)
    greedy = np.argsort(np.where(ok, -scores[:5], np.inf), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(out["greedy_slate"][:5], greedy)
    assert sorted(out["slate"][5, :2].tolist()) == [3, 40] and out["slate"][5, 2:].tolist() == [-1] * 3
    assert out["propensity_item_position"][5, 2:].tolist() == [0.0] * 3


def _policy_dir(path: str) -> str:
    """A ranking policy with raw string and float features (random weights: the twin does not need
    training), exported as the Trainer exports one."""
    schema = FeatureSchema(
        [FeatureSpec("country", "categorical", dtype="string", vocabulary=["de", "fr", "us"])],
        per_arm=[
            FeatureSpec("category", "categorical", dtype="string", vocabulary=CATEGORIES),
            FeatureSpec("price", "float", mean=20.0, std=10.0),
        ],
    )
    pre = PerArmPreprocessor(schema, K)
    obs_spec = {
        "global": tf.TensorSpec([pre.global_dim], tf.float32),
        "per_arm": tf.TensorSpec([K, pre.arm_dim], tf.float32),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, K),
    }
    tf.random.set_seed(0)  # as the Trainer: the head must still draw freshly
    try:
        net = PerArmRewardNetwork(obs_spec, common_layers=(4,), output_gain=2.0)
        policy = RankingPolicy(
            trajectories.time_step_spec(obs_spec, tf.TensorSpec([L], tf.float32)),
            specs.BoundedTensorSpec([L], tf.int32, 0, K - 1),
            net,
            PlackettLuce(0.5),
        )
        PolicySaver(PerArmFeaturePolicy(policy, pre)).save(path)
    finally:
        tf.random.set_seed(None)
    return path


def _inputs(n: int) -> dict:
    rng = np.random.default_rng(3)
    return {
        "observation_country": rng.choice(["de", "fr", "us", "xx"], n).astype(object),
        "observation_per_arm/category": rng.choice(CATEGORIES, (n, K)).astype(object),
        "observation_per_arm/price": rng.uniform(1, 60, (n, K)).astype(np.float32),
        "observation_num_actions": np.full(n, K, np.int64),
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _policy_dir(str(tmp_path_factory.mktemp("ranked") / "policy"))


# The Pusher and ai-edge-litert: the pinned stack's (.venv-core has neither), so `make test` runs it there.
@pytest.mark.slow
def test_a_pushed_ranking_policys_litert_file_answers_in_a_fresh_process_without_tensorflow(exported, tmp_path):
    dest = str(tmp_path / "serving")
    pushed = core.push_policy(exported, dest, True, _inputs(ROWS), verifier=lambda d: None)  # the LiteRT stage runs
    with open(os.path.join(pushed.destination, litert.LITERT_SPEC_FILE)) as f:
        description = json.load(f)
    assert description["policy_version"] == pushed.version
    assert description["source_signature"] == "serving_ranked_masked"
    assert sorted(description["outputs"]) == sorted(
        ["slate", "propensity_item_position", "propensity_cascade", "greedy_slate", "scores", "policy_version"]
    )
    # docs/serving.md's client, run as written (but for the version's path) in a fresh process
    text = _docs_block(DOCS_CLIENT).replace("pipeline_root/ranking/serving/1795555600", pushed.destination)
    text += "\nimport sys; assert 'tensorflow' not in sys.modules and 'rlops' not in sys.modules"
    text += "\nprint(json.dumps({k: v.tolist() for k, v in out.items()}))"
    proc = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = {k: np.asarray(v) for k, v in json.loads(proc.stdout.splitlines()[-1]).items()}
    mask = np.ones((2, K), bool)
    mask[1, :4] = False  # the block's second request: its mask and num_actions
    mask[1, 7:] = False
    slate = out["slate"]
    assert mask[np.arange(2)[:, None], slate].all() and all(len(set(s)) == L for s in slate.tolist())
    scores = out["scores"].astype(np.float64)
    exact = PlackettLuce(0.5).marginals(scores, L, mask)[np.arange(2)[:, None], slate, np.arange(L)]
    np.testing.assert_allclose(out["propensity_item_position"], exact, atol=1e-6)
    assert out["policy_version"].tolist() == [pushed.version] * 2


# The Pusher and ai-edge-litert: the pinned stack's (.venv-core has neither), so `make test` runs it there.
@pytest.mark.slow
def test_the_pusher_refuses_a_ranked_litert_file_with_baked_in_seeds(exported, tmp_path, monkeypatch):
    """A RANDOM_UNIFORM seeded at conversion: LiteRT re-seeds it to the same value, and the draw
    checks refuse the file before any version appears."""

    def baked(batch, count):
        shape = tf.stack([tf.cast(batch, tf.int32), tf.constant(count, tf.int32)])
        return tf.maximum(tf.raw_ops.RandomUniform(shape=shape, dtype=tf.float32, seed=7, seed2=11), 2.0**-24)

    monkeypatch.setattr(slate_head, "fresh_uniforms", baked)
    dest = str(tmp_path / "serving")
    with pytest.raises(RuntimeError, match="LiteRT at batch 1: "):
        core.push_policy(exported, dest, True, _inputs(ROWS), verifier=lambda d: None)
    assert core.existing_versions(dest) == []
