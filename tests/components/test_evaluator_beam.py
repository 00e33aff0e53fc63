"""The Beam engine against the in-memory one: one estimator table, one hash-derived bootstrap,
so both give the same estimates, intervals and ESS (<= 1e-9) -- through the CombineFn on per-arm
records with varying candidates, masks and weights, and end to end on 40k records (SavedModels
scored on the workers, the reward model fitted on a hash sample) with 1 and 2 DirectRunner
workers, and on per-arm Examples with fixed and varying candidate sets (the first pass's item
catalog numbers items as the in-memory engine does). Bad input is one line or NOT_BLESSED with a
reason."""

import dataclasses
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from helpers import fresh_python
from linear_policies import save_linear_policy

from rlops.components.common import feedback, records
from rlops.components.common.feedback import LoggedFeedback
from rlops.components.common.model import NOT_BLESSED_FILE
from rlops.components.evaluator import beam as beam_engine, bootstrap, core, estimators, on_logs
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.experience_gen.records import encode_bandit

# Slow: the Beam engine against the in-memory one on 40k records; `make test` runs it.
N = 40_000  # 2 shards of 2 read batches each: bundles, workers and chunks all split the sums
pytestmark = pytest.mark.slow

D, K = 3, 4
THETA = np.array([[1.5, 0.0, -1.0], [-1.0, 1.5, 0.0], [0.0, -1.0, 1.5], [-0.5, -0.5, -0.5]])
TOL = 1e-9


def assert_same_estimates(a: dict, b: dict):
    assert set(a) == set(b)
    for name in a:
        for field in ("value", "lower", "upper"):
            x, y = a[name][field], b[name][field]
            if x is None or y is None:  # untrusted: null on both engines
                assert x is None and y is None, (name, field, x, y)
                continue
            assert (math.isnan(x) and math.isnan(y)) or abs(x - y) <= TOL, (name, field, x, y)


# ---- the CombineFn on arrays -----------------------------------------------------------------------


def _varying(n=3000, seed=0):
    """Per-arm records with varying candidate sets (padding slots), a mask, and record weights."""
    rng = np.random.default_rng(seed)
    k, m = 5, 12
    items = np.stack([rng.permutation(m)[:k] for _ in range(n)])
    items[:, 2:][rng.random((n, k - 2)) < 0.4] = -1
    items[:, 2:] = -np.sort(-items[:, 2:], 1)
    mask = (items >= 0).astype(float)
    props = mask / mask.sum(1, keepdims=True)
    actions = np.array([rng.choice(k, p=p) for p in props])
    rewards = rng.binomial(1, 0.2 + 0.05 * (actions % 3)).astype(float)
    data = LoggedFeedback(
        rng.normal(size=(n, 2)),
        actions,
        rewards,
        props[np.arange(n), actions],
        weights=rng.integers(0, 3, n).astype(float),
        action_mask=mask,
        items=items,
        item_features=rng.normal(size=(m, 2)),
        keys=rng.integers(0, 2**63, n, dtype=np.uint64),
    )
    target = rng.dirichlet(np.ones(k), n) * mask
    target /= target.sum(1, keepdims=True)
    q = np.where(mask > 0, rng.random((n, k)), 0.0)
    return data, target, q


def _masked(n=4000, seed=1):
    """Fixed actions with an action mask, record weights and a greedy target."""
    rng = np.random.default_rng(seed)
    mask = np.ones((n, K))
    mask[: n // 3, 3] = 0
    props = mask / mask.sum(1, keepdims=True)
    actions = np.array([rng.choice(K, p=p) for p in props])
    data = LoggedFeedback(
        rng.normal(size=(n, D)),
        actions,
        rng.normal(size=n) + actions,
        props[np.arange(n), actions],
        weights=rng.random(n) * 2,
        action_mask=mask,
    )
    return data, estimators.greedy_probs(rng.integers(0, 3, n), K), rng.normal(size=(n, K))


def _combine_on_beam(data, policies, q, num_bootstrap, seed, grids, batch_sizes):
    """The same columns fed to TermsCombineFn in uneven, shuffled batches on the DirectRunner."""
    import apache_beam as beam

    prepared = [p if isinstance(p, str) else estimators.prepare_policy(p, data, q, "policy") for p in policies]
    layout = estimators.Layout(len(policies), grids)
    columns = estimators.record_columns(
        data.actions, data.rewards, data.propensities, data.record_weights, prepared, q, grids
    )
    bounds = np.cumsum([0] + list(batch_sizes))
    batches = [(columns[a:b], data.record_keys[a:b], np.zeros(K)) for a, b in zip(bounds[:-1], bounds[1:]) if a < b]
    batches = [batches[i] for i in np.random.default_rng(seed).permutation(len(batches))]
    combine = beam_engine.terms_combine_fn()(layout, num_bootstrap, seed)

    def build(p):
        return p | beam.Create(batches, reshuffle=False) | beam.CombineGlobally(combine)

    return beam_engine.run_pipeline(build, None, tempfile.mkdtemp(prefix="combine-")).sums


@pytest.mark.parametrize("case", ["varying_candidates", "masks_and_weights"])
def test_combine_fn_gives_the_in_memory_comparison(case):
    data, target, q = _varying() if case == "varying_candidates" else _masked()
    n, seed, b = len(data.actions), 3, 200
    grids = estimators.make_grids(estimators.DEFAULT_GRID)
    policies = [target, estimators.LOGGING_POLICY]
    memory = estimators.compare(data, target, estimators.LOGGING_POLICY, q, num_bootstrap=b, seed=seed, min_ess=0)
    sizes = [1, 700, 13, n]  # uneven batches, the last one partial
    sums = _combine_on_beam(data, policies, q, b, seed, grids, sizes)
    on_beam = estimators.comparison_from_sums(sums, 0, 1, [False, True], True, estimators.TrustRule(b, 0.95, min_ess=0))
    for got, want in zip(on_beam, memory):
        assert_same_estimates({k: v.as_dict() for k, v in got.items()}, {k: v.as_dict() for k, v in want.items()})
    assert on_beam.diagnostics.ess["candidate"] == pytest.approx(memory.diagnostics.ess["candidate"], abs=TOL)
    assert on_beam.diagnostics.hyperparameters == memory.diagnostics.hyperparameters
    assert memory.diagnostics.reason is None and memory.candidate["dr"].lower < memory.candidate["dr"].upper


def test_hash_bootstrap_weights_do_not_depend_on_order_or_chunking():
    keys = np.random.default_rng(0).integers(0, 2**63, 5000, dtype=np.uint64)
    cols = np.random.default_rng(1).random((5000, 3))
    whole = bootstrap.bootstrap_sums(cols, keys, 120, seed=7)
    order = np.random.default_rng(2).permutation(5000)
    shuffled = bootstrap.bootstrap_sums(cols[order], keys[order], 120, seed=7, chunk_elements=1000)
    np.testing.assert_allclose(shuffled, whole, rtol=1e-12)
    w = bootstrap.poisson_weights(keys, 400, seed=7)  # Poisson(1): mean 1, variance 1
    assert abs(w.mean() - 1) < 0.01 and abs(w.var() - 1) < 0.02
    assert abs(np.corrcoef(w[0], w[1])[0, 1]) < 0.05 and abs(np.corrcoef(w[0], w[4])[0, 1]) < 0.05
    assert not np.array_equal(w, bootstrap.poisson_weights(keys, 400, seed=8))


# ---- end to end on Examples and SavedModels ------------------------------------------------------------


def write_examples(root, n, seed=0, shards=2, propensity=True, mask_column=True):
    """Uniformly logged Bernoulli rewards with weights and an action mask (unless not
    `mask_column`: then every action is allowed), in `shards` files."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    mask = np.ones((n, K), np.int64)
    if mask_column:
        mask[rng.random(n) < 0.3, 3] = 0
    props = mask / mask.sum(1, keepdims=True)
    a = (rng.random(n)[:, None] > np.cumsum(props, 1)).sum(1)
    means = 1 / (1 + np.exp(-(x @ THETA.T - 1.0)))
    cols = {
        records.CONTEXT: x,
        records.ACTION: a,
        records.REWARD: (rng.random(n) < means[np.arange(n), a]).astype(np.float32),
        records.WEIGHT: rng.integers(1, 3, n).astype(np.float32),
    }
    if mask_column:
        cols[records.ACTION_MASK] = mask
    if propensity:
        cols[records.PROPENSITY] = props[np.arange(n), a].astype(np.float32)
    os.makedirs(records.split_dir(root, "eval"), exist_ok=True)
    for s, rows in enumerate(np.array_split(np.arange(n), shards)):
        path = os.path.join(records.split_dir(root, "eval"), f"data-{s:05d}-of-{shards:05d}.gz")
        with tf.io.TFRecordWriter(path, options="GZIP") as w:
            for ex in encode_bandit({k: v[rows] for k, v in cols.items()}):
                w.write(ex)
    return root


def save_policy(model_uri, theta):
    return save_linear_policy(model_uri, theta, emit_predicted_rewards=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("beam_eval")
    return {
        "root": root,
        "examples": write_examples(str(root / "examples"), N),
        "good": save_policy(str(root / "good"), THETA),
        "bad": save_policy(str(root / "bad"), -THETA),
    }


def _config(**kw):
    # A reward-model sample smaller than the split: the bottom-k hash sample is exercised too.
    return EvaluatorConfig(
        kind="bandit", num_bootstrap=100, reward_model_sample=8_000, dm_refits=10, dm_refit_records=2_000, **kw
    )


def run_pipeline(world, tmp, engine, args=None):
    return core.run_evaluator(
        _config(engine=engine),
        world["good"],
        str(tmp / "evaluation"),
        str(tmp / "blessing"),
        examples_uri=world["examples"],
        baseline_model_uri=world["bad"],
        num_actions=K,
        beam_pipeline_args=args,
    )


@pytest.mark.slow
def test_beam_engine_equals_in_memory_on_40k_records_with_one_and_two_workers(world, tmp_path):
    memory = run_pipeline(world, tmp_path / "memory", "memory").metrics
    runs = {"beam": run_pipeline(world, tmp_path / "beam", "beam")}
    with pytest.MonkeyPatch.context() as patch:
        # The DirectRunner starts each pass's 2 worker processes as `sys.executable -m
        # apache_beam.runners.worker.sdk_worker_main`: the suite's warm interpreter forks them
        # (conftest.warm_fresh_python), so they skip importing TensorFlow, not the pipeline's work.
        patch.setattr(sys, "executable", fresh_python())
        runs["beam_2_workers"] = run_pipeline(
            world, tmp_path / "beam2", "beam", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
        )
    assert memory["engine"] == "memory" and memory["eval_records"] == N
    assert memory["blessed"] and memory["trust"]["trusted"]
    for name, result in runs.items():
        got = result.metrics
        assert got["engine"] == "beam" and got["eval_records"] == N, name
        for group in ("candidate", "baseline_estimates", "improvement", "candidate_greedy"):
            assert_same_estimates(got[group], memory[group])
        for who in ("candidate", "baseline"):
            assert abs(got["trust"]["ess"][who] - memory["trust"]["ess"][who]) <= TOL * memory["trust"]["ess"][who]
        assert got["trust"]["hyperparameters"] == memory["trust"]["hyperparameters"]
        assert got["candidate_action_share"] == memory["candidate_action_share"]
        assert got["blessed"] == memory["blessed"] and got["reason"] == memory["reason"]


def _cli(*args):
    """`rlops evaluate` in its own process: the suite's warm interpreter when there is one
    (conftest.warm_fresh_python: forked from one that has imported TensorFlow and nothing of
    rlops; `-W ignore` rather than PYTHONWARNINGS, which it could not honour warm)."""
    env, python = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), fresh_python()
    return subprocess.run(
        [python, "-W", "ignore", "-m", "rlops.pipelines.cli", "evaluate", *args],
        capture_output=True,
        text=True,
        env=env,
    )


def test_missing_propensity_is_one_line_naming_it(tmp_path):
    examples = write_examples(str(tmp_path / "examples"), 300, propensity=False)
    out = _cli("--examples", examples, "--policy", "uniform", "--num-actions", str(K), "--engine", "beam")
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "'propensity'" in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_uniform_policy_on_the_beam_engine_reads_the_number_of_actions_from_the_examples(tmp_path):
    """Once refused without --num-actions; now read from the records (their mask's or per-arm
    width, else the largest logged action), as the in-memory engine reads it."""
    examples = write_examples(str(tmp_path / "examples"), 400, mask_column=False)
    config = EvaluatorConfig(kind="bandit", num_bootstrap=100, dm_refits=0, engine="beam")
    out = on_logs.evaluate_on_logs(config, examples, "uniform")
    memory = on_logs.evaluate_on_logs(dataclasses.replace(config, engine="memory"), examples, "uniform")
    assert out["engine"] == "beam" and out["num_actions"] == memory["num_actions"] == K
    assert out["estimates"]["ips"]["value"] == pytest.approx(memory["estimates"]["ips"]["value"], rel=1e-9)


def test_policy_that_fails_to_load_is_named(tmp_path):
    """The driver scores every policy on the reward model's sample first, so a policy that cannot
    be loaded is named from there, before any worker starts."""
    examples = write_examples(str(tmp_path / "examples"), 300)
    broken = str(tmp_path / "broken_model")
    os.makedirs(broken)
    config = EvaluatorConfig(kind="bandit", num_bootstrap=100, dm_refits=0, engine="beam")
    sources = [
        beam_engine.PolicySource("saved_model", broken, "gs://bucket/models/7"),
        beam_engine.PolicySource("logging"),
    ]
    with pytest.raises(ValueError, match=r"^policy gs://bucket/models/7 cannot be loaded by the Evaluator's driver: "):
        beam_engine.run_split(config, examples, "eval", sources, K, 0)


def test_empty_eval_split_is_not_blessed_with_a_reason(world, tmp_path):
    examples = str(tmp_path / "examples")
    os.makedirs(records.split_dir(examples, "eval"))
    with tf.io.TFRecordWriter(
        os.path.join(records.split_dir(examples, "eval"), "data-00000-of-00001.gz"), options="GZIP"
    ):
        pass
    result = core.run_evaluator(
        _config(engine="beam"),
        world["good"],
        str(tmp_path / "evaluation"),
        str(tmp_path / "blessing"),
        examples_uri=examples,
        num_actions=K,
    )
    assert not result.blessed and "the eval split has no records" in result.reason
    assert os.path.exists(tmp_path / "blessing" / NOT_BLESSED_FILE)


# ---- per-arm Examples: fixed and varying candidate sets -------------------------------------------------

ITEM_FEATURES = ["item_category", "item_brand", "item_price", "item_popularity"]
ARM_SLOTS = 8


def _per_arm_examples(root, varying: bool):
    """ExperienceGen's per-arm Examples from generator logs (item table joined by id): every item
    of the table in every record, or (varying) 3..ARM_SLOTS shown items per record."""
    from rlops.components.experience_gen.config import ExperienceGenConfig, SpecConfig
    from rlops.components.experience_gen.core import run_experience_gen
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    extra = {"candidates": (3, ARM_SLOTS), "num_candidate_sets": 12} if varying else {}
    gen = LogGenerator(LogConfig(logging="thompson", ctr=0.1, seed=0, num_users=300, **extra))
    logs = gen.sample(3000, seed=1)
    paths = logs.to_files(str(root), format="parquet")
    columns = {"features": list(logs.context_columns), "item_id": "item_id", "item_features": ITEM_FEATURES}
    cfg = {
        "source": {"kind": "file", "pattern": paths["impressions"], "format": "parquet"},
        "item_source": {"kind": "file", "pattern": paths["items"], "format": "parquet"},
        "bandit_columns": dict(columns, candidates="candidates") if varying else columns,
        "splits": {"splits": [{"name": "train", "hash_buckets": 1}, {"name": "eval", "hash_buckets": 3}]},
    }
    if varying:
        cfg["action_spec"] = SpecConfig.discrete(ARM_SLOTS).__dict__
    result = run_experience_gen(ExperienceGenConfig.from_json(cfg), str(root / "ex"), str(root / "q"))
    assert result.records_quarantined == 0
    return str(root / "ex"), ARM_SLOTS if varying else gen.num_items


def _per_arm_model(root, examples, num_actions):
    """A per-arm LinUCB policy trained briefly on the train split (its SavedModel is what the
    Beam workers score, through the records' per-arm features and num_actions)."""
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    config = TrainerConfig(
        agent="lin_ucb", num_actions=num_actions, batch_size=256, train_steps=10, steps_per_run=10, alpha=0.1
    )
    run_trainer(config, str(root / "model"), str(root / "run"), examples)
    return str(root / "model")


@pytest.fixture(scope="module")
def per_arm_examples(tmp_path_factory):
    root = tmp_path_factory.mktemp("beam_per_arm")
    return {case: _per_arm_examples(root / case, case == "varying") for case in ("fixed", "varying")}


@pytest.fixture(scope="module")
def per_arm_models(per_arm_examples, tmp_path_factory):
    root = tmp_path_factory.mktemp("beam_per_arm_models")
    return {case: _per_arm_model(root / case, *per_arm_examples[case]) for case in per_arm_examples}


@pytest.mark.slow
@pytest.mark.parametrize("case, reward_model", [("fixed", "auto"), ("varying", "auto"), ("varying", "low_rank")])
def test_beam_engine_equals_in_memory_on_per_arm_records(
    per_arm_examples, per_arm_models, case, reward_model, tmp_path
):
    """Per-arm Examples end to end through run_evaluator (a per-arm SavedModel scored on the
    workers against the logging policy): the Beam engine identifies the items over the whole
    split as the in-memory engine does, so the shared [global, arm] reward model (or the
    factorization over the catalog, "low_rank", fitted on the driver and predicted on the
    workers) and every estimate, interval and ESS agree (<= 1e-9); fixed candidate sets keep the
    per-action models."""
    (examples, num_actions), model = per_arm_examples[case], per_arm_models[case]
    data = feedback.load_logged_feedback(examples)
    assert (data.items is not None) == (case == "varying")
    if case == "varying":
        num = (data.items >= 0).sum(1)
        assert num.min() < num.max() and len(data.item_features) > ARM_SLOTS  # slot k: many items
    results = {}
    for engine in ("memory", "beam"):
        config = EvaluatorConfig(
            kind="bandit",
            num_bootstrap=100,
            reward_model_sample=1500,
            dm_refits=10,
            dm_refit_records=500,
            engine=engine,
            reward_model=reward_model,
            min_ess=0,  # a greedy policy over many arms: few effective records, intervals all the same
            # The candidate served at the grid's larger epsilons (a second run_split on Beam) is
            # compared on the auto cases; low_rank's own part is the first run's fit and predictions.
            serving_epsilons=() if reward_model == "low_rank" else EvaluatorConfig.serving_epsilons,
        )
        out = tmp_path / engine
        results[engine] = core.run_evaluator(
            config,
            model,
            str(out / "evaluation"),
            str(out / "blessing"),
            examples_uri=examples,
            num_actions=num_actions,
        ).metrics
    memory, got = results["memory"], results["beam"]
    assert memory["engine"] == "memory" and got["engine"] == "beam"
    assert got["eval_records"] == memory["eval_records"] == len(data.actions)
    for group in ("candidate", "baseline_estimates", "improvement", "candidate_greedy"):
        assert_same_estimates(got[group], memory[group])
    for who in ("candidate", "baseline"):
        assert abs(got["trust"]["ess"][who] - memory["trust"]["ess"][who]) <= TOL * memory["trust"]["ess"][who]
    assert got["trust"]["hyperparameters"] == memory["trust"]["hyperparameters"]
    assert got["candidate_action_share"] == memory["candidate_action_share"]
    assert got["reward_model"] == memory["reward_model"] and got["blessed"] == memory["blessed"]
    assert memory["reward_model"] == ("logistic_low_rank" if reward_model == "low_rank" else "logistic")
    assert memory["candidate"]["dr"]["lower"] < memory["candidate"]["dr"]["upper"], (memory["reason"], memory["trust"])
    # The candidate served at each larger epsilon of the grid (not clearing the gate at its own):
    # a second run_split on Beam, tried as in memory.
    tried, got_tried = memory["served_policy"]["tried"], got["served_policy"]["tried"]
    assert len(tried) == (1 if reward_model == "low_rank" else 4) and len(got_tried) == len(tried)
    for want, trial in zip(tried, got_tried):
        assert trial["epsilon"] == want["epsilon"] and trial["clears_gate"] == want["clears_gate"]
        assert abs(trial["ess"] - want["ess"]) <= TOL * want["ess"]
        assert_same_estimates({"improvement": trial["improvement"]}, {"improvement": want["improvement"]})


def _arm_values_in_batches(features, sizes, seed):
    """The first pass's ArmValues: batches of records in shuffled order through the CombineFn."""
    bounds = np.cumsum([0] + list(sizes))
    parts = [
        beam_engine.ArmValues.of({k: v[a:b] for k, v in features.items()}, "data-00000-of-00001.gz", int(a))
        for a, b in zip(bounds[:-1], bounds[1:])
        if a < b
    ]
    parts = [parts[i] for i in np.random.default_rng(seed).permutation(len(parts))]
    fn = beam_engine.arm_values_combine_fn()()
    accs = [fn.add_input(fn.create_accumulator(), p) for p in parts[:3]] + [parts[3:]]
    return fn.extract_output(fn.merge_accumulators(accs[:3] + [fn.merge_accumulators(accs[3])]))


def test_first_pass_catalog_numbers_items_as_in_memory(per_arm_examples):
    """Batches of 7 records (most items absent from most batches), merged in any order: the
    catalog gives every slot the in-memory engine's item index and the same arm features; fixed
    candidate sets give no catalog until one record differs; a catalog too large is named."""
    examples, _ = per_arm_examples["varying"]
    data = feedback.load_logged_feedback(examples)
    features = {k: v for k, v in data.features.items() if k.startswith("per_arm/") or k == "num_actions"}
    n = len(data.actions)
    for seed in (0, 1):
        catalog = beam_engine.arm_catalog(_arm_values_in_batches(features, [7] * (n // 7 + 1), seed), examples)
        assert catalog is not None and len(catalog.keys) == len(data.item_features)
        got = beam_engine.catalog_items(catalog, features, examples)
        np.testing.assert_array_equal(got["items"], data.items)
        np.testing.assert_array_equal(got["item_features"], data.item_features)
        np.testing.assert_array_equal(got["action_mask"], data.action_mask)
    fixed_examples, _ = per_arm_examples["fixed"]
    fixed = feedback.load_logged_feedback(fixed_examples).features
    fixed = {k: v for k, v in fixed.items() if k.startswith("per_arm/") or k == "num_actions"}
    assert beam_engine.arm_catalog(_arm_values_in_batches(fixed, [500] * 5, 0), fixed_examples) is None
    fixed["num_actions"] = fixed["num_actions"].copy()
    fixed["num_actions"][-1] -= 1  # one record in the last batch shows one item fewer
    values = _arm_values_in_batches(fixed, [500] * 5, 0)
    assert values.varies and beam_engine.arm_catalog(values, fixed_examples) is not None
    for i in (1700, 1200):  # the first bad num_actions in the split is named, whatever the batch order
        fixed["num_actions"][i] = 99
    with pytest.raises(
        ValueError, match=r"record 1200 of data-00000-of-00001.gz has num_actions 99, outside \[1, 34\]"
    ):
        beam_engine.arm_catalog(_arm_values_in_batches(fixed, [500] * 5, 2), fixed_examples)
    valid = (data.items >= 0).reshape(-1)
    price = {"per_arm/item_price": feedback.arm_slot_values(features, "per_arm/item_price", valid)}
    assert len(beam_engine.distinct_combinations(price)["per_arm/item_price"]) == len(
        np.unique(price["per_arm/item_price"])
    )
    with pytest.raises(beam_engine.WorkerError, match=r"per-arm feature 'per_arm/item_price' has more than 3 distinct"):
        beam_engine.distinct_combinations(price, cap=3)


def test_the_in_memory_split_holds_a_fixed_candidate_sets_items_once(per_arm_examples):
    """Issue 49: every record of a fixed candidate set lists the same items, so the in-memory engine
    holds each per-arm column as one row broadcast over the records (no bytes per record), with the
    values load_logged_feedback gives; varying candidates keep a row per record."""
    from rlops.components.evaluator.split_records import parse_feedback, read_serialized

    for case in ("fixed", "varying"):
        examples, _ = per_arm_examples[case]
        got = parse_feedback(read_serialized(examples, "eval"), 0).features
        want = feedback.load_logged_feedback(examples).features
        per_arm = [k for k in want if k.startswith("per_arm/")]
        assert per_arm and sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        shared = [k for k in per_arm if got[k].strides[0] == 0]
        assert shared == (per_arm if case == "fixed" else []), case
