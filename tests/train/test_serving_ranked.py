"""serving_ranked: a RankingAgent trained on slate logs (the slate generator's users and item table,
raw named features through the exported preprocessing), exported, and served in a fresh process
with TensorFlow alone: no item twice, masked items never shown, the reported propensities equal
the numpy module's exact ones, replay by row seed, the slate-length error, the metadata; and the
draw checks (rlops.train.verify_ranked) pass an honest export and fail one with baked-in seeds."""

import json
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from helpers import run_fresh_python

from rlops.agents import specs, trajectories
from rlops.agents.bandits import PerArmRewardNetwork
from rlops.agents.ranking import (
    EpsilonPerSlot,
    FeedbackModel,
    PlackettLuce,
    RankingAgent,
    RankingPolicy,
)
from rlops.agents.ranking.ranking_agent import order_items_from_action
from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator
from rlops.features.export import PerArmFeaturePolicy
from rlops.features.per_arm import PerArmPreprocessor
from rlops.features.schema import FeatureSchema, FeatureSpec
from rlops.heads.slate import head as slate_head
from rlops.train import ranked_serving, verify_ranked
from rlops.train.policy_saver import PolicySaver, load_specs

K, L, ROWS = 10, 3, 32


def _world():
    gen = SlateLogGenerator(SlateConfig(num_items=K, num_slots=L, seed=0))
    schema = FeatureSchema(
        [
            FeatureSpec(
                "user_feature_0",
                "categorical",
                dtype="string",
                vocabulary=sorted(set(gen.population["user_feature_0"])),
            ),
            FeatureSpec("user_float_0", "float", mean=0.0, std=1.0),
        ],
        per_arm=[
            FeatureSpec(
                "item_category", "categorical", dtype="string", vocabulary=sorted(set(gen.items["item_category"]))
            ),
            FeatureSpec("item_price", "float", mean=40.0, std=20.0),
        ],
    )
    return gen, PerArmPreprocessor(schema, K)


def _raw(gen, logs, rows):
    """Raw serving inputs for the logged users of `rows`: every item a candidate."""
    users = logs.users[rows]
    n = len(users)
    return {
        "user_feature_0": gen.population["user_feature_0"][users].astype(np.bytes_),
        "user_float_0": gen.population["user_float_0"][users].astype(np.float32),
        "per_arm_item_category": np.broadcast_to(gen.items["item_category"].astype(np.bytes_), (n, K)).copy(),
        "per_arm_item_price": np.broadcast_to(gen.items["item_price"].astype(np.float32), (n, K)).copy(),
        "num_actions": np.full(n, K, np.int64),
    }


@pytest.fixture(scope="module")
def trained():
    """A RankingAgent trained for a few steps on 2,000 logged slates (SCORE_VECTOR clicks)."""
    gen, pre = _world()
    obs_spec = {
        "global": tf.TensorSpec([pre.global_dim], tf.float32),
        "per_arm": tf.TensorSpec([K, pre.arm_dim], tf.float32),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, K),
    }
    agent = RankingAgent(
        trajectories.time_step_spec(obs_spec, tf.TensorSpec([L], tf.float32)),
        specs.BoundedTensorSpec([L], tf.int32, 0, K - 1),
        PerArmRewardNetwork(obs_spec, common_layers=(8,), output_gain=1.0),
        tf_keras.optimizers.Adam(0.02),
        feedback_model=FeedbackModel.SCORE_VECTOR,
        logits_temperature=0.5,
    )
    logs = gen.sample(2000, seed=1)
    train = tf.function(agent.train, autograph=False)
    for rows in np.array_split(np.arange(len(logs)), 10):
        obs = pre({k: tf.constant(v) for k, v in _raw(gen, logs, rows).items()})
        shown = {**order_items_from_action(obs, logs.slates[rows]), "num_actions": np.full(len(rows), L, np.int32)}
        outer = (len(rows),)
        train(
            trajectories.Trajectory(
                np.full(outer, trajectories.StepType.FIRST),
                shown,
                np.zeros((*outer, L), np.int32),
                (),
                np.full(outer, trajectories.StepType.LAST),
                logs.rewards[rows].astype(np.float32),
                np.zeros(outer, np.float32),
            )
        )
    return gen, pre, agent, logs


def _export(trained, path, slate_policy=None):
    gen, pre, agent, _ = trained
    policy = agent.collect_policy
    if slate_policy is not None:
        policy = RankingPolicy(policy.time_step_spec, policy.action_spec, agent.scoring_network, slate_policy)
    PolicySaver(PerArmFeaturePolicy(policy, pre), train_step=tf.Variable(7, dtype=tf.int64)).save(str(path))
    return str(path)


# Runs in a fresh interpreter: TensorFlow only, never rlops.
SERVER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    saved_dir, inputs_npz = sys.argv[1:3]
    data = dict(np.load(inputs_npz))
    mask = data.pop("action_mask")
    policy = tf.saved_model.load(saved_dir)
    out = {"signatures": sorted(policy.signatures)}
    out["inputs"] = sorted(policy.signatures["serving_ranked"].structured_input_signature[1])
    plain = policy.signatures["serving_ranked"](**data)
    out["plain"] = {k: v.numpy().tolist() for k, v in plain.items()}
    masked = policy.signatures["serving_ranked_masked"](action_mask=mask, **data)
    out["masked"] = {k: v.numpy().tolist() for k, v in masked.items()}
    replay = policy.signatures["serving_ranked_replay"](action_mask=mask, row_seeds=masked["seed"], **data)
    out["replay_slate"] = replay["slate"].numpy().tolist()
    short = mask.copy()
    short[0, :] = 0
    short[0, :2] = 1  # two allowed candidates for a slate of three
    try:
        policy.signatures["serving_ranked_masked"](action_mask=short, **data)
        out["short_error"] = None
    except tf.errors.InvalidArgumentError as e:
        out["short_error"] = next(ln.strip() for ln in e.message.splitlines() if "slate length" in ln)
    out["metadata"] = {k: (v.numpy().decode() if v.dtype == tf.string else v.numpy().item())
                       for k, v in policy.signatures["get_metadata"]().items()}
    out["rlops_imported"] = any(m == "rlops" or m.startswith("rlops.") for m in sys.modules)
    print(json.dumps(out))
""")


@pytest.mark.parametrize(
    "slate_policy", [None, EpsilonPerSlot(0.3)], ids=["plackett_luce_collect_policy", "epsilon_per_slot"]
)
def test_serving_ranked_in_a_fresh_process_without_rlops(trained, tmp_path, slate_policy):
    gen, pre, agent, logs = trained
    saved = _export(trained, tmp_path / "policy", slate_policy)
    raw = _raw(gen, logs, np.arange(ROWS))
    raw["num_actions"][:4] = [L, 5, 7, 9]  # fewer candidates in use: the rest are padding
    mask = np.random.default_rng(5).uniform(size=(ROWS, K)) < 0.7
    mask[:, :L] = True
    np.savez(tmp_path / "inputs.npz", action_mask=mask.astype(np.int64), **raw)
    out = run_fresh_python(SERVER, saved, str(tmp_path / "inputs.npz"))
    assert not out["rlops_imported"]
    assert {"serving_ranked", "serving_ranked_masked", "serving_ranked_replay", "action"} <= set(out["signatures"])
    assert out["inputs"] == sorted(raw)  # the same raw named features as serving_default's, num_actions
    assert load_specs(saved)["signatures"]["serving_ranked_masked"]["inputs"] == sorted([*raw, "action_mask"])

    # the scores are the trained network's on the preprocessed raw features
    obs = pre({k: tf.constant(v) for k, v in raw.items()})
    want_scores = agent.scoring_network({"global": obs["global"], "per_arm": obs["per_arm"]}).numpy()
    policy = agent.collect_policy.slate_policy if slate_policy is None else slate_policy
    candidates = np.arange(K)[None, :] < raw["num_actions"][:, None]
    for name, allowed in (("plain", candidates), ("masked", candidates & mask)):
        got = {k: np.asarray(v) for k, v in out[name].items()}
        np.testing.assert_allclose(got["scores"], want_scores, rtol=1e-5, atol=1e-6)
        scores = got["scores"].astype(np.float64)
        slate = got["slate"]
        assert slate.shape == (ROWS, L) and got["propensity_cascade"].shape == (ROWS, L)
        assert all(len(set(row)) == L for row in slate.tolist()), "an item twice in a slate"
        assert allowed[np.arange(ROWS)[:, None], slate].all(), "a masked or padding candidate was shown"
        exact = policy.marginals(scores, L, allowed)
        np.testing.assert_allclose(
            got["propensity_item_position"], exact[np.arange(ROWS)[:, None], slate, np.arange(L)], atol=1e-6
        )
        np.testing.assert_allclose(
            got["propensity_cascade"], policy.prefix_probs(scores, slate, allowed), rtol=1e-5, atol=1e-9
        )
        greedy = np.argsort(np.where(allowed, -scores, np.inf), axis=1, kind="stable")[:, :L]
        np.testing.assert_array_equal(got["greedy_slate"], greedy)
        assert got["policy_version"].tolist() == [-1] * ROWS
    np.testing.assert_array_equal(out["replay_slate"], out["masked"]["slate"])
    assert f"slate length {L} needs at least {L} allowed candidates per request; request" in out["short_error"]
    assert out["short_error"].endswith("[0] [has] [2]"), out["short_error"]  # request 0 has 2
    kind = "plackett_luce" if slate_policy is None else "epsilon_per_slot"
    meta = out["metadata"]
    assert (meta["num_slots"], meta["num_candidates"], meta["slate_policy"]) == (L, K, kind)
    assert meta["propensity_method"] == ranked_serving.PROPENSITY_METHODS[kind]
    if slate_policy is None:
        assert (meta["temperature"], meta["quadrature_step"]) == (0.5, 0.25)
    else:
        assert meta["epsilon"] == 0.3


def test_ranking_export_has_no_serving_default_and_constant_metadata(trained, tmp_path):
    """A ranking export has no serving_default (its action is a slate); checkpoints and the
    metadata variables work as before, and the ranking constants are not in checkpoints."""
    saved = _export(trained, tmp_path / "policy")
    loaded = tf.saved_model.load(saved)
    assert "serving_default" not in loaded.signatures
    assert int(loaded.get_train_step()) == 7
    assert json.loads((tmp_path / "policy" / "policy_specs.json").read_text())["metadata"] == []
    with pytest.raises(ValueError, match="num_slots"):
        gen, pre, agent, _ = trained
        PolicySaver(PerArmFeaturePolicy(agent.collect_policy, pre), metadata={"num_slots": 1.0})


def _inputs(trained):
    gen, _, _, logs = trained
    return _raw(gen, logs, np.arange(ROWS))


def test_draw_checks_pass_an_honest_export(trained, tmp_path):
    saved = _export(trained, tmp_path / "policy", PlackettLuce(0.4))
    verify_ranked.verify_ranked(saved, _inputs(trained), calls_one=400, calls_many=12, rows_many=ROWS)


def test_draw_checks_fail_a_head_with_baked_in_seeds(trained, tmp_path, monkeypatch):
    """Random ops seeded at export: the same stream in every process."""

    def baked(batch):
        return tf.raw_ops.RandomUniformInt(
            shape=tf.reshape(tf.cast(batch, tf.int32), [1]),
            minval=tf.constant(0, tf.int64),
            maxval=tf.constant(np.iinfo(np.int64).max, tf.int64),
            seed=7,
            seed2=11,
        )

    monkeypatch.setattr(slate_head, "fresh_row_seeds", baked)
    saved = _export(trained, tmp_path / "policy", PlackettLuce(0.4))
    with pytest.raises(RuntimeError, match="two fresh processes draw the same slates"):
        verify_ranked.verify_ranked(saved, _inputs(trained), calls_one=200, calls_many=8, rows_many=ROWS)


def test_draw_checks_catch_wrong_propensities_and_frequencies():
    """The parent-side checks on synthetic draws: honest ones pass; a head that reports PL
    marginals but always shows the greedy slate, or misreports a propensity, fails."""
    rng = np.random.default_rng(0)
    policy, scores = PlackettLuce(1.0), rng.normal(size=(4, K))
    meta = {"slate_policy": "plackett_luce", "temperature": 1.0, "quadrature_step": 0.25, "num_slots": L}
    allowed = np.ones((4, K), bool)
    marg = policy.marginals(scores, L)

    def draws(slates):
        idx = np.arange(4)[None, :, None]
        return {
            "many_slate": slates,
            "many_scores": np.repeat(scores[None], len(slates), 0).astype(np.float32),
            "many_greedy_slate": np.repeat(np.argsort(-scores, 1)[None, :, :L], len(slates), 0),
            "many_propensity_item_position": marg[idx, slates, np.arange(L)].astype(np.float32),
            "many_propensity_cascade": policy.prefix_probs(np.tile(scores, (len(slates), 1)), slates.reshape(-1, L))
            .reshape(slates.shape)
            .astype(np.float32),
            "feed_num_actions": np.full(4, K),
        }

    def both(slates):  # the same draws under "one" and "many"
        d = draws(slates)
        return {**d, **{k.replace("many_", "one_"): v for k, v in d.items() if k.startswith("many_")}}

    honest = [both(np.stack([policy.sample(rng, scores, L, allowed) for _ in range(400)])) for _ in range(2)]
    assert verify_ranked.ranked_draws_error(honest, meta) is None
    greedy = np.repeat(np.argsort(-scores, 1)[None, :, :L], 400, 0)
    assert "frequencies" in verify_ranked.ranked_draws_error([both(greedy), both(greedy)], meta)
    wrong = [dict(h) for h in honest]
    wrong[1]["many_propensity_item_position"] = wrong[1]["many_propensity_item_position"] * 1.01
    assert "propensity_item_position" in verify_ranked.ranked_draws_error(wrong, meta)
    repeated = [honest[0], honest[0]]
    assert "two fresh processes" in verify_ranked.ranked_draws_error(repeated, meta)


@pytest.mark.parametrize("with_mask", [False, True], ids=["no_num_actions_in_spec", "mask_in_observation"])
def test_bare_ranking_policy_inputs(tmp_path, with_mask):
    """A bare RankingPolicy: `num_actions` is an input even when its spec lacks it; a policy whose
    observation holds `action_mask` (a splitter) takes it in every signature, and serving_ranked_masked
    is serving_ranked."""
    da, dg = 2, 3
    inner = {"global": tf.TensorSpec([dg], tf.float32), "per_arm": tf.TensorSpec([K, da], tf.float32)}
    obs_spec = {**inner, "action_mask": tf.TensorSpec([K], tf.int32)} if with_mask else inner

    def splitter(obs):
        return {k: v for k, v in obs.items() if k != "action_mask"}, obs["action_mask"]

    policy = RankingPolicy(
        trajectories.time_step_spec(obs_spec),
        specs.BoundedTensorSpec([L], tf.int32, 0, K - 1),
        PerArmRewardNetwork(inner, common_layers=(4,)),
        PlackettLuce(1.0),
        splitter if with_mask else None,
    )
    PolicySaver(policy).save(str(tmp_path / "p"))
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    names = sorted(["arg_global", "per_arm", "num_actions"] + (["action_mask"] if with_mask else []))
    assert sorted(loaded.signatures["serving_ranked"].structured_input_signature[1]) == names
    masked = sorted(loaded.signatures["serving_ranked_masked"].structured_input_signature[1])
    assert masked == sorted(set(names) | {"action_mask"})
    rng = np.random.default_rng(0)
    mask = np.ones((64, K), np.int32)
    mask[:, 5:] = 0
    feeds = {
        "arg_global": tf.constant(rng.normal(size=(64, dg)), tf.float32),  # `global` is a keyword
        "per_arm": tf.constant(rng.normal(size=(64, K, da)), tf.float32),
        "num_actions": tf.fill([64], tf.constant(K - 1, tf.int64)),
        "action_mask": tf.constant(mask, tf.int64 if not with_mask else tf.int32),
    }
    out = loaded.signatures["serving_ranked_masked"](**feeds)
    assert (out["slate"].numpy() < 5).all()
    feeds.pop("action_mask")
    if not with_mask:
        assert (loaded.signatures["serving_ranked"](**feeds)["slate"].numpy() < K - 1).all()


@pytest.mark.slow  # the Pusher's code: on the pinned stack, beside the pipelines
def test_the_pushers_verifier_sends_a_ranking_policy_to_the_page_checks(trained, tmp_path, monkeypatch):
    """The Pusher's verifier (what run_pusher calls on the staged copy) reads a ranking export's
    decision kind and runs verify_ranked on it (whose checks the tests above drive); its failure
    stops the push. An export without the kind (older rlops) is read as slate by its signatures."""
    from rlops.components.pusher import core
    from rlops.train.policy_saver import load_specs, model_decision_kind

    saved = _export(trained, tmp_path / "policy", PlackettLuce(0.4))
    assert "decision_kind" not in load_specs(saved) and model_decision_kind(saved) == "slate"
    gen, pre, agent, _ = trained
    policy = RankingPolicy(
        agent.collect_policy.time_step_spec, agent.collect_policy.action_spec, agent.scoring_network, PlackettLuce(0.4)
    )
    named = str(tmp_path / "named")
    PolicySaver(
        PerArmFeaturePolicy(policy, pre), train_step=tf.Variable(7, dtype=tf.int64), decision_kind="slate"
    ).save(named)
    assert load_specs(named)["decision_kind"] == "slate" and model_decision_kind(named) == "slate"
    metadata = tf.saved_model.load(named).signatures["get_metadata"]()
    assert metadata["decision_kind"].numpy() == b"slate"
    seen = []

    def stuck(path, inputs):
        seen.append(path)
        raise RuntimeError("two fresh processes draw the same slates")

    monkeypatch.setattr(verify_ranked, "verify_ranked", stuck)
    with pytest.raises(RuntimeError, match="pushed ranking policy failed verification: two fresh processes"):
        core.subprocess_verifier(_inputs(trained))(saved)
    assert seen == [saved]
