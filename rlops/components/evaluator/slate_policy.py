"""A ranking SavedModel evaluated on logged pages (decision kind `slate`): the Evaluator's ranking
path and `rlops evaluate --policy <SavedModel>` on slate Examples.

Evaluate what you serve: the candidate's `serving_ranked` scores the K items for each logged
page's context, and its slate policy (from `get_metadata`: Plackett-Luce at its temperature, or
epsilon per slot) gives the exact terms every slate estimator needs (rlops.agents.ranking's numpy
module, the same numbers the served head reports): each logged item's marginal at its slot, each
logged prefix's probability, and the distribution at each slot given the logged prefix (Cascade-DR,
with slate_evaluation's backward reward-to-go table fitted under it). The greedy page of the same
scores is estimated beside it. The baseline is the last blessed ranking model when it can score the
logs, else the logging policy (its logged propensities; every weight 1), with the reason.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlops.components.common import records
from rlops.components.common.model import serving_dir
from rlops.components.common.slates import SlateLogs, parse_slates, slate_record_spec
from rlops.components.evaluator.comparisons import LOGGING_BASELINE
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.slate_config import SlateEvaluatorConfig
from rlops.components.evaluator.slate_estimators import (
    REQUIREMENTS,
    TABLE,
    SlateComparison,
    SlateLog,
    SlateTarget,
    compare_slates,
    pseudo_inverse_weights_uniform,
    shown_item_marginals,
)
from rlops.components.evaluator.slate_evaluation import logged_uniformly, logging_target, reward_to_go_table, slate_log
from rlops.features.serving_names import NUM_ACTIONS, serving_inputs_from_records
from rlops.heads.slate.probabilities import Greedy, SlatePolicy

log = logging.getLogger(__name__)

SERVING_RANKED = "serving_ranked"
SCORE_BATCH = 2048  # pages per serving_ranked call


@dataclass
class RankingModel:
    """A ranking SavedModel loaded to score logged pages."""

    path: str
    signature: Any  # serving_ranked
    slate_policy: SlatePolicy  # what it serves (its get_metadata)
    num_slots: int
    num_candidates: int
    loaded: Any = None  # the loaded SavedModel (keeps the signature's variables alive)

    @property
    def description(self) -> dict[str, Any]:
        return {"slate_policy": repr(self.slate_policy), "num_slots": self.num_slots}


def load_ranking_model(path: str) -> RankingModel:
    """The SavedModel at `path` (a Model artifact's directory or the SavedModel itself); one error
    when it serves no pages."""
    import tensorflow as tf

    from rlops.heads.slate.verifier import policy_from_metadata

    saved = serving_dir(path) if tf.io.gfile.exists(serving_dir(path)) else path
    policy = tf.saved_model.load(saved)
    if SERVING_RANKED not in policy.signatures:
        raise ValueError(
            f"{saved} serves no pages (no {SERVING_RANKED} signature; it has {sorted(policy.signatures)}): "
            "slate logs evaluate a ranking policy (trainer.agent: ranking)"
        )
    metadata = {}
    for k, v in policy.signatures["get_metadata"]().items():
        value = v.numpy()
        metadata[k] = value.decode() if isinstance(value, bytes) else value.item()
    return RankingModel(
        saved,
        policy.signatures[SERVING_RANKED],
        policy_from_metadata(metadata),
        int(metadata["num_slots"]),
        int(metadata["num_candidates"]),
        policy,
    )


@dataclass(frozen=True)
class SlateSplit:
    """A split's pages and the raw context features of each, in the same order."""

    logs: SlateLogs
    features: dict[str, np.ndarray]  # record key -> [n, ...]


def read_split(examples_uri: str, split: str, feature_spec: dict[str, Any]) -> SlateSplit:
    """Every page of `split` with the context features `feature_spec` parses (tf.io spec by record key)."""
    import tensorflow as tf

    spec = slate_record_spec(examples_uri, split)
    files = sorted(tf.io.gfile.glob(records.split_file_pattern(examples_uri, split)))
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    logs = parse_slates(serialized, spec)
    parsed = records.batch_parser(feature_spec)(tf.constant(serialized)) if feature_spec else {}
    return SlateSplit(logs, {k: v.numpy() for k, v in parsed.items()})


def model_feature_spec(model: RankingModel) -> dict[str, Any]:
    """The tf.io parse spec of the context features the model takes (its schema beside it)."""
    from rlops.features import load as load_feature_schema

    schema = load_feature_schema(model.path)
    if schema is None:
        raise ValueError(f"{model.path}: no feature schema beside the SavedModel; was it exported by the Trainer?")
    return records.feature_parse_spec(schema)


def model_scores(model: RankingModel, data: SlateSplit) -> np.ndarray:
    """[n, K] the model's scores of the K items for each page's context."""
    import tensorflow as tf

    logs = data.logs
    check_fits(model, logs)
    inputs = serving_inputs_from_records(data.features)
    specs = model.signature.structured_input_signature[1]
    missing = sorted(set(specs) - set(inputs) - {NUM_ACTIONS})
    if missing:
        raise ValueError(f"{model.path} takes input(s) {missing} that the slate records do not hold")
    n = len(logs)
    out = []
    for start in range(0, n, SCORE_BATCH):
        rows = slice(start, min(start + SCORE_BATCH, n))
        feeds = {k: tf.constant(inputs[k][rows], specs[k].dtype) for k in specs if k != NUM_ACTIONS}
        feeds[NUM_ACTIONS] = tf.fill([rows.stop - rows.start], tf.constant(logs.num_items, tf.int64))
        out.append(model.signature(**feeds)["scores"].numpy().astype(np.float64))
    return np.concatenate(out) if out else np.zeros((0, logs.num_items))


def check_fits(model: RankingModel, logs: SlateLogs) -> None:
    """The model ranks the logs' K items and serves pages at least as long as theirs."""
    if model.num_candidates != logs.num_items:
        raise ValueError(f"{model.path} ranks {model.num_candidates} items; the slate logs have {logs.num_items} items")
    if logs.slate_length > model.num_slots:
        raise ValueError(
            f"{model.path} serves pages of {model.num_slots} slots; the slate logs show {logs.slate_length}"
        )


def filled_slates(logs: SlateLogs) -> np.ndarray:
    """[n, L] the logged pages with each padded slot given an item the page does not show (a
    conditional at a shown slot depends on the items above it only, so the filler changes nothing)."""
    slates = logs.slates.copy()
    for i in np.flatnonzero((~logs.slot_mask).any(1)):
        unused = np.setdiff1d(np.arange(logs.num_items), slates[i][logs.slot_mask[i]])
        pad = ~logs.slot_mask[i]
        slates[i, pad] = unused[: int(pad.sum())]
    return slates


def policy_target(policy: SlatePolicy, scores: np.ndarray, logs: SlateLogs, logged: SlateLog) -> SlateTarget:
    """The exact terms of `policy` over `scores` on the logged pages (see the module docstring)."""
    length, k = logs.slate_length, logs.num_items
    slates = filled_slates(logs)
    rows = np.arange(len(logs))[:, None]
    slots = np.arange(length)[None, :]
    marginals = policy.marginals(scores, length)  # [n, K, L]
    marginal = marginals[rows, slates, slots]
    action_dist = policy.conditionals(scores, slates)  # [n, L, K] given the logged prefix
    picked = np.take_along_axis(action_dist, slates[..., None], axis=2)[..., 0]
    cascade = np.cumprod(np.where(logs.slot_mask, picked, 1.0), axis=1)
    q_hat = np.broadcast_to(reward_to_go_table(logged, action_dist, k)[None], action_dist.shape)
    pseudo_inverse = None
    if k > length and logged_uniformly(logs):  # the pseudo-inverse's closed form (uniform logging)
        pseudo_inverse = pseudo_inverse_weights_uniform(shown_item_marginals(slates, marginals), k, logs.slot_mask)
    return SlateTarget(marginal, cascade, action_dist, q_hat, pseudo_inverse)


@dataclass(frozen=True)
class CandidateRun:
    """The candidate's served page against the baseline, and its greedy page alone."""

    main: SlateComparison
    greedy: SlateComparison
    baseline_name: str
    baseline_reason: str | None
    num_records: int


def compare_candidate(
    config: SlateEvaluatorConfig,
    data: SlateSplit,
    model: RankingModel,
    baseline: RankingModel | None,
    baseline_name: str | None = None,
) -> CandidateRun:
    """Every slate estimator for the model's served page against the baseline's (paired), and for
    its greedy page."""
    logs = data.logs
    logged = slate_log(logs)
    scores = model_scores(model, data)
    served = policy_target(model.slate_policy, scores, logs, logged)
    greedy = policy_target(Greedy(), scores, logs, logged)
    reason = None
    base_target = logging_target(logs)
    name = LOGGING_BASELINE
    if baseline is not None:
        try:
            base_target = policy_target(baseline.slate_policy, model_scores(baseline, data), logs, logged)
            name = baseline_name or baseline.path
        except ValueError as e:  # another item set or page length: the logs' own policy instead
            reason = f"the blessed model cannot score these logs ({e}); compared against the logging policy"
            log.warning("evaluator: %s", reason)

    def compare(candidate: SlateTarget, baseline_target: SlateTarget | None) -> SlateComparison:
        return compare_slates(
            logged,
            candidate,
            baseline_target,
            num_bootstrap=config.num_bootstrap,
            confidence=config.confidence,
            seed=config.seed,
            min_records=config.min_eval_records,
            min_ess=config.min_ess,
        )

    main, greedy_cmp = compare(served, base_target), compare(greedy, None)
    return CandidateRun(main, greedy_cmp, name, reason, len(logs))


def _estimates(part: dict[str, Estimate] | None) -> dict[str, dict]:
    return {} if part is None else {k: v.as_dict() for k, v in part.items()}


# The estimator the gate falls back to when the logs carry per-position propensities only: the
# configured one needs prefix propensities (log.propensity_cascade), which public per-position logs
# do not carry. Self-normalized estimators fall back to sniips, the others to iips.
MARGINAL_FALLBACK = {True: "sniips", False: "iips"}


def gate_estimator(config: SlateEvaluatorConfig, logs: SlateLogs) -> tuple[str, str | None]:
    """The estimator that decides on these logs, and the note that says why when it is not
    `evaluator.estimator` (the logs lack the prefix propensities it needs)."""
    chosen = next(e for e in TABLE if e.name == config.estimator)
    needs = {need for group in chosen.groups for need in REQUIREMENTS[group]}
    if logs.propensity_cascade is not None or "log.propensity_cascade" not in needs:
        return config.estimator, None
    fallback = MARGINAL_FALLBACK[config.estimator.startswith("sn")]
    return fallback, (
        f"evaluator.estimator: {config.estimator} needs the logging policy's prefix propensities "
        f"(slate_columns.propensity_cascade), which these logs do not carry; the gate used {fallback} "
        "(per-position propensities: unbiased when a slot's reward depends on its own item)"
    )


def slate_metrics(config: SlateEvaluatorConfig, run: CandidateRun, model: RankingModel, logs: SlateLogs) -> dict:
    """The Evaluator's metrics (the bandit path's keys, with slate estimators)."""
    main = run.main
    estimator, note = gate_estimator(config, logs)
    decisive = main.difference[estimator] if main.difference else None
    reason = None if decisive is None else decisive.reason
    out: dict[str, Any] = {
        "decision_kind": "slate",
        "num_eval_records": run.num_records,
        "eval_records": run.num_records,
        "engine": "memory",
        "baseline": run.baseline_name,
        "served_policy": model.description,
        "slate_length": logs.slate_length,
        "num_items": logs.num_items,
        "candidate": _estimates(main.candidate),
        "candidate_greedy": _estimates(run.greedy.candidate),
        "baseline_estimates": _estimates(main.baseline),
        "improvement": _estimates(main.difference),
        "trust": {
            "trusted": reason is None,
            "reason": reason,
            "num_records": main.num_records,
            "ess": main.ess,
            "greedy_ess": run.greedy.ess.get("candidate", {}),
            "min_eval_records": config.min_eval_records,
            "min_ess": config.min_ess,
        },
    }
    if run.baseline_reason:
        out["baseline_reason"] = run.baseline_reason
    out["gate_estimator"] = estimator
    if note:
        out["gate_note"] = note
        log.warning("evaluator: %s", note)
    return out


def evaluate_slate_candidate(
    config: SlateEvaluatorConfig, examples_uri: str, model_uri: str, baseline_model_uri: str | None
) -> tuple[dict[str, Any], Estimate]:
    """(metrics, the improvement that blesses) of the ranking model at `model_uri` on the eval split."""
    model = load_ranking_model(model_uri)
    baseline = _baseline(baseline_model_uri)
    if _empty(examples_uri, "eval"):
        reason = "the eval split has no pages (see experience_gen.splits)"
        empty = {"num_eval_records": 0, "baseline": LOGGING_BASELINE, "candidate": {}, "improvement": {}}
        return {**empty, "trust": {"trusted": False, "reason": reason}}, Estimate(np.nan, np.nan, np.nan, reason)
    data = read_split(examples_uri, "eval", model_feature_spec(model))
    run = compare_candidate(config, data, model, baseline, baseline_model_uri)
    metrics = slate_metrics(config, run, model, data.logs)
    assert run.main.difference is not None  # a baseline is always compared
    return metrics, run.main.difference[metrics["gate_estimator"]]


def _empty(examples_uri: str, split: str) -> bool:
    try:
        records.first_example(records.split_file_pattern(examples_uri, split))
    except ValueError:  # no records (or no files) in the split
        return True
    return False


def _baseline(baseline_model_uri: str | None) -> RankingModel | None:
    """The last blessed model, when it is a ranking model (else the logging policy is the baseline)."""
    if not baseline_model_uri:
        return None
    try:
        return load_ranking_model(baseline_model_uri)
    except ValueError as e:
        log.warning("evaluator: baseline %s: %s; compared against the logging policy", baseline_model_uri, e)
        return None


def saved_policy_on_logs(saved_model: str, examples_uri: str, split: str, config: SlateEvaluatorConfig) -> dict:
    """`rlops evaluate --policy <SavedModel>` on slate Examples: the page it serves against the
    logging policy, and its greedy page alone, as JSON (slate_evaluation's keys, plus
    `improvement_over_logging`, `greedy_estimates` and `served_policy`)."""
    from rlops.components.evaluator.slate_evaluation import estimate_entries

    if not os.path.exists(saved_model) and "://" not in saved_model:
        raise ValueError(
            f"--policy: slate logs are evaluated for uniform or logging, or a ranking SavedModel; "
            f"no SavedModel at {saved_model}"
        )
    model = load_ranking_model(saved_model)
    data = read_split(examples_uri, split, model_feature_spec(model))
    run = compare_candidate(config, data, model, None)
    logs, main = data.logs, run.main
    mask = logs.slot_mask
    return {
        "decision_kind": "slate",
        "policy": saved_model,
        "served_policy": model.description,
        "split": split,
        "num_records": main.num_records,
        "slate_length": logs.slate_length,
        "num_items": logs.num_items,
        "shown_slots": int(mask.sum()),
        "observed_mean_slate_reward": float(np.where(mask, logs.rewards, 0.0).sum(1).mean()),
        "confidence": config.confidence,
        "engine": "memory",
        "estimates": estimate_entries(main.candidate, main.ess["candidate"]),
        "improvement_over_logging": _estimates(main.difference),
        "greedy_estimates": estimate_entries(run.greedy.candidate, run.greedy.ess["candidate"]),
    }
