"""Off-policy estimators against a plain-loop reference, and IPS unbiasedness in simulation."""
import numpy as np
import pytest

from rlops.components.evaluator import ope


def loop_reference(ctx, actions, rewards, props, pi, q):
    n = len(actions)
    ips = sum(pi[i][actions[i]] / props[i] * rewards[i] for i in range(n)) / n
    wsum = sum(pi[i][actions[i]] / props[i] for i in range(n))
    snips = sum(pi[i][actions[i]] / props[i] * rewards[i] for i in range(n)) / wsum
    dm = sum(sum(pi[i][a] * q[i][a] for a in range(len(pi[i]))) for i in range(n)) / n
    dr = dm + sum(pi[i][actions[i]] / props[i] * (rewards[i] - q[i][actions[i]]) for i in range(n)) / n
    return {"ips": ips, "snips": snips, "dm": dm, "dr": dr}


def fixed_data(n=200, k=4, seed=0):
    rng = np.random.default_rng(seed)
    ctx = rng.normal(size=(n, 3))
    props = rng.dirichlet(np.ones(k), n)
    actions = np.array([rng.choice(k, p=p) for p in props])
    rewards = rng.normal(size=n) + actions
    data = ope.LoggedFeedback(ctx, actions, rewards, props[np.arange(n), actions])
    pi = rng.dirichlet(np.ones(k), n)
    q = rng.normal(size=(n, k))
    return data, pi, q


def test_estimators_match_loop_reference():
    data, pi, q = fixed_data()
    got = ope.estimate(data, pi, q, num_bootstrap=200)
    ref = loop_reference(data.contexts, data.actions, data.rewards, data.propensities, pi, q)
    for name in ope.ESTIMATORS:
        assert got[name].value == pytest.approx(ref[name], rel=1e-9)
        assert got[name].lower <= got[name].value <= got[name].upper


def test_paired_comparison_difference_and_identity():
    data, pi, q = fixed_data(seed=1)
    cand, base, diff = ope.compare(data, pi, pi, q, num_bootstrap=100)
    for name in ope.ESTIMATORS:
        assert diff[name].value == 0 and diff[name].lower == 0 and diff[name].upper == 0  # same rows, same policy
    other = ope.greedy_probs(np.zeros(len(data.actions), int), 4)
    cand, base, diff = ope.compare(data, pi, other, q, num_bootstrap=100)
    for name in ope.ESTIMATORS:
        assert diff[name].value == pytest.approx(cand[name].value - base[name].value)


def test_ips_is_unbiased_where_the_true_value_is_known():
    """Uniform logging over 5 arms with Bernoulli rewards of known means; the greedy target
    policy's true value lies inside IPS's 95% interval, and the mean estimate over 200
    independent logs is within 3 standard errors of it."""
    k, n = 5, 2_000
    rng = np.random.default_rng(42)
    theta = rng.normal(size=(k, 3))
    estimates, covered = [], 0
    for rep in range(200):
        ctx = rng.normal(size=(n, 3))
        means = 1 / (1 + np.exp(-ctx @ theta.T))                  # [N, K] expected rewards
        actions = rng.integers(0, k, n)
        rewards = (rng.uniform(size=n) < means[np.arange(n), actions]).astype(float)
        target = np.argmax(ctx[:, :1] * np.arange(k), 1)  # a fixed rule, not the optimal policy
        true_value = means[np.arange(n), target].mean()
        data = ope.LoggedFeedback(ctx, actions, rewards, np.full(n, 1.0 / k))
        est = ope.estimate(data, ope.greedy_probs(target, k), num_bootstrap=200, seed=rep)["ips"]
        estimates.append(est.value - true_value)
        covered += est.lower <= true_value <= est.upper
    errors = np.array(estimates)
    assert abs(errors.mean()) < 3 * errors.std() / np.sqrt(len(errors))
    assert covered >= 0.88 * 200   # ~95% nominal coverage


def test_cross_fitted_reward_model_recovers_linear_rewards():
    rng = np.random.default_rng(3)
    ctx = rng.normal(size=(3000, 2))
    actions = rng.integers(0, 3, 3000)
    theta = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 0.0]])
    rewards = (ctx * theta[actions]).sum(1) + 0.1 * rng.normal(size=3000)
    q = ope.fit_reward_model(ctx, actions, rewards, 3)
    np.testing.assert_allclose(q, ctx @ theta.T, atol=0.1)  # ridge shrinks a little


def test_bad_propensity_names_the_row():
    with pytest.raises(ValueError, match="row 1"):
        ope.LoggedFeedback(np.zeros((2, 1)), np.array([0, 1]), np.zeros(2), np.array([0.5, 0.0]))


def test_logging_policy_baseline_is_the_observed_mean_reward():
    data, pi, q = fixed_data(seed=2)
    cand, base, diff = ope.compare(data, pi, ope.LOGGING_POLICY, q, num_bootstrap=100)
    for name in ope.ESTIMATORS:
        assert base[name].value == pytest.approx(data.rewards.mean())
        assert diff[name].value == pytest.approx(cand[name].value - data.rewards.mean())
    # Evaluating the logging policy itself by IPS gives exactly the observed mean too.
    logging_probs = np.zeros_like(pi)
    logging_probs[np.arange(len(data.actions)), data.actions] = data.propensities
    assert ope.estimate(data, logging_probs, num_bootstrap=10)["ips"].value == pytest.approx(data.rewards.mean())
