"""The blessing rule (evaluator/gate.py): the three rules, the margin's scale, and what the config
accepts. The rule's promise (how often a push is worse than the incumbent by more than the margin)
is measured by benchmarks/closed_loop.py; here, by simulation of the interval it reads."""

import numpy as np
import pytest

from rlops.components.evaluator import gate
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate


def test_the_default_rule_ships_an_estimated_better_policy_that_is_confidently_not_much_worse():
    config = EvaluatorConfig()  # use_lower_bound, max_regression 0.05
    baseline = 0.20  # tolerated: 0.01
    assert gate.judge(config, Estimate(0.02, -0.009, 0.05), baseline).clears
    assert not gate.judge(config, Estimate(0.02, -0.011, 0.05), baseline).clears  # could be worse by > 5%
    assert not gate.judge(config, Estimate(-0.001, -0.005, 0.003), baseline).clears  # estimated worse
    verdict = gate.judge(config, Estimate(0.02, -0.011, 0.05), baseline)
    assert verdict.clause == (
        "point estimate 0.0200 > 0.0 and lower 95% bound -0.0110 <= -0.0100 (5% of the baseline's 0.2000)"
    )
    assert gate.margin(config, -0.2) == pytest.approx(0.01)  # a cost: the margin is a share of its size


def test_the_strict_and_the_point_estimate_rules():
    strict = EvaluatorConfig(max_regression=0.0)
    assert not gate.judge(strict, Estimate(0.02, -0.001, 0.05), 0.2).clears
    assert gate.judge(strict, Estimate(0.02, 0.001, 0.05), 0.2).clears
    # No baseline estimate to scale the margin by: the strict rule.
    assert gate.margin(EvaluatorConfig(), None) is None
    assert not gate.judge(EvaluatorConfig(), Estimate(0.02, -0.001, 0.05), None).clears
    point = EvaluatorConfig(use_lower_bound=False)
    assert gate.judge(point, Estimate(0.001, -0.5, 0.5), 0.2).clears
    assert gate.margin(point, 0.2) is None
    with_floor = EvaluatorConfig(min_improvement=0.01)
    assert not gate.judge(with_floor, Estimate(0.009, 0.0, 0.02), 0.2).clears
    # A negative min_improvement (push unless much worse) is looser than the margin: it applies.
    tolerant = EvaluatorConfig(min_improvement=-1.0)
    verdict = gate.judge(tolerant, Estimate(0.0172, -0.1096, 0.15), 0.6207)
    assert verdict.clears and verdict.clause.endswith("> -1.0000 (min_improvement)")


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), "5%"])
def test_max_regression_outside_a_share_is_a_one_line_error(bad):
    with pytest.raises(ValueError, match=r"^evaluator\.max_regression must be a share in \[0, 1\)"):
        EvaluatorConfig(max_regression=bad)


def test_the_promise_holds_where_the_interval_holds():
    """Normal estimates with a 95% interval: among candidates truly worse than the baseline by more
    than the margin, the rule ships at most the share whose interval misses low (2.5%); of those
    better by more than 5% it ships more than the strict rule does."""
    rng = np.random.default_rng(0)
    config, baseline, se = EvaluatorConfig(), 0.2, 0.02
    tolerated = gate.margin(config, baseline)
    truths = rng.uniform(-0.05, 0.05, 200_000)
    values = truths + rng.normal(0, se, truths.size)
    shipped = np.array([gate.judge(config, Estimate(v, v - 1.96 * se, v + 1.96 * se), baseline).clears for v in values])
    much_worse = truths < -tolerated
    assert shipped[much_worse].mean() <= 0.025
    better = truths > 0.01
    strict = EvaluatorConfig(max_regression=0.0)
    shipped_strict = np.array(
        [gate.judge(strict, Estimate(v, v - 1.96 * se, v + 1.96 * se), baseline).clears for v in values[better]]
    )
    assert shipped[better].mean() > shipped_strict.mean() + 0.1  # measured: 0.51 against 0.35
