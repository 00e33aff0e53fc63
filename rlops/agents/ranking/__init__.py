"""Slate (ranking) policies with exact propensities: which ordered list of L items out of K a
policy shows, and with what probability each item lands at each slot (the slate head,
rlops.heads.slate: numpy `probabilities`, TensorFlow `tf_probabilities` and `head`), the
RankingPolicy that serves it, and the RankingAgent that learns the scores."""

from typing import TYPE_CHECKING

from rlops.heads.slate.probabilities import (
    EpsilonPerSlot,
    Greedy,
    PlackettLuce,
    SlatePolicy,
    UniformWithoutReplacement,
    brute_force_marginals,
    brute_force_slate_probs,
    check_inputs,
    enumerate_slates,
    epsilon_rank_marginals,
)

if TYPE_CHECKING:
    from rlops.agents.ranking.ranking_agent import (
        CHOSEN_INDEX,
        CHOSEN_VALUE,
        FeedbackModel,
        PositionalBiasType,
        RankingAgent,
        RankingPolicyType,
        cascading_feedback,
        compute_score_tensor_for_cascading,
        order_items_from_action,
    )
    from rlops.agents.ranking.ranking_policy import RankingPolicy
    from rlops.heads.slate.head import slate_head

# The TensorFlow side loads on first use: `probabilities` users (the slate generator, the evaluator's
# workers) do not pay for importing TensorFlow.
_LAZY = {
    **dict.fromkeys(
        (
            "RankingAgent",
            "RankingPolicyType",
            "FeedbackModel",
            "PositionalBiasType",
            "CHOSEN_INDEX",
            "CHOSEN_VALUE",
            "compute_score_tensor_for_cascading",
            "cascading_feedback",
            "order_items_from_action",
        ),
        "rlops.agents.ranking.ranking_agent",
    ),
    "RankingPolicy": "rlops.agents.ranking.ranking_policy",
    "slate_head": "rlops.heads.slate.head",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SlatePolicy",
    "PlackettLuce",
    "EpsilonPerSlot",
    "UniformWithoutReplacement",
    "Greedy",
    "epsilon_rank_marginals",
    "check_inputs",
    "enumerate_slates",
    "brute_force_slate_probs",
    "brute_force_marginals",
    "RankingAgent",
    "RankingPolicyType",
    "FeedbackModel",
    "PositionalBiasType",
    "CHOSEN_INDEX",
    "CHOSEN_VALUE",
    "compute_score_tensor_for_cascading",
    "cascading_feedback",
    "order_items_from_action",
    "RankingPolicy",
    "slate_head",
]
