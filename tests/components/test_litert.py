"""The LiteRT policy beside every pushed SavedModel (rlops.train.litert, the Pusher's LiteRT stage).

For each agent kind, the converted policy.tflite runs under ai-edge-litert alone, in a fresh
process that imports neither TensorFlow nor rlops, on 10,000 random inputs (unseen strings, masks,
varying candidate counts): greedy actions identical to the SavedModel's, each sampled action's
propensity within 1e-6 of the exploring policy's probability (computed here from the SavedModel's
greedy action), and the sampled actions' frequencies consistent with those probabilities.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from rlops.components.pusher import core, publish
from rlops.train import litert

# Slow: exports every agent kind and converts it to LiteRT (a module fixture of ~30-100 s); `make test` runs it.
pytestmark = pytest.mark.slow

N = 10_000
EPSILON = 0.2
K_DENSE, D_DENSE, K_PER_ARM = 5, 8, 34
UNSEEN = "never-seen"


# ---- policies of every kind, random weights (equivalence does not need training) -----------------
def _randomize(variables, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for v in variables:
        if not v.dtype.is_floating:
            continue
        value = rng.normal(size=v.shape)
        if len(v.shape) == 2 and v.shape[0] == v.shape[1]:  # LinUCB / LinTS covariance: well conditioned
            value = np.eye(v.shape[0]) + 0.1 * value @ value.T
        v.assign(value.astype(v.dtype.as_numpy_dtype))


def _vocab(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{j}" for j in range(n)]


def _dense(kind: str, out: str, masked: bool = False) -> None:
    from rlops.components.trainer import masks
    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.components.trainer.config import TrainerConfig
    from rlops.features.export import FeaturePolicy
    from rlops.features.preprocessing import Preprocessor
    from rlops.features.schema import FeatureSchema, FeatureSpec
    from rlops.train.policy_saver import PolicySaver

    pre = Preprocessor(FeatureSchema([FeatureSpec("context", "float_list", dim=D_DENSE)]))
    agent = make_bandit_agent(
        TrainerConfig(agent=kind, num_actions=K_DENSE),
        pre.observation_dim,
        tf.Variable(0, dtype=tf.int64),
        masked=masked,
    )
    _randomize(agent.policy.variables, 1)
    greedy = serving_policy(agent)
    policy = masks.MaskedFeaturePolicy(greedy, pre, K_DENSE) if masked else FeaturePolicy(greedy, pre)
    PolicySaver(policy, serving_epsilon=EPSILON).save(out)


def per_arm_schema(hash_buckets: int = 0):
    """4 string user columns, an int64 and a multivalent string categorical, a float; 3 string item
    features (vocabularies + the one OOV bucket; `hash_buckets` > 0 hashes the first user column)."""
    from rlops.features.schema import FeatureSchema, FeatureSpec

    users = [FeatureSpec(f"user_{i}", "categorical", dtype="string", vocabulary=_vocab(f"u{i}_", 20)) for i in range(4)]
    if hash_buckets:
        users[0] = FeatureSpec("user_0", "categorical", dtype="string", hash_buckets=hash_buckets)
    others = [
        FeatureSpec("region", "categorical", dtype="int64", vocabulary=[3, 7, 11, 19]),
        FeatureSpec("tags", "categorical", dtype="string", vocabulary=_vocab("t", 4), multivalent=True, dim=3),
        FeatureSpec("age", "float", mean=30.0, std=10.0),
    ]
    items = [
        FeatureSpec(f"item_feature_{i}", "categorical", dtype="string", vocabulary=_vocab(f"c{i}_", 12))
        for i in range(3)
    ]
    return FeatureSchema(users + others, per_arm=items)


def _per_arm(kind: str, out: str, hash_buckets: int = 0) -> None:
    from rlops.components.trainer.agents.build import make_bandit_agent, serving_policy
    from rlops.components.trainer.config import TrainerConfig
    from rlops.features.export import PerArmFeaturePolicy
    from rlops.features.per_arm import PerArmPreprocessor
    from rlops.train.policy_saver import PolicySaver

    pre = PerArmPreprocessor(per_arm_schema(hash_buckets), K_PER_ARM)
    agent = make_bandit_agent(
        TrainerConfig(agent=kind, num_actions=K_PER_ARM),
        pre.global_dim,
        tf.Variable(0, dtype=tf.int64),
        per_arm=(pre.global_dim, K_PER_ARM, pre.arm_dim),
    )
    _randomize(agent.policy.variables, 2)
    PolicySaver(PerArmFeaturePolicy(serving_policy(agent), pre), serving_epsilon=EPSILON).save(out)


def _per_arm_under_a_global_seed(kind: str, out: str) -> None:
    """Exported as the Trainer exports, after tf.random.set_seed: its draws must stay fresh all the
    same (test_a_per_arm_policy_exported_under_a_global_seed_explores_freshly_in_both_artifacts)."""
    tf.random.set_seed(0)
    try:
        _per_arm(kind, out)
    finally:
        tf.random.set_seed(None)


def _ppo(out: str, stochastic: bool) -> None:
    import tf_keras

    from rlops.agents import specs
    from rlops.agents.ppo import PPOAgent
    from rlops.agents.trajectories import time_step_spec
    from rlops.train.policy_saver import PolicySaver

    obs = tf.TensorSpec((4,), tf.float32, "observation")
    actions = specs.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
    agent = PPOAgent(time_step_spec(obs), actions, tf_keras.optimizers.Adam(1e-3), normalize_observations=True)
    PolicySaver(agent.collect_policy if stochastic else agent.policy).save(out)


KINDS = {
    "neural_epsilon_greedy": lambda d: _dense("neural_epsilon_greedy", d),
    "lin_ucb": lambda d: _dense("lin_ucb", d),
    "lin_ts": lambda d: _dense("lin_ts", d),
    "neural_epsilon_greedy_masked": lambda d: _dense("neural_epsilon_greedy", d, masked=True),
    "lin_ts_masked": lambda d: _dense("lin_ts", d, masked=True),
    "per_arm_neural_epsilon_greedy": lambda d: _per_arm_under_a_global_seed("neural_epsilon_greedy", d),
    "per_arm_lin_ucb": lambda d: _per_arm("lin_ucb", d),
    "per_arm_lin_ts": lambda d: _per_arm("lin_ts", d),
    "ppo_greedy": lambda d: _ppo(d, stochastic=False),
    "ppo_stochastic": lambda d: _ppo(d, stochastic=True),
}


def random_inputs(description: dict, n: int, seed: int) -> dict[str, np.ndarray]:
    """n rows for the LiteRT signature's inputs: strings from the schema's vocabularies or unseen
    ones (and "" padding), masks allowing >= 1 action, 1..K candidates, normal floats."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in description["inputs"].items():
        shape = [n] + [3 if d is None else d for d in spec["shape"][1:]]
        if spec["dtype"] == "string":
            prefix = {"tags": "t"}.get(name) or (f"c{name[-1]}_" if name.startswith("per_arm_") else f"u{name[-1]}_")
            known = np.asarray([f"{prefix}{j}" for j in range(4)] + [f"{UNSEEN}-{name}-{j}" for j in range(3)] + [""])
            out[name] = rng.choice(known, size=shape).astype(object)
        elif name == "action_mask":
            mask = (rng.random(shape) < 0.5).astype(np.int64)
            mask[np.arange(n), rng.integers(0, shape[1], n)] = 1
            out[name] = mask
        elif name == "num_actions":
            out[name] = rng.integers(1, K_PER_ARM + 1, n).astype(np.int64)
        elif spec["dtype"] == "int64":
            out[name] = rng.choice([3, 7, 11, 19, 5, 42], size=shape).astype(np.int64)
        else:
            out[name] = rng.normal(size=shape).astype(np.float32)
    return out


def saved_model_answer(saved_dir: str, inputs: dict) -> dict:
    """The SavedModel's greedy action and [N, K] probabilities of the action the policy serves."""
    loaded = tf.saved_model.load(saved_dir)
    if "serving_default" in loaded.signatures:
        sig = loaded.signatures["serving_default"]
        specs = sig.structured_input_signature[1]
        out = sig(
            **{
                k: tf.constant(v) if specs[k].dtype == tf.string else tf.cast(v, specs[k].dtype)
                for k, v in inputs.items()
            }
        )
        greedy, action, prop = (out[k].numpy() for k in ("greedy_action", "action", "propensity"))
        k = K_PER_ARM if "num_actions" in inputs else K_DENSE
        allowed = np.ones((len(greedy), k), bool)
        if "action_mask" in inputs:
            allowed &= inputs["action_mask"].astype(bool)
        if "num_actions" in inputs:
            allowed &= np.arange(k)[None, :] < inputs["num_actions"][:, None]
        n_allowed = allowed.sum(1, keepdims=True)
        greedy_ok = allowed[np.arange(len(greedy)), greedy][:, None]
        probs = np.where(greedy_ok, EPSILON, 1.0) * allowed / n_allowed
        probs[np.arange(len(greedy)), greedy] += np.where(greedy_ok[:, 0], 1 - EPSILON, 0.0)
        # The SavedModel's own draws follow the same distribution (a check on this reference).
        np.testing.assert_allclose(prop, probs[np.arange(len(greedy)), action], atol=1e-6)
        return {"greedy": greedy, "probs": probs}
    sig = loaded.signatures["action"]
    n = len(inputs["observation"])
    out = sig(
        observation=tf.constant(inputs["observation"]),
        step_type=tf.zeros([n], tf.int32),
        reward=tf.zeros([n]),
        discount=tf.ones([n]),
    )
    if litert.LOGITS not in out:
        action = out["action"].numpy()
        return {"greedy": action, "probs": np.eye(2)[action]}
    logits = out[litert.LOGITS].numpy().astype(np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    return {"greedy": logits.argmax(1), "probs": probs}


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("litert_policies")
    out = {}
    for kind, build in KINDS.items():
        path = str(root / kind)
        build(path)
        litert.convert_to_dir(path)
        out[kind] = path
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_litert_policy_matches_the_saved_model_under_ai_edge_litert_alone(policies, kind):
    path = policies[kind]
    with open(os.path.join(path, litert.LITERT_SPEC_FILE)) as f:
        description = json.load(f)
    loaded = tf.saved_model.load(path)
    if "serving_default" in loaded.signatures:  # the LiteRT inputs are the SavedModel's, by name
        assert sorted(description["inputs"]) == sorted(
            loaded.signatures["serving_default"].structured_input_signature[1]
        )
    inputs = random_inputs(description, N, seed=list(KINDS).index(kind))
    got = {
        k: v[0] if v.ndim else v
        for k, v in litert.run_standalone(os.path.join(path, litert.LITERT_FILE), inputs).items()
    }
    assert not got["modules_tensorflow"] and not got["modules_rlops"]  # ai_edge_litert alone
    want = saved_model_answer(path, inputs)
    np.testing.assert_array_equal(got["greedy_action"], want["greedy"])
    rows = np.arange(N)
    expected = want["probs"][rows, got["action"]]
    assert (expected > 0).all()  # never an action the policy cannot take (masked, past the candidates)
    np.testing.assert_allclose(got["propensity"], expected, atol=1e-6, rtol=0)
    assert (got["policy_version"] == -1).all()  # convert_to_dir: unpublished
    if want["probs"].max(1).min() < 1:  # an exploring policy: its draws follow the probabilities
        _chi_square(got["action"], want["greedy"], want["probs"])


def _chi_square(action: np.ndarray, greedy: np.ndarray, probs: np.ndarray) -> None:
    """Counts of 'the greedy action' and of each other action index against their expected counts
    (sums of the per-row probabilities); sparse cells pooled."""
    k = probs.shape[1]
    rows = np.arange(len(action))
    not_greedy = probs.copy()
    not_greedy[rows, greedy] = 0
    expected = np.concatenate([[probs[rows, greedy].sum()], not_greedy.sum(0)])
    observed = np.concatenate([[(action == greedy).sum()], np.bincount(action[action != greedy], minlength=k)])
    big = expected >= 5
    expected = np.append(expected[big], expected[~big].sum())
    observed = np.append(observed[big], observed[~big].sum())
    keep = expected > 0
    p = stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue
    assert p > 0.001, (observed, expected)


# ---- the Pusher ------------------------------------------------------------------------------------
def _verify_inputs(path: str, n: int = 32) -> dict:
    with open(os.path.join(path, litert.LITERT_SPEC_FILE)) as f:
        description = json.load(f)
    return {f"observation_{k}": v for k, v in random_inputs(description, n, seed=5).items()}


def test_every_pushed_version_carries_a_verified_litert_policy_answering_its_number(policies, tmp_path):
    path = policies["per_arm_lin_ucb"]
    inputs = _verify_inputs(path)
    dest = str(tmp_path / "serving")
    first = core.push_policy(path, dest, True, inputs, verifier=lambda d: None)
    back = publish.rollback(dest, first.version)  # re-published under a new number
    for version in (first.version, back.version):
        directory = os.path.join(dest, str(version))
        with open(os.path.join(directory, litert.LITERT_SPEC_FILE)) as f:
            assert json.load(f)["policy_version"] == version
        feeds = {k[len("observation_") :]: v for k, v in inputs.items()}
        out = litert.run_standalone(os.path.join(directory, litert.LITERT_FILE), feeds)
        assert (out["policy_version"] == version).all()
        with open(os.path.join(directory, publish.MARKER)) as f:
            assert litert.LITERT_FILE in json.load(f)["files"]
    from rlops.pipelines.cli_serving import describe

    assert [r["artifacts"] for r in describe(dest)] == [["saved_model", "litert"]] * 2  # `rlops serving list`


def test_unseen_strings_are_part_of_the_pusher_check():
    inputs = {"observation_user": np.asarray(["a", "b", ""], object), "observation_age": np.ones(3, np.float32)}
    rows = core.litert_inputs(inputs)
    assert len(rows["user"]) == 6 and rows["user"][3].startswith(core.UNSEEN_PREFIX) and rows["user"][5] == ""
    np.testing.assert_array_equal(rows["age"], np.ones(6))


def test_a_litert_policy_that_disagrees_fails_the_push_naming_the_input(policies, tmp_path, monkeypatch):
    path = policies["lin_ucb"]
    other = litert.convert_policy(policies["neural_epsilon_greedy"])  # another policy's file
    monkeypatch.setattr(litert, "convert_policy", lambda d, allow_flex=False, loaded=None: other)
    dest = str(tmp_path / "serving")
    with pytest.raises(
        RuntimeError,
        match=r"disagrees with the SavedModel on verification input row \d+ "
        r"\{'context': \[.*\]\}: greedy action",
    ):
        core.push_policy(path, dest, True, _verify_inputs(path), verifier=lambda d: None)
    assert core.existing_versions(dest) == []


def test_a_policy_needing_flex_ops_fails_the_push_in_one_line_naming_the_op(tmp_path):
    path = str(tmp_path / "hashed")
    _per_arm("lin_ucb", path, hash_buckets=16)
    inputs = {"observation_user_0": np.asarray(["x", "y"], object)}  # conversion fails before any check
    dest = str(tmp_path / "serving")
    with pytest.raises(litert.LiteRTConversionError) as failure:
        core.push_policy(path, dest, True, inputs, verifier=lambda d: None)
    message = str(failure.value)
    assert "\n" not in message and "StringToHashBucketFast" in message and "litert_allow_flex" in message
    assert core.existing_versions(dest) == []
    pushed = core.push_policy(path, dest, True, inputs, verifier=lambda d: None, litert_allow_flex=True)
    assert os.path.getsize(os.path.join(pushed.destination, litert.LITERT_FILE)) > 0  # opted in: published


# ---- exploration as logged: fresh draws in every artifact ------------------------------------------
def test_a_per_arm_policy_exported_under_a_global_seed_explores_freshly_in_both_artifacts(policies):
    """The Trainer sets tf.random.set_seed before exporting (so does the fixture for this policy).
    Both artifacts still draw freshly: at batch 1 and 64, call after call, in two fresh processes
    each (the Pusher's draw checks)."""
    path = policies["per_arm_neural_epsilon_greedy"]
    inputs = _verify_inputs(path, n=64)
    core.subprocess_verifier(inputs)(path)  # the SavedModel: raises on a failed draw check
    assert litert.compare(path, os.path.join(path, litert.LITERT_FILE), core.litert_inputs(inputs)) is None


def test_a_stochastic_policy_converted_from_its_action_signature_draws_freshly(policies):
    path = policies["ppo_stochastic"]
    inputs = {"observation": np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)}
    assert litert.compare(path, os.path.join(path, litert.LITERT_FILE), inputs) is None  # includes check_draws


def test_serving_masked_greedy_action_respects_the_mask(policies):
    serve = tf.saved_model.load(policies["neural_epsilon_greedy"]).signatures["serving_masked"]
    context = tf.constant(np.random.default_rng(1).normal(size=(200, D_DENSE)).astype(np.float32))
    greedy = serve(context=context, action_mask=tf.ones([200, K_DENSE], tf.int64))["greedy_action"].numpy()
    mask = np.ones((200, K_DENSE), np.int64)
    mask[np.arange(200), greedy] = 0  # the greedy item masked out
    out = {k: v.numpy() for k, v in serve(context=context, action_mask=tf.constant(mask)).items()}
    rows = np.arange(200)
    assert (mask[rows, out["greedy_action"]] == 1).all() and (mask[rows, out["action"]] == 1).all()
    np.testing.assert_allclose(out["propensity"], 1 / (K_DENSE - 1), atol=1e-6)  # served uniformly


@pytest.mark.parametrize("kind", ["per_arm_lin_ucb", "lin_ts_masked"])
def test_serving_replay_decides_as_the_serving_head_does_with_the_callers_uniforms(policies, kind):
    from rlops.features import serving_candidates
    from rlops.heads import epsilon_greedy

    path = policies[kind]
    loaded = tf.saved_model.load(path)
    replay = loaded.signatures["serving_replay"]
    with open(os.path.join(path, litert.LITERT_SPEC_FILE)) as f:
        inputs = random_inputs(json.load(f), 500, seed=9)
    specs = replay.structured_input_signature[1]
    feeds = {
        k: tf.constant(v) if specs[k].dtype == tf.string else tf.cast(v, specs[k].dtype) for k, v in inputs.items()
    }
    uniforms = np.random.default_rng(9).random((500, 2)).astype(np.float32)
    first, again = (
        {k: v.numpy() for k, v in replay(uniforms=tf.constant(uniforms), **feeds).items()} for _ in range(2)
    )
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])  # the same uniforms: the same decision
    greedy = loaded.signatures["serving_default"](**feeds)["greedy_action"].numpy()
    allowed = serving_candidates.allowed_actions(inputs, K_PER_ARM if "num_actions" in inputs else K_DENSE)
    action, propensity, greedy_action = epsilon_greedy.decide(greedy, EPSILON, allowed, uniforms)
    np.testing.assert_array_equal(first["action"], action)
    np.testing.assert_array_equal(first["greedy_action"], greedy_action)
    np.testing.assert_allclose(first["propensity"], propensity, atol=1e-6)
