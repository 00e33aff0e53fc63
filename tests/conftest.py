"""Test setup shared by the whole suite.

Splits the host CPU into two logical devices before TensorFlow initializes, so strategy tests
can build a two-replica MirroredStrategy on a CPU-only machine. Everything else runs on CPU:0
as usual.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # as the entry points do: see rlops/quiet.py

import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # already initialized by an earlier import
    pass


# Tests marked slow here rather than in their files (several people edit those files at once;
# move a mark into its file when you next touch it). Each takes tens of seconds on 2 cores
# (`make test`'s --durations shows them); `make test-fast` (-m "not slow") leaves them out, and
# `make test` runs them. Keys are node ids without parameters; the value says what it runs.
SLOW = {
    "tests/components/test_ope_varying_candidates.py::test_experience_gen_trainer_evaluator_on_varying_candidates": "ExperienceGen, Trainer and Evaluator end to end (~75 s with its fixture)",
    "tests/components/test_ope_varying_candidates.py::test_rlops_evaluate_on_varying_candidates": "`rlops evaluate` in a subprocess on a trained policy (~40 s)",
    "tests/components/test_trainer_per_arm_warm_start.py::test_same_features_warm_start_acts_like_the_base_then_trains_on": "two per-arm trainings and a warm start (~50 s)",
    "tests/components/test_publish.py::test_concurrent_processes_get_distinct_ordered_versions": "several publishing processes at once, local and GCS (~30 s each)",
    "tests/train/test_learner.py::test_ppo_debug_and_gradient_summaries_under_mirrored_equal_one_replica": "PPO under MirroredStrategy with every summary, against one replica (~50 s)",
    "tests/train/test_learner.py::test_ppo_mirrored_two_replicas_equals_one_replica_on_the_global_batch": "PPO under MirroredStrategy against one replica, twice (~25 s each)",
    "tests/train/test_on_policy.py::test_direct_and_learner_paths_train_the_same": "two PPO trainings compared step by step (~30 s)",
    "tests/features/test_per_arm_pipeline.py::test_per_arm_trainer_beats_uniform_evaluates_and_serves_raw_features": "the per-arm pipeline trained, evaluated and served, per agent (~15-30 s each)",
    "tests/components/test_experience_gen_tfx.py::test_local_dag_runner_with_statistics_gen": "a LocalDagRunner pipeline with TFX's StatisticsGen (~20 s)",
    "tests/components/test_experience_gen_simulation.py::test_epsilon_greedy_around_a_saved_policy_logs_its_propensities": "trains and saves a policy, then simulates logs around it (~25 s)",
    "tests/agents/test_ppo_summaries.py::test_debug_and_gradient_summaries_once_per_train_call": "PPO training with every debug and gradient summary read back (~30 s)",
    "tests/agents/test_ppo_summaries.py::test_through_the_learner_summaries_follow_the_interval": "PPO through the Learner with summaries read back (~15-30 s)",
    "tests/agents/test_ppo.py::test_values_computed_outside_train_match_values_computed_in_train": "two PPO trainings compared, per action space (~20-60 s)",
    "tests/agents/test_bandits.py::test_neural_interaction_loop_compiles_with_xla": "XLA compilation of the neural bandit's interaction loop (~25 s)",
    "tests/train/test_xla_clean.py::test_ppo_update_under_tpu_strategy_has_no_float64": "PPO's update traced under a TPU strategy stand-in, per action space (~30-60 s)",
}


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if item.nodeid.split("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)
