"""What a new user on public logs tripped on (issue 45), each checked the way the user met it: the
ignored-columns note named the pandas index column '' (a blank), the item table's 'matched no
files' did not name its config key, and a comma-separated local source pattern (which the
ingestion page documents) was refused at load."""

from __future__ import annotations

import pytest

from rlops.pipelines.config import ConfigError, load_config

# --- the ignored-columns note names an unnamed column -----------------------------------------------


def test_the_note_names_the_unnamed_index_column_instead_of_a_blank():
    from rlops.components.experience_gen.layout import Field, Layout, SourceSchema
    from rlops.components.experience_gen.pipeline import ignored_columns_note

    layout = Layout("bandit", (Field("action", ("action",), "int"), Field("reward", ("reward",), "float")))
    # pandas' df.to_csv(path) with its index: the header starts with ',', the first name is ''
    note = ignored_columns_note(layout, SourceSchema(("", "action", "reward", "extra")), "logs.csv")
    assert note == (
        "experience_gen: 2 column(s) of logs.csv not in the config, ignored: (unnamed column 1: a pandas index?), extra"
    )
    # a blank name elsewhere: its position, no guess
    note = ignored_columns_note(layout, SourceSchema(("action", "reward", " ")), "logs.csv")
    assert note == "experience_gen: 1 column(s) of logs.csv not in the config, ignored: (unnamed column 3)"


def test_planning_a_csv_written_with_its_pandas_index_logs_a_readable_note(tmp_path, caplog):
    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.experience_gen.pipeline import make_plan

    logs = tmp_path / "logs.csv"
    logs.write_text(",x_0,action,reward,propensity\n0,0.1,1,0,0.5\n1,0.3,0,1,0.5\n")  # df.to_csv(path)
    config = ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": str(logs), "format": "csv"},
            "bandit_columns": {"context_prefix": "x_"},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 1},
        }
    )
    with caplog.at_level("INFO", logger="rlops"):
        make_plan(config)
    want = f"experience_gen: 1 column(s) of {logs} not in the config, ignored: (unnamed column 1: a pandas index?)"
    assert want in caplog.messages, caplog.messages


# --- the item table's missing files name experience_gen.item_source.pattern -------------------------


def _per_arm_yaml(tmp_path, items_pattern: str) -> str:
    logs = tmp_path / "impressions.csv"
    logs.write_text("user,item_id,reward,propensity\nu1,a,1,0.5\nu2,b,0,0.5\n")
    path = tmp_path / "logs.yaml"
    path.write_text(
        f"root: '{tmp_path / 'root'}'\n"
        "experience_gen:\n"
        f"  source: {{kind: file, pattern: '{logs}', format: csv}}\n"
        f"  item_source: {{kind: file, pattern: '{items_pattern}', format: csv}}\n"
        "  action_spec: {shape: [], dtype: int32, minimum: 0, maximum: 1}\n"
        "  bandit_columns: {features: [user], item_id: item_id, item_features: [item_price]}\n"
    )
    return str(path)


def test_load_config_names_the_item_source_key_when_its_pattern_matches_nothing(tmp_path):
    missing = str(tmp_path / "itemz.csv")
    with pytest.raises(ConfigError) as e:
        load_config("bandit", _per_arm_yaml(tmp_path, missing))
    assert str(e.value) == f"experience_gen.item_source.pattern: no files match '{missing}'"
    # one part of a comma-separated pattern missing: that part is named
    items = tmp_path / "items.csv"
    items.write_text("item_id,item_price\na,1.0\nb,2.0\n")
    with pytest.raises(ConfigError, match=f"^experience_gen.item_source.pattern: no files match '{missing}'$"):
        load_config("bandit", _per_arm_yaml(tmp_path, f"{items},{missing}"))
    load_config("bandit", _per_arm_yaml(tmp_path, str(items)))  # there: loads


def test_the_item_table_reader_names_the_key_too(tmp_path):
    """The Python API (no load_config): ExperienceGen's own read of the item table."""
    from rlops.components.experience_gen import items
    from rlops.components.experience_gen.config import FileSource

    missing = str(tmp_path / "itemz.csv")
    with pytest.raises(FileNotFoundError) as e:
        items.read_frames(FileSource(pattern=missing, format="csv"))
    text = str(e.value)
    assert text.startswith("experience_gen.item_source.pattern: ") and missing in text and "\n" not in text, text


def test_rlops_run_prints_one_line_naming_the_item_source_key(tmp_path, capsys):
    from rlops.pipelines.cli import main

    missing = str(tmp_path / "itemz.csv")
    assert main(["run", "bandit", "--config", _per_arm_yaml(tmp_path, missing)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"rlops: config error: experience_gen.item_source.pattern: no files match '{missing}'"]


# --- a comma-separated local source pattern loads; a missing part is named -------------------------------


def _bandit_yaml(tmp_path, pattern: str) -> str:
    path = tmp_path / "comma.yaml"
    path.write_text(
        f"root: '{tmp_path / 'root'}'\n"
        "experience_gen:\n"
        f"  source: {{kind: file, pattern: '{pattern}', format: csv}}\n"
        "  bandit_columns: {context_prefix: x_}\n"
        "  action_spec: {shape: [], dtype: int32, minimum: 0, maximum: 1}\n"
    )
    return str(path)


def test_a_comma_separated_local_source_pattern_loads_and_a_missing_part_is_named(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for f in (a, b):
        f.write_text("x_0,action,reward,propensity\n0.1,1,0,0.5\n0.3,0,1,0.5\n")
    config = load_config("bandit", _bandit_yaml(tmp_path, f"{a},{b}"))
    assert config.experience_gen is not None and config.experience_gen.source.pattern == f"{a},{b}"
    missing = tmp_path / "c.csv"
    with pytest.raises(ConfigError) as e:
        load_config("bandit", _bandit_yaml(tmp_path, f"{a}, {missing}"))
    assert str(e.value) == f"experience_gen.source.pattern: no files match '{missing}'"
