"""The ranking path (decision kind `slate`) through the Trainer and the Evaluator: a RankingAgent
trained on the slate generator's logs as ExperienceGen writes them, exported with `serving_ranked`;
the greedy page of the scores it serves is worth more than the logging policy's pages, by the
generator's exact truth. The Evaluator scores the page it serves with the slate estimators (numbers
against a numpy reference), blesses on the configured estimator's lower bound, and writes null,
never NaN, where it trusts nothing; `rlops evaluate --policy <SavedModel>` gives the same numbers."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents.ranking.propensities import Greedy
from rlops.components.experience_gen import ExperienceGenConfig, FileSource, SlateColumns, run_experience_gen
from rlops.components.experience_gen.config import FeatureColumn
from rlops.components.trainer.config import TrainerConfig, apply_per_arm_defaults
from rlops.components.trainer.core import run_trainer, serving_dir
from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator

K, L, PAGES = 10, 3, 2500

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world():
    return SlateLogGenerator(SlateConfig(num_items=K, num_slots=L, click_model="cascade", num_users=300, seed=0))


@pytest.fixture(scope="module")
def slate_examples(world, tmp_path_factory):
    """The generator's pages (one JSON line each, string item ids, its item table) through ExperienceGen."""
    tmp = tmp_path_factory.mktemp("ranking")
    logs = world.sample(PAGES, seed=1)
    paths = logs.to_files(str(tmp / "logs"), layout="slate", format="jsonl")
    config = ExperienceGenConfig(
        record_kind="slate",
        source=FileSource(pattern=paths["slates"], format="jsonl"),
        item_source=FileSource(pattern=paths["items"], format="csv"),
        slate_columns=SlateColumns(
            position=None,
            item_id="slate",
            item_table_id="item_id",
            propensity_cascade="propensity_cascade",
            features=tuple(FeatureColumn(c) for c in logs.context_columns),
        ),
        slate_length=L,
    )
    result = run_experience_gen(config, str(tmp / "examples"), str(tmp / "quarantine"))
    return str(tmp / "examples"), result.outputs_per_split, logs.context_columns


def population_inputs(world, columns) -> dict[str, tf.Tensor]:
    """serving_ranked's inputs for every user of the generator's population: raw features, all K items."""
    pop = world.population
    feeds = {c: tf.constant(pop[c].astype(np.bytes_ if pop[c].dtype.kind == "U" else np.float32)) for c in columns}
    feeds["num_actions"] = tf.fill([len(pop[columns[0]])], tf.constant(K, tf.int64))
    return feeds


@pytest.fixture(scope="module")
def trained(slate_examples, tmp_path_factory):
    """The ranking pipeline's trainer defaults, with more passes than its 12 over these few pages."""
    examples, per_split, _ = slate_examples
    tmp = tmp_path_factory.mktemp("trained")
    config = TrainerConfig.from_dict(apply_per_arm_defaults({"agent": "ranking", "num_epochs": 40}))
    result = run_trainer(config, str(tmp / "model"), str(tmp / "run"), examples)
    return config, result, str(tmp / "model")


def served_scores(model_uri, world, columns) -> tuple[dict, np.ndarray]:
    policy = tf.saved_model.load(serving_dir(model_uri))
    meta = {k: v.numpy() for k, v in policy.signatures["get_metadata"]().items()}
    page = policy.signatures["serving_ranked"](**population_inputs(world, columns))
    return meta, page


def test_the_ranking_agent_learns_pages_worth_more_than_the_logging_policys(world, slate_examples, trained):
    _, per_split, columns = slate_examples
    config, result, model_uri = trained
    assert config.network == "dot_product" and config.ranking.slate_policy == "plackett_luce"
    assert result.extra["train_records"] == per_split["train"] * config.epochs  # every page, every pass
    assert (result.extra["num_items"], result.extra["slate_length"]) == (K, L)

    meta, page = served_scores(model_uri, world, columns)
    assert meta["slate_policy"] == b"plackett_luce" and meta["temperature"] == 0.5 and meta["num_slots"] == L
    scores = page["scores"].numpy().astype(np.float64)  # [users, K], the items in the item table's order
    np.testing.assert_array_equal(page["greedy_slate"].numpy(), Greedy().sample(None, scores, L))

    logging = world.true_value(world.logging_policy, world.logging_scores).value
    greedy = world.true_value(Greedy(), scores).value
    best = world.true_value(Greedy(), np.log(world.relevance)).value
    assert greedy > logging + 0.25 * (best - logging), (greedy, logging, best)


def reference_estimates(examples: str, model_uri: str) -> dict[str, float]:
    """iips and snrips of the served Plackett-Luce page by hand: the model's scores of each eval
    page's context, the numpy module's exact probabilities, OBP's formulas."""
    from rlops.agents.ranking.propensities import PlackettLuce
    from rlops.components.common.slates import read_slate_logs

    logs = read_slate_logs(examples, "eval")
    policy = tf.saved_model.load(serving_dir(model_uri))
    spec = policy.signatures["serving_ranked"].structured_input_signature[1]
    parsed = tf.io.parse_example(
        [r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(f"{examples}/Split-eval/*"), "GZIP")],
        {k: tf.io.FixedLenFeature([], s.dtype) for k, s in spec.items() if k != "num_actions"},
    )
    parsed["num_actions"] = tf.fill([len(logs)], tf.constant(K, tf.int64))
    scores = policy.signatures["serving_ranked"](**parsed)["scores"].numpy().astype(np.float64)
    pl = PlackettLuce(0.5)
    rows, slots = np.arange(len(logs))[:, None], np.arange(L)[None]
    marginal = pl.marginals(scores, L)[rows, logs.slates, slots]
    iips = (marginal / logs.propensity * logs.rewards).sum(1).mean()
    w = pl.prefix_probs(scores, logs.slates) / logs.propensity_cascade
    snrips = ((w * logs.rewards).sum(0) / w.sum(0)).sum()
    return {"iips": iips, "snrips": snrips}


def test_the_evaluator_scores_the_page_the_candidate_serves(slate_examples, trained, tmp_path):
    import json

    from rlops.components.evaluator.core import run_evaluator
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig

    examples = slate_examples[0]
    model_uri = trained[2]
    config = SlateEvaluatorConfig()
    result = run_evaluator(config.to_json(), model_uri, str(tmp_path / "eval"), str(tmp_path / "bless"), examples)
    metrics = result.metrics
    assert metrics["baseline"] == "logging_policy" and metrics["eval_records"] == slate_examples[1]["eval"]
    reference = reference_estimates(examples, model_uri)
    for name, value in reference.items():
        assert metrics["candidate"][name]["value"] == pytest.approx(value, rel=1e-6), name
    # the logging policy's own pages: every weight 1, so snrips is the mean page reward
    improvement = metrics["improvement"]["snrips"]
    lower = improvement["lower"]
    assert result.blessed == (lower > 0.0), (result.reason, improvement)
    assert set(metrics["candidate_greedy"]) == set(metrics["candidate"])  # the greedy page beside the served one
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())  # strict JSON
    assert written["improvement"]["snrips"] == improvement
    assert (tmp_path / "bless" / ("BLESSED" if result.blessed else "NOT_BLESSED")).exists()

    # nothing trusted: null (never NaN) with the reason, and no blessing
    strict = SlateEvaluatorConfig(min_ess=1e9)
    untrusted = run_evaluator(strict.to_json(), model_uri, str(tmp_path / "e2"), str(tmp_path / "b2"), examples)
    assert not untrusted.blessed and "effective sample size" in untrusted.reason
    written = json.loads((tmp_path / "e2" / "metrics.json").read_text(), parse_constant=pytest.fail)
    assert written["improvement"]["snrips"]["value"] is None and written["trust"]["trusted"] is False


def test_a_blessed_baseline_is_the_paired_comparison(slate_examples, trained, tmp_path):
    from rlops.components.evaluator.core import run_evaluator
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig

    examples, model_uri = slate_examples[0], trained[2]
    config = SlateEvaluatorConfig(min_ess=0.0)
    result = run_evaluator(
        config.to_json(), model_uri, str(tmp_path / "e"), str(tmp_path / "b"), examples, baseline_model_uri=model_uri
    )
    assert result.metrics["baseline"] == model_uri
    assert result.metrics["improvement"]["snrips"]["value"] == 0.0  # the same pages, paired: exactly no gain
    assert not result.blessed


def test_rlops_evaluate_scores_a_ranking_saved_model_on_slate_logs(slate_examples, trained, tmp_path, capsys):
    import json

    from rlops.pipelines.cli import main

    examples, model_uri = slate_examples[0], trained[2]
    out = tmp_path / "result.json"
    assert main(["evaluate", "--examples", examples, "--policy", model_uri, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "vs logging" in table and "scored as served: PlackettLuce(temperature=0.5)" in table
    result = json.loads(out.read_text())
    reference = reference_estimates(examples, model_uri)
    assert result["estimates"]["iips"]["value"] == pytest.approx(reference["iips"], rel=1e-6)
    assert set(result["improvement_over_logging"]) == set(result["estimates"]) == set(result["greedy_estimates"])
    assert main(["evaluate", "--examples", examples, "--policy", str(tmp_path / "nothing")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--policy: slate logs are evaluated for uniform or logging, or a ranking SavedModel" in line


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
