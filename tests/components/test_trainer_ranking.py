"""The Trainer's ranking path (decision kind `slate`): a RankingAgent trained on the slate generator's
logs as ExperienceGen writes them, exported with `serving_ranked`; the greedy page of the scores it
serves is worth more than the logging policy's pages, by the generator's exact truth."""

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


def test_the_ranking_agent_learns_pages_worth_more_than_the_logging_policys(world, slate_examples, tmp_path):
    examples, per_split, columns = slate_examples
    # the ranking pipeline's defaults; more passes than its 12 over these few pages
    config = TrainerConfig.from_dict(apply_per_arm_defaults({"agent": "ranking", "num_epochs": 40}))
    assert config.network == "dot_product" and config.ranking.slate_policy == "plackett_luce"
    result = run_trainer(config, str(tmp_path / "model"), str(tmp_path / "run"), examples)
    assert result.extra["train_records"] == per_split["train"] * config.epochs  # every page, every pass
    assert (result.extra["num_items"], result.extra["slate_length"]) == (K, L)

    policy = tf.saved_model.load(serving_dir(str(tmp_path / "model")))
    assert {"serving_ranked", "serving_ranked_masked", "serving_ranked_replay"} <= set(policy.signatures)
    meta = {k: v.numpy() for k, v in policy.signatures["get_metadata"]().items()}
    assert meta["slate_policy"] == b"plackett_luce" and meta["temperature"] == 0.5 and meta["num_slots"] == L
    page = policy.signatures["serving_ranked"](**population_inputs(world, columns))
    scores = page["scores"].numpy().astype(np.float64)  # [users, K], the items in the item table's order
    np.testing.assert_array_equal(page["greedy_slate"].numpy(), Greedy().sample(None, scores, L))

    logging = world.true_value(world.logging_policy, world.logging_scores).value
    greedy = world.true_value(Greedy(), scores).value
    best = world.true_value(Greedy(), np.log(world.relevance)).value
    assert greedy > logging + 0.25 * (best - logging), (greedy, logging, best)


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
