"""OPE you can trust on production-shaped logs: the uniform policy's value, estimated from
Thompson-sampling-like logs (n = 10,000, CTR ~0.8%), lies inside the DR family's 95% intervals
in at least 90% of 20 seeds. The truth is exact (the generator's click model), not simulated."""

import numpy as np
import pytest

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import estimators, reward_models
from rlops.envs.logged_feedback import LogConfig, LogGenerator

# Slow: interval coverage over many simulated seeds; `make test` runs it.
pytestmark = pytest.mark.slow

DR_FAMILY = ("dr", "sndr", "switch_dr", "dr_os")


def test_dr_family_intervals_cover_the_uniform_policys_true_value():
    gen = LogGenerator(LogConfig(logging="thompson", seed=0))
    truth = gen.true_value(gen.uniform_policy)
    assert gen.true_value(gen.logging_policy) > 1.3 * truth  # the logs favour other items: a real shift
    covered = {name: 0 for name in DR_FAMILY}
    errors = {name: [] for name in DR_FAMILY + ("dm",)}
    for seed in range(20):
        logs = gen.sample(10_000, seed=seed)
        imp = logs.impressions
        data = LoggedFeedback(
            gen.encode(logs.contexts()), imp["action"], imp["reward"].astype(float), imp["propensity"]
        )
        q = reward_models.reward_predictions("logistic", data, gen.num_items, seed=seed)  # balanced
        est = estimators.estimate(
            data, estimators.uniform_probs(len(data.actions), gen.num_items), q, num_bootstrap=200, seed=seed
        )
        for name in DR_FAMILY:
            assert est[name].trusted, est[name].reason
            covered[name] += est[name].lower <= truth <= est[name].upper
        for name in errors:
            errors[name].append(abs(est[name].value - truth) / truth)
    assert all(c >= 18 for c in covered.values()), covered
    # Mean relative error; DM too, thanks to the balanced reward model (unbalanced: 0.37).
    assert all(np.mean(e) < 0.2 for e in errors.values()), {k: np.mean(e) for k, e in errors.items()}


@pytest.mark.slow
def test_dm_interval_with_reward_model_refits_covers_the_true_value():
    """DM's interval from the fixed reward model covered the uniform policy's value in 9 of 20
    seeds (docs/notes.md); refitting the model within the bootstrap brings it to >= 17 of 20."""
    gen = LogGenerator(LogConfig(logging="thompson", seed=0))
    truth = gen.true_value(gen.uniform_policy)
    fixed = refit = 0
    for seed in range(20):
        logs = gen.sample(10_000, seed=seed)
        imp = logs.impressions
        data = LoggedFeedback(
            gen.encode(logs.contexts()), imp["action"], imp["reward"].astype(float), imp["propensity"]
        )
        target = estimators.uniform_probs(len(data.actions), gen.num_items)
        q = reward_models.reward_predictions("logistic", data, gen.num_items, seed=seed)
        dm = estimators.estimate(data, target, q, num_bootstrap=100, seed=seed)["dm"]
        fixed += dm.lower <= truth <= dm.upper
        refits = reward_models.refit_dm_replicates(
            data, [target], "logistic", gen.num_items, replicates=10, max_records=5_000, seed=seed
        )
        dm = estimators.estimate(data, target, q, num_bootstrap=100, seed=seed, dm_refits=refits)["dm"]
        refit += dm.lower <= truth <= dm.upper
    assert fixed <= 12 and refit >= 17, (fixed, refit)
