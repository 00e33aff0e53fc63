"""Policies: map a TimeStep to a PolicyStep(action, state, info).

All policies here are stateless (state `()`) and batched. Action masks come from an optional
`observation_and_action_constraint_splitter(observation) -> (observation, mask)`, where mask is
[B, num_actions] with 1 for allowed actions; masked actions are never chosen.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from rlops.agents import specs
from rlops.agents.trajectories import PolicyStep, TimeStep
from rlops.heads.epsilon_greedy import (
    allowed_count_tf,
    collect_draw,
    sample_masked_uniform,
    uniform_propensity_tf,
)

Splitter = Callable[[Any], tuple[Any, tf.Tensor]]


class Policy(tf.Module):
    """Base class. Subclasses implement `_action` (and `_distribution_params` when they have one)."""

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        info_spec: Any = (),
        observation_and_action_constraint_splitter: Splitter | None = None,
        name: str | None = None,
    ):
        super().__init__(name=name)
        # Specs are plain nests, not trackable state: keep tf.Module from wrapping them
        # (its _DictWrapper/_TupleWrapper would leak into saved spec files and comparisons).
        self.time_step_spec = self._no_dependency(time_step_spec)
        self.action_spec = self._no_dependency(action_spec)
        self.info_spec = self._no_dependency(info_spec)
        self.policy_state_spec = ()
        self.observation_and_action_constraint_splitter = observation_and_action_constraint_splitter

    def action(self, time_step: TimeStep, policy_state: Any = (), seed: Any = None) -> PolicyStep:
        return self._action(time_step, seed)

    def get_initial_state(self, batch_size: int | None = None) -> Any:
        return ()

    def _split(self, observation: Any) -> tuple[Any, tf.Tensor | None]:
        if self.observation_and_action_constraint_splitter is None:
            return observation, None
        obs, mask = self.observation_and_action_constraint_splitter(observation)
        return obs, mask

    def _batch_size(self, time_step: TimeStep) -> tf.Tensor:
        return tf.shape(time_step.step_type)[0]

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        raise NotImplementedError


class RandomPolicy(Policy):
    """Uniform over the action spec (over allowed actions under a mask); info holds the
    propensity of the chosen action, so logged data carries what off-policy evaluation needs."""

    def __init__(self, time_step_spec: TimeStep, action_spec: tf.TensorSpec, **kwargs: Any):
        super().__init__(
            time_step_spec, action_spec, info_spec={"propensity": tf.TensorSpec((), tf.float32, "propensity")}, **kwargs
        )

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        obs, mask = self._split(time_step.observation)
        batch = self._batch_size(time_step)
        spec = self.action_spec
        if specs.is_discrete(spec):
            n = specs.num_actions(spec)
            action = sample_masked_uniform(mask, batch, n, tf.int32, seed)
            action = tf.cast(action + int(spec.minimum), spec.dtype)
            return PolicyStep(action, (), {"propensity": uniform_propensity_tf(allowed_count_tf(mask, batch, n))})
        shape = tf.concat([[batch], spec.shape], 0)
        action = tf.random.uniform(shape, spec.minimum, spec.maximum, dtype=spec.dtype)
        return PolicyStep(action, (), {"propensity": tf.ones([batch], tf.float32)})


class ActorPolicy(Policy):
    """Samples from an ActorNetwork's distribution (the PPO collect policy).

    policy_info holds the distribution parameters and the action's log-probability, so the
    learner can rebuild the old distribution (ratios, KL) without re-running the old network.
    """

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        actor_network: Any,
        observation_normalizer: Any = None,
        clip_actions: bool = True,
        **kwargs: Any,
    ):
        info_spec = {
            "dist_params": actor_network.params_spec(),
            "log_probability": tf.TensorSpec((), tf.float32, "log_probability"),
        }
        super().__init__(time_step_spec, action_spec, info_spec=info_spec, **kwargs)
        self.actor_network = actor_network
        self.observation_normalizer = observation_normalizer
        self.clip_actions = clip_actions

    def distribution_params(self, time_step: TimeStep) -> dict[str, Any]:
        obs, mask = self._split(time_step.observation)
        if self.observation_normalizer is not None:
            obs = self.observation_normalizer.normalize(obs)
        return self.actor_network.distribution_params(obs, mask)

    def distribution(self, time_step: TimeStep) -> Any:
        return self.actor_network.distribution(self.distribution_params(time_step))

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        params = self.distribution_params(time_step)
        dist = self.actor_network.distribution(params)
        index = dist.sample(seed=seed)
        log_prob = dist.log_prob(index)
        return PolicyStep(
            self._clip(self.index_to_action(index)), (), {"dist_params": params, "log_probability": log_prob}
        )

    def index_to_action(self, index: tf.Tensor) -> tf.Tensor:
        """Discrete distributions are over 0..n-1; the spec's actions start at its minimum
        (Gym's Discrete(start=...))."""
        spec = self.action_spec
        if specs.is_discrete(spec) and int(np.min(spec.minimum)) != 0:
            return index + tf.cast(int(np.min(spec.minimum)), index.dtype)
        return index

    def numpy_sampler(
        self, seed: int | None = None
    ) -> Callable[[np.ndarray[Any, Any]], tuple[np.ndarray[Any, Any], dict[str, Any]]]:
        """Snapshot of this policy as a numpy function observation -> (action, info), for
        collectors that act thousands of times between weight updates. Same distribution and
        info as `action` (tested against it); no action masks. Raises ValueError where the
        network has no numpy twin."""
        if self.observation_and_action_constraint_splitter is not None:
            raise ValueError("numpy_sampler does not support action masks")
        net = self.actor_network
        forward = net.mlp.numpy_forward()
        normalize = self.observation_normalizer.numpy_normalize() if self.observation_normalizer else None
        rng = np.random.default_rng(seed)
        action_dtype = self.action_spec.dtype.as_numpy_dtype
        if not net.discrete:
            log_std = net.log_std.numpy().reshape(self.action_spec.shape)
            scale = np.exp(log_std).astype(np.float32)

        def sample(observation: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
            x = observation.reshape(observation.shape[0], -1).astype(np.float32)
            if normalize is not None:
                x = normalize(x).astype(np.float32)
            out = forward(x)
            if net.discrete:
                z = out - out.max(-1, keepdims=True)
                log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
                gumbel = -np.log(-np.log(rng.uniform(size=out.shape)))
                action = np.argmax(log_p + gumbel, -1)
                log_prob = np.take_along_axis(log_p, action[:, None], -1)[:, 0]
                return (action + int(self.action_spec.minimum)).astype(action_dtype), {
                    "dist_params": {"logits": out.astype(np.float32)},
                    "log_probability": log_prob.astype(np.float32),
                }
            loc = out.reshape((-1,) + tuple(self.action_spec.shape))
            eps = rng.standard_normal(loc.shape)
            action = loc + scale * eps
            axes = tuple(range(1, loc.ndim))
            log_prob = (-0.5 * eps**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(axes)
            return action.astype(action_dtype), {
                "dist_params": {"loc": loc.astype(np.float32), "scale": np.broadcast_to(scale, loc.shape).copy()},
                "log_probability": log_prob.astype(np.float32),
            }

        return sample

    def _clip(self, action: tf.Tensor) -> tf.Tensor:
        spec = self.action_spec
        if self.clip_actions and specs.is_bounded(spec) and not specs.is_discrete(spec):
            return tf.clip_by_value(action, spec.minimum, spec.maximum)
        return action


class GreedyPolicy(Policy):
    """The mode of a wrapped policy's distribution (argmax for discrete, mean for continuous)."""

    def __init__(self, policy: ActorPolicy, name: str | None = None):
        super().__init__(
            policy.time_step_spec, policy.action_spec, (), policy.observation_and_action_constraint_splitter, name=name
        )
        self.wrapped_policy = policy

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        dist = self.wrapped_policy.distribution(time_step)
        mode = self.wrapped_policy.index_to_action(dist.mode())
        return PolicyStep(self.wrapped_policy._clip(mode), (), ())


class EpsilonGreedyPolicy(Policy):
    """With probability epsilon a uniform (allowed) action, otherwise the greedy policy's action.

    `info["propensity"]` is the probability this policy gave the chosen action, which makes data
    it logs usable for off-policy evaluation.
    """

    def __init__(self, greedy_policy: Policy, epsilon: float | Callable[[], float], name: str | None = None):
        info_spec = {"propensity": tf.TensorSpec((), tf.float32, "propensity")}
        if tf.nest.flatten(greedy_policy.info_spec):  # e.g. predicted rewards, passed through
            info_spec["greedy_info"] = greedy_policy.info_spec
        super().__init__(
            greedy_policy.time_step_spec,
            greedy_policy.action_spec,
            info_spec,
            greedy_policy.observation_and_action_constraint_splitter,
            name=name,
        )
        self.greedy_policy = greedy_policy
        self.epsilon = epsilon

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        greedy = self.greedy_policy.action(time_step)
        _, mask = self._split(time_step.observation)
        n = specs.num_actions(self.action_spec)
        epsilon = self.epsilon() if callable(self.epsilon) else self.epsilon
        # the bandit head's rule (rlops.heads.epsilon_greedy), drawn from TF's seeded stream
        action, propensity, _ = collect_draw(greedy.action, n, epsilon, mask, self.action_spec.dtype)
        info = {"propensity": propensity}
        if "greedy_info" in self.info_spec:
            info["greedy_info"] = greedy.info
        return PolicyStep(action, (), info)
