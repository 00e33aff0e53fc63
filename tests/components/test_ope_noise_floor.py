"""The reward-noise floor under the bootstrap intervals (estimators.py's docstring): a candidate
that differs from a near-deterministic logger is judged on the few records where the logger
explored, and a night with no clicks there gave a bootstrap interval of almost no width far from
the truth (the closed loop's night 1: [-0.015, 0.042] around 0.089). Numbers against numpy."""

import math

import numpy as np
import pytest

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import bootstrap, estimators

K, N, EPS = 34, 5000, 0.2  # the closed loop's catalog, an eval half, its serving epsilon
CTR = np.full(K, 0.06)
CTR[0], CTR[1] = 0.10, 0.09  # the logger's greedy item, the candidate's
DR_FAMILY = ("dr", "sndr", "switch_dr", "dr_os")


def _epsilon_greedy(item: int, n: int = N) -> np.ndarray:
    return estimators.epsilon_greedy_probs(np.full(n, item), K, EPS)


def _night(seed: int, n: int = N) -> LoggedFeedback:
    """n decisions of the logger (epsilon-greedy on item 0) with clicks from CTR."""
    rng = np.random.default_rng(seed)
    actions = np.where(rng.random(n) < 1 - EPS, 0, rng.integers(0, K, n))
    rewards = (rng.random(n) < CTR[actions]).astype(float)
    return LoggedFeedback(np.zeros((n, 1)), actions, rewards, _epsilon_greedy(0, n)[np.arange(n), actions])


def _reward_model(candidate_item_ctr: float, n: int = N) -> np.ndarray:
    q = np.tile(CTR, (n, 1))
    q[:, 1] = candidate_item_ctr
    return q


def test_the_floor_is_the_bernoulli_noise_of_each_estimators_coefficients():
    rng = np.random.default_rng(0)
    data = _night(1)
    s = rng.uniform(0.5, 2.0, N)  # record weights
    data = LoggedFeedback(data.contexts, data.actions, data.rewards, data.propensities, weights=s)
    target, q = _epsilon_greedy(1), _reward_model(0.07)
    tau, lam = 50.0, 100.0
    sums = estimators.data_sums(data, [target], q, 100, 0, estimators.make_grids(estimators.DEFAULT_GRID, tau, lam))
    chosen = {term: sums.layout.grids[i].index(value) for i, (term, value) in enumerate((("switch", tau), ("os", lam)))}
    floor = estimators.noise_floor(sums, 0, chosen)

    rows = np.arange(N)
    w = target[rows, data.actions] / data.propensities
    qa = q[rows, data.actions]
    v = qa * (1 - qa)
    total, mean_w = s.sum(), (s * w).sum() / s.sum()
    sd = lambda c: math.sqrt(((s * c) ** 2 * v).sum()) / total  # noqa: E731
    expected = {
        "ips": sd(w),
        "snips": sd(w / mean_w),
        "dm": 0.0,
        "dr": sd(w),
        "sndr": sd(w / mean_w),
        "switch_dr": sd(w * (w <= tau)),
        "dr_os": sd(lam * w / (w**2 + lam)),
    }
    assert floor == pytest.approx(expected, rel=1e-9)


def test_no_floor_for_rewards_that_are_not_clicks_or_without_a_reward_model():
    data = _night(2)
    target, q = _epsilon_greedy(1), _reward_model(0.07)
    grids = estimators.make_grids(estimators.DEFAULT_GRID)
    last = {"switch": len(grids[0]) - 1, "os": len(grids[1]) - 1}
    graded = LoggedFeedback(data.contexts, data.actions, data.rewards * 0.5, data.propensities)  # 0 or 0.5
    assert set(estimators.noise_floor(estimators.data_sums(graded, [target], q, 50, 0, grids), 0, last).values()) == {
        0.0
    }
    assert set(estimators.noise_floor(estimators.data_sums(data, [target], None, 50, 0, grids), 0, last).values()) == {
        0.0
    }
    # The logging policy's estimate is the observed mean: no reward model term, no floor.
    assert set(
        estimators.noise_floor(
            estimators.data_sums(data, [estimators.LOGGING_POLICY], q, 50, 0, grids), 0, last
        ).values()
    ) == {0.0}


def test_a_night_without_clicks_where_the_candidate_differs_gets_a_floored_interval():
    """Find a night whose ~29 records of the candidate's item hold no click: the bootstrap
    alone gives an interval far narrower than the noise those records carry; the floor widens
    it to at least value -/+ z sd and it covers the truth."""
    truth = float(_epsilon_greedy(1, 1)[0] @ CTR)
    target, q = _epsilon_greedy(1), _reward_model(0.07)
    seed, data = next((s, d) for s in range(100) if (d := _night(s)).rewards[d.actions == 1].sum() == 0)
    comparison = estimators.compare(data, target, estimators.LOGGING_POLICY, q, num_bootstrap=200, seed=seed)
    grids = estimators.make_grids(estimators.DEFAULT_GRID)
    sums = estimators.data_sums(data, [target, estimators.LOGGING_POLICY], q, 200, seed, grids)
    result = estimators.policy_result(sums, 0, True, False, {"switch_tau": None, "dr_os_lambda": None})
    z = bootstrap.normal_quantile(0.975)
    dr = comparison.candidate["dr"]
    spread = float(np.std(result.boot["dr"], ddof=1))
    assert result.noise_sd["dr"] > 2 * spread, (result.noise_sd["dr"], spread)  # the bootstrap collapsed
    assert dr.upper - dr.value >= z * result.noise_sd["dr"] - 1e-12
    # ... down to 0, where a click rate's interval ends (clipped to the rewards' [0, 1])
    assert dr.value - dr.lower >= min(z * result.noise_sd["dr"], dr.value) - 1e-12 and dr.lower >= 0.0
    assert dr.lower <= truth <= dr.upper, (dr, truth)
    # metrics.json's trust block reports it (the logger's own estimate has none).
    assert comparison.diagnostics.as_dict()["dr_noise_floor_sd"] == {
        "candidate": result.noise_sd["dr"],
        "baseline": 0.0,
    }
    # The improvement over the logger: the logger's own floor is 0, so the candidate's carries over.
    improvement = comparison.difference["dr"]
    assert improvement.upper - improvement.value >= z * result.noise_sd["dr"] - 1e-12


def test_rare_click_coverage_rises_to_nominal(monkeypatch):
    """200 nights of the setting above, the reward model 22% low on the candidate's item: the
    bootstrap alone covered the truth on 90-92% of them, the floored intervals on >= 95%."""
    truth = float(_epsilon_greedy(1, 1)[0] @ CTR)
    target, q = _epsilon_greedy(1), _reward_model(0.07)

    def coverage() -> dict[str, float]:
        hits = dict.fromkeys(DR_FAMILY + ("ips",), 0)
        for seed in range(200):
            est = estimators.estimate(_night(seed), target, q, num_bootstrap=200, seed=seed)
            for name in hits:
                assert est[name].trusted, est[name].reason
                hits[name] += est[name].lower <= truth <= est[name].upper
        return {name: h / 200 for name, h in hits.items()}

    floored = coverage()
    monkeypatch.setattr(estimators, "noise_floor", lambda sums, p, chosen: dict.fromkeys(estimators.ESTIMATORS, 0.0))
    bootstrap_only = coverage()
    assert all(floored[name] >= 0.95 for name in floored), floored
    assert all(bootstrap_only[name] < floored[name] for name in floored), (bootstrap_only, floored)


def test_plentiful_clicks_the_floor_and_the_bootstrap_agree():
    """Four items, half the traffic explored, CTR 25-35%, the reward model right: the bootstrap
    sees the noise the floor assumes (click rates barely vary across items, so it is nearly all
    the variance there is): the two spreads agree within 20% (IPS also carries the spread of
    w q), and the interval is the percentile one where the bootstrap spreads more, else the
    floor's value -/+ z sd joined to it."""
    n, k = 4000, 4
    rng = np.random.default_rng(3)
    logger = estimators.epsilon_greedy_probs(np.zeros(n, int), k, 0.5)
    actions = rng.choice(k, n, p=logger[0])
    ctr = np.array([0.3, 0.35, 0.25, 0.3])
    rewards = (rng.random(n) < ctr[actions]).astype(float)
    data = LoggedFeedback(np.zeros((n, 1)), actions, rewards, logger[np.arange(n), actions])
    target, q = estimators.epsilon_greedy_probs(np.ones(n, int), k, 0.5), np.tile(ctr, (n, 1))
    grids = estimators.make_grids(estimators.DEFAULT_GRID)
    sums = estimators.data_sums(data, [target], q, 300, 0, grids)
    result = estimators.policy_result(sums, 0, True, False, {"switch_tau": None, "dr_os_lambda": None})
    est = estimators.estimate(data, target, q, num_bootstrap=300, seed=0)
    z = bootstrap.normal_quantile(0.975)
    expected = {}
    for name in ("ips", "snips") + DR_FAMILY:
        boot, floor = result.boot[name], result.noise_sd[name]
        spread = float(np.std(boot, ddof=1))
        assert 0.8 < floor / spread < 1.1, (name, floor, spread)
        lower, upper = float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))
        if spread >= floor:
            expected[name] = (lower, upper)
        else:
            value = est[name].value
            expected[name] = (min(lower, value - z * floor), max(upper, value + z * floor))
    for name in ("switch_dr", "dr_os"):  # joined with DR's (test_ope_switch_interval.py)
        expected[name] = (min(expected[name][0], expected["dr"][0]), max(expected[name][1], expected["dr"][1]))
    for name, interval in expected.items():
        # Equal up to float summation order (a multithreaded BLAS may add the replicates differently).
        assert (est[name].lower, est[name].upper) == pytest.approx(interval, rel=1e-12, abs=1e-15), name


def test_a_candidate_that_never_takes_a_logged_action_is_untrusted_not_an_error():
    """E_s[w] = 0: the self-normalized estimators' floor divides by it (a ZeroDivisionError in the
    first version of the floor); every estimate must come back with the ESS reason instead."""
    data = _night(4)
    never = estimators.greedy_probs(np.full(N, K - 1), K)
    data = LoggedFeedback(
        data.contexts, np.where(data.actions == K - 1, 0, data.actions), data.rewards, data.propensities
    )
    est = estimators.estimate(data, never, _reward_model(0.07), num_bootstrap=50)
    assert set(est) == set(estimators.ESTIMATORS)
    for name, e in est.items():
        assert not e.trusted and "effective sample size" in e.reason, name
