"""Per-arm logs (an item table) get a learner that personalises and uses every record by default;
dense logs keep the dense defaults; a linear agent on per-arm logs trains as asked, with a one-line
warning that it cannot personalise. The numbers behind the defaults: benchmarks/defaults_vs_vw.py."""

from __future__ import annotations

import logging

import pytest

from rlops.components.trainer.config import PER_ARM_DEFAULTS, TrainerConfig, apply_per_arm_defaults
from rlops.pipelines.config import ConfigError, load_config


@pytest.fixture
def per_arm_yaml(tmp_path):
    logs, items = tmp_path / "impressions.csv", tmp_path / "items.csv"
    logs.write_text("user,item_id,reward,propensity\nu1,a,1,0.5\nu2,b,0,0.5\n")
    items.write_text("item_id,item_price\na,1.0\nb,2.0\n")
    path = tmp_path / "logs.yaml"
    path.write_text(
        "experience_gen:\n"
        f"  source: {{kind: file, pattern: '{logs}', format: csv}}\n"
        f"  item_source: {{kind: file, pattern: '{items}', format: csv}}\n"
        "  action_spec: {shape: [], dtype: int32, minimum: 0, maximum: 1}\n"
        "  bandit_columns: {features: [user], item_id: item_id, item_features: [item_price]}\n"
    )
    return str(path)


def load(tmp_path, path: str | None, *overrides: str):
    return load_config("bandit", path, [f"root={tmp_path}/root", *overrides])


def test_per_arm_logs_get_the_two_tower_learner_over_every_record(tmp_path, per_arm_yaml):
    trainer = load(tmp_path, per_arm_yaml).trainer
    assert trainer.agent == "neural_epsilon_greedy"
    assert (trainer.network, trainer.hidden_sizes, trainer.reward_loss) == (
        "dot_product",
        (8,),
        "sigmoid_cross_entropy",
    )
    assert (trainer.weight_decay, trainer.learning_rate) == (0.3, 0.005)
    # Passes over the split, no step budget: the steps grow with the logs.
    assert (trainer.epochs, trainer.max_train_steps, trainer.train_batch_size) == (12, None, 1024)


def test_dense_logs_keep_the_dense_defaults(tmp_path):
    trainer = load(tmp_path, None).trainer
    default = TrainerConfig(num_actions=10)
    assert (trainer.network, trainer.hidden_sizes, trainer.reward_loss, trainer.weight_decay) == (
        "common_tower",
        (64,),
        "squared_error",
        0.0,
    )
    assert (trainer.learning_rate, trainer.train_batch_size) == (default.learning_rate, 32)
    assert (trainer.epochs, trainer.max_train_steps) == (None, 2000)  # the split repeats for 2,000 steps


def test_what_the_user_sets_wins_key_by_key(tmp_path, per_arm_yaml):
    trainer = load(tmp_path, per_arm_yaml, "trainer.learning_rate=0.01", "trainer.num_epochs=3").trainer
    assert (trainer.learning_rate, trainer.epochs, trainer.network) == (0.01, 3, "dot_product")
    # Another network keeps its own hidden_sizes default; squared error for rewards that are not clicks.
    trainer = load(tmp_path, per_arm_yaml, "trainer.network=common_tower", "trainer.reward_loss=squared_error").trainer
    assert (trainer.network, trainer.hidden_sizes, trainer.reward_loss) == ("common_tower", (64,), "squared_error")
    # A step budget keeps its meaning: the split repeats for that many steps.
    trainer = load(tmp_path, per_arm_yaml, "trainer.train_steps=300").trainer
    assert (trainer.epochs, trainer.max_train_steps) == (None, 300)


def test_linear_agents_on_per_arm_logs_warn_in_one_line_and_keep_their_defaults(tmp_path, per_arm_yaml, caplog):
    caplog.set_level(logging.WARNING, logger="rlops.pipelines.config")
    for agent in ("lin_ucb", "lin_ts"):
        caplog.clear()
        trainer = load(tmp_path, per_arm_yaml, f"trainer.agent={agent}").trainer
        (record,) = caplog.records
        assert record.levelno == logging.WARNING and "\n" not in record.getMessage()
        assert record.getMessage().startswith(f"trainer.agent: '{agent}' over per-arm features")
        assert (trainer.network, trainer.weight_decay, trainer.epochs) == ("common_tower", 0.0, 1)
    caplog.clear()
    load(tmp_path, per_arm_yaml)  # the default agent: no warning
    load(tmp_path, None, "trainer.agent=lin_ucb")  # dense logs: one model per arm personalises
    assert not caplog.records


def test_an_unknown_agent_on_per_arm_logs_is_still_one_line_naming_the_key(tmp_path, per_arm_yaml):
    with pytest.raises(ConfigError, match=r"^trainer\.agent: unknown agent 'lin_usb'; closest: lin_ucb"):
        load(tmp_path, per_arm_yaml, "trainer.agent=lin_usb")


def test_the_defaults_are_a_valid_trainer_section():
    config = TrainerConfig.from_dict({**apply_per_arm_defaults({}), "num_actions": 34})
    assert {k: getattr(config, k) for k in PER_ARM_DEFAULTS} == {
        **PER_ARM_DEFAULTS,
        "hidden_sizes": tuple(PER_ARM_DEFAULTS["hidden_sizes"]),  # type: ignore[arg-type]
    }
    assert apply_per_arm_defaults({"agent": "lin_ucb"}) == {"agent": "lin_ucb"}


def test_the_item_id_becomes_an_item_feature_for_the_two_tower_default(tmp_path, per_arm_yaml):
    def item_features(*overrides: str) -> list[str]:
        config = load(tmp_path, per_arm_yaml, *overrides)
        return [f.name for f in config.experience_gen.bandit_columns.item_features]

    assert item_features() == ["item_price", "item_id"]  # each item's own embedding beside its features
    config = load(tmp_path, per_arm_yaml)
    assert config.experience_gen.bandit_columns.item_features[-1].kind == "categorical"
    # Listed already: kept as given; another network or agent: the item table's features as given.
    assert item_features("experience_gen.bandit_columns.item_features=[item_id, item_price]") == [
        "item_id",
        "item_price",
    ]
    assert item_features("trainer.network=common_tower") == ["item_price"]
    assert item_features("trainer.network=dot_product") == ["item_price"]  # a chosen network: as listed
    assert item_features("trainer.agent=lin_ucb") == ["item_price"]
