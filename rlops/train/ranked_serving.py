"""`serving_ranked`: the slate serving signatures PolicySaver adds when the exported policy ranks
(a `RankingPolicy`, bare or wrapped with its feature preprocessing, e.g. `PerArmFeaturePolicy`).

Inputs (one per raw feature, named as `serving_default` names them; rlops.features.serving_names):

    <global feature>    [B] or [B, W]   raw global features (strings included), or `global` [B, Dg]
    per_arm_<name>      [B, K]          each candidate's item feature, or `per_arm` [B, K, Da]
    num_actions         [B] int64       candidates in use (slots >= num_actions are padding)

Signatures (a signature cannot have optional inputs, so the mask is a second signature, as
`serving_masked` is for one item):

    serving_ranked          the inputs above
    serving_ranked_masked   ... plus `action_mask` [B, K] int64 (1 = may be shown); the same as
                            serving_ranked for a policy whose observation already holds a mask
    serving_ranked_replay   ... plus `action_mask` [B, K] and `row_seeds` [B] int64: the decision
                            serving_ranked(_masked) returned with `seed` = row_seeds, exactly

Outputs (every signature):

    slate                     [B, L] int32    candidate indices in display order (none twice, none masked)
    propensity_item_position  [B, L] float32  P(the shown item at its slot), exact (IIPS)
    propensity_cascade        [B, L] float32  P(the shown prefix through each slot), exact (RIPS)
    greedy_slate              [B, L] int32    the top L allowed candidates by score
    scores                    [B, K] float32  the scoring network's scores
    seed                      [B] int64       the row seed each draw came from (log it to replay)
    policy_version            [B] int64       as serving_default's (the Pusher's asset; -1 unpublished)

Randomness is the ranking head's (rlops.heads.slate.head.slate_head): fresh row seeds
from a RandomUniformInt whose op seeds are pinned to (0, 0), so draws are fresh on every call and
independent across processes. A request with fewer than L allowed candidates is an error, not a
padded slate: the call fails (InvalidArgumentError) with "slate length L needs at least L allowed
candidates per request; request i has n" -- a padded slot would carry no propensity an estimator
could use.

`ranked_scores` (a function of the SavedModel, not a signature) is serving_ranked_masked up to
its `scores` and the `allowed` [B, K] mask: the LiteRT twin's converter (rlops.train.litert_ranked)
puts its own float32 head on it.

`get_metadata` gains constants (they describe the graph, so no checkpoint can change them):
`num_slots`, `num_candidates`, `slate_policy` ('plackett_luce', 'epsilon_per_slot', 'uniform',
'greedy'), `temperature` and `quadrature_step` (PL) or `epsilon`, and `propensity_method`.
"""

from __future__ import annotations

import keyword
from typing import Any, Callable, Mapping

import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.agents.ranking.ranking_policy import RankingPolicy
from rlops.features.serving_names import NUM_ACTIONS, serving_input_name
from rlops.heads.slate import head as slate, tf_probabilities

SERVING_RANKED = "serving_ranked"
SERVING_RANKED_MASKED = "serving_ranked_masked"
SERVING_RANKED_REPLAY = "serving_ranked_replay"
SIGNATURES = (SERVING_RANKED, SERVING_RANKED_MASKED, SERVING_RANKED_REPLAY)
ACTION_MASK = "action_mask"
ROW_SEEDS = "row_seeds"
SCORES = "scores"
ALLOWED = "allowed"
RANKED_SCORES = "ranked_scores"  # the module function LiteRT converts (rlops.train.litert_ranked)
OUTPUTS = (
    slate.SLATE,
    slate.PROPENSITY_ITEM_POSITION,
    slate.PROPENSITY_CASCADE,
    slate.GREEDY_SLATE,
    SCORES,
    slate.SEED,
)

# metadata keys
NUM_SLOTS = "num_slots"
NUM_CANDIDATES = "num_candidates"
SLATE_POLICY = "slate_policy"
TEMPERATURE = "temperature"
QUADRATURE_STEP = "quadrature_step"
EPSILON = "epsilon"
PROPENSITY_METHOD = "propensity_method"
PROPENSITY_METHODS = {
    "plackett_luce": "quadrature over the exponential race (log-time trapezoid, Poisson-binomial)",
    "epsilon_per_slot": "dynamic program over (greedy items taken, other items taken)",
    "uniform": "closed form 1 / allowed candidates",
    "greedy": "deterministic (1 for the top L)",
}


def find_ranking(policy: Any) -> tuple[RankingPolicy, Any] | None:
    """(the RankingPolicy, its preprocessor or None) when `policy` ranks: a RankingPolicy, or a
    feature policy (`wrapped_policy` + `preprocessor`, rlops.features.export) around one."""
    if isinstance(policy, RankingPolicy):
        return policy, None
    inner = getattr(policy, "wrapped_policy", None)
    if isinstance(inner, RankingPolicy):
        return inner, policy.preprocessor
    return None


def ranked_metadata(ranking: RankingPolicy) -> dict[str, tf.Tensor]:
    """The constants `get_metadata` adds for a ranking export (see the module docstring)."""
    kind, parameter = slate.policy_kind(ranking.slate_policy)
    out = {
        NUM_SLOTS: tf.constant(ranking.num_slots, tf.int64),
        NUM_CANDIDATES: tf.constant(ranking.num_items, tf.int64),
        SLATE_POLICY: tf.constant(kind),
        PROPENSITY_METHOD: tf.constant(PROPENSITY_METHODS[kind]),
    }
    if kind == "plackett_luce":
        out[TEMPERATURE] = tf.constant(parameter, tf.float64)
        step = getattr(ranking.slate_policy, "quadrature_step", tf_probabilities.QUADRATURE_STEP)  # as slate_head
        out[QUADRATURE_STEP] = tf.constant(step, tf.float64)
    elif kind == "epsilon_per_slot":
        out[EPSILON] = tf.constant(parameter, tf.float64)
    return out


def ranked_input_name(key: str) -> str:
    """A serving input's name: serving_input_name's, and `arg_` before a Python keyword (`global`,
    a per-arm observation's key), which current TensorFlow refuses as a parameter name."""
    name = serving_input_name(key)
    return "arg_" + name if keyword.iskeyword(name) else name


def ranked_functions(
    module: tf.Module,
    policy: Any,
    batch_size: int | None,
    before_trace: Callable[[], None],
    with_version: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]],
) -> dict[str, Any]:
    """The three signatures' concrete functions for `policy` (find_ranking must accept it), and
    `module.ranked_scores` (RANKED_SCORES). `before_trace` runs first while each traces
    (PolicySaver's unseeded graph); `with_version` adds `policy_version`."""
    found = find_ranking(policy)
    if found is None:
        raise ValueError(f"serving_ranked needs a RankingPolicy (or a feature policy around one); got {policy!r}")
    ranking, preprocessor = found
    metadata = getattr(module, "metadata", {})
    clash = sorted(set(ranked_metadata(ranking)) & set(metadata))
    if clash:
        raise ValueError(f"metadata {clash} would hide the ranking export's own metadata of that name; rename it")
    obs_spec = policy.time_step_spec.observation
    if not isinstance(obs_spec, Mapping):
        raise ValueError(f"serving_ranked needs named observation features; got {obs_spec}")
    key_of = {ranked_input_name(k): k for k in obs_spec}
    inputs = {
        n: tf.TensorSpec([batch_size] + obs_spec[k].shape.as_list(), obs_spec[k].dtype, name=n)
        for n, k in key_of.items()
    }
    if NUM_ACTIONS not in inputs:  # always an input: a server fills K slots with fewer candidates
        inputs[NUM_ACTIONS] = tf.TensorSpec([batch_size], tf.int64, name=NUM_ACTIONS)
    num_items = ranking.num_items

    def decide(features: dict, mask: tf.Tensor | None, row_seeds: tf.Tensor | None = None) -> dict:
        before_trace()
        observation = {key_of.get(n, n): v for n, v in features.items()}
        if preprocessor is not None:
            observation = preprocessor(observation)
        scores, allowed = ranking.scores(observation)  # the policy's own mask and num_actions
        allowed = utils.combine_masks(allowed, mask)
        out = slate.slate_head(scores, ranking.num_slots, ranking.slate_policy, allowed, row_seeds=row_seeds)
        return with_version({**out, SCORES: scores})

    def replay(**features: tf.Tensor) -> dict:
        # keyword inputs only: every input is then listed by structured_input_signature[1]
        mask = None if ACTION_MASK in key_of else features.pop(ACTION_MASK)
        return decide(features, mask, features.pop(ROW_SEEDS))

    masked_inputs = dict(inputs)
    if ACTION_MASK not in inputs:  # else the policy's observation already holds the mask
        masked_inputs[ACTION_MASK] = tf.TensorSpec([batch_size, num_items], tf.int64, name=ACTION_MASK)
    replay_inputs = {**masked_inputs, ROW_SEEDS: tf.TensorSpec([batch_size], tf.int64, name=ROW_SEEDS)}
    # One trace of the scoring, the draw and the exact marginals, which all three signatures call:
    # serving_ranked and _masked are serving_ranked_replay with fresh row seeds (unmasked: with a
    # mask allowing every candidate, as no mask does). Signatures only: a module attribute would be
    # traced again when saved (a second copy).
    shared = tf.function(replay, autograph=False)

    def fresh(**features: tf.Tensor) -> dict:
        before_trace()  # the seeds' random op is in this graph
        batch = tf.shape(next(iter(features.values())))[0]
        if ACTION_MASK not in features:
            features[ACTION_MASK] = tf.ones(tf.stack([batch, num_items]), tf.int64)
        return shared(**features, **{ROW_SEEDS: slate.resolve_row_seeds(batch)})

    function = tf.function(fresh, autograph=False)

    def scores_and_allowed(**features: tf.Tensor) -> dict:
        # serving_ranked_masked up to its scores: what the LiteRT twin wraps in its float32 head
        # (rlops.train.litert_ranked), since LiteRT has neither float64 nor the row-seed hash.
        before_trace()
        mask = None if ACTION_MASK in key_of else features.pop(ACTION_MASK)
        observation = {key_of.get(n, n): v for n, v in features.items()}
        if preprocessor is not None:
            observation = preprocessor(observation)
        scores, allowed = ranking.scores(observation)
        allowed = utils.combine_masks(allowed, mask)
        allowed = tf.ones(tf.shape(scores), tf.bool) if allowed is None else tf.cast(allowed, tf.bool)
        return {SCORES: scores, ALLOWED: allowed}

    module.ranked_scores = tf.function(scores_and_allowed, autograph=False)
    module.ranked_scores.get_concrete_function(**masked_inputs)
    return {
        SERVING_RANKED: function.get_concrete_function(**inputs),
        SERVING_RANKED_MASKED: function.get_concrete_function(**masked_inputs),
        SERVING_RANKED_REPLAY: shared.get_concrete_function(**replay_inputs),
    }


__all__ = [
    "SERVING_RANKED",
    "SERVING_RANKED_MASKED",
    "SERVING_RANKED_REPLAY",
    "SIGNATURES",
    "OUTPUTS",
    "find_ranking",
    "ranked_metadata",
    "ranked_functions",
]
