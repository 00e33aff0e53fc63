"""Logged episodes (ExperienceGen trajectory records) -> the [B, T+1] batches PPOAgent.train takes.

An episode of L logged steps becomes n training rows plus one boundary (LAST) row:
  - terminated (last discount 0): n = L; the boundary row is a placeholder (a copy of the last
    step): the terminal transition has discount 0, so its observation is never bootstrapped from.
  - truncated (last discount > 0): n = L - 1; the logs hold no observation after the last step,
    so the last logged step becomes the boundary row and its observation bootstraps the step
    before it exactly. Its own action is dropped: its advantage cannot be estimated.
The rows are cut into windows of T training rows plus the next row as the bootstrap row
(windows overlap by one row, like consecutive VectorDriver batches); the last window is padded
with LAST rows. Weights are 1 on training rows, 0 on boundary and padding rows (which PPOAgent
also masks because they are LAST), and padding copies real values so every masked row still
holds a valid distribution (no NaN to leak through a 0 weight).

PPO rebuilds the logging policy's action distribution from policy_info/dist_params/*. Where the
logs hold only policy_info/log_probability, the distribution is derived only where that number
determines it: two actions (p and 1 - p), or a uniform logging policy over K actions (every
logged probability 1/K). Anything else is an error naming the missing feature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import StepType, Trajectory
from rlops.components.common import records

LOGITS = records.DIST_PARAMS_PREFIX + "logits"
LOC = records.DIST_PARAMS_PREFIX + "loc"
SCALE = records.DIST_PARAMS_PREFIX + "scale"
# Probability floor for the action not taken (two actions): a greedy logger gives it exactly 0.
_MIN_PROB = 1e-8
_UNIFORM_ATOL = 1e-4  # |log p + log K|: float32 logs of log(1/K)


@dataclass(frozen=True)
class LoggedFeatures:
    """What the logged SequenceExamples hold (read from the first record)."""

    observation_dim: int
    discrete: bool
    action_dim: int  # values per action (1 for a discrete action)
    policy_info: dict[str, int] = field(default_factory=dict)  # "policy_info/<path>" -> values per step


def first_episode(file_pattern: str) -> tf.train.SequenceExample:
    for path in sorted(tf.io.gfile.glob(file_pattern)):
        for record in tf.data.TFRecordDataset(path, compression_type="GZIP").take(1):
            return tf.train.SequenceExample.FromString(record.numpy())
    raise ValueError(f"examples: no episodes in {file_pattern}; the train split is empty")


def inspect_logs(file_pattern: str) -> LoggedFeatures:
    lists = first_episode(file_pattern).feature_lists.feature_list
    for name in (records.OBSERVATION, records.ACTION, records.REWARD, records.DISCOUNT, records.STEP_TYPE):
        if name not in lists:
            raise ValueError(
                f"examples: the records have no '{name}' feature list; PPO trains on trajectory "
                f"records (ExperienceGen record_kind 'trajectory'), got features {sorted(lists)}"
            )
    action = lists[records.ACTION].feature[0]
    discrete = action.WhichOneof("kind") == "int64_list"
    info = {k: len(v.feature[0].float_list.value) for k, v in lists.items() if k.startswith(records.POLICY_INFO_PREFIX)}
    return LoggedFeatures(
        observation_dim=len(lists[records.OBSERVATION].feature[0].float_list.value),
        discrete=discrete,
        action_dim=len(action.int64_list.value if discrete else action.float_list.value),
        policy_info=info,
    )


# --- the logging policy's distribution --------------------------------------------------------

InfoFn = Callable[[dict, tf.Tensor], dict]  # (parsed policy_info, actions [L]) -> PPO policy_info


def policy_info_reader(logged: LoggedFeatures, action_spec: tf.TensorSpec) -> tuple[dict, InfoFn]:
    """(the policy_info spec to parse, a function completing it into {"dist_params", "log_probability"}).

    Raises ValueError naming the missing feature where the logs do not determine the logging
    policy's distribution."""
    info = logged.policy_info
    if specs.is_discrete(action_spec):
        return _discrete_reader(info, specs.num_actions(action_spec))
    return _continuous_reader(info, tuple(action_spec.shape.as_list()))


def _key(feature: str) -> str:
    return feature[len(records.POLICY_INFO_PREFIX) :]


def _log_prob_spec() -> dict:
    return {_key(records.LOG_PROBABILITY): tf.TensorSpec((), tf.float32)}


def _discrete_reader(info: dict[str, int], k: int) -> tuple[dict, InfoFn]:
    if LOGITS in info:
        if info[LOGITS] != k:
            raise ValueError(f"{LOGITS}: {info[LOGITS]} values per step, but the action spec has {k} actions")
        spec: dict = {"dist_params": {"logits": tf.TensorSpec((k,), tf.float32)}}
        if records.LOG_PROBABILITY in info:
            spec.update(_log_prob_spec())
        return spec, _with_log_prob
    if records.LOG_PROBABILITY not in info:
        raise ValueError(
            f"{LOGITS}: PPO needs the logging policy's action distribution, and the logs have "
            f"neither {LOGITS} nor {records.LOG_PROBABILITY} (policy_info features: {sorted(info)})"
        )
    if k == 2:  # p(other) = 1 - p(taken): the one logged number determines both
        return _log_prob_spec(), _two_action_logits
    return _log_prob_spec(), lambda parsed, action: _uniform_logits(parsed, action, k)


def _with_log_prob(parsed: dict, action: tf.Tensor) -> dict:
    logits = parsed["dist_params"]["logits"]
    log_prob = parsed.get("log_probability")
    if log_prob is None:
        log_prob = tf.gather(tf.nn.log_softmax(logits), tf.cast(action, tf.int32), batch_dims=1)
    return {"dist_params": {"logits": logits}, "log_probability": log_prob}


def _two_action_logits(parsed: dict, action: tf.Tensor) -> dict:
    log_p = parsed["log_probability"]
    log_other = tf.math.log(tf.maximum(1.0 - tf.exp(log_p), _MIN_PROB))
    taken = tf.one_hot(tf.cast(action, tf.int32), 2)
    logits = taken * log_p[:, None] + (1.0 - taken) * log_other[:, None]
    return {"dist_params": {"logits": logits}, "log_probability": log_p}


def _uniform_logits(parsed: dict, action: tf.Tensor, k: int) -> dict:
    log_p = parsed["log_probability"]
    check = tf.debugging.assert_near(
        log_p, tf.fill(tf.shape(log_p), -math.log(k)), atol=_UNIFORM_ATOL, message=uniform_error(k)
    )
    with tf.control_dependencies([check]):
        logits = tf.zeros([tf.shape(log_p)[0], k], tf.float32)
    return {"dist_params": {"logits": logits}, "log_probability": tf.identity(log_p)}


def uniform_error(k: int) -> str:
    return (
        f"{LOGITS}: the logs hold only {records.LOG_PROBABILITY}, which determines a {k}-action "
        f"distribution only for a uniform logging policy (log 1/{k} = {-math.log(k):.4f} at every step), "
        f"and these logs are not uniform; log the logging policy's {LOGITS}"
    )


def check_uniform(file_pattern: str, k: int, max_episodes: int = 8) -> None:
    """Fails early, naming the feature, when the first episodes already rule out uniform logging
    (the input pipeline checks every step again)."""
    import numpy as np

    files = sorted(tf.io.gfile.glob(file_pattern))
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP").take(max_episodes):
        steps = tf.train.SequenceExample.FromString(record.numpy()).feature_lists.feature_list
        log_p = np.asarray([f.float_list.value[0] for f in steps[records.LOG_PROBABILITY].feature])
        if np.any(np.abs(log_p + math.log(k)) > _UNIFORM_ATOL):
            raise ValueError(uniform_error(k))


def _continuous_reader(info: dict[str, int], shape: tuple[int, ...]) -> tuple[dict, InfoFn]:
    missing = [f for f in (LOC, SCALE) if f not in info]
    if missing:
        have = f"only {records.LOG_PROBABILITY}" if records.LOG_PROBABILITY in info else f"{sorted(info) or 'none'}"
        raise ValueError(
            f"{missing[0]}: PPO rebuilds the logging policy's Normal(loc, scale) from {LOC} and "
            f"{SCALE}; the logs lack {', '.join(missing)} (policy_info features: {have})"
        )
    size = math.prod(shape)
    for f in (LOC, SCALE):
        if info[f] != size:
            raise ValueError(f"{f}: {info[f]} values per step, but the action spec has shape {shape}")
    spec: dict = {"dist_params": {"loc": tf.TensorSpec(shape, tf.float32), "scale": tf.TensorSpec(shape, tf.float32)}}
    if records.LOG_PROBABILITY in info:
        spec.update(_log_prob_spec())

    def complete(parsed: dict, action: tf.Tensor) -> dict:
        params = parsed["dist_params"]
        log_prob = parsed.get("log_probability")
        if log_prob is None:  # log N(a; loc, scale), summed over the action's dimensions
            z = (tf.cast(action, tf.float32) - params["loc"]) / params["scale"]
            log_prob = tf.reduce_sum(
                -0.5 * tf.square(z) - tf.math.log(params["scale"]) - 0.5 * math.log(2 * math.pi),
                axis=list(range(1, 1 + len(shape))),
            )
        return {"dist_params": dict(params), "log_probability": log_prob}

    return spec, complete


# --- episodes -> windows ----------------------------------------------------------------------


def episode_windows(episode: Trajectory, window_length: int) -> tuple[Trajectory, tf.Tensor]:
    """One episode [L, ...] -> (windows [W, T+1, ...], weights [W, T+1]); W = 0 when nothing trains."""
    t = window_length
    length = tf.shape(episode.reward)[0]
    truncated = episode.discount[-1] > 0.0
    n = length - tf.cast(truncated, tf.int32)  # training rows
    num_windows = (n + t - 1) // t
    total = num_windows * t + 1  # rows the windows cover (incl. boundary/padding)
    pos = tf.range(total)
    # Row i < n is logged row i; the boundary and padding rows copy the last logged row.
    source = tf.minimum(pos, length - 1)
    rows = tf.nest.map_structure(lambda x: tf.gather(x, source), episode)
    train = pos < n
    last = tf.fill([total], StepType.LAST)
    rows = rows._replace(
        step_type=tf.where(train, rows.step_type, last),
        next_step_type=tf.where(pos < n - 1, rows.next_step_type, last),
        reward=tf.where(train, rows.reward, 0.0),
        discount=tf.where(train, rows.discount, 1.0),
    )
    weights = tf.cast(train, tf.float32)
    index = tf.range(num_windows)[:, None] * t + tf.range(t + 1)[None, :]  # [W, T+1], overlap 1
    take = lambda x: tf.gather(x, index)  # noqa: E731
    return tf.nest.map_structure(take, rows), take(weights)


def windows_dataset(
    file_pattern: str,
    observation_spec: tf.TensorSpec,
    action_spec: tf.TensorSpec,
    info_spec: dict,
    complete_info: InfoFn,
    window_length: int,
) -> tf.data.Dataset:
    """Unbatched windows: dict(experience=Trajectory [T+1, ...], weights=[T+1])."""

    def to_windows(episode: Trajectory) -> tf.data.Dataset:
        episode = episode._replace(policy_info=complete_info(episode.policy_info, episode.action))
        windows, weights = episode_windows(episode, window_length)
        return tf.data.Dataset.from_tensor_slices({"experience": windows, "weights": weights})

    episodes = records.episode_dataset(file_pattern, observation_spec, action_spec, info_spec)
    return episodes.flat_map(to_windows)


def count_windows(file_pattern: str, window_length: int) -> tuple[int, int, int]:
    """(episodes, training rows, windows) of the split, from the discount lists alone (cheap)."""
    t = window_length

    def parse(serialized: tf.Tensor) -> tf.Tensor:
        _, seq = tf.io.parse_single_sequence_example(
            serialized, sequence_features={records.DISCOUNT: tf.io.FixedLenSequenceFeature([], tf.float32)}
        )
        discount = seq[records.DISCOUNT]
        n = tf.shape(discount)[0] - tf.cast(discount[-1] > 0.0, tf.int32)
        return tf.stack([1, n, (n + t - 1) // t])

    files = tf.data.Dataset.list_files(file_pattern, shuffle=False)
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    totals = ds.reduce(tf.zeros([3], tf.int32), lambda acc, x: acc + x).numpy()
    return int(totals[0]), int(totals[1]), int(totals[2])
