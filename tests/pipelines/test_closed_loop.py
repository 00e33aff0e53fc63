"""The nightly loop, closed (benchmarks/closed_loop.py, small): the pushed policy serves simulated
users from a process without rlops, their clicks come from the generator's known click model, the
decisions (with the serving policy's version) are the next night's input, and `rlops run bandit`
ingests, warm-starts, evaluates and pushes. Checked against the generator's exact values."""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlops.train.serving_epsilon import read_serving_epsilon

pytestmark = pytest.mark.slow

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "closed_loop.py"
NIGHTS, DECISIONS = 2, 8_000  # night 1 is served by night 0's push: the loop closes once
# The benchmark's product settings (docs/benchmarks.md, "Closed loop"), smaller: CTR 5% (at the default
# 0.5% a night's eval split holds too few clicks where a new policy differs from the logger for
# any interval to mean something), every night's logs so far, the per-arm two-tower network on
# the log loss, serving epsilon 0.05, blessing on the DR point estimate. (At epsilon 0.2 and the
# default network, as before 2026-11-27, every candidate of these 3 nights was worse than the
# logger in truth, 0.086-0.093 against 0.095: once the split stopped hashing the reward the gate
# rightly pushed none; before, night 0 pushed one below the logger.)
LOOP = dict(
    ctr=0.05,
    serving_epsilon=0.05,
    gate="point_estimate",
    all_nights=True,
    network="dot_product",
    reward_loss="sigmoid_cross_entropy",
    hidden_sizes=(8,),
    item_id_feature=True,
    # what the benchmark trained before it ran the product's defaults (2026-12-08): a 1:1 split,
    # 600 steps of 128 at lr 3e-3, 200 bootstrap replicates
    train_share=1,
    eval_share=1,
    train_steps=600,
    batch_size=128,
    learning_rate=3e-3,
    num_bootstrap=200,
    in_process=True,
)


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("closed_loop", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules["closed_loop"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _write_small_night(cl, gen, night_dir: str) -> None:
    """50 logged decisions of the generator's logging policy, written as a night's logs."""
    logs = gen.sample(50, seed=0)
    impressions = logs.impressions
    cl.write_night(
        night_dir,
        gen,
        logs.contexts(),
        impressions["action"],
        impressions["propensity"],
        impressions["reward"],
        np.zeros(50, np.int64),
    )


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    cl = _load_benchmark()
    work = tmp_path_factory.mktemp("closed_loop")
    config = cl.LoopConfig(nights=NIGHTS, decisions=DECISIONS, seed=0, workdir=str(work), **LOOP)
    return cl, config, cl.run_loop(config, log=lambda *a, **k: None)


# Not reached in this budget by a well-specified learner either (docs/benchmarks.md, "Closed loop"): in 3
# nights of 10k decisions at serving epsilon 0.05 the low-rank reference learner (a rank-4 logistic
# factorization, the click model's own shape, every night's data, pushed every night, no gate)
# ends at 0.53, 0.76 and 0.67 of the way on worlds 0-2. At the budget (5 nights x 20k) it
# does reach 0.8, and the product's mean over worlds 0-2 did too: 0.81 (weight decay 0.3, 1,500
# steps a night, serving epsilon 0.03; 0.76 at 0.05), not over held-out worlds 3-5 (0.72); with the
# Switch-DR gate, mean 0.79 over worlds 0-5, where the reference fitted on the same logs ends only
# 0.01-0.05 higher (world 0: 0.72-0.76). Given 80 passes of 512 a night at lr 1e-3, that gate's
# loop served 0.81-0.88 on all six worlds (session 13; the reference itself clears 0.8 on world 0
# in 9 of 20 draws). Those runs take 14-18 minutes a world: too long for the test command.
@pytest.mark.xfail(
    strict=True,
    reason="not reached at 2 nights x 8k decisions, CTR 5%, serving epsilon 0.05: at 3 nights x 10k "
    "the well-specified low-rank reference learner reaches 0.53 on world 0 "
    "(docs/benchmarks.md, Closed loop); remove this mark when it passes",
)
def test_served_policy_rises_and_closes_most_of_the_gap_to_the_optimum(loop):
    _, _, result = loop
    served = [n.served_value for n in result.nights]
    # Exact values from the generator: the served (epsilon-greedy) policy on the whole population.
    assert result.logging_value < result.optimal_value
    assert served[-1] > result.logging_value and served[-1] >= served[0], served
    assert all(b >= a - 1e-9 for a, b in zip(served, served[1:])), f"a pushed policy was worse in truth: {served}"
    fraction = result.fraction_of_gap(served[-1])
    assert fraction >= 0.8, (
        f"last night's served policy is {fraction:.0%} of the way from the logging policy "
        f"({result.logging_value:.4f}) to the optimum ({result.optimal_value:.4f}): {served}"
    )


def test_every_logged_decision_carries_the_version_pushed_that_night(loop):
    cl, config, result = loop
    serving_dir = os.path.join(config.workdir, "pipeline", "serving")
    published = cl.serving_versions(serving_dir)
    for night in result.nights:
        logged = pd.read_parquet(os.path.join(config.workdir, f"night_{night.night}", "impressions.parquet"))
        assert len(logged) == DECISIONS and logged[cl.VERSION_COLUMN].notna().all()
        versions = set(logged[cl.VERSION_COLUMN].unique())
        if night.night == 0:
            assert versions == {cl.LOGGING_VERSION}  # the generator's logging policy
            continue
        before = result.nights[night.night - 1]
        # The decisions were made by what served after last night's run: the version it pushed,
        # or, when it pushed nothing, the one serving before.
        expected = before.pushed_version if before.pushed_version is not None else before.served_version
        assert versions == {expected}, (night.night, versions, expected)
        if expected != cl.LOGGING_VERSION:
            assert expected in published
    assert any(n.pushed_version is not None for n in result.nights), "the loop never pushed a policy"
    # serving_default answers with its own version (not just the directory it was loaded from).
    assert {n.version_source for n in result.nights if n.served_version != cl.LOGGING_VERSION} == {"signature"}


def test_logged_propensities_are_the_served_policys_probabilities(loop):
    cl, config, result = loop
    night = next(n for n in result.nights[1:] if n.logged_by_version != cl.LOGGING_VERSION)
    logged = pd.read_parquet(os.path.join(config.workdir, f"night_{night.night}", "impressions.parquet"))
    # The epsilon it was published serving: trainer.serving_epsilon, or a larger one the Evaluator
    # certified (evaluator.serving_epsilons) when the trained one could not clear the gate.
    version_dir = os.path.join(config.workdir, "pipeline", "serving", str(night.logged_by_version))
    eps, k = read_serving_epsilon(version_dir), cl.world(config).num_items
    assert eps is not None and eps >= config.serving_epsilon - 1e-6
    # epsilon-greedy over all K items: eps / K off the greedy item, 1 - eps + eps / K on it.
    assert np.isin(np.round(logged["propensity"], 5), np.round([eps / k, 1 - eps + eps / k], 5)).all()
    assert abs(logged["reward"].mean() - night.logged_value) < 4 * np.sqrt(night.logged_value / len(logged))


def test_ope_intervals_hold_the_candidates_true_value_or_miss_by_less_than_their_half_width(loop):
    """Coverage itself is a rate (>= 90% over the benchmark's nights, docs/benchmarks.md): three
    95% intervals all cover only 86% of the time, and a change of thread count re-rolls the
    nights. What must never happen is the bootstrap's collapse: night 1 at one thread per process
    gave DR [-0.015, 0.042] around a true 0.089, a miss of 1.6 half-widths (P < 1e-4 for an
    honest interval); the reward-noise floor widened it to [-0.056, 0.079] (test_ope_noise_floor)."""
    _, _, result = loop
    nights = [n for n in result.nights if n.candidate_covered is not None]  # intervals the Evaluator trusted
    assert nights, "the Evaluator gave no interval on any night"
    far = [
        (n.night, n.candidate_lower, n.candidate_value, n.candidate_upper)
        for n in nights
        if max(n.candidate_lower - n.candidate_value, n.candidate_value - n.candidate_upper)
        > (n.candidate_upper - n.candidate_lower) / 2
    ]
    assert not far, f"OPE intervals that miss the candidate's exact value by more than their half-width: {far}"


@pytest.mark.parametrize("epsilon", [0.05, 0.2])
def test_epsilon_ceiling_is_the_value_of_the_optimum_served_epsilon_greedy(epsilon):
    """The most a policy served with epsilon can reach: the optimum's greedy item, explored uniformly."""
    cl = _load_benchmark()
    config = cl.LoopConfig(seed=0, **dict(LOOP, serving_epsilon=epsilon))
    gen = cl.world(config)
    k = gen.num_items
    served = lambda contexts: (1 - epsilon) * gen.optimal_policy(contexts) + epsilon / k
    logging, optimum = gen.true_value(gen.logging_policy), gen.true_value(gen.optimal_policy)
    expected = (gen.true_value(served) - logging) / (optimum - logging)
    assert abs(cl.epsilon_ceiling(config) - expected) < 1e-9
    assert 0 < expected < 1


def test_the_reference_on_logs_reads_what_the_logs_hold(tmp_path):
    """`--reference-on-logs`: the reference learner fitted on a kept workdir's logs. Logs that
    explore every item let it go most of the way; logs that only ever show one item leave it
    guessing, whatever the learner: the measure of what a product run's own logs allowed."""
    cl = _load_benchmark()
    loop = dict(LOOP, serving_epsilon=0.03, reference_model="lowrank", reference_l2=10.0)
    gen = cl.world(cl.LoopConfig(seed=0, **loop))
    rng = np.random.default_rng(0)
    fractions = {}
    for name, pick in (
        ("uniform", lambda n: rng.integers(0, gen.num_items, n)),
        ("one_item", lambda n: np.zeros(n, int)),
    ):
        config = cl.LoopConfig(nights=2, seed=0, workdir=str(tmp_path / name), **loop)
        for night in range(config.nights):
            contexts = gen.sample_contexts(8_000, seed=night)
            frame = pd.DataFrame(dict(contexts))
            frame["action"] = pick(8_000)
            ctr = gen.expected_ctr(contexts)[np.arange(8_000), frame["action"]]
            frame["reward"] = (rng.random(8_000) < ctr).astype(int)
            os.makedirs(cl.night_directory(config.workdir, night))
            frame.to_parquet(os.path.join(cl.night_directory(config.workdir, night), cl.IMPRESSIONS))
        fractions[name] = cl.reference_on_logs(config)
    assert len(fractions["uniform"]) == 2
    # Measured: 0.37, 0.46 against 0.13, 0.13.
    assert fractions["uniform"][-1] > 0.4 and fractions["one_item"][-1] < fractions["uniform"][-1] - 0.25, fractions


def test_without_flags_the_night_runs_the_products_defaults(tmp_path):
    """The benchmark measures what a user who sets nothing gets: its night config holds only the
    logs' mapping, the trainer's seed and the evaluator's kind and seed; the config the product
    loads then carries the per-arm defaults and the default gate. A flag is written into it."""
    import yaml

    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.trainer.config import PER_ARM_DEFAULTS
    from rlops.pipelines.config import load_config

    cl = _load_benchmark()
    config = cl.LoopConfig(seed=3)
    gen, night_dir = cl.world(config), cl.night_directory(str(tmp_path), 0)
    _write_small_night(cl, gen, night_dir)  # the loader checks that the source matches files
    night = cl.night_yaml(config, gen, str(tmp_path / "root"), night_dir, 0)
    assert night["trainer"] == {"seed": 3} and night["evaluator"] == {"kind": "bandit", "seed": 3}
    assert "splits" not in night["experience_gen"] and "night_*" in night["experience_gen"]["source"]["pattern"]
    path = tmp_path / "night.yaml"
    path.write_text(yaml.safe_dump(night))
    loaded = load_config("bandit", str(path))
    assert loaded.trainer.exploration_epsilon == PER_ARM_DEFAULTS["serving_epsilon"] == config.epsilon
    assert loaded.trainer.network == PER_ARM_DEFAULTS["network"] and loaded.trainer.epochs == 12
    assert loaded.evaluator.max_regression == EvaluatorConfig().max_regression > 0
    strict = cl.night_yaml(cl.LoopConfig(seed=3, gate="lower_bound"), gen, str(tmp_path), night_dir, 0)
    assert strict["evaluator"]["use_lower_bound"] is True and strict["evaluator"]["max_regression"] == 0.0


def test_serving_epsilon_by_night_sets_each_nights_run_and_the_ceiling(tmp_path):
    """`--serving-epsilon-by-night 0.1,0.05,0.03`: night k's pipeline run pushes a policy serving
    at the k-th value (the last repeating), as a nightly job would set trainer.serving_epsilon;
    the ceiling is the last night's."""
    cl = _load_benchmark()
    config = cl.LoopConfig(nights=5, seed=0, **dict(LOOP, serving_epsilon_by_night=(0.1, 0.05, 0.03)))
    gen = cl.world(config)
    served = [
        cl.night_yaml(config, gen, str(tmp_path), str(tmp_path), k)["trainer"]["serving_epsilon"] for k in range(5)
    ]
    assert served == [0.1, 0.05, 0.03, 0.03, 0.03]
    assert cl.epsilon_ceiling(config) == cl.epsilon_ceiling(cl.LoopConfig(seed=0, **dict(LOOP, serving_epsilon=0.03)))
    assert (
        cl.night_yaml(cl.LoopConfig(**LOOP), gen, str(tmp_path), str(tmp_path), 3)["trainer"]["serving_epsilon"] == 0.05
    )


def test_the_references_softmax_exploration_spreads_over_near_ties_with_an_epsilon_floor():
    """`--reference-temperature T`: epsilon uniformly over the items, the rest by softmax(score / T);
    0 is epsilon-greedy exactly, a small T splits between near-tied items only."""
    cl = _load_benchmark()
    scores = np.array([[0.10, 0.30, 0.299, 0.05], [0.2, 0.1, 0.1, 0.1]])
    greedy = cl.reference_serving_probs(scores, 0.04)
    np.testing.assert_allclose(greedy, [[0.01, 0.97, 0.01, 0.01], [0.97, 0.01, 0.01, 0.01]])
    aimed = cl.reference_serving_probs(scores, 0.04, temperature=0.003)
    np.testing.assert_allclose(aimed.sum(1), 1.0)
    assert (aimed >= 0.01 - 1e-12).all()
    # Items 1 and 2 differ by 0.001 in score: softmax weights 1 : exp(-1/3); item 0, 0.2 below, ~0.
    np.testing.assert_allclose(aimed[0, 2] - 0.01, (aimed[0, 1] - 0.01) * np.exp(-1 / 3), rtol=1e-9)
    assert aimed[0, 0] - 0.01 < 1e-12 and aimed[1].argmax() == 0
    np.testing.assert_allclose(cl.reference_serving_probs(scores, 0.04, temperature=100.0), 0.25, atol=1e-3)


def test_num_epochs_replaces_the_step_budget_in_a_config_the_product_loads(tmp_path):
    """`--num-epochs 10`: each night's run makes 10 passes over its train split (the steps grow
    with the logs), no step cap; the night's config loads with the product's strict loader."""
    import yaml

    from rlops.pipelines.config import load_config

    cl = _load_benchmark()
    config = cl.LoopConfig(seed=0, **dict(LOOP, num_epochs=10))
    gen, night_dir = cl.world(config), cl.night_directory(str(tmp_path), 0)
    _write_small_night(cl, gen, night_dir)  # the loader checks that the source matches files
    night = cl.night_yaml(config, gen, str(tmp_path / "root"), night_dir, 0)
    assert night["trainer"]["num_epochs"] == 10 and "train_steps" not in night["trainer"]
    path = tmp_path / "night.yaml"
    path.write_text(yaml.safe_dump(night))
    trainer = load_config("bandit", str(path)).trainer
    assert trainer.epochs == 10 and trainer.max_train_steps is None
    steps = cl.night_yaml(cl.LoopConfig(**dict(LOOP, train_steps=600)), gen, "r", night_dir, 0)["trainer"]
    assert steps["train_steps"] == 600 and "num_epochs" not in steps
    # Neither given: the product's budget (the per-arm default's passes).
    assert {"train_steps", "num_epochs"}.isdisjoint(
        cl.night_yaml(cl.LoopConfig(**dict(LOOP, train_steps=None)), gen, "r", night_dir, 0)["trainer"]
    )


def test_a_draw_reruns_the_same_world_with_other_users_clicks_and_splits():
    """`--draws N`: runs of one world that differ in every draw (users, clicks, explorations, train
    halves) but not in the world (its click model, logging policy and optimum); draw 0 keeps the
    streams every earlier figure used."""
    cl = _load_benchmark()
    base, other = cl.LoopConfig(seed=3, **LOOP), cl.LoopConfig(seed=3, draw=1, **LOOP)
    assert base.rng(2, 3).random() == np.random.default_rng([3, 2, 3]).random()
    assert other.rng(2, 3).random() != base.rng(2, 3).random()
    gen_base, gen_other = cl.world(base), cl.world(other)
    assert gen_base.true_value(gen_base.optimal_policy) == gen_other.true_value(gen_other.optimal_policy)
    users = [gen_base.sample_contexts(50, seed=c.sample_seed(1))["position"] for c in (base, other)]
    assert (users[0] == gen_base.sample_contexts(50, seed=1)["position"]).all() and (users[0] != users[1]).any()
    reference = dict(LOOP, nights=2, decisions=4_000, reference_model="lowrank", reference_l2=10.0)
    runs = [cl.reference_loop(cl.LoopConfig(seed=0, draw=d, **reference)) for d in (0, 1, 0)]
    assert runs[0] == runs[2] and runs[0] != runs[1], runs
    configs = [cl.LoopConfig(seed=s, draw=d) for s in (0, 1) for d in (0, 1, 2)]
    summary = cl.last_night_by_world(configs, [[0.1, 0.7], [0.9], [0.85], [0.2], [0.5], [0.8]])
    assert summary["0"] == {
        "mean": 0.8167,
        "sd": round(float(np.std([0.7, 0.9, 0.85], ddof=1)), 4),
        "min": 0.7,
        "max": 0.9,
        "at_least_0_8": 2,
        "draws": 3,
    }
    assert summary["1"]["at_least_0_8"] == 1 and summary["1"]["mean"] == 0.5
    assert cl.run_directory_name(3, 0) == "seed_3" and cl.run_directory_name(3, 2) == "seed_3_draw_2"
