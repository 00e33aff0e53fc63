"""The ranking path's pieces that need no trained model (the trained path end to end is
tests/pipelines/test_ranking_pipeline.py): the Evaluator's exact terms of a slate policy on logged
pages, shorter pages included, against brute-force enumeration; the Trainer's one line for logs
that hold no slates."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlops.components.common.slates import SlateLogs
from rlops.components.evaluator.slate_evaluation import slate_log
from rlops.components.evaluator.slate_policy import policy_target
from rlops.components.trainer.config import TrainerConfig, apply_per_arm_defaults
from rlops.components.trainer.core import run_trainer
from rlops.heads.slate.probabilities import EpsilonPerSlot, PlackettLuce, brute_force_slate_probs

K, L = 5, 3


@pytest.mark.parametrize("policy", [PlackettLuce(0.7), EpsilonPerSlot(0.2)], ids=repr)
def test_a_policys_terms_on_logged_pages_are_the_enumerated_probabilities(policy):
    slates = np.array([[4, 0, 2], [1, 3, -1], [2, -1, -1]])  # a full page, two shorter ones
    n = len(slates)
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(n, K))
    logs = SlateLogs(
        keys=np.arange(n, dtype=np.uint64),
        slate_ids=np.array(["a", "b", "c"], object),
        slates=slates,
        rewards=np.where(slates >= 0, rng.integers(0, 2, slates.shape), 0).astype(float),
        propensity=np.full(slates.shape, 0.2),
        propensity_cascade=np.cumprod(np.full(slates.shape, 0.2), 1),
        num_items=K,
    )
    target = policy_target(policy, scores, logs, slate_log(logs))
    every, probs = brute_force_slate_probs(policy, scores, L)  # [S, L], [n, S]
    for i in range(n):
        for slot in np.flatnonzero(slates[i] >= 0):
            at = every[:, slot] == slates[i, slot]
            prefix = (every[:, : slot + 1] == slates[i, : slot + 1]).all(1)
            assert target.marginal[i, slot] == pytest.approx(probs[i, at].sum(), abs=1e-9)
            assert target.cascade[i, slot] == pytest.approx(probs[i, prefix].sum(), rel=1e-9)
            above = (every[:, :slot] == slates[i, :slot]).all(1)
            given = np.bincount(every[above, slot], probs[i, above], minlength=K) / probs[i, above].sum()
            np.testing.assert_allclose(target.action_dist[i, slot], given, atol=1e-12)


def test_logs_that_are_not_slates_are_one_line(tmp_path):
    """Bandit Examples given to the ranking agent: one line saying what the records are."""
    from rlops.components.common.records import split_file_pattern

    examples = tmp_path / "examples"
    path = split_file_pattern(str(examples), "train").replace("*", "data-00000-of-00001")
    tf.io.gfile.makedirs(str(tmp_path / "examples" / "Split-train"))
    example = tf.train.Example(
        features=tf.train.Features(feature={"action": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))})
    )
    with tf.io.TFRecordWriter(path, "GZIP") as w:
        w.write(example.SerializeToString())
    config = TrainerConfig.from_dict(apply_per_arm_defaults({"agent": "ranking"}))
    with pytest.raises(ValueError, match="holds no slate records") as e:
        run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), str(examples))
    assert "\n" not in str(e.value)
