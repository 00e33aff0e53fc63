"""Ranking policies in TensorFlow: a slate of L items out of K scored candidates, with the exact
probabilities off-policy evaluation needs.

`slate_head(scores, num_slots, slate_policy, mask, seed, row_seeds, uniforms)` is the serving decision:

    slate                     [B, L] int32   item indices in display order (no item twice, none masked)
    propensity_item_position  [B, L] float32 P(the shown item at its slot): what IIPS needs
    propensity_cascade        [B, L] float32 P(the shown prefix through each slot): RIPS, Cascade-DR
    greedy_slate              [B, L] int32   the top L allowed items by score
    seed                      [B]    int64   the row seeds the draw came from (log them to replay it;
                                             absent when the caller passed `uniforms`)

`slate_policy` is one of `propensities`' numpy policies, used as the configuration:
`PlackettLuce(temperature)` (Gumbel-top-L), `EpsilonPerSlot(epsilon)`, `UniformWithoutReplacement()`
or `Greedy()`; the probabilities are `tf_propensities`' (the numpy module's math in TF).

Randomness: each row's draw is a pure function of one int64 row seed (`tf_propensities.row_uniforms`).
With no seed the row seeds come from a RandomUniformInt op whose seeds are pinned to (0, 0), so
TensorFlow seeds it from OS entropy once per process: draws are fresh on every call and independent
across processes, whatever `tf.random.set_seed` said while tracing (the contract of
`rlops.features.serving_head`). `seed` [2] (TensorFlow's stateless convention) makes the whole
batch replayable; `row_seeds` [B] makes each request replayable on its own, whatever else was in
its batch (the returned `seed` is that input when given). `uniforms` [B, n] replace the seeds
altogether: the slate is a pure function of them (`tf_propensities.numpy_sample_slates` is its
numpy twin), which is the shape of `serving_head`'s replay contract and what a LiteRT graph without
the int64 hash can feed from its builtin RANDOM_UNIFORM.

`RankingPolicy` wraps the head as a TF-Agents-style policy over per-arm observations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.agents.policies import Policy, Splitter
from rlops.agents.ranking import tf_propensities
from rlops.agents.ranking.propensities import (
    EpsilonPerSlot,
    Greedy,
    PlackettLuce,
    SlatePolicy,
    UniformWithoutReplacement,
)
from rlops.agents.trajectories import PolicyStep, TimeStep

SLATE = "slate"
PROPENSITY_ITEM_POSITION = "propensity_item_position"
PROPENSITY_CASCADE = "propensity_cascade"
GREEDY_SLATE = "greedy_slate"
SEED = "seed"


def policy_kind(slate_policy: SlatePolicy) -> tuple[str, float]:
    """(kind, parameter) of a numpy slate policy for `tf_propensities`."""
    if isinstance(slate_policy, PlackettLuce):
        return "plackett_luce", slate_policy.temperature
    if isinstance(slate_policy, EpsilonPerSlot):
        return "epsilon_per_slot", slate_policy.epsilon
    if isinstance(slate_policy, UniformWithoutReplacement):
        return "uniform", 1.0
    if isinstance(slate_policy, Greedy):
        return "greedy", 0.0
    raise ValueError(
        f"slate_policy must be PlackettLuce, EpsilonPerSlot, UniformWithoutReplacement or Greedy; got {slate_policy!r}"
    )


def fresh_row_seeds(batch: tf.Tensor) -> tf.Tensor:
    """[batch] int64 seeds from OS entropy (op seeds pinned to (0, 0): see the module docstring)."""
    return tf.raw_ops.RandomUniformInt(
        shape=tf.reshape(tf.cast(batch, tf.int32), [1]),
        minval=tf.constant(0, tf.int64),
        maxval=tf.constant(np.iinfo(np.int64).max, tf.int64),
        seed=0,
        seed2=0,
    )


def resolve_row_seeds(batch: tf.Tensor, seed: Any = None, row_seeds: Any = None) -> tf.Tensor:
    """[batch] int64 row seeds: `row_seeds` as given, else derived from the stateless `seed` [2]
    (a Python int s means [s, 0]), else fresh."""
    if row_seeds is not None:
        if seed is not None:
            raise ValueError("give `seed` (one [2] seed for the batch) or `row_seeds` ([B], one per row), not both")
        return tf.reshape(tf.cast(row_seeds, tf.int64), [-1])
    if seed is None:
        return fresh_row_seeds(batch)
    if isinstance(seed, (int, np.integer)):
        seed = [int(seed), 0]
    seed = tf.cast(seed, tf.int64)
    if seed.shape.rank != 1 or seed.shape[0] != 2:
        raise ValueError(f"seed must be a stateless seed of shape [2] (row seeds go in `row_seeds`); got {seed.shape}")
    return tf.random.stateless_uniform(tf.reshape(batch, [1]), seed, minval=None, maxval=None, dtype=tf.int64)


def slate_head(
    scores: tf.Tensor,
    num_slots: int,
    slate_policy: SlatePolicy,
    mask: tf.Tensor | None = None,
    seed: Any = None,
    row_seeds: tf.Tensor | None = None,
    uniforms: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """The served slate for scores [B, K] (see the module docstring); `mask` [B, K] (1 = allowed).
    `uniforms` [B, tf_propensities.num_uniforms(...)] in (0, 1), when given, are the draw's
    randomness (replay, or a LiteRT graph's RANDOM_UNIFORM); the outputs then have no `seed`.
    A request with fewer than `num_slots` allowed candidates fails with an error naming the slate
    length."""
    kind, parameter = policy_kind(slate_policy)
    scores = tf.convert_to_tensor(scores)
    allowed = tf.ones(tf.shape(scores), tf.bool) if mask is None else tf.cast(mask, tf.bool)
    allowed = tf_propensities.check_allowed(allowed, num_slots)
    extra: dict[str, tf.Tensor] = {}
    if uniforms is None:
        row = resolve_row_seeds(tf.shape(scores)[0], seed, row_seeds)
        count = tf_propensities.num_uniforms(kind, tf.shape(scores)[1], num_slots)
        uniforms, extra = tf_propensities.row_uniforms(row, count), {SEED: row}
    elif seed is not None or row_seeds is not None:
        raise ValueError("give `uniforms` or a seed (`seed` / `row_seeds`), not both")
    checked = {"check": False}  # check_allowed ran above
    slate = tf_propensities.sample_slates(kind, scores, allowed, num_slots, uniforms, parameter, **checked)
    greedy = (
        slate
        if kind == "greedy"
        else tf_propensities.sample_slates("greedy", scores, allowed, num_slots, None, **checked)
    )
    step = getattr(slate_policy, "quadrature_step", tf_propensities.QUADRATURE_STEP)  # PL: the policy's grid
    marginals = tf_propensities.slate_marginals(kind, scores, allowed, num_slots, parameter, step, **checked)
    at_slot = tf.gather(tf.transpose(marginals, [0, 2, 1]), slate[..., None], axis=2, batch_dims=2)[..., 0]
    cascade = tf_propensities.slate_prefix_probs(kind, scores, allowed, slate, parameter)
    return {
        SLATE: slate,
        PROPENSITY_ITEM_POSITION: tf.cast(at_slot, tf.float32),
        PROPENSITY_CASCADE: tf.cast(cascade, tf.float32),
        GREEDY_SLATE: greedy,
        **extra,
    }


class RankingPolicy(Policy):
    """Scores the K candidates of a per-arm observation ({'global': [B, Dg], 'per_arm': [B, K, Da],
    optional 'num_actions': [B]}) with `scoring_network` and serves a slate drawn by `slate_policy`.

    action: [B, L] item indices (the action spec's dtype; shape [L], bounds [0, K - 1]).
    info: `predicted_rewards_mean` [B, K] (the scores), `propensity_item_position` [B, L] and
    `propensity_cascade` [B, L]. Candidates at index >= num_actions and those masked by the
    splitter's mask are never shown. `action(time_step, seed=...)` takes a stateless seed [2]
    (replayable draws); without one draws are fresh on every call.
    """

    def __init__(
        self,
        time_step_spec: TimeStep,
        action_spec: tf.TensorSpec,
        scoring_network: Any,
        slate_policy: SlatePolicy | None = None,
        observation_and_action_constraint_splitter: Splitter | None = None,
        name: str | None = None,
    ):
        self.slate_policy = Greedy() if slate_policy is None else slate_policy
        policy_kind(self.slate_policy)
        self.num_slots, self.num_items = check_ranking_specs(
            time_step_spec, action_spec, observation_and_action_constraint_splitter
        )
        info_spec = {
            utils.PREDICTED_REWARDS_MEAN: tf.TensorSpec([self.num_items], tf.float32, utils.PREDICTED_REWARDS_MEAN),
            PROPENSITY_ITEM_POSITION: tf.TensorSpec([self.num_slots], tf.float32, PROPENSITY_ITEM_POSITION),
            PROPENSITY_CASCADE: tf.TensorSpec([self.num_slots], tf.float32, PROPENSITY_CASCADE),
        }
        super().__init__(time_step_spec, action_spec, info_spec, observation_and_action_constraint_splitter, name=name)
        self.scoring_network = scoring_network

    def scores(self, observation: Any) -> tuple[tf.Tensor, tf.Tensor | None]:
        """[B, K] scores and the [B, K] mask of allowed candidates (None: all)."""
        obs, mask = self._split(observation)
        mask = utils.combine_masks(mask, utils.num_actions_mask(obs, self.num_items))
        obs = {k: v for k, v in obs.items() if k != utils.NUM_ACTIONS_FEATURE_KEY}
        return tf.cast(self.scoring_network(obs), tf.float32), mask

    def _action(self, time_step: TimeStep, seed: Any) -> PolicyStep:
        scores, mask = self.scores(time_step.observation)
        out = slate_head(scores, self.num_slots, self.slate_policy, mask, seed=seed)
        info = {
            utils.PREDICTED_REWARDS_MEAN: scores,
            PROPENSITY_ITEM_POSITION: out[PROPENSITY_ITEM_POSITION],
            PROPENSITY_CASCADE: out[PROPENSITY_CASCADE],
        }
        return PolicyStep(tf.cast(out[SLATE], self.action_spec.dtype), (), info)


def check_ranking_specs(
    time_step_spec: TimeStep, action_spec: Any, splitter: Splitter | None = None
) -> tuple[int, int]:
    """(L, K) from a slate action spec (shape [L], integer, bounds [0, K - 1]) and a per-arm
    observation spec ('per_arm' [K, Da]); a one-line ValueError otherwise."""
    obs_spec = time_step_spec.observation
    if splitter is not None:
        obs_spec, _ = splitter(obs_spec)
    if (
        not isinstance(obs_spec, dict)
        or utils.PER_ARM_FEATURE_KEY not in obs_spec
        or utils.GLOBAL_FEATURE_KEY not in obs_spec
    ):
        raise ValueError(
            f"ranking needs a per-arm observation spec {{'{utils.GLOBAL_FEATURE_KEY}': [Dg], "
            f"'{utils.PER_ARM_FEATURE_KEY}': [K, Da]}}; got {obs_spec}"
        )
    num_items = obs_spec[utils.PER_ARM_FEATURE_KEY].shape[0]
    if action_spec.shape.rank != 1 or not action_spec.dtype.is_integer:
        raise ValueError(f"ranking action spec must be an integer vector of shape [num_slots]; got {action_spec}")
    num_slots = int(action_spec.shape[0])
    if num_items is None or num_slots > int(num_items):
        raise ValueError(f"slate length {num_slots} needs at least {num_slots} candidates; the spec has {num_items}")
    maximum = int(np.max(getattr(action_spec, "maximum", num_items - 1)))
    minimum = int(np.min(getattr(action_spec, "minimum", 0)))
    if minimum != 0 or maximum != int(num_items) - 1:
        raise ValueError(
            f"ranking action spec bounds must be [0, {int(num_items) - 1}] (item indices); got [{minimum}, {maximum}]"
        )
    return num_slots, int(num_items)
