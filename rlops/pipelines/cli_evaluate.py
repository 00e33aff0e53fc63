"""`rlops evaluate`: what would this policy have earned on these logs? Outside any pipeline run.

    rlops evaluate --examples DIR --policy SAVED_MODEL|uniform|logging [--split eval]
                   [--reward-model auto|ridge|logistic|network] [--[no-]reward-model-balance]
                   [--dm-refits 30] [--num-bootstrap 500] [--min-eval-records 100] [--min-ess 30]
                   [--engine auto|memory|beam] [--beam-threshold-records N] [--reward-model-sample N]
                   [--beam-pipeline-arg=--direct_num_workers=2 ...] [--plot PNG] [--json FILE]

Prints every estimator with its interval as a table, then one JSON line; writes a PNG plot only
when --plot names one. A SavedModel is scored as it is served (serving_default's epsilon-greedy),
its greedy policy beside it; on slate Examples a ranking SavedModel is scored as it serves its pages
(serving_ranked's slate policy), its greedy page beside it. The work is the Evaluator's own code
(rlops.components.evaluator.on_logs, slate_evaluation, slate_policy).
"""

from __future__ import annotations

import argparse
import json
import sys

from rlops.components.common.decision_kinds import BANDIT, SLATE
from rlops.components.evaluator.config import DEFAULT_BEAM_THRESHOLD, ENGINES
from rlops.components.evaluator.reward_models import (
    DEFAULT_BALANCE,
    DEFAULT_DM_REFITS,
    DEFAULT_REWARD_MODEL,
    DEFAULT_SAMPLE,
    REWARD_MODEL_CHOICES,
)
from rlops.components.properties import number


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("evaluate", help="off-policy estimates of a policy's value on logged feedback")
    p.add_argument("--examples", required=True, help="Examples directory (Split-<name>/ TFRecord shards)")
    p.add_argument(
        "--policy", required=True, help="policy SavedModel (or Model artifact) directory, 'uniform', or 'logging'"
    )
    p.add_argument("--split", default="eval", help="split to evaluate on (default: eval)")
    p.add_argument("--num-actions", type=int, help="number of actions (default: the policy's spec, else the data's)")
    p.add_argument(
        "--action-minimum",
        type=int,
        help="the first action id, e.g. 1 for ids 1..K (default: the policy's spec, else 0)",
    )
    p.add_argument(
        "--reward-model",
        default=DEFAULT_REWARD_MODEL,
        choices=REWARD_MODEL_CHOICES,
        help=f"reward model behind DM and the DR family (default {DEFAULT_REWARD_MODEL}; auto: logistic "
        "for 0/1 rewards, else ridge)",
    )
    p.add_argument(
        "--reward-model-balance",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_BALANCE,
        help="fit the reward model on rows balanced toward the evaluated policies (evaluator.reward_model_balance; "
        f"default {'on' if DEFAULT_BALANCE else 'off'})",
    )
    p.add_argument(
        "--dm-refits",
        type=int,
        default=DEFAULT_DM_REFITS,
        help=f"reward-model refits behind DM's interval, 0 for none (evaluator.dm_refits; default {DEFAULT_DM_REFITS})",
    )
    p.add_argument("--num-bootstrap", type=int, default=500, help="bootstrap resamples (default 500)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    p.add_argument("--min-eval-records", type=int, default=100, help="fewer records: no interval (default 100)")
    p.add_argument(
        "--min-ess",
        type=float,
        default=30.0,
        help="smaller effective sample size of the importance weights: no interval (default 30)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--engine",
        default="auto",
        choices=ENGINES,
        help="in-memory numpy or a Beam pipeline (memory independent of the split's size); auto: Beam "
        "above --beam-threshold-records",
    )
    p.add_argument(
        "--beam-threshold-records",
        type=int,
        default=DEFAULT_BEAM_THRESHOLD,
        help=f"eval records above which --engine auto runs Beam (default {DEFAULT_BEAM_THRESHOLD})",
    )
    p.add_argument(
        "--reward-model-sample",
        type=int,
        default=DEFAULT_SAMPLE,
        help=f"records the reward model is fitted on (a hash sample; default {DEFAULT_SAMPLE})",
    )
    p.add_argument(
        "--beam-pipeline-arg",
        action="append",
        default=[],
        dest="beam_pipeline_args",
        metavar="ARG",
        help="a Beam pipeline option for the Beam engine, e.g. --beam-pipeline-arg=--direct_num_workers=2 (repeatable)",
    )
    p.add_argument("--plot", metavar="PNG", help="also write a plot of the estimates to this PNG file")
    p.add_argument("--json", dest="json_path", help="also write the JSON result here")
    p.set_defaults(handler=run)
    return p


def _value(est: dict, signed: bool = False) -> str:
    if est.get("value") is None:  # untrusted: no number to read
        return "none"
    return number(est["value"], "+" if signed else "", 5)


def _interval(est: dict, signed: bool = False) -> str:
    if est.get("lower") is None or est.get("upper") is None:
        return "no interval"
    sign = "+" if signed else ""
    return f"[{number(est['lower'], sign, 5)}, {number(est['upper'], sign, 5)}]"


def render_table(result: dict) -> str:
    """The estimates as a table; with no trustworthy interval, one line saying why and what would
    make one (the reason ends with it) instead of untrusted numbers."""
    conf = f"{result['confidence']:.0%}"
    lines = []
    if result["trusted"]:
        rows = [("estimator", "value", f"{conf} interval", "vs logging", f"{conf} interval")]
        for name, est in result["estimates"].items():
            diff = result["improvement_over_logging"][name]
            rows.append((name, _value(est), _interval(est), _value(diff, True), _interval(diff, True)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"records {result['num_records']} ({result.get('engine', 'memory')} engine), ESS {result['ess']:.1f}, "
        f"reward model {result['reward_model']}, logging policy observed {result['observed_mean_reward']:.5f}"
    )
    if result.get("serving_epsilon") is not None:
        greedy = result["greedy_estimates"]["dr"]
        lines.append(
            f"scored as served: epsilon-greedy, epsilon {result['serving_epsilon']:g}; the greedy policy "
            f"alone: dr {_value(greedy)} {_interval(greedy)}, ESS {result['greedy_ess']:.1f}"
        )
    if not result["trusted"]:
        lines.append(f"no estimate: {result['reason']}")
    return "\n".join(lines)


def run_slates(args, config) -> int:
    """`rlops evaluate` on slate Examples: every slate estimator with its interval and ESS."""
    from rlops.components.evaluator.slate_evaluation import (
        SLATE_POLICIES,
        SlateOptions,
        evaluate_slates_on_logs,
        render_slate_table,
    )

    options = SlateOptions(
        num_bootstrap=config.num_bootstrap,
        confidence=config.confidence,
        min_records=config.min_eval_records,
        min_ess=config.min_ess,
        seed=config.seed,
        engine="beam" if config.engine == "beam" else "memory",
        beam_pipeline_args=tuple(args.beam_pipeline_args),
    )
    if args.policy in SLATE_POLICIES:
        result = evaluate_slates_on_logs(args.examples, args.policy, args.split, options)
    else:  # a ranking SavedModel, scored as it serves its pages
        from rlops.components.evaluator.slate_config import SlateEvaluatorConfig
        from rlops.components.evaluator.slate_policy import saved_policy_on_logs

        slate_config = SlateEvaluatorConfig(
            num_bootstrap=config.num_bootstrap,
            confidence=config.confidence,
            min_eval_records=config.min_eval_records,
            min_ess=config.min_ess,
            seed=config.seed,
        )
        result = saved_policy_on_logs(args.policy, args.examples, args.split, slate_config)
    print(render_slate_table(result))
    line = json.dumps(result, sort_keys=True, allow_nan=False)
    print(line)
    if args.json_path:
        with open(args.json_path, "w") as f:
            f.write(line + "\n")
    return 0


def run_bandit(args, config) -> int:
    """`rlops evaluate` on bandit Examples: every single-item estimator with its interval and ESS."""
    from rlops.components.evaluator.on_logs import evaluate_on_logs
    from rlops.components.evaluator.plots import plot_policy_estimates
    from rlops.components.properties import json_safe

    result = evaluate_on_logs(
        config,
        args.examples,
        args.policy,
        args.split,
        args.num_actions,
        args.action_minimum,
        args.beam_pipeline_args,
    )
    if args.plot:
        plot_policy_estimates(result, args.plot)
        result["plot"] = args.plot
    print(render_table(result))
    line = json.dumps(json_safe(result), sort_keys=True, allow_nan=False)  # strict JSON: NaN -> null
    print(line)
    if args.json_path:
        with open(args.json_path, "w") as f:
            f.write(line + "\n")
    return 0


# What `rlops evaluate` runs per decision kind of the Examples (their record_kind): the kinds whose
# logs carry the logging policy's probabilities.
ON_LOGS = {BANDIT: run_bandit, SLATE: run_slates}


def run(args) -> int:
    from rlops.components.common.decision_kinds import read_record_kind
    from rlops.components.evaluator.config import EvaluatorConfig

    try:
        config = EvaluatorConfig(
            kind=BANDIT,
            reward_model=args.reward_model,
            num_bootstrap=args.num_bootstrap,
            reward_model_balance=args.reward_model_balance,
            dm_refits=args.dm_refits,
            confidence=args.confidence,
            min_eval_records=args.min_eval_records,
            min_ess=args.min_ess,
            seed=args.seed,
            engine=args.engine,
            beam_threshold_records=args.beam_threshold_records,
            reward_model_sample=args.reward_model_sample,
        )
    except ValueError as e:  # name the flag, not the config key
        key = str(e).split(" ", 1)[0].removeprefix("evaluator.").rstrip(":")
        print(f"rlops evaluate: --{key.replace('_', '-')}: {str(e).split(' ', 1)[1]}", file=sys.stderr)
        return 2
    try:
        kind = read_record_kind(args.examples).name  # as ExperienceGen wrote it beside the splits
        on_logs = ON_LOGS.get(kind)
        if on_logs is None:
            raise ValueError(
                f"{args.examples} holds {kind} records: they carry no logging probabilities to evaluate a policy from"
            )
        return on_logs(args, config)
    except (ValueError, FileNotFoundError) as e:
        print(f"rlops evaluate: {e}", file=sys.stderr)
        return 2
