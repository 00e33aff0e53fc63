"""Off-policy evaluation, one import for callers: the estimator table and the in-memory engine
(estimators.py), the reward models (reward_models.py) and the hash-derived Poisson bootstrap
(bootstrap.py). The Beam engine is rlops.components.evaluator.beam. See estimators.py for the
definitions."""

from __future__ import annotations

from rlops.components.common.feedback import LoggedFeedback  # noqa: F401
from rlops.components.common.record_keys import file_record_keys  # noqa: F401
from rlops.components.evaluator.bootstrap import (  # noqa: F401
    POISSON,
    bootstrap_sums,
    check_bootstrap_args,
    difference_interval,
    mean_confidence_interval,
    poisson_bootstrap_sums,
    refit_interval,
)
from rlops.components.evaluator.estimate import Estimate  # noqa: F401
from rlops.components.evaluator.estimators import (  # noqa: F401
    DEFAULT_GRID,
    DEFAULT_MIN_ESS,
    DEFAULT_MIN_RECORDS,
    ESTIMATORS,
    LOGGING_POLICY,
    MODEL_FREE,
    TABLE,
    Comparison,
    Diagnostics,
    Estimator,
    apply_action_mask,
    compare,
    effective_sample_size,
    epsilon_greedy_probs,
    estimate,
    greedy_probs,
    importance_weights,
    uniform_probs,
)
from rlops.components.evaluator.reward_models import (  # noqa: F401
    AUTO,
    DEFAULT_BALANCE,
    DEFAULT_DM_REFIT_RECORDS,
    DEFAULT_DM_REFITS,
    DEFAULT_REWARD_MODEL,
    DEFAULT_SAMPLE,
    NETWORK,
    REWARD_MODEL_CHOICES,
    REWARD_MODELS,
    RewardModelFn,
    balancing_weights,
    clip_to_observed,
    evaluated_probability,
    fit_arm_reward_model,
    fit_reward_model,
    refit_dm_replicates,
    resolve_reward_model,
    reward_predictions,
    subset,
)
