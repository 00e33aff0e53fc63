"""Issue 11, the Evaluator's part: one eval record must not bless, the bootstrap's memory is
bounded, and bad evaluator settings fail naming the key."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from rlops.components.evaluator import ope
from rlops.components.evaluator.config import EvaluatorConfig

MEMORY_CHILD = r"""
import json, resource, sys
import numpy as np
from rlops.components.evaluator import ope
n, k = int(sys.argv[1]), 10
rng = np.random.default_rng(0)
actions = rng.integers(0, k, n)
data = ope.LoggedFeedback(np.zeros((n, 1)), actions, (rng.random(n) < 0.1).astype(float), np.full(n, 1 / k))
target, q = ope.uniform_probs(n, k), np.full((n, k), 0.1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
est = ope.compare(data, target, ope.LOGGING_POLICY, q, num_bootstrap=1000)[2]["dr"]
print(json.dumps({"before": before, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "trusted": est.trusted}))
"""


def test_one_logged_click_at_propensity_0_1_is_not_blessed():
    """Reproduced before the fix: every resample is the one row, DR's improvement interval was
    [9, 9] and `lower > 0` blessed it. Now no interval exists and the reason says why."""
    data = ope.LoggedFeedback(np.zeros((1, 2)), np.array([0]), np.array([1.0]), np.array([0.1]))
    _, _, diff = ope.compare(data, ope.greedy_probs(np.array([0]), 3), ope.LOGGING_POLICY, np.zeros((1, 3)))
    assert diff["dr"].value == pytest.approx(9.0)
    assert math.isnan(diff["dr"].lower) and not diff["dr"].lower > 0
    assert "min_eval_records" in diff["dr"].reason


def test_streaming_bootstrap_memory_is_bounded_in_a_subprocess():
    """250k eval rows x 1,000 resamples: the old index bootstrap needed 250k x 1,000 x 8 bytes
    = 2 GB of indices; the streaming one stays within a chunk (~48 MB) plus the per-row terms."""
    proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, "250000"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["trusted"]
    assert out["peak"] - out["before"] < 250, out      # MB beyond the inputs


@pytest.mark.parametrize("key,value", [("num_bootstrap", 0), ("num_bootstrap", "500"), ("num_bootstrap", 2.5),
                                       ("num_episodes", 1), ("num_episodes", True),
                                       ("min_improvement", "1e3"), ("min_improvement", float("nan")),
                                       ("min_improvement", None), ("min_eval_records", 0), ("min_ess", -1.0),
                                       ("reward_model", "forest"), ("switch_tau", "big"), ("dr_os_lambda", -1),
                                       ("use_lower_bound", "yes"), ("confidence", 1.5),
                                       ("reward_model_balance", "no")])
def test_evaluator_settings_are_validated_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"evaluator.{key}"):
        EvaluatorConfig(**{key: value})
    with pytest.raises(ValueError, match=f"evaluator.{key}"):
        EvaluatorConfig.from_json(json.dumps({key: value}) if not (isinstance(value, float) and math.isnan(value))
                                  else '{"%s": NaN}' % key)


def test_too_few_episodes_give_no_interval():
    est = ope.difference_interval(np.array([10.0]), np.array([1.0]), min_episodes=5)
    assert not est.trusted and "only 1 episodes" in est.reason
    assert ope.difference_interval(np.arange(10.0), np.zeros(10)).trusted
