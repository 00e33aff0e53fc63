"""PPO trained offline from logged trajectories (ExperienceGen 'trajectory' records)."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import StepType, Trajectory
from rlops.components.common import records
from rlops.components.common.model import serving_dir
from rlops.components.experience_gen.records import encode_episode, step_types
from rlops.components.trainer import episodes
from rlops.components.trainer.config import TrainerConfig
from rlops.components.trainer.core import run_trainer

F, M, L_ = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
OBS = 3


def make_episode(length: int, terminated: bool, seed: int = 0, num_actions: int = 2) -> dict[str, np.ndarray]:
    """One logged episode as ExperienceGen writes it (step types derived from the order)."""
    rng = np.random.default_rng(seed)
    st, nst = step_types(length)
    discount = np.ones(length, np.float32)
    discount[-1] = 0.0 if terminated else 1.0
    return {
        "step_type": st.astype(np.int32),
        "next_step_type": nst.astype(np.int32),
        "observation": rng.normal(size=(length, OBS)).astype(np.float32),
        "action": rng.integers(0, num_actions, length).astype(np.int32),
        "reward": rng.random(length).astype(np.float32),
        "discount": discount,
        "log_probability": np.log(rng.uniform(0.2, 0.8, length)).astype(np.float32),
    }


def as_trajectory(ep: dict[str, np.ndarray]) -> Trajectory:
    info = {
        "dist_params": {"logits": np.zeros((len(ep["reward"]), 2), np.float32)},
        "log_probability": ep["log_probability"],
    }
    return Trajectory(
        step_type=ep["step_type"],
        observation=ep["observation"],
        action=ep["action"],
        policy_info=tf.nest.map_structure(tf.constant, info),
        next_step_type=ep["next_step_type"],
        reward=ep["reward"],
        discount=ep["discount"],
    )


def reference_windows(ep: dict[str, np.ndarray], t: int) -> dict[str, np.ndarray]:
    """Plain-numpy statement of the layout: n training rows, then one boundary row, then padding;
    window k = rows [kT, kT+T]."""
    length = len(ep["reward"])
    n = length if ep["discount"][-1] == 0 else length - 1  # truncated: the last step only bootstraps
    rows = []
    for i in range(n):
        rows.append(
            {
                "step_type": ep["step_type"][i],
                "next_step_type": L_ if i == n - 1 else ep["next_step_type"][i],
                "observation": ep["observation"][i],
                "action": ep["action"][i],
                "reward": ep["reward"][i],
                "discount": ep["discount"][i],
                "weight": 1.0,
            }
        )
    boundary = {
        "step_type": L_,
        "next_step_type": L_,
        "observation": ep["observation"][-1],
        "action": ep["action"][-1],
        "reward": 0.0,
        "discount": 1.0,
        "weight": 0.0,
    }
    num_windows = -(-n // t)
    rows += [boundary] * (num_windows * t + 1 - n)
    windows = [rows[k * t : k * t + t + 1] for k in range(num_windows)]
    shape = lambda key: (num_windows, t + 1) + np.shape(rows[0][key])  # noqa: E731
    return {key: np.asarray([[r[key] for r in w] for w in windows]).reshape(shape(key)) for key in rows[0]}


@pytest.mark.parametrize(
    "length,terminated,t",
    [(4, True, 3), (4, False, 3), (6, True, 3), (7, False, 3), (1, True, 4), (1, False, 4), (2, False, 5)],
)
def test_episode_windows_match_numpy_reference(length, terminated, t):
    ep = make_episode(length, terminated, seed=length)
    windows, weights = episodes.episode_windows(as_trajectory(ep), t)
    ref = reference_windows(ep, t)
    got = {
        "step_type": windows.step_type,
        "next_step_type": windows.next_step_type,
        "observation": windows.observation,
        "action": windows.action,
        "reward": windows.reward,
        "discount": windows.discount,
        "weight": weights,
    }
    for key, value in got.items():
        np.testing.assert_allclose(np.asarray(value), ref[key], err_msg=key)
    assert windows.policy_info["dist_params"]["logits"].shape[:2] == weights.shape
    if length == 1 and not terminated:
        assert weights.shape[0] == 0  # one cut-off step: nothing to bootstrap from, nothing trains


def test_windows_by_hand():
    """Terminated after 4 steps, T = 3: two windows overlapping in row 3; the boundary follows."""
    ep = make_episode(4, terminated=True)
    w, weights = episodes.episode_windows(as_trajectory(ep), 3)
    assert w.step_type.numpy().tolist() == [[F, M, M, M], [M, L_, L_, L_]]
    assert w.next_step_type.numpy().tolist() == [[M, M, M, L_], [L_, L_, L_, L_]]
    assert w.discount.numpy().tolist() == [[1, 1, 1, 0], [0, 1, 1, 1]]  # 0: the terminal transition
    assert weights.numpy().tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    # Cut off after 4 steps: step 3 becomes the boundary and bootstraps step 2 (discount 1).
    ep = make_episode(4, terminated=False)
    w, weights = episodes.episode_windows(as_trajectory(ep), 3)
    assert w.step_type.numpy().tolist() == [[F, M, M, L_]]
    assert w.discount.numpy().tolist() == [[1, 1, 1, 1]]
    np.testing.assert_array_equal(w.observation.numpy()[0, 3], ep["observation"][3])
    assert w.reward.numpy()[0, 3] == 0.0 and weights.numpy().tolist() == [[1, 1, 1, 0]]


def test_windowed_advantages_match_a_numpy_gae_over_the_episode():
    """PPOAgent's own GAE on the windows equals numpy GAE over the whole episode with the
    lambda-trace cut at window ends (as between consecutive T-step online batches): a terminated
    episode does not bootstrap, a cut-off one bootstraps from its last logged observation, and
    boundary and padding rows leak into no training row."""
    import tf_keras

    from rlops.agents.ppo import PPOAgent
    from rlops.agents.trajectories import time_step_spec

    gamma, lam, t = 0.9, 0.8, 3
    obs_spec = tf.TensorSpec((OBS,), tf.float32)
    agent = PPOAgent(
        time_step_spec(obs_spec),
        specs.BoundedTensorSpec((), tf.int32, 0, 1),
        tf_keras.optimizers.Adam(1e-3),
        discount_factor=gamma,
        lambda_value=lam,
        use_gae=True,
    )
    value = lambda o: np.tanh(o @ np.array([0.5, -1.0, 2.0], np.float32))  # noqa: E731
    for length, terminated in [(7, True), (7, False), (9, False), (3, True)]:
        ep = make_episode(length, terminated, seed=length)
        n = length if terminated else length - 1
        v = value(ep["observation"])
        adv, acc = np.zeros(n), 0.0
        for i in reversed(range(n)):
            next_v = 0.0 if (terminated and i == n - 1) else v[i + 1]
            trace = (i + 1) % t != 0 and i < n - 1  # the window's last row, or the episode's
            acc = ep["reward"][i] + gamma * next_v - v[i] + (gamma * lam * acc if trace else 0.0)
            adv[i] = acc
        w, weights = episodes.episode_windows(as_trajectory(ep), t)
        values = tf.constant(value(w.observation.numpy()), tf.float32)
        got, _ = agent.compute_advantages_and_returns(w, values, tf.constant(w.reward))
        trained = weights.numpy()[:, :-1] > 0
        rows = (np.arange(w.reward.shape[0])[:, None] * t + np.arange(t)[None, :])[trained]
        np.testing.assert_array_equal(np.sort(rows), np.arange(n))  # every training row exactly once
        np.testing.assert_allclose(got.numpy()[trained], adv[rows], rtol=1e-5, atol=1e-5)


# --- logged records -> policy_info --------------------------------------------------------------


def write_episodes(examples_uri: str, eps: list[dict[str, np.ndarray]], info_keys: tuple[str, ...]) -> str:
    """Episodes as ExperienceGen writes them: gzipped SequenceExamples under Split-train/."""
    os.makedirs(records.split_dir(examples_uri, "train"), exist_ok=True)
    path = os.path.join(records.split_dir(examples_uri, "train"), "data-00000-of-00001.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for i, ep in enumerate(eps):
            steps = {k: ep[k] for k in ("observation", "action", "reward", "discount")}
            steps.update({records.POLICY_INFO_PREFIX + k: ep[k] for k in info_keys})
            w.write(encode_episode(f"ep-{i}", steps))
    return examples_uri


def read_windows(examples_uri: str, action_spec) -> list[dict]:
    pattern = records.split_file_pattern(examples_uri, "train")
    info_spec, complete = episodes.policy_info_reader(episodes.inspect_logs(pattern), action_spec)
    ds = episodes.windows_dataset(pattern, tf.TensorSpec((OBS,), tf.float32), action_spec, info_spec, complete, 4)
    return list(ds.as_numpy_iterator())


def test_two_actions_logits_follow_from_the_logged_log_probability(tmp_path):
    eps = [make_episode(6, terminated=True, seed=s) for s in range(3)]
    uri = write_episodes(str(tmp_path / "ex"), eps, ("log_probability",))
    windows = read_windows(uri, specs.BoundedTensorSpec((), tf.int32, 0, 1))
    assert len(windows) == 3 * 2
    for w in windows:
        ex = w["experience"]
        probs = tf.nn.softmax(ex.policy_info["dist_params"]["logits"]).numpy()
        taken = np.take_along_axis(probs, ex.action[:, None].astype(int), 1)[:, 0]
        np.testing.assert_allclose(taken, np.exp(ex.policy_info["log_probability"]), rtol=1e-5)
        np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-6)


def test_logged_logits_are_used_and_log_probability_derived(tmp_path):
    ep = make_episode(5, terminated=True, num_actions=3)
    ep["dist_params/logits"] = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    uri = write_episodes(str(tmp_path / "ex"), [ep], ("dist_params/logits",))
    w = read_windows(uri, specs.BoundedTensorSpec((), tf.int32, 0, 2))[0]
    info = w["experience"].policy_info
    np.testing.assert_allclose(info["dist_params"]["logits"][:4], ep["dist_params/logits"][:4])
    expected = tf.nn.log_softmax(ep["dist_params/logits"]).numpy()[np.arange(4), ep["action"][:4]]
    np.testing.assert_allclose(info["log_probability"][:4], expected, rtol=1e-5)


def test_uniform_logging_over_three_actions_gives_equal_logits_and_nothing_else(tmp_path):
    uniform = make_episode(5, terminated=True, num_actions=3)
    uniform["log_probability"][:] = -math.log(3)
    uri = write_episodes(str(tmp_path / "u"), [uniform], ("log_probability",))
    w = read_windows(uri, specs.BoundedTensorSpec((), tf.int32, 0, 2))[0]
    np.testing.assert_array_equal(w["experience"].policy_info["dist_params"]["logits"], np.zeros((5, 3)))
    # Not uniform (an epsilon-greedy logger): the logits are unknowable from log_probability alone.
    skewed = make_episode(5, terminated=True, num_actions=3)
    uri = write_episodes(str(tmp_path / "s"), [uniform, skewed], ("log_probability",))
    with pytest.raises(tf.errors.InvalidArgumentError, match="policy_info/dist_params/logits"):
        read_windows(uri, specs.BoundedTensorSpec((), tf.int32, 0, 2))
    config = TrainerConfig(agent="ppo", num_actions=3)
    with pytest.raises(ValueError, match="policy_info/dist_params/logits"):  # before any training
        run_trainer(config, str(tmp_path / "m"), str(tmp_path / "r"), examples_uri=uri)


def test_missing_distribution_features_are_named(tmp_path):
    ep = make_episode(4, terminated=True)
    uri = write_episodes(str(tmp_path / "none"), [ep], ())
    with pytest.raises(ValueError, match="policy_info/dist_params/logits"):
        run_trainer(TrainerConfig(agent="ppo", num_actions=2), str(tmp_path / "m"), str(tmp_path / "r"), uri)
    # Continuous actions logged with only a log-probability: the Normal cannot be rebuilt.
    cont = dict(ep, action=np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32))
    uri = write_episodes(str(tmp_path / "cont"), [cont], ("log_probability",))
    with pytest.raises(ValueError, match="policy_info/dist_params/loc.*only policy_info/log_probability"):
        run_trainer(TrainerConfig(agent="ppo"), str(tmp_path / "m"), str(tmp_path / "r"), uri)
    # Discrete actions, log-probabilities only: how many actions is the config's to say.
    uri = write_episodes(str(tmp_path / "k"), [ep], ("log_probability",))
    with pytest.raises(ValueError, match="trainer.num_actions"):
        run_trainer(TrainerConfig(agent="ppo"), str(tmp_path / "m"), str(tmp_path / "r"), uri)


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="trainer.ppo_offline.window_lenght"):
        TrainerConfig(agent="ppo", ppo_offline={"window_lenght": 8})
    with pytest.raises(ValueError, match="trainer.ppo_offline.batch_size"):
        TrainerConfig(agent="ppo", ppo_offline={"batch_size": 0})
    with pytest.raises(ValueError, match="trainer.ppo_offline"):
        TrainerConfig(agent="lin_ucb", num_actions=3, ppo_offline={"batch_size": 4})
    config = TrainerConfig(agent="ppo")  # no env_id: fine for offline, not for online
    assert TrainerConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="trainer.ppo.env_id"):
        run_trainer(config, str(tmp_path / "m"), str(tmp_path / "r"))
    ep = make_episode(4, terminated=True)
    uri = write_episodes(str(tmp_path / "ex"), [ep], ("log_probability",))
    with pytest.raises(ValueError, match="trainer.ppo_offline.batch_size"):  # 2 windows < one batch of 16
        run_trainer(
            TrainerConfig(agent="ppo", num_actions=2, ppo_offline={"window_length": 3}),
            str(tmp_path / "m"),
            str(tmp_path / "r"),
            uri,
        )
    with pytest.raises(ValueError, match="trainer.ppo.env_id"):  # 3 logged observation values, CartPole 4
        run_trainer(
            TrainerConfig(agent="ppo", ppo={"env_id": "CartPole-v1"}), str(tmp_path / "m"), str(tmp_path / "r"), uri
        )


def test_trainer_component_takes_ppo_with_examples_or_an_env_id():
    from tfx.types import Channel, standard_artifacts

    from rlops.components.trainer.component import Trainer

    with pytest.raises(ValueError, match="trainer.ppo.env_id"):  # at pipeline construction, not at run time
        Trainer(config=TrainerConfig(agent="ppo"))
    Trainer(config=TrainerConfig(agent="ppo"), examples=Channel(type=standard_artifacts.Examples))
    Trainer(config=TrainerConfig(agent="ppo", ppo={"env_id": "CartPole-v1"}))


def test_bandit_records_are_not_trajectories(tmp_path):
    from rlops.components.experience_gen import ExperienceGenConfig, SimulationSource, run_experience_gen

    config = ExperienceGenConfig(source=SimulationSource(env="linear", num_records=50))
    run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"), ["--runner=DirectRunner"])
    with pytest.raises(ValueError, match="record_kind 'trajectory'"):
        run_trainer(
            TrainerConfig(agent="ppo", num_actions=4), str(tmp_path / "m"), str(tmp_path / "r"), str(tmp_path / "ex")
        )


# --- end to end on simulated CartPole logs --------------------------------------------------------


@pytest.fixture(scope="module")
def cartpole_logs(tmp_path_factory):
    """200 CartPole episodes from a uniform-random logging policy (log-probabilities only)."""
    from rlops.components.experience_gen import ExperienceGenConfig, SimulationSource, run_experience_gen

    root = tmp_path_factory.mktemp("cartpole")
    config = ExperienceGenConfig(
        record_kind="trajectory",
        max_bad_record_ratio=0.0,
        source=SimulationSource(env="gym:CartPole-v1", num_episodes=200, seed=2),
    )
    run_experience_gen(config, str(root / "examples"), str(root / "quarantine"), ["--runner=DirectRunner"])
    return str(root / "examples")


@pytest.fixture(scope="module")
def offline_run(cartpole_logs, tmp_path_factory):
    root = tmp_path_factory.mktemp("ppo_offline")
    config = TrainerConfig(
        agent="ppo",
        num_actions=2,
        steps_per_run=10,
        summary_interval=10,
        ppo_offline={"batch_size": 16, "window_length": 32, "num_passes": 4},
    )
    result = run_trainer(config, str(root / "model"), str(root / "run"), examples_uri=cartpole_logs)
    return config, result, str(root)


@pytest.mark.slow
def test_offline_ppo_exports_a_policy_that_loads_and_acts(offline_run):
    _, result, root = offline_run
    model = os.path.join(root, "model")
    assert result.extra["offline"] and result.train_steps == 4 * (result.extra["windows"] // 16)
    assert tf.train.latest_checkpoint(os.path.join(model, "train", "checkpoints"))
    assert tf.io.gfile.glob(os.path.join(root, "run", "events.out.tfevents.*"))
    metrics = json.load(open(os.path.join(root, "run", "metrics.json")))
    assert metrics["train_steps"] == result.train_steps and np.isfinite(metrics["final_loss"])
    loaded = tf.saved_model.load(serving_dir(model))  # plain TensorFlow, through the signature
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    out = loaded.signatures["action"](
        step_type=tf.zeros([5], tf.int32), reward=tf.zeros([5]), discount=tf.ones([5]), observation=tf.constant(obs)
    )
    assert out["action"].shape == (5,) and set(out["action"].numpy().tolist()) <= {0, 1}
    # The agent's train step counts gradient steps (TF-Agents): PPOConfig's 20 epochs per train call.
    assert int(loaded.signatures["get_train_step"]()["train_step"]) == result.train_steps * 20


@pytest.mark.slow
def test_offline_ppo_from_random_logs_beats_the_random_policy(offline_run):
    """One round of policy improvement over the logging policy: PPO's clipped ratio keeps the
    stochastic policy near uniform, but its greedy policy follows the advantage's sign, and in
    CartPole that alone balances the pole far longer than random (~22 steps)."""
    from rlops.agents.policies import RandomPolicy
    from rlops.envs.gym_env import GymVectorEnv, evaluate_policy
    from rlops.train.policy_saver import SavedPolicy

    _, _, root = offline_run
    env = GymVectorEnv("CartPole-v1", 1)
    random_returns = evaluate_policy("CartPole-v1", RandomPolicy(env.time_step_spec, env.action_spec), 20, seed=7)
    env.close()
    greedy = evaluate_policy("CartPole-v1", SavedPolicy(serving_dir(os.path.join(root, "model"))), 20, seed=7)
    assert random_returns.mean() < 40 and greedy.mean() > 3 * random_returns.mean(), (greedy, random_returns)


@pytest.mark.slow
def test_offline_retraining_warm_starts_from_the_previous_model(offline_run, cartpole_logs, tmp_path):
    config, first, root = offline_run
    config = TrainerConfig.from_dict(
        {
            **json.loads(config.to_json()),
            "ppo_offline": {**dataclasses.asdict(config.ppo_offline), "max_train_steps": 2},
        }
    )
    second = run_trainer(
        config, str(tmp_path / "m2"), str(tmp_path / "r2"), cartpole_logs, base_model_uri=os.path.join(root, "model")
    )
    assert second.warm_started_from and second.train_steps == 2
    loaded = tf.saved_model.load(serving_dir(str(tmp_path / "m2")))
    assert int(loaded.signatures["get_train_step"]()["train_step"]) == (first.train_steps + 2) * 20
