"""The slate head's verifier: pages drawn by a served ranking policy (a SavedModel's
`serving_ranked`, or its LiteRT twin) held to the exact numpy probabilities
(rlops.heads.slate.probabilities) on the scores the model returned:

- every slate shows allowed candidates only, none twice; `greedy_slate` and `scores` are the same
  on every call and in every process, and `greedy_slate` is the top L by score;
- the reported `propensity_item_position` is the exact marginal of the shown item at its slot and
  `propensity_cascade` the exact prefix probability (PROPENSITY_TOLERANCE; CASCADE_RTOL relative);
- per slot, the items' frequencies match the exact marginals (Pearson chi-square, cells expecting
  fewer than 5 pooled, Bonferroni over the L slots);
- draws repeat no more often than independent draws do, between calls in a process and between
  processes at the same call (per slot, Bonferroni over the slots).

Each statistical test fails at rlops.heads.draws.SIGNIFICANCE and returns a ChanceFailure (the
caller confirms it on fresh draws). numpy only: rlops.train.verify_ranked and
rlops.train.litert_ranked run the processes and call `draws_error`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlops.heads.draws import PROPENSITY_TOLERANCE, SIGNIFICANCE, ChanceFailure, pearson_pvalue, repeat_pvalue
from rlops.heads.slate import probabilities as props

CASCADE_RTOL = 1e-5  # float32 outputs: prefix probabilities reach 1e-9 and below


def policy_from_metadata(metadata: Mapping[str, Any]) -> props.SlatePolicy:
    """The numpy slate policy a ranking export's `get_metadata` describes."""
    kind = metadata.get("slate_policy")
    if kind == "plackett_luce":
        return props.PlackettLuce(float(metadata["temperature"]), float(metadata["quadrature_step"]))
    if kind == "epsilon_per_slot":
        return props.EpsilonPerSlot(float(metadata["epsilon"]))
    if kind == "uniform":
        return props.UniformWithoutReplacement()
    if kind == "greedy":
        return props.Greedy()
    raise ValueError(f"get_metadata names no slate policy this check knows: slate_policy={kind!r}")


def draws_error(
    draws: Sequence[Mapping[str, np.ndarray]],
    policy: props.SlatePolicy,
    num_slots: int,
    allowed_of: Callable[[int, int], np.ndarray],
    name: str,
) -> str | None:
    """`draws`: one process's outputs each (`one_<output>` [calls, 1, ...] at batch 1, `many_<output>`
    [calls, B, ...] at batch B; outputs slate, propensity_item_position, propensity_cascade,
    greedy_slate, scores), served by `policy` with `num_slots` slots; `allowed_of(batch, K)` the
    rows' allowed candidates [batch, K]; `name` the artifact, for the messages. The first failed
    check (see the module docstring), or None."""
    for part in ("one", "many"):
        scores = np.asarray(draws[0][f"{part}_scores"][0], np.float64)  # [B, K]
        batch, k = scores.shape
        what = f"{name} at batch {batch}"
        for i, d in enumerate(draws):
            if np.abs(d[f"{part}_scores"] - scores[None]).max() > 1e-5 * max(1.0, np.abs(scores).max()):
                return f"{what}: scores change from call to call or between processes (process {i})"
        allowed = allowed_of(batch, k)
        greedy = _greedy(scores, allowed, num_slots)
        if any((d[f"{part}_greedy_slate"] != greedy[None]).any() for d in draws):
            return f"{what}: greedy_slate is not the top {num_slots} allowed candidates by score on every call"
        marginals = policy.marginals(scores, num_slots, allowed)  # [B, K, L]
        slates = []
        for i, d in enumerate(draws):
            slate = d[f"{part}_slate"].astype(np.int64)  # [C, B, L]
            error = _slate_error(slate, allowed, f"{what}, process {i}")
            error = error or _propensity_error(
                policy, scores, allowed, slate, d, part, marginals, f"{what}, process {i}"
            )
            if error:
                return error
            slates.append(slate)
        p = slot_frequency_pvalue(np.concatenate(slates), marginals)
        if p < SIGNIFICANCE:
            return ChanceFailure(
                f"{what}: the items' frequencies at some slot do not match the reported marginals "
                f"(chi-square, Bonferroni p={p:.2g})"
            )
        for i, s in enumerate(slates):
            half = len(s) // 2
            p = slot_repeat_pvalue(s[0::2][:half], s[1::2][:half], marginals)
            if p < SIGNIFICANCE:
                return ChanceFailure(f"{what}: process {i} repeats its slates from call to call (p={p:.2g})")
        for i in range(1, len(slates)):
            m = min(len(slates[0]), len(slates[i]))
            p = slot_repeat_pvalue(slates[0][:m], slates[i][:m], marginals)
            if p < SIGNIFICANCE:
                return ChanceFailure(f"{what}: two fresh processes draw the same slates (p={p:.2g})")
    return None


def _greedy(scores: np.ndarray, allowed: np.ndarray, num_slots: int) -> np.ndarray:
    return props.Greedy().sample(np.random.default_rng(0), scores, num_slots, allowed)


def _slate_error(slate: np.ndarray, allowed: np.ndarray, what: str) -> str | None:
    """An item outside the candidates, a masked one, or one shown twice in a slate."""
    k = allowed.shape[1]
    outside = (slate < 0) | (slate >= k)
    if outside.any():
        call, row, slot = np.argwhere(outside)[0]
        return f"{what}: call {call} row {row} slot {slot} shows item {slate[call, row, slot]}, not a candidate index"
    rows = np.arange(slate.shape[1])[None, :, None]
    masked = ~allowed[rows, slate]
    if masked.any():
        call, row, slot = np.argwhere(masked)[0]
        return f"{what}: call {call} row {row} slot {slot} shows item {slate[call, row, slot]}, which is masked"
    ordered = np.sort(slate, axis=-1)
    twice = (ordered[..., 1:] == ordered[..., :-1]).any(-1)
    if twice.any():
        call, row = np.argwhere(twice)[0]
        return f"{what}: call {call} row {row} shows an item twice: {slate[call, row].tolist()}"
    return None


def _propensity_error(
    policy: Any,
    scores: np.ndarray,
    allowed: np.ndarray,
    slate: np.ndarray,
    d: Mapping[str, np.ndarray],
    part: str,
    marginals: np.ndarray,
    what: str,
) -> str | None:
    """Reported propensities against the exact numpy ones for the same scores and slates."""
    calls, batch, num_slots = slate.shape
    rows = np.arange(batch)[None, :, None]
    exact = marginals[rows, slate, np.arange(num_slots)[None, None, :]]
    reported = d[f"{part}_propensity_item_position"]
    wrong = np.abs(reported - exact) > PROPENSITY_TOLERANCE
    if wrong.any():
        call, row, slot = np.argwhere(wrong)[0]
        return (
            f"{what}: call {call} row {row} slot {slot} reports propensity_item_position "
            f"{reported[call, row, slot]:.8f}, the exact marginal is {exact[call, row, slot]:.8f}"
        )
    flat = slate.reshape(calls * batch, num_slots)
    cascade = policy.prefix_probs(
        np.repeat(scores[None], calls, 0).reshape(-1, scores.shape[1]),
        flat,
        np.repeat(allowed[None], calls, 0).reshape(-1, allowed.shape[1]),
    )
    cascade = cascade.reshape(calls, batch, num_slots)
    reported = d[f"{part}_propensity_cascade"]
    wrong = np.abs(reported - cascade) > CASCADE_RTOL * cascade + 1e-12
    if wrong.any():
        call, row, slot = np.argwhere(wrong)[0]
        return (
            f"{what}: call {call} row {row} slot {slot} reports propensity_cascade "
            f"{reported[call, row, slot]:.6g}, the exact prefix probability is {cascade[call, row, slot]:.6g}"
        )
    return None


def slot_frequency_pvalue(slates: np.ndarray, marginals: np.ndarray) -> float:
    """Bonferroni-corrected (x L) smallest per-slot p-value of Pearson chi-square tests: slates
    [R, B, L] drawn R times on B rows against marginals [B, K, L]; per slot the cells are the items,
    counts summed over rows and calls, cells expecting < 5 pooled. (Rows differ, so counts vary
    less than a multinomial's: conservative.)"""
    calls, _, num_slots = slates.shape
    k = marginals.shape[1]
    worst = min(
        pearson_pvalue(
            np.bincount(slates[:, :, slot].ravel(), minlength=k).astype(np.float64),
            calls * marginals[:, :, slot].sum(0),
        )
        for slot in range(num_slots)
    )
    return min(1.0, worst * num_slots)


def slot_repeat_pvalue(a: np.ndarray, b: np.ndarray, marginals: np.ndarray) -> float:
    """Bonferroni-corrected (x L) smallest per-slot p-value of 'slates a and b [R, B, L] show the
    same item at a slot this often' for independent draws (rlops.heads.draws.repeat_pvalue
    with that slot's marginals)."""
    num_slots = marginals.shape[2]
    worst = min(
        (repeat_pvalue(a[:, :, slot], b[:, :, slot], marginals[:, :, slot]) for slot in range(num_slots)), default=1.0
    )
    return min(1.0, worst * num_slots)
