"""Evaluate a slate policy on logged slates (decision kind `slate`): what `rlops evaluate` runs on
slate Examples.

Policies given by name: `uniform` (L of the K items uniformly without replacement) and `logging`
(the logged propensities themselves: every weight is 1, so each estimator returns the logs' own
mean slate reward, a check of the plumbing). A slate policy served from a SavedModel comes with the
ranking agent.

The target's terms (slate_estimators.SlateTarget) are exact for the uniform policy: its marginal
of any item at any position is 1/K, its prefix probability prod_{t<=l} 1/(K-t), and its
distribution at slot l given the logged prefix uniform over the K-l items not yet shown.
Cascade-DR's reward model is a table of reward-to-go per (slot, item) fitted backwards over the
slate (slot L first), shrunk toward the slot's mean; DR stays unbiased where the model is wrong.
The pseudo-inverse needs the logger's pairwise marginals: it runs where the logs show uniform
logging (every propensity 1/K), with the slate reward taken as the sum of the slot rewards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rlops.components.common.slates import SlateLogs, read_slate_logs
from rlops.components.evaluator.slate_estimators import (
    SlateComparison,
    SlateLog,
    SlateTarget,
    compare_slates,
    pseudo_inverse_weights_uniform,
    shown_item_marginals,
)

SLATE_POLICIES = ("uniform", "logging")
SHRINKAGE = 1.0  # pseudo-slates of the slot's mean behind each item's reward-to-go
UNIFORM_TOLERANCE = 1e-6
BEAM_BATCH = 4096  # slates per element of the Beam engine


@dataclass(frozen=True)
class SlateOptions:
    num_bootstrap: int = 500
    confidence: float = 0.95
    min_records: int = 100
    min_ess: float = 30.0
    seed: int = 0
    engine: str = "memory"  # memory | beam
    beam_pipeline_args: tuple[str, ...] = ()


def slate_log(logs: SlateLogs) -> SlateLog:
    """The estimators' view of read-back slates (slate reward: the sum of the slot rewards)."""
    mask = logs.slot_mask
    return SlateLog(
        keys=logs.keys,
        slates=np.where(mask, logs.slates, 0),
        rewards=np.where(mask, logs.rewards, 0.0),
        propensity=np.where(mask, logs.propensity, 1.0),
        slot_mask=mask,
        propensity_cascade=logs.propensity_cascade,
        slate_reward=np.where(mask, logs.rewards, 0.0).sum(1),
    )


def logged_uniformly(logs: SlateLogs) -> bool:
    """Every shown item's logged marginal is 1/K (uniform logging without replacement)."""
    p = logs.propensity[logs.slot_mask]
    return bool(np.all(np.abs(p - 1.0 / logs.num_items) <= UNIFORM_TOLERANCE))


def uniform_target(logs: SlateLogs, log: SlateLog) -> SlateTarget:
    """The uniform policy's exact terms on the logged slates, with Cascade-DR's table model."""
    n, length = logs.slates.shape
    k = logs.num_items
    if k < length:
        raise ValueError(f"slate_length {length} is larger than the {k} items: no slate can be filled")
    remaining = k - np.arange(length, dtype=float)  # items left at each slot
    marginal = np.full((n, length), 1.0 / k)
    cascade = np.broadcast_to(np.cumprod(1.0 / remaining), (n, length)).copy()
    shown_before = np.zeros((n, length, k), bool)  # [i, l, a]: a sits in the logged prefix a_<l
    for slot in range(1, length):
        shown_before[np.arange(n), slot:, log.slates[:, slot - 1]] = True
    action_dist = np.where(shown_before, 0.0, 1.0 / remaining[None, :, None])
    q_hat = reward_to_go_table(log, action_dist, k)
    pseudo_inverse = None
    if logged_uniformly(logs) and k > length:
        at_shown = shown_item_marginals(log.slates, np.full((n, k, length), 1.0 / k))
        pseudo_inverse = pseudo_inverse_weights_uniform(at_shown, k, log.slot_mask)
    return SlateTarget(marginal, cascade, action_dist, q_hat, pseudo_inverse)


def logging_target(logs: SlateLogs) -> SlateTarget:
    """The logging policy on its own slates: its logged propensities (every weight 1)."""
    return SlateTarget(np.where(logs.slot_mask, logs.propensity, 1.0), logs.propensity_cascade)


def reward_to_go_table(log: SlateLog, action_dist: np.ndarray, num_items: int) -> np.ndarray:
    """[n, L, K] q(l, a): the expected reward of slots l.. given item a at slot l, one number per
    (slot, item), fitted from the last slot to the first: the target at slot l is the slot's reward
    plus the next slot's model averaged under the target's distribution there."""
    n, length = log.slates.shape
    mask = log.mask
    table = np.zeros((length, num_items))
    q_hat = np.zeros((n, length, num_items))
    following = np.zeros(n)  # E_pi q(l+1, .) given the logged prefix, 0 past the slate's end
    for slot in range(length - 1, -1, -1):
        shown = mask[:, slot]
        target = log.rewards[:, slot] + following
        items = log.slates[shown, slot]
        sums = np.bincount(items, target[shown], minlength=num_items)
        counts = np.bincount(items, minlength=num_items)
        mean = float(target[shown].mean()) if shown.any() else 0.0
        table[slot] = (sums + SHRINKAGE * mean) / (counts + SHRINKAGE)
        q_hat[:, slot] = table[slot]
        following = np.where(shown, (action_dist[:, slot] * table[slot]).sum(1), 0.0)
    return q_hat


def evaluate_slates(
    logs: SlateLogs, policy: str, options: SlateOptions = SlateOptions()
) -> tuple[SlateComparison, SlateTarget]:
    """Every slate estimator for `policy` ('uniform' or 'logging') on `logs`."""
    if policy not in SLATE_POLICIES:
        raise ValueError(
            f"--policy: slate logs are evaluated for {' or '.join(SLATE_POLICIES)} "
            f"(a ranking SavedModel comes with the ranking agent), got {policy!r}"
        )
    log = slate_log(logs)
    target = uniform_target(logs, log) if policy == "uniform" else logging_target(logs)
    o = options
    if o.engine == "beam":
        from rlops.components.evaluator.slate_beam import compare_slates_beam

        rows = [slice(i, i + BEAM_BATCH) for i in range(0, len(logs), BEAM_BATCH)]
        batches = [(log.rows(r), [target.rows(r)]) for r in rows]
        comparison = compare_slates_beam(
            batches,
            o.num_bootstrap,
            o.confidence,
            o.seed,
            o.min_records,
            o.min_ess,
            beam_pipeline_args=o.beam_pipeline_args,
        )
        return comparison, target
    return compare_slates(log, target, None, o.num_bootstrap, o.confidence, o.seed, o.min_records, o.min_ess), target


def evaluate_slates_on_logs(
    examples_uri: str, policy: str, split: str = "eval", options: SlateOptions = SlateOptions()
) -> dict:
    """`rlops evaluate` on slate Examples: every estimator with its interval and ESS, as JSON."""
    logs = read_slate_logs(examples_uri, split)
    comparison, _ = evaluate_slates(logs, policy, options)
    mask = logs.slot_mask
    estimates: dict[str, dict[str, float | str | None]] = {}
    for name, est in comparison.candidate.items():
        trusted = est.reason is None
        estimates[name] = {
            "value": _number(est.value) if trusted or math.isfinite(est.lower) else None,
            "lower": _number(est.lower),
            "upper": _number(est.upper),
            "ess": _number(comparison.ess["candidate"].get(name, math.nan)),
        }
        if est.reason:
            estimates[name]["reason"] = est.reason
    return {
        "decision_kind": "slate",
        "policy": policy,
        "split": split,
        "num_records": len(logs),
        "slate_length": logs.slate_length,
        "num_items": logs.num_items,
        "shown_slots": int(mask.sum()),
        "observed_mean_slate_reward": float(np.where(mask, logs.rewards, 0.0).sum(1).mean()),
        "confidence": options.confidence,
        "engine": options.engine,
        "estimates": estimates,
    }


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def render_slate_table(result: dict) -> str:
    """The estimates as a table: a value only where the trust rule gave an interval, else why not."""
    conf = f"{result['confidence']:.0%}"
    rows: list[Sequence[str]] = [("estimator", "value", f"{conf} interval", "ESS", "")]
    for name, est in result["estimates"].items():
        value = "none" if est["value"] is None else f"{est['value']:.5f}"
        interval = "no interval" if est["lower"] is None else f"[{est['lower']:.5f}, {est['upper']:.5f}]"
        ess = "-" if est["ess"] is None else f"{est['ess']:.1f}"
        rows.append((name, value, interval, ess, est.get("reason", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths[:4]))
    lines.append(
        f"slates {result['num_records']} ({result['shown_slots']} shown slots, L={result['slate_length']}, "
        f"K={result['num_items']}), {result['engine']} engine, logging policy observed "
        f"{result['observed_mean_slate_reward']:.5f} per slate"
    )
    return "\n".join(lines)
