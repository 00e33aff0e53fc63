"""Issue 11, the Evaluator's part: one eval record must not bless, the bootstrap's memory is
bounded, and bad evaluator settings fail naming the key."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import fresh_python

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import bootstrap, estimators
from rlops.components.evaluator.config import EvaluatorConfig

MEMORY_CHILD = r"""
import json, resource, sys
import numpy as np
from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator import estimators
n, k = int(sys.argv[1]), 10
rng = np.random.default_rng(0)
actions = rng.integers(0, k, n)
data = LoggedFeedback(np.zeros((n, 1)), actions, (rng.random(n) < 0.1).astype(float), np.full(n, 1 / k))
target, q = estimators.uniform_probs(n, k), np.full((n, k), 0.1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
est = estimators.compare(data, target, estimators.LOGGING_POLICY, q, num_bootstrap=1000)[2]["dr"]
print(json.dumps({"before": before, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "trusted": est.trusted}))
"""


def test_one_logged_click_at_propensity_0_1_is_not_blessed():
    """Reproduced before the fix: every resample is the one row, DR's improvement interval was
    [9, 9] and `lower > 0` blessed it. Now no interval exists and the reason says why."""
    data = LoggedFeedback(np.zeros((1, 2)), np.array([0]), np.array([1.0]), np.array([0.1]))
    _, _, diff = estimators.compare(
        data, estimators.greedy_probs(np.array([0]), 3), estimators.LOGGING_POLICY, np.zeros((1, 3))
    )
    assert diff["dr"].value == pytest.approx(9.0)
    assert math.isnan(diff["dr"].lower) and not diff["dr"].lower > 0
    assert "min_eval_records" in diff["dr"].reason


def test_streaming_bootstrap_memory_is_bounded_in_a_subprocess():
    """250k eval rows x 1,000 resamples: the old index bootstrap needed 250k x 1,000 x 8 bytes
    = 2 GB of indices; the streaming one stays within a chunk (~48 MB) plus the per-row terms."""
    proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, "250000"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["trusted"]
    assert out["peak"] - out["before"] < 250, out  # MB beyond the inputs


@pytest.mark.parametrize(
    "key,value",
    [
        ("num_bootstrap", 0),
        ("num_bootstrap", "500"),
        ("num_bootstrap", 2.5),
        ("num_episodes", 1),
        ("num_episodes", True),
        ("min_improvement", "1e3"),
        ("min_improvement", float("nan")),
        ("min_improvement", None),
        ("min_eval_records", 0),
        ("min_ess", -1.0),
        ("reward_model", "forest"),
        ("switch_tau", "big"),
        ("dr_os_lambda", -1),
        ("use_lower_bound", "yes"),
        ("confidence", 1.5),
        ("reward_model_balance", "no"),
    ],
)
def test_evaluator_settings_are_validated_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"evaluator.{key}"):
        EvaluatorConfig(**{key: value})
    with pytest.raises(ValueError, match=f"evaluator.{key}"):
        EvaluatorConfig.from_json(
            json.dumps({key: value}) if not (isinstance(value, float) and math.isnan(value)) else '{"%s": NaN}' % key
        )


def test_too_few_episodes_give_no_interval():
    est = bootstrap.difference_interval(np.array([10.0]), np.array([1.0]), min_episodes=5)
    assert not est.trusted and "only 1 episodes" in est.reason
    assert bootstrap.difference_interval(np.arange(10.0), np.zeros(10)).trusted


# ---- issue 20: an untrustworthy estimate is NOT_BLESSED with its reason, and the run succeeds ----

SMALL_RUN = [
    "experience_gen.source.num_records=1500",
    "trainer.train_steps=100",
    "trainer.steps_per_run=100",
    "evaluator.num_bootstrap=100",
    "evaluator.dm_refits=10",
]


def _run_bandit(root, overrides):
    """`rlops run bandit` in its own process, as a user runs it: exit code and output. The process
    is the suite's warm interpreter when there is one (conftest.warm_fresh_python: forked from one
    that has imported TensorFlow and nothing of rlops)."""
    args = [fresh_python(), "-m", "rlops.pipelines.cli", "run", "bandit", "--set", f"root={root}"]
    for item in SMALL_RUN + overrides:
        args += ["--set", item]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_low_ess_is_not_blessed_with_its_reason_and_the_run_exits_0(tmp_path):
    """Reproduced before the fix: NOT BLESSED was logged, then ML Metadata refused the NaN lower
    bound ('no such column: nan ... candidate_sndr_lower'), exit 1, 'looks like a bug in rlops'."""
    out = _run_bandit(tmp_path, ["evaluator.min_eval_records=10", "evaluator.min_ess=100000"])
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "blessed: False" in text and "effective sample size" in text and "min_ess" in text
    assert "pushed: False" in text and "looks like a bug" not in text and "no such column" not in text
    # The summary says why there is no estimate (and what would make one) instead of printing
    # untrusted numbers or [nan, nan].
    assert "estimates: none: effective sample size" in out.stdout and "more exploration" in out.stdout
    assert "[nan" not in out.stdout and "candidate_dr:" not in out.stdout, out.stdout[-2000:]


@pytest.mark.slow
def test_empty_eval_split_is_not_blessed_with_its_reason_and_the_run_exits_0(tmp_path):
    # One bucket in a million for eval: 1,500 records leave it empty; no minimum, so it gets that far.
    out = _run_bandit(
        tmp_path,
        [
            'experience_gen.splits.splits=[{"name": "train", "hash_buckets": 1000000}, '
            '{"name": "eval", "hash_buckets": 1}]',
            'experience_gen.min_split_records={"eval": 0}',
        ],
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "blessed: False" in text and "the eval split has no records" in text


def test_properties_are_finite_or_absent():
    from rlops.components.evaluator.core import EvalResult, scalar_metrics
    from rlops.components.properties import finite_properties, set_custom_properties

    props = finite_properties(
        {
            "a": 1.5,
            "b": math.nan,
            "c": math.inf,
            "d": np.float32(-np.inf),
            "e": 3,
            "f": "text",
            "g": True,
            "h": {"x": math.nan, "y": [1.0, math.inf]},
        }
    )
    assert props == {"a": 1.5, "e": 3, "f": "text", "g": True, "h": {"x": None, "y": [1.0, None]}}
    nan = {"value": 0.5, "lower": math.nan, "upper": math.nan, "reason": "too few"}
    result = EvalResult(False, "too few", {"candidate": {"dr": nan}, "improvement": {"dr": dict(nan, value=math.nan)}})
    assert scalar_metrics(result) == {"candidate_dr": 0.5, "blessed": 0.0}

    class Artifact:  # TFX's typed setters, recorded
        def __init__(self):
            self.props = {}

        def set_int_custom_property(self, k, v):
            self.props[k] = ("int", v)

        def set_float_custom_property(self, k, v):
            self.props[k] = ("float", v)

        def set_string_custom_property(self, k, v):
            self.props[k] = ("string", v)

    artifact = Artifact()
    set_custom_properties(artifact, {"blessed": True, "loss": math.nan, "rate": 2.0, "reason": "r", "id": 7})
    assert artifact.props == {
        "blessed": ("int", 1),
        "rate": ("float", 2.0),
        "reason": ("string", "r"),
        "id": ("int", 7),
    }


def test_kfp_evaluator_writes_no_nan_metadata_or_metrics(monkeypatch):
    """The KFP entrypoint's evaluator step on an untrustworthy estimate: the blessing says
    NOT_BLESSED with the reason; the Metrics artifact gets only finite scalars (KFP writes its
    metadata as JSON, where NaN is not a value)."""
    from rlops.components.evaluator import core
    from rlops.components.kfp import entrypoint

    nan = {"value": 0.5, "lower": math.nan, "upper": math.nan, "reason": "ESS 4.0 < 30 (min_ess)"}
    result = core.EvalResult(
        False,
        "not blessed: ESS 4.0 < 30 (min_ess)",
        {
            "baseline": "logging_policy",
            "candidate": {"dr": nan, "sndr": nan},
            "candidate_greedy": {"dr": dict(nan, value=math.nan)},
            "improvement": {"dr": nan},
        },
    )
    monkeypatch.setattr(core, "run_evaluator", lambda *a, **k: result)

    class Artifact:
        def __init__(self, name):
            self.uri, self.name, self.metadata, self.logged = f"/tmp/{name}", name, {}, {}

        def log_metric(self, key, value):
            assert math.isfinite(value), (key, value)
            self.logged[key] = value

    evaluation, blessing = Artifact("evaluation"), Artifact("blessing")
    blessed = entrypoint.evaluator(
        "{}", Artifact("model"), evaluation, blessing, examples=Artifact("examples"), num_actions=4
    )
    assert blessed is False and blessing.metadata["blessed"] == 0 and "min_ess" in blessing.metadata["reason"]
    assert evaluation.logged == {"candidate_dr": 0.5, "candidate_sndr": 0.5, "improvement_dr": 0.5}
    json.dumps(blessing.metadata, allow_nan=False)
