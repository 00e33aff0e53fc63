"""Slate policies: exact marginals against enumeration of every ordered slate, the enumeration's
own chain of conditionals against closed forms written out slate by slate, masks, and samplers
against their marginals and joint probabilities by chi-square."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from rlops.agents.ranking import (
    EpsilonPerSlot,
    Greedy,
    PlackettLuce,
    UniformWithoutReplacement,
    brute_force_marginals,
    brute_force_slate_probs,
    enumerate_slates,
    epsilon_rank_marginals,
)

POLICIES = {
    "plackett_luce": (PlackettLuce(0.9), 1e-7),
    "epsilon_per_slot": (EpsilonPerSlot(0.3), 1e-12),
    "uniform": (UniformWithoutReplacement(), 1e-12),
    "greedy": (Greedy(), 0.0),
}


def _scores(rng, n, k, spread):
    """n rows of scores spanning exactly `spread` logit units (min and max present)."""
    s = rng.uniform(0.0, spread, (n, k))
    s[:, 0], s[:, -1] = 0.0, spread
    return s


@pytest.mark.parametrize("name", POLICIES)
def test_marginals_equal_enumeration_for_every_small_slate_space(name):
    policy, tol = POLICIES[name]
    rng = np.random.default_rng(0)
    worst = 0.0
    for k in range(2, 10):
        for num_slots in range(1, min(k, 4) + 1):
            for spread in (0.5, 3.0, 8.0 * policy.temperature if name == "plackett_luce" else 8.0):
                scores = _scores(rng, 2, k, spread)
                exact = brute_force_marginals(policy, scores, num_slots)
                worst = max(worst, np.abs(policy.marginals(scores, num_slots) - exact).max())
    assert worst <= tol, worst


def _pl_joint(scores, slate, temperature):
    """Plackett-Luce slate probability, written out: prod_t w_{a_t} / (W - sum_{j<t} w_{a_j})."""
    w = np.exp(scores / temperature)
    prob, left = 1.0, w.sum()
    for item in slate:
        prob *= w[item] / left
        left -= w[item]
    return prob


def _epsilon_joint(scores, slate, epsilon):
    """EpsilonPerSlot slate probability: each slot (1-eps) 1{best remaining} + eps / #remaining."""
    remaining = list(range(len(scores)))
    prob = 1.0
    for item in slate:
        best = max(remaining, key=lambda j: (scores[j], -j))  # ties: lowest index
        prob *= (1 - epsilon) * (item == best) + epsilon / len(remaining)
        remaining.remove(item)
    return prob


def test_enumeration_chain_matches_closed_forms():
    rng = np.random.default_rng(1)
    scores = np.round(rng.normal(size=(1, 6)) * 2, 1)
    scores[0, 4] = scores[0, 1]  # a tie: broken by the lowest index
    slates, probs = brute_force_slate_probs(PlackettLuce(0.7), scores, 3)
    assert len(slates) == 6 * 5 * 4 and len({tuple(s) for s in slates}) == len(slates)
    np.testing.assert_allclose(probs[0], [_pl_joint(scores[0], s, 0.7) for s in slates], rtol=1e-12)
    _, probs = brute_force_slate_probs(EpsilonPerSlot(0.25), scores, 3)
    np.testing.assert_allclose(probs[0], [_epsilon_joint(scores[0], s, 0.25) for s in slates], rtol=1e-12)
    _, probs = brute_force_slate_probs(UniformWithoutReplacement(), scores, 3)
    np.testing.assert_allclose(probs[0], 1 / math.perm(6, 3), rtol=1e-12)
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-12)


def test_epsilon_rank_table_and_ties():
    # epsilon = 0 is greedy, epsilon = 1 is uniform.
    np.testing.assert_allclose(epsilon_rank_marginals(7, 3, 0.0), np.eye(7, 3), atol=1e-15)
    np.testing.assert_allclose(epsilon_rank_marginals(7, 3, 1.0), np.full((7, 3), 1 / 7), atol=1e-15)
    scores = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]])
    assert Greedy().sample(np.random.default_rng(0), scores, 3).tolist() == [[1, 2, 4]]
    marg = EpsilonPerSlot(0.2).marginals(scores, 2)
    np.testing.assert_allclose(marg, brute_force_marginals(EpsilonPerSlot(0.2), scores, 2), atol=1e-12)
    assert marg[0, 1, 0] > marg[0, 2, 0] == marg[0, 4, 0]  # item 1 wins the tie at slot 0


@pytest.mark.parametrize("name", POLICIES)
def test_masked_items_have_probability_zero_and_are_never_sampled(name):
    policy, tol = POLICIES[name]
    rng = np.random.default_rng(2)
    scores = _scores(rng, 4, 8, 5.0)
    mask = np.ones((4, 8), bool)
    mask[0, [0, 3]] = mask[1, [7]] = mask[2, [1, 2, 5, 6, 7]] = False  # row 2 keeps exactly L = 3
    marg = policy.marginals(scores, 3, mask)
    assert (marg[~mask] == 0).all()
    np.testing.assert_allclose(marg, brute_force_marginals(policy, scores, 3, mask), atol=max(tol, 1e-15))
    slates = policy.sample(rng, np.repeat(scores, 500, 0), 3, np.repeat(mask, 500, 0))
    assert np.take_along_axis(np.repeat(mask, 500, 0), slates, 1).all()
    assert (np.sort(slates, 1)[:, 1:] != np.sort(slates, 1)[:, :-1]).all()  # no item twice
    with pytest.raises(ValueError, match="slate length 4"):
        policy.marginals(scores, 4, mask)
    with pytest.raises(ValueError, match="slate length 9"):
        policy.sample(rng, scores, 9)


@pytest.mark.parametrize("name", ["plackett_luce", "epsilon_per_slot", "uniform"])
def test_sampling_frequencies_match_marginals_and_joint_probabilities(name):
    policy, _ = POLICIES[name]
    rng = np.random.default_rng(3)
    scores, draws = _scores(rng, 1, 5, 3.0), 50_000
    mask = np.array([[True, True, False, True, True]])
    slates = policy.sample(rng, np.repeat(scores, draws, 0), 2, np.repeat(mask, draws, 0))
    # Per slot: the item counts against the exact marginals (Bonferroni over the two slots).
    marg = policy.marginals(scores, 2, mask)[0]
    allowed = mask[0]
    for slot in range(2):
        counts = np.bincount(slates[:, slot], minlength=5)[allowed]
        assert stats.chisquare(counts, draws * marg[allowed, slot]).pvalue > 0.0005
    # Whole slates against their joint probabilities (prefix_probs' last column).
    space = enumerate_slates(5, 2)
    space = space[allowed[space].all(1)]
    joint = policy.prefix_probs(np.repeat(scores, len(space), 0), space, np.repeat(mask, len(space), 0))[:, -1]
    np.testing.assert_allclose(joint.sum(), 1.0, rtol=1e-12)
    index = {tuple(s): j for j, s in enumerate(space)}
    counts = np.bincount([index[tuple(s)] for s in slates], minlength=len(space))
    assert stats.chisquare(counts, draws * joint).pvalue > 0.001


@pytest.mark.parametrize("name", POLICIES)
def test_prefix_probs_are_products_of_conditionals(name):
    policy, _ = POLICIES[name]
    rng = np.random.default_rng(4)
    scores = _scores(rng, 6, 7, 4.0)
    mask = rng.random((6, 7)) < 0.8
    mask[:, :4] = True
    slates = UniformWithoutReplacement().sample(rng, scores, 4, mask)
    cond = policy.conditionals(scores, slates, mask)
    assert cond.shape == (6, 4, 7)
    np.testing.assert_allclose(cond.sum(2), 1.0, rtol=1e-12)
    for i, slot in itertools.product(range(6), range(4)):
        off = ~mask[i] | np.isin(np.arange(7), slates[i, :slot])  # masked or already shown
        assert (cond[i, slot, off] == 0).all()
        np.testing.assert_allclose(
            policy.next_item_probs(scores[i : i + 1], slates[i : i + 1, :slot], mask[i : i + 1])[0],
            cond[i, slot],
            rtol=1e-12,
        )
    prefix = policy.prefix_probs(scores, slates, mask)
    picked = cond[np.arange(6)[:, None], np.arange(4)[None, :], slates]
    np.testing.assert_allclose(prefix, np.cumprod(picked, 1), rtol=1e-12)
    # The last column is the joint probability the enumeration assigns to the slate.
    for i in range(6):
        space, probs = brute_force_slate_probs(policy, scores[i : i + 1], 4, mask[i : i + 1])
        j = int(np.flatnonzero((space == slates[i]).all(1))[0])
        np.testing.assert_allclose(prefix[i, -1], probs[0, j], rtol=1e-12, atol=1e-300)
    # A logged slate showing an item twice has probability 0 from that slot on.
    twice = np.array([[2, 1, 2, 3]])
    assert (policy.prefix_probs(scores[:1], twice, mask[:1])[0, 2:] == 0).all()


def test_plackett_luce_marginals_of_a_large_request_are_distributions():
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(3, 100)) * 2.0
    mask = rng.random((3, 100)) < 0.9
    marg = PlackettLuce(0.5).marginals(scores, 5, mask)
    np.testing.assert_allclose(marg.sum(1), 1.0, atol=1e-9)  # each slot shows one item
    assert marg.sum(2).max() <= 1.0 + 1e-9 and (marg >= 0).all()
    assert (marg[~mask] == 0).all()
    # Many items, widely spread scores: the quadrature's grid still covers every slot.
    wide = rng.normal(size=(2, 30)) * 4.0
    np.testing.assert_allclose(
        PlackettLuce().marginals(wide, 2), brute_force_marginals(PlackettLuce(), wide, 2), atol=1e-10
    )
    # Slot 0 of Plackett-Luce is the softmax over the allowed items.
    logits = np.where(mask, scores / 0.5, -np.inf)
    softmax = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(marg[:, :, 0], softmax / softmax.sum(1, keepdims=True), atol=1e-10)
