"""Evaluate a slate policy on logged slates (decision kind `slate`): what `rlops evaluate` runs on
slate Examples.

Policies given by name: `uniform` (L of the K items uniformly without replacement) and `logging`
(the logged propensities themselves: every weight is 1, so each estimator returns the logs' own
mean slate reward, a check of the plumbing). A ranking SavedModel is slate_policy.py's.

The target's terms (slate_estimators.SlateTarget) are exact for the uniform policy: its marginal
of any item at any position is 1/K, its prefix probability prod_{t<=l} 1/(K-t), and its
distribution at slot l given the logged prefix uniform over the K-l items not yet shown.
Cascade-DR's reward model is a table of reward-to-go per (slot, item) fitted backwards over the
slate (slot L first), shrunk toward the slot's mean, on the split's first `REWARD_MODEL_SAMPLE`
slates; DR stays unbiased where the model is wrong. The pseudo-inverse needs the logger's pairwise
marginals: it runs where the logs show uniform logging (every propensity 1/K), with the slate
reward taken as the sum of the slot rewards.

Two engines give the same numbers: in memory (the split read whole) and Beam, whose workers read
and parse the records in batches and sum their terms (memory independent of the split's size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rlops.components.common.records import split_file_pattern
from rlops.components.common.slates import (
    SlateLogs,
    SlateRecordSpec,
    parse_slates,
    read_slate_logs,
    slate_record_spec,
)
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.estimators import TrustRule
from rlops.components.evaluator.slate_estimators import (
    SlateComparison,
    SlateLog,
    SlateTarget,
    compare_slates,
    comparison_from_sums,
    make_layout,
    pseudo_inverse_weights_uniform,
    shown_item_marginals,
)

SLATE_POLICIES = ("uniform", "logging")
SHRINKAGE = 1.0  # pseudo-slates of the slot's mean behind each item's reward-to-go
UNIFORM_TOLERANCE = 1e-6
BEAM_BATCH = 4096  # most slates per element of the Beam engine
REWARD_MODEL_SAMPLE = 100_000  # slates Cascade-DR's table is fitted on


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


@dataclass(frozen=True)
class UniformModel:
    """What the uniform policy's terms need beyond a batch of slates, fitted on a sample."""

    table: np.ndarray  # [L, K] Cascade-DR's reward-to-go per (slot, item)
    uniform_logging: bool  # the sample was logged uniformly: the pseudo-inverse applies


def uniform_action_dist(log: SlateLog, num_items: int) -> np.ndarray:
    """[n, L, K] the uniform policy at slot l given the logged prefix: 1/(K-l) on the items not shown above."""
    n, length = log.slates.shape
    remaining = num_items - np.arange(length, dtype=float)
    shown_before = np.zeros((n, length, num_items), bool)  # [i, l, a]: a sits in the logged prefix a_<l
    for slot in range(1, length):
        shown_before[np.arange(n), slot:, log.slates[:, slot - 1]] = True
    return np.where(shown_before, 0.0, 1.0 / remaining[None, :, None])


def fit_uniform_model(logs: SlateLogs) -> UniformModel:
    """The reward-to-go table and whether the logs were logged uniformly, from (a sample of) them."""
    log = slate_log(logs)
    check_fillable(logs)
    table = reward_to_go_table(log, uniform_action_dist(log, logs.num_items), logs.num_items)
    return UniformModel(table, logged_uniformly(logs) and logs.num_items > logs.slate_length)


def check_fillable(logs: SlateLogs) -> None:
    if logs.num_items < logs.slate_length:
        raise ValueError(
            f"slate_length {logs.slate_length} is larger than the {logs.num_items} items: no slate can be filled"
        )


def uniform_target(logs: SlateLogs, log: SlateLog, model: UniformModel | None = None) -> SlateTarget:
    """The uniform policy's exact terms on the logged slates, with Cascade-DR's table model (fitted
    on these slates unless given)."""
    check_fillable(logs)
    model = fit_uniform_model(logs) if model is None else model
    n, length = logs.slates.shape
    k = logs.num_items
    remaining = k - np.arange(length, dtype=float)  # items left at each slot
    marginal = np.full((n, length), 1.0 / k)
    cascade = np.broadcast_to(np.cumprod(1.0 / remaining), (n, length)).copy()
    action_dist = uniform_action_dist(log, k)
    q_hat = np.broadcast_to(model.table[None], (n, length, k))
    pseudo_inverse = None
    if model.uniform_logging:
        if not logged_uniformly(logs):
            raise ValueError(
                "the pseudo-inverse assumed uniform logging from a sample of the logs, and a later "
                "slate's propensity is not 1/K"
            )
        at_shown = shown_item_marginals(log.slates, np.full((n, k, length), 1.0 / k))
        pseudo_inverse = pseudo_inverse_weights_uniform(at_shown, k, log.slot_mask)
    return SlateTarget(marginal, cascade, action_dist, q_hat, pseudo_inverse)


def logging_target(logs: SlateLogs) -> SlateTarget:
    """The logging policy on its own slates: its logged propensities (every weight 1)."""
    return SlateTarget(np.where(logs.slot_mask, logs.propensity, 1.0), logs.propensity_cascade)


def reward_to_go_table(log: SlateLog, action_dist: np.ndarray, num_items: int) -> np.ndarray:
    """[L, K] q(l, a): the expected reward of slots l.. given item a at slot l, one number per
    (slot, item), fitted from the last slot to the first: the target at slot l is the slot's reward
    plus the next slot's model averaged under the target's distribution there."""
    n, length = log.slates.shape
    mask = log.mask
    table = np.zeros((length, num_items))
    following = np.zeros(n)  # E_pi q(l+1, .) given the logged prefix, 0 past the slate's end
    for slot in range(length - 1, -1, -1):
        shown = mask[:, slot]
        target = log.rewards[:, slot] + following
        items = log.slates[shown, slot]
        sums = np.bincount(items, target[shown], minlength=num_items)
        counts = np.bincount(items, minlength=num_items)
        mean = float(target[shown].mean()) if shown.any() else 0.0
        table[slot] = (sums + SHRINKAGE * mean) / (counts + SHRINKAGE)
        following = np.where(shown, (action_dist[:, slot] * table[slot]).sum(1), 0.0)
    return table


def check_policy(policy: str) -> None:
    if policy not in SLATE_POLICIES:
        raise ValueError(
            f"--policy: slate logs are evaluated here for {' or '.join(SLATE_POLICIES)} "
            f"(a ranking SavedModel: slate_policy.py), got {policy!r}"
        )


def target_of(policy: str, logs: SlateLogs, log: SlateLog, model: UniformModel | None) -> SlateTarget:
    return uniform_target(logs, log, model) if policy == "uniform" else logging_target(logs)


def evaluate_slates(
    logs: SlateLogs, policy: str, options: SlateOptions = SlateOptions()
) -> tuple[SlateComparison, SlateTarget]:
    """Every slate estimator for `policy` ('uniform' or 'logging') on `logs`, in memory."""
    check_policy(policy)
    log = slate_log(logs)
    model = fit_uniform_model(logs.head(REWARD_MODEL_SAMPLE)) if policy == "uniform" else None
    target = target_of(policy, logs, log, model)
    o = options
    comparison = compare_slates(log, target, None, o.num_bootstrap, o.confidence, o.seed, o.min_records, o.min_ess)
    return comparison, target


@dataclass(frozen=True)
class ToSlateBatch:
    """What a Beam worker does with a batch of serialized slate records: parse them, and build the
    policy's terms on them."""

    spec: SlateRecordSpec
    policy: str
    model: UniformModel | None

    def __call__(self, serialized: list[bytes]) -> object:
        from rlops.components.evaluator.slate_beam import SlateBatch

        logs = parse_slates(serialized, self.spec)
        log = slate_log(logs)
        return SlateBatch(log, (target_of(self.policy, logs, log, self.model),))


def evaluate_slates_beam(
    examples_uri: str, split: str, policy: str, options: SlateOptions = SlateOptions()
) -> tuple[SlateComparison, SlateLogs]:
    """evaluate_slates as a Beam pipeline over the split's files: the driver reads a sample (the
    reward model's, and which estimators have their inputs), workers read, parse and sum. Returns
    the estimates and that sample."""
    import tempfile

    import apache_beam as beam

    from rlops.components.evaluator.beam import run_pipeline
    from rlops.components.evaluator.slate_beam import sum_slates

    check_policy(policy)
    spec = slate_record_spec(examples_uri, split)
    sample = read_slate_logs(examples_uri, split, REWARD_MODEL_SAMPLE)
    model = fit_uniform_model(sample) if policy == "uniform" else None
    to_batch = ToSlateBatch(spec, policy, model)
    first = sample.head(BEAM_BATCH)
    layout = make_layout(slate_log(first), [target_of(policy, first, slate_log(first), model)])
    o = options

    def build(p: beam.Pipeline) -> beam.PCollection:
        batches = (
            p
            | "ReadSlates" >> beam.io.ReadFromTFRecord(split_file_pattern(examples_uri, split), compression_type="gzip")
            | "Batch" >> beam.BatchElements(min_batch_size=256, max_batch_size=BEAM_BATCH)
            | "Terms" >> beam.Map(to_batch)
        )
        return sum_slates(batches, layout, o.num_bootstrap, o.seed)

    with tempfile.TemporaryDirectory() as out_dir:
        sums = run_pipeline(build, o.beam_pipeline_args, out_dir)
    rule = TrustRule(o.num_bootstrap, o.confidence, o.min_records, o.min_ess)
    return comparison_from_sums(sums, rule, 0, None), sample


def evaluate_slates_on_logs(
    examples_uri: str, policy: str, split: str = "eval", options: SlateOptions = SlateOptions()
) -> dict:
    """`rlops evaluate` on slate Examples: every estimator with its interval and ESS, as JSON."""
    observed: float | None = None
    shown: int | None = None
    if options.engine == "beam":
        comparison, logs = evaluate_slates_beam(examples_uri, split, policy, options)  # logs: a sample
    else:
        logs = read_slate_logs(examples_uri, split)
        comparison, _ = evaluate_slates(logs, policy, options)
        mask = logs.slot_mask
        observed = float(np.where(mask, logs.rewards, 0.0).sum(1).mean())
        shown = int(mask.sum())
    return {
        "decision_kind": "slate",
        "policy": policy,
        "split": split,
        "num_records": comparison.num_records,
        "slate_length": logs.slate_length,
        "num_items": logs.num_items,
        "shown_slots": shown,
        "observed_mean_slate_reward": observed,
        "confidence": options.confidence,
        "engine": options.engine,
        "estimates": estimate_entries(comparison.candidate, comparison.ess["candidate"]),
    }


def estimate_entries(estimates: dict[str, Estimate], ess: dict[str, float]) -> dict[str, dict]:
    """`rlops evaluate`'s JSON of one policy's estimates: value (none where untrusted), interval, the
    ESS of its weights, and the reason where there is no interval."""
    out: dict[str, dict[str, float | str | None]] = {}
    for name, est in estimates.items():
        trusted = est.reason is None
        out[name] = {
            "value": _number(est.value) if trusted or math.isfinite(est.lower) else None,
            "lower": _number(est.lower),
            "upper": _number(est.upper),
            "ess": _number(ess.get(name, math.nan)),
        }
        if est.reason:
            out[name]["reason"] = est.reason
    return out


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def render_slate_table(result: dict) -> str:
    """The estimates as a table: a value only where the trust rule gave an interval, else why not; a
    ranking SavedModel's rows add its improvement over the logging policy."""
    conf = f"{result['confidence']:.0%}"
    versus = result.get("improvement_over_logging")
    head = ("estimator", "value", f"{conf} interval", "ESS") + (("vs logging", f"{conf} interval") if versus else ())
    rows: list[Sequence[str]] = [(*head, "")]
    for name, est in result["estimates"].items():
        row = [name, *_value_and_interval(est, ""), "-" if est["ess"] is None else f"{est['ess']:.1f}"]
        if versus:
            row += _value_and_interval(versus[name], "+")
        rows.append((*row, est.get("reason", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths[:-1]))
    line = f"slates {result['num_records']} (L={result['slate_length']}, K={result['num_items']}), {result['engine']} engine"
    if result["observed_mean_slate_reward"] is not None:
        line += f", logging policy observed {result['observed_mean_slate_reward']:.5f} per slate"
    lines.append(line)
    if result.get("served_policy"):
        lines.append(f"scored as served: {result['served_policy']['slate_policy']}")
    return "\n".join(lines)


def _value_and_interval(est: dict, sign: str) -> list[str]:
    value = "none" if est.get("value") is None else f"{est['value']:{sign}.5f}"
    if est.get("lower") is None or est.get("upper") is None:
        return [value, "no interval"]
    return [value, f"[{est['lower']:{sign}.5f}, {est['upper']:{sign}.5f}]"]
