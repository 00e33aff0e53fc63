"""Logged action masks through the Trainer: every bandit agent trains with the mask as its
observation's constraint (TF-Agents' splitter), and every exported signature that takes the mask
-- `action` of the greedy and of the exploring policy, `serving_default`, `serving_masked` --
never picks a masked action. The Evaluator and the Pusher's verification feed the logged mask.

The logs: uniform logging over the allowed actions; action 0 is masked wherever x0 > 0.3 (where
it pays most) and every other action at random in 20% of the rows.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common import records
from rlops.components.experience_gen.records import encode_bandit

# Slow: trains each agent on masked logs and serves the exports; `make test` runs it.
pytestmark = pytest.mark.slow

D, K, N_TRAIN, N_EVAL, EPS = 3, 4, 4000, 1000, 0.2
THETA = np.array([[2.0, 0.0, -1.0], [-1.0, 2.0, 0.0], [0.0, -1.0, 2.0], [-0.5, -0.5, -0.5]])


def _masks(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    mask = (rng.random((len(x), K)) > 0.2).astype(np.int64)
    mask[x[:, 0] > 0.3, 0] = 0
    empty = mask.sum(1) == 0
    mask[empty, 1 + rng.integers(0, K - 1, empty.sum())] = 1
    return mask


def _write(root: str, split: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    mask = _masks(x, rng)
    probs = mask / mask.sum(1, keepdims=True)
    a = (probs.cumsum(1) > rng.random((n, 1))).argmax(1)
    r = (rng.random(n) < 1 / (1 + np.exp(-(x @ THETA.T)[np.arange(n), a]))).astype(np.float32)
    cols = {
        records.CONTEXT: x,
        records.ACTION: a,
        records.REWARD: r,
        records.PROPENSITY: probs[np.arange(n), a].astype(np.float32),
        records.ACTION_MASK: mask,
    }
    os.makedirs(records.split_dir(root, split), exist_ok=True)
    with tf.io.TFRecordWriter(
        os.path.join(records.split_dir(root, split), "data-00000-of-00001.gz"), options="GZIP"
    ) as w:
        for ex in encode_bandit(cols):
            w.write(ex)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("masked") / "examples")
    _write(root, "train", N_TRAIN, 0)
    _write(root, "eval", N_EVAL, 1)
    return root


CONFIGS = {
    "neural_epsilon_greedy": dict(train_steps=300, learning_rate=1e-2, hidden_sizes=(16,)),
    "lin_ucb": dict(train_steps=60),
    "lin_ts": dict(train_steps=60),
}


@pytest.fixture(scope="module")
def trained(examples, tmp_path_factory):
    """agent name -> its model trained on the masked logs (each trained once per module)."""
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    cache: dict[str, str] = {}

    def get(agent: str) -> str:
        if agent not in cache:
            root = tmp_path_factory.mktemp(agent)
            config = TrainerConfig(
                agent=agent,
                num_actions=K,
                batch_size=64,
                steps_per_run=100,
                epsilon=EPS,
                serving_epsilon=EPS,
                seed=0,
                **CONFIGS[agent],
            )
            result = run_trainer(config, str(root / "model"), str(root / "run"), examples_uri=examples)
            assert result.extra["action_mask"] is True
            cache[agent] = str(root / "model")
        return cache[agent]

    return get


def _probes(n: int = 3000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    return x, _masks(x, rng)


def _action_signature(saved_model_dir: str, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    sig = tf.saved_model.load(saved_model_dir).signatures["action"]
    n = len(x)
    return sig(
        step_type=tf.zeros([n], tf.int32),
        reward=tf.zeros([n]),
        discount=tf.ones([n]),
        observation_context=tf.constant(x),
        observation_action_mask=tf.constant(mask),
    )["action"].numpy()


def _masked_picks(actions: np.ndarray, mask: np.ndarray) -> int:
    return int((mask[np.arange(len(actions)), actions] == 0).sum())


@pytest.mark.parametrize("agent", list(CONFIGS))
def test_every_signature_honours_the_mask_and_the_greedy_policy_learns(trained, agent):
    from rlops.components.common.model import serving_dir
    from rlops.components.trainer.layout import COLLECT_POLICY_DIR

    uri = trained(agent)
    x, mask = _probes()
    loaded = tf.saved_model.load(serving_dir(uri))
    serve = loaded.signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["action_mask", "context"]  # the mask is an input
    out = serve(context=tf.constant(x), action_mask=tf.constant(mask))
    greedy, action, propensity = (out[k].numpy() for k in ("greedy_action", "action", "propensity"))
    collect = _action_signature(os.path.join(uri, COLLECT_POLICY_DIR), x, mask)
    picks = {
        "greedy_action": greedy,
        "action": action,
        "action signature": _action_signature(serving_dir(uri), x, mask),
        "collect policy": collect,
        "serving_masked": loaded.signatures["serving_masked"](context=tf.constant(x), action_mask=tf.constant(mask))[
            "greedy_action"
        ].numpy(),
    }
    assert {k: _masked_picks(v, mask) for k, v in picks.items()} == {k: 0 for k in picks}
    np.testing.assert_array_equal(picks["action signature"], greedy)
    np.testing.assert_array_equal(picks["serving_masked"], greedy)
    # serving_default's propensity: epsilon-greedy over the allowed actions (numpy reference).
    allowed = mask.sum(1)
    np.testing.assert_allclose(propensity, EPS / allowed + (1 - EPS) * (action == greedy), rtol=1e-5)
    assert 0.05 < np.mean(action != greedy) < 0.25  # it does explore, among the allowed actions
    # The greedy policy learned: it mostly picks the best allowed action of the true model.
    best = np.where(mask > 0, x @ THETA.T, -np.inf).argmax(1)
    agree = float(np.mean(greedy == best))
    print(f"{agent}: greedy == best allowed action in {agree:.3f} of rows")
    assert agree > 0.75, agree


def test_the_evaluator_and_the_pushers_check_feed_the_logged_mask(trained, examples):
    from rlops.components.common.model import serving_dir
    from rlops.components.evaluator.bandit import evaluate_bandit
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.pusher.core import verification_inputs
    from rlops.components.pusher.verify import verify

    uri = trained("neural_epsilon_greedy")
    metrics, improvement = evaluate_bandit(EvaluatorConfig(num_bootstrap=50), examples, uri, K, None)
    data_mask = records.read_logged_bandit(examples, "eval")[records.ACTION_MASK]
    assert metrics["candidate_action_share"][0] < (data_mask[:, 0] == 1).sum()  # only where allowed
    assert np.isfinite(improvement.value)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "inputs.npz")
        np.savez(npz, **verification_inputs(examples, None))
        result = verify(serving_dir(uri), npz)
    assert result["ok"], result


def test_mask_errors_name_the_input(trained):
    from rlops.components.common.model import serving_dir
    from rlops.features.schema import FeatureSchemaError
    from rlops.train.policy_saver import SavedPolicy

    uri = trained("lin_ucb")
    x, mask = _probes(8)
    policy = SavedPolicy(serving_dir(uri))
    with pytest.raises(FeatureSchemaError, match="'action_mask' is missing"):
        policy.actions(x)
    a = policy.actions(x, action_mask=mask)
    assert _masked_picks(a, mask) == 0
    serve = tf.saved_model.load(serving_dir(uri)).signatures["serving_default"]
    mask[3] = 0  # a row that allows nothing has no valid answer
    with pytest.raises(tf.errors.InvalidArgumentError, match="action_mask: a row allows no action"):
        serve(context=tf.constant(x), action_mask=tf.constant(mask))


def test_a_mask_of_the_wrong_width_is_refused_naming_it(examples, tmp_path):
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    with pytest.raises(ValueError, match="'action_mask' has 4 entries per record, but trainer.num_actions is 5"):
        run_trainer(
            TrainerConfig(agent="lin_ucb", num_actions=5, train_steps=1),
            str(tmp_path / "m"),
            str(tmp_path / "r"),
            examples_uri=examples,
        )


class _PerArmInputs(tf.Module):
    """A stand-in for PerArmPreprocessor: dense global [Dg], per_arm [K, Da] and num_actions in."""

    def raw_specs(self, batch_size=None):
        return {
            "global": tf.TensorSpec([batch_size, 3], tf.float32),
            "per_arm": tf.TensorSpec([batch_size, 6, 2]),
            "num_actions": tf.TensorSpec([batch_size], tf.int64),
        }

    def __call__(self, features):
        return {k: features[k] for k in ("global", "per_arm", "num_actions")}


@pytest.mark.parametrize("agent", ["neural_epsilon_greedy", "lin_ucb"])
def test_per_arm_agents_with_a_mask_train_and_act_among_allowed_candidates(agent, tmp_path):
    """Per-arm + mask: an arm is a candidate only if it is below num_actions AND allowed by the mask,
    for the greedy and exploring policies and serving_default's exploring head."""
    from rlops.agents import trajectories
    from rlops.components.common.model import serving_dir
    from rlops.components.trainer import masks
    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.export import export_policies

    k, n = 6, 600
    config = TrainerConfig(agent=agent, num_actions=k, hidden_sizes=(8,), epsilon=0.5, learning_rate=1e-2)
    step = tf.Variable(0, dtype=tf.int64)
    a = make_bandit_agent(config, 0, step, per_arm=(3, k, 2), masked=True)
    rng = np.random.default_rng(0)
    g, arms = rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=(n, k, 2)).astype(np.float32)
    num = rng.integers(2, k + 1, n).astype(np.int64)
    mask = (rng.random((n, k)) > 0.4).astype(np.int64)
    mask[np.arange(n), rng.integers(0, num)] = 1  # at least one allowed candidate
    allowed = mask * (np.arange(k)[None] < num[:, None])
    taken = np.array([rng.choice(np.flatnonzero(r)) for r in allowed])
    reward = (arms[np.arange(n), taken, 0] > 0).astype(np.float32)
    observation = {masks.OBSERVATION: {"global": g, "num_actions": num}, masks.MASK: mask}
    info = {"chosen_arm_features": arms[np.arange(n), taken], "propensity": np.full(n, 0.5, np.float32)}
    experience = trajectories.single_step_trajectory(observation, tf.constant(taken, tf.int32), reward, info)
    experience = experience._replace(
        policy_info={k_: v for k_, v in experience.policy_info.items() if k_ in a.training_data_spec.policy_info}
    )
    a.train(experience)
    full = {masks.OBSERVATION: {"global": g, "per_arm": arms, "num_actions": num}, masks.MASK: mask}
    for policy in (serving_policy(a), a.collect_policy):
        acts = policy.action(trajectories.restart(full, n)).action.numpy()
        assert (allowed[np.arange(n), acts] == 1).all(), type(policy).__name__
    wrapped = [masks.MaskedFeaturePolicy(p, _PerArmInputs(), k) for p in (serving_policy(a), a.collect_policy)]
    export_policies(*wrapped, step, str(tmp_path), "bandit", serving_epsilon=0.5)
    out = tf.saved_model.load(serving_dir(str(tmp_path))).signatures["serving_default"](
        **{
            "global": tf.constant(g),
            "per_arm": tf.constant(arms),
            "num_actions": tf.constant(num),
            "action_mask": tf.constant(mask),
        }
    )
    for key in ("action", "greedy_action"):
        assert (allowed[np.arange(n), out[key].numpy()] == 1).all(), key
    np.testing.assert_allclose(
        out["propensity"].numpy(),
        0.5 / allowed.sum(1) + 0.5 * (out["action"].numpy() == out["greedy_action"].numpy()),
        rtol=1e-5,
    )
