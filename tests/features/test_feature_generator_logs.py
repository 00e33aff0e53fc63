"""Generator logs (rlops.envs.logged_feedback: four hashed 32-hex user columns, floats, position,
34 items) through the bandit pipeline: zero quarantine, LinUCB trains, evaluates and pushes; the
pushed policy acts on raw strings and beats the uniform policy's true value. (NeuralEpsilonGreedy
on the same kinds of feature -- hashed strings, floats, a position -- runs the whole pipeline in
test_feature_pipeline, and beats uniform on these generator logs in test_per_arm_pipeline.)"""

import glob
import gzip

import numpy as np
import pytest

logged_feedback = pytest.importorskip("rlops.envs.logged_feedback")  # lands with feat-ope
from rlops.pipelines.config import build_config  # noqa: E402
from rlops.pipelines.local import run_local  # noqa: E402
from rlops.train.policy_saver import SavedPolicy  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("agent", ["lin_ucb"])
def test_generator_logs_train_evaluate_push(tmp_path, agent):
    gen = logged_feedback.LogGenerator(logged_feedback.LogConfig(logging="uniform", ctr=0.2, seed=0))
    logs = gen.sample(12000, seed=1)
    paths = logs.to_files(str(tmp_path / "logs"), format="parquet")
    features = list(logs.context_columns)
    raw = {
        "name": f"gen-{agent}",
        "root": str(tmp_path / "root"),
        "warm_start": False,
        "beam_args": ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"],
        "experience_gen": {
            "record_kind": "bandit",
            "source": {"kind": "file", "pattern": paths["impressions"], "format": "parquet"},
            "bandit_columns": {"features": [{"name": f} for f in features]},
            # a quarter held out: the paired DR interval must clear zero
            "splits": {"splits": [{"name": "train", "hash_buckets": 3}, {"name": "eval", "hash_buckets": 1}]},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": gen.num_items - 1},
        },
        "trainer": {
            "agent": agent,
            "train_steps": 100,  # 12,800 examples: the 9,000 train records seen once
            "steps_per_run": 100,
            "batch_size": 128,
            "learning_rate": 0.01,
            "alpha": 0.2,
        },
        "evaluator": {"kind": "bandit", "estimator": "dr", "min_improvement": 0.0, "num_bootstrap": 200, "min_ess": 10},
    }  # a greedy policy over 34 items on uniform logs: ESS ~ n_eval / 34
    run = run_local(build_config("bandit", raw))
    assert run.components["ExperienceGen"] == "COMPLETE"
    quarantine = glob.glob(str(tmp_path / "root" / "**" / "quarantine*.jsonl.gz"), recursive=True)
    assert quarantine and sum(len(gzip.open(f).read().splitlines()) for f in quarantine) == 0
    assert run.blessed and run.pushed, run.blessing_reason
    policy = SavedPolicy(run.pushed_destination)
    fresh = gen.sample(4000, seed=2).contexts()
    actions = policy.actions({k: np.asarray(v) for k, v in fresh.items()})
    k = gen.num_items

    def greedy(ctx):
        return np.eye(k)[policy.actions({c: np.asarray(v) for c, v in ctx.items()})]

    uniform = gen.true_value(lambda ctx: np.full((len(ctx["position"]), k), 1.0 / k))
    assert gen.true_value(greedy) > 1.1 * uniform
    assert set(actions) <= set(range(k))
