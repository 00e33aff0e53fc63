"""Slate (ranking) policies with exact propensities: which ordered list of L items out of K a
policy shows, and with what probability each item lands at each slot."""

from rlops.agents.ranking.propensities import (
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
]
