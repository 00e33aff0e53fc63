"""Generate the Open Bandit Pipeline slate goldens (tests/golden/fixtures/obp_slate_*.npz).

Run once, outside the repository's stack (OBP pins torch and an old matplotlib):

    python3.10 -m venv /tmp/obp-venv
    /tmp/obp-venv/bin/pip install obp==0.5.7 "matplotlib<3.9"
    /tmp/obp-venv/bin/python tests/golden/make_fixtures_obp_slate.py

Each configuration draws logged slates from OBP's `SyntheticSlateBanditDataset` (its reward
structure and click model), takes a Plackett-Luce evaluation policy over random logits, fits OBP's
own `SlateRegressionModel` for Cascade-DR's q_hat, and stores the inputs beside the point
estimates of OBP's SIPS, IIPS, RIPS, their self-normalized variants and Cascade-DR.
tests/components/test_slate_estimators_obp.py checks rlops' estimators against them (1e-6).

OBP's ground truth is not stored: its `cascade` click model's `calc_ground_truth_policy_value`
multiplies the expectations of dependent clicks (not exact), and its expected rewards are float16.
Accuracy is checked against exact enumeration instead (tests/components/test_slate_estimators.py,
benchmarks/slate_ope.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from obp.dataset import SyntheticSlateBanditDataset, linear_behavior_policy_logit, logistic_reward_function
from obp.ope import (
    SelfNormalizedSlateIndependentIPS,
    SelfNormalizedSlateRewardInteractionIPS,
    SelfNormalizedSlateStandardIPS,
    SlateCascadeDoublyRobust,
    SlateIndependentIPS,
    SlateRegressionModel,
    SlateRewardInteractionIPS,
    SlateStandardIPS,
)
from sklearn.linear_model import Ridge

OUT = Path(__file__).parent / "fixtures"

# name: (reward_structure, click_model, PL logging over linear logits (else uniform), seed)
CONFIGS = {
    "independent_pbm": ("independent", "pbm", True, 1),
    "cascade_additive_none": ("cascade_additive", None, True, 2),
    "cascade_decay_cascade": ("cascade_decay", "cascade", False, 3),
    "standard_additive_pbm": ("standard_additive", "pbm", True, 4),
}
NUM_ITEMS, NUM_SLOTS, NUM_SLATES, DIM_CONTEXT = 6, 3, 400, 3


def make(name: str, reward_structure: str, click_model: str | None, pl_logging: bool, seed: int) -> None:
    dataset = SyntheticSlateBanditDataset(
        n_unique_action=NUM_ITEMS,
        len_list=NUM_SLOTS,
        dim_context=DIM_CONTEXT,
        reward_type="binary",
        reward_structure=reward_structure,
        click_model=click_model,
        base_reward_function=logistic_reward_function,
        behavior_policy_function=linear_behavior_policy_logit if pl_logging else None,
        random_state=seed,
    )
    log = dataset.obtain_batch_bandit_feedback(n_rounds=NUM_SLATES, return_pscore_item_position=True)
    n, length, k = NUM_SLATES, NUM_SLOTS, NUM_ITEMS
    logits = np.random.default_rng(seed).normal(size=(n, k))
    e_joint, e_marginal, e_cascade = dataset.obtain_pscore_given_evaluation_policy_logit(
        action=log["action"], evaluation_policy_logit_=logits, return_pscore_item_position=True
    )
    action_dist = dataset.calc_evaluation_policy_action_dist(action=log["action"], evaluation_policy_logit_=logits)
    q_hat = SlateRegressionModel(
        base_model=Ridge(alpha=1.0), len_list=length, n_unique_action=k, fitting_method="normal"
    ).fit_predict(
        context=log["context"],
        action=log["action"],
        reward=log["reward"],
        pscore_cascade=log["pscore_cascade"],
        evaluation_policy_pscore_cascade=e_cascade,
        evaluation_policy_action_dist=action_dist,
    )
    common = dict(slate_id=log["slate_id"], reward=log["reward"], position=log["position"])
    estimates = {
        "sips": SlateStandardIPS(len_list=length).estimate_policy_value(
            **common, pscore=log["pscore"], evaluation_policy_pscore=e_joint
        ),
        "snsips": SelfNormalizedSlateStandardIPS(len_list=length).estimate_policy_value(
            **common, pscore=log["pscore"], evaluation_policy_pscore=e_joint
        ),
        "iips": SlateIndependentIPS(len_list=length).estimate_policy_value(
            **common,
            pscore_item_position=log["pscore_item_position"],
            evaluation_policy_pscore_item_position=e_marginal,
        ),
        "sniips": SelfNormalizedSlateIndependentIPS(len_list=length).estimate_policy_value(
            **common,
            pscore_item_position=log["pscore_item_position"],
            evaluation_policy_pscore_item_position=e_marginal,
        ),
        "rips": SlateRewardInteractionIPS(len_list=length).estimate_policy_value(
            **common, pscore_cascade=log["pscore_cascade"], evaluation_policy_pscore_cascade=e_cascade
        ),
        "snrips": SelfNormalizedSlateRewardInteractionIPS(len_list=length).estimate_policy_value(
            **common, pscore_cascade=log["pscore_cascade"], evaluation_policy_pscore_cascade=e_cascade
        ),
        "cascade_dr": SlateCascadeDoublyRobust(len_list=length, n_unique_action=k).estimate_policy_value(
            **common,
            action=log["action"],
            pscore_cascade=log["pscore_cascade"],
            evaluation_policy_pscore_cascade=e_cascade,
            q_hat=q_hat,
            evaluation_policy_action_dist=action_dist,
        ),
    }
    slate = (n, length)
    np.savez_compressed(
        OUT / f"obp_slate_{name}.npz",
        slates=log["action"].reshape(slate),
        rewards=log["reward"].reshape(slate).astype(float),
        propensity=log["pscore_item_position"].reshape(slate),
        propensity_cascade=log["pscore_cascade"].reshape(slate),
        propensity_joint=log["pscore"].reshape(slate),
        target_marginal=e_marginal.reshape(slate),
        target_cascade=e_cascade.reshape(slate),
        target_joint=e_joint.reshape(slate),
        target_action_dist=action_dist.reshape(n, length, k),
        q_hat=q_hat.reshape(n, length, k),
        estimator_names=np.array(list(estimates)),
        estimates=np.array([float(v) for v in estimates.values()]),
        config=np.array([reward_structure, str(click_model), "pl" if pl_logging else "uniform"]),
    )
    print(name, {key: round(float(v), 6) for key, v in estimates.items()})


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for config_name, args in CONFIGS.items():
        make(config_name, *args)
