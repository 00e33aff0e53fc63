"""Parity with Open Bandit Pipeline 0.5.7's slate estimators on its own synthetic data.

The fixtures (tests/golden/make_fixtures_obp_slate.py, generated once in a separate venv with
obp==0.5.7) hold logged slates from `SyntheticSlateBanditDataset` under four reward structures and
click models, a Plackett-Luce evaluation policy, OBP's q_hat for Cascade-DR and OBP's point
estimates. OBP's ground truth is not used: its `cascade` click model's truth multiplies the
expectations of dependent clicks and is not exact (rlops' accuracy checks enumerate instead).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlops.components.evaluator.slate_estimators import SlateLog, SlateTarget, compare_slates

FIXTURES = sorted((Path(__file__).parent.parent / "golden" / "fixtures").glob("obp_slate_*.npz"))


def test_there_are_fixtures_for_at_least_three_configurations():
    configs = {tuple(np.load(path)["config"][:2]) for path in FIXTURES}
    assert len(configs) >= 3


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_estimates_equal_obp(path):
    f = np.load(path)
    n = len(f["slates"])
    log = SlateLog(
        keys=np.arange(n, dtype=np.uint64),
        slates=f["slates"],
        rewards=f["rewards"],
        propensity=f["propensity"],
        propensity_cascade=f["propensity_cascade"],
    )
    # SIPS reads the joint from the prefix probabilities' last slot: OBP's pscore is that number.
    np.testing.assert_allclose(f["propensity_cascade"][:, -1], f["propensity_joint"][:, 0], rtol=1e-12)
    np.testing.assert_allclose(f["target_cascade"][:, -1], f["target_joint"][:, 0], rtol=1e-12)
    target = SlateTarget(
        marginal=f["target_marginal"],
        cascade=f["target_cascade"],
        action_dist=f["target_action_dist"],
        q_hat=f["q_hat"],
    )
    ours = compare_slates(log, target, num_bootstrap=50).candidate
    theirs = dict(zip(f["estimator_names"], f["estimates"]))
    assert set(theirs) == {"sips", "snsips", "iips", "sniips", "rips", "snrips", "cascade_dr"}
    for name, value in theirs.items():
        assert ours[name].value == pytest.approx(value, abs=1e-6), name
    assert "slate_reward" in ours["pi"].reason  # no slate reward logged: skipped, not raised
