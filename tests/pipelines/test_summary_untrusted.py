"""The run summary of an untrusted comparison: the reason, as before, and the point estimates the
Evaluator did not trust (metrics.json's `untrusted_value`), labelled as such, where before they
were only in `rlops evaluate --json`. A trusted comparison's lines are unchanged."""

from __future__ import annotations

import math

from rlops.components.evaluator.estimate import Estimate
from rlops.pipelines.local import RunSummary, _key_metrics

WHY = "effective sample size of the importance weights too small: candidate 18.6 < 30 (min_ess); log with more exploration"


def _untrusted_metrics() -> dict:
    return {
        "baseline": "logging_policy",
        "eval_records": 400,
        "candidate": {
            "dr": Estimate(0.05123, math.nan, math.nan, WHY).as_dict(),
            "snips": Estimate(0.04981, math.nan, math.nan, WHY).as_dict(),
            "ips": Estimate(math.nan, math.nan, math.nan, WHY).as_dict(),  # no number at all: left out
        },
        "improvement": {
            "dr": Estimate(0.01204, math.nan, math.nan, WHY).as_dict(),
            "snips": Estimate(-0.00312, math.nan, math.nan, WHY).as_dict(),
            "ips": Estimate(math.nan, math.nan, math.nan, WHY).as_dict(),
        },
        "trust": {"trusted": False, "reason": WHY},
    }


def test_the_summary_prints_the_untrusted_point_estimates_labelled_as_untrusted():
    lines = _key_metrics(_untrusted_metrics())
    assert lines["estimates"] == f"none: {WHY}"  # the reason, as before
    assert lines["untrusted_estimates"] == (
        "candidate dr 0.0512, snips 0.0498; improvement dr +0.0120, snips -0.0031 "
        "(point estimates without an interval, not trusted: see estimates)"
    )
    assert not any(k.startswith(("candidate_", "improvement_")) for k in lines), lines  # never read as results


def test_the_rendered_summary_labels_them_and_gives_the_reason_once():
    summary = RunSummary(
        "p",
        1.0,
        metrics=_key_metrics(_untrusted_metrics()),
        blessed=False,
        blessing_reason=f"not blessed: no trustworthy estimate of the improvement in dr: {WHY}",
    )
    text = summary.render()
    assert f"  estimates: none: {WHY}\n  untrusted_estimates: candidate dr 0.0512, snips 0.0498; " in text, text
    assert text.count(WHY) == 1, text
    assert "blessed: False  (not blessed: no trustworthy estimate of the improvement in dr: see estimates)" in text


def test_an_untrusted_run_without_any_number_has_no_such_line():
    metrics = {
        "baseline": "logging_policy",
        "candidate": {},
        "improvement": {},
        "trust": {"trusted": False, "reason": WHY},
    }
    assert _key_metrics(metrics) == {"baseline": "logging_policy", "estimates": f"none: {WHY}"}


def test_a_trusted_run_keeps_its_lines():
    metrics = {
        "baseline": "logging_policy",
        "candidate": {"dr": Estimate(0.1939, 0.1095, 0.2751).as_dict()},
        "improvement": {"dr": Estimate(0.1435, 0.0592, 0.2211).as_dict()},
        "trust": {"trusted": True, "reason": None},
    }
    assert _key_metrics(metrics) == {
        "baseline": "logging_policy",
        "candidate_dr": "0.1939 [0.1095, 0.2751]",
        "improvement_dr": "+0.1435 [+0.0592, +0.2211]",
    }
