"""`rlops init --from logs.csv [--items items.csv]` on public-log shapes made here: an Open Bandit
Dataset-like log with its item table (per-arm), a plain single-item log, and messy input.

Each test reads the guesses from the written YAML's comments and its values, loads it with the
strict loader unchanged, and (one slow test) runs the pipeline on it to the end.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import yaml

from rlops.pipelines import cli
from rlops.pipelines.config import load_config

ROWS = 400
ITEMS = 20


def _hashed(prefix: str, n: int, rng: np.random.Generator, distinct: int) -> list[str]:
    """OBD's user features: md5-looking strings, a few distinct values per column."""
    pool = [hashlib.md5(f"{prefix}{i}".encode()).hexdigest() for i in range(distinct)]
    return [pool[i] for i in rng.integers(0, distinct, size=n)]


def obd_like(directory, rows: int = ROWS, num_items: int = ITEMS) -> tuple[str, str]:
    """OBD's shape: an unnamed pandas index, timestamp, item_id, position, click,
    propensity_score, user_feature_0..3; and item_context.csv (index, item_id, item_feature_0..3)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    items = rng.integers(0, num_items, size=rows)
    logs = pd.DataFrame(
        {
            "timestamp": pd.date_range("2019-11-24", periods=rows, freq="min").strftime("%Y-%m-%d %H:%M:%S.%f+00:00"),
            "item_id": items,
            "position": rng.integers(1, 4, size=rows),
            "click": (rng.random(rows) < 0.2 + 0.6 * items / num_items).astype(int),  # the last item is best
            "propensity_score": np.full(rows, 1.0 / num_items),
            **{f"user_feature_{i}": _hashed(f"u{i}", rows, rng, 4 + i) for i in range(4)},
        }
    )
    table = pd.DataFrame(
        {
            "item_id": np.arange(num_items),
            "item_feature_0": rng.normal(size=num_items).round(4),
            **{f"item_feature_{i}": _hashed(f"i{i}", num_items, rng, 3) for i in range(1, 4)},
        }
    )
    log_path, item_path = os.path.join(directory, "logs.csv"), os.path.join(directory, "item_context.csv")
    logs.to_csv(log_path)  # OBD's files carry pandas' index as an unnamed first column
    table.to_csv(item_path)
    return log_path, item_path


def plain_log(directory, rows: int = ROWS, propensity: bool = True) -> str:
    """A single-item log: context columns, action, reward, prob."""
    rng = np.random.default_rng(1)
    lines = ["age,country,score,action,reward" + (",prob" if propensity else "")]
    for i in range(rows):
        action = int(rng.integers(0, 5))
        row = [str(int(rng.integers(18, 70))), ["fr", "de", "us"][i % 3], f"{rng.normal():.4f}", str(action)]
        row.append(str(int(rng.random() < 0.2 + 0.1 * action)))
        lines.append(",".join(row + (["0.2"] if propensity else [])))
    path = os.path.join(directory, "plain.csv")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def init(*args: str) -> int:
    return cli.main(["init", *args])


def guesses(text: str) -> dict[str, str]:
    """role -> 'column  (how sure: why)' from the config's comment lines."""
    out = {}
    for line in text.splitlines():
        body = line.removeprefix("#").strip()
        if line.startswith("#   ") and " <- " in body:
            role, rest = body.split(" <- ", 1)
            out[role.strip()] = rest
    return out


def decisions(text: str) -> list[str]:
    return [line.split("DECIDE: ", 1)[1] for line in text.splitlines() if line.startswith("# DECIDE: ")]


def test_open_bandit_like_logs_with_an_item_table_become_a_per_arm_config(tmp_path, capsys):
    logs, items = obd_like(tmp_path)
    out = tmp_path / "my.yaml"
    assert init("--from", logs, "--items", items, "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert f"next: rlops run bandit --config {out}" in printed
    text = out.read_text()
    g = guesses(text)
    assert g["item_id"].startswith("item_id  (sure: name match; 20 distinct ints, 0..19; 100% of them are ids in")
    assert g["reward"].startswith("click  (sure: name match; 0/1")
    assert g["propensity"].startswith("propensity_score  (sure: name match; probabilities in (0, 1]")
    assert g["position"].startswith("position  (sure")
    assert g["timestamp"].startswith("timestamp  (sure: name match; date-times")
    (decide,) = decisions(text)  # the slate question, with its default spelled out
    assert decide.startswith(
        "'position' (3 values) says a row is one slot of a slate: each row trains as its own decision"
    )
    assert text.rstrip().endswith(f"#   rlops run bandit --config {out}")

    raw = yaml.safe_load(text)["experience_gen"]
    cols = raw["bandit_columns"]
    assert (cols["item_id"], cols["reward"], cols["propensity"], cols["timestamp"]) == (
        "item_id",
        "click",
        "propensity_score",
        "timestamp",
    )
    assert "item_table_id" not in cols  # the same name in both files
    assert [f["name"] for f in cols["features"]] == ["position"] + [f"user_feature_{i}" for i in range(4)]
    assert cols["features"][0] == {"name": "position", "kind": "categorical", "dtype": "int64"}
    assert cols["features"][1] == {"name": "user_feature_0", "kind": "categorical", "dtype": "string"}
    assert cols["item_features"] == [
        {"name": "item_feature_0", "kind": "float"},
        *[{"name": f"item_feature_{i}", "kind": "categorical", "dtype": "string"} for i in range(1, 4)],
        {"name": "item_id", "kind": "categorical"},  # the per-arm default's item id feature, written out
    ]
    assert raw["action_spec"] == {"shape": [], "dtype": "int32", "minimum": 0, "maximum": ITEMS - 1}
    assert raw["item_source"] == {"kind": "file", "pattern": items, "format": "csv"}
    # The unnamed index column is listed, commented out, with the reason.
    assert "# - {name: unnamed, column: '', kind: categorical, dtype: int64}" in text
    assert "left out: an unnamed column (a row index?)" in text

    config = load_config("bandit", str(out))  # the strict loader, the file unchanged
    assert config.experience_gen.bandit_columns.item_id == "item_id"
    assert config.trainer.num_actions == ITEMS


def test_the_guides_e_commerce_logs_text_item_ids_and_p_shown(tmp_path):
    """The shape the "bring your own logs" page uses: text item ids, `clicked`, `p_shown`."""
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    impressions, items = LogGenerator(LogConfig(logging="uniform", seed=0)).sample(300, seed=1).to_pandas()
    impressions = impressions.drop(columns="action").rename(columns={"reward": "clicked", "propensity": "p_shown"})
    impressions.to_csv(tmp_path / "impressions.csv", index=False)
    items.to_csv(tmp_path / "items.csv", index=False)
    out = tmp_path / "shop.yaml"
    assert (
        init("--from", str(tmp_path / "impressions.csv"), "--items", str(tmp_path / "items.csv"), "--out", str(out))
        == 0
    )
    g = guesses(out.read_text())
    assert (
        g["item_id"].startswith("item_id  (sure: name match; ")
        and "100% of them are ids in items.csv's item_id" in g["item_id"]
    )
    assert g["reward"].startswith("clicked  (sure") and g["propensity"].startswith("p_shown  (likely: name match")
    cols = load_config("bandit", str(out)).experience_gen.bandit_columns
    # the item table's features, and its id column that the per-arm default learner adds
    assert [f.name for f in cols.item_features] == [
        "item_category",
        "item_brand",
        "item_price",
        "item_popularity",
        "item_id",
    ]


def test_a_plain_single_item_log_maps_action_reward_and_prob(tmp_path):
    logs = plain_log(tmp_path)
    out = tmp_path / "plain.yaml"
    assert init("--from", logs, "--out", str(out)) == 0
    text = out.read_text()
    g = guesses(text)
    assert g["action"] == "action  (sure: name match; 5 distinct ints, 0..4)"
    assert g["reward"] == "reward  (sure: name match; 0/1)"
    assert g["propensity"].startswith("prob  (sure: name match; probabilities in (0, 1], 0.2..0.2")
    assert g["position"] == g["timestamp"] == "(none found)"
    assert decisions(text) == []
    raw = yaml.safe_load(text)["experience_gen"]
    assert raw["action_spec"] == {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 4}
    assert raw["bandit_columns"]["features"] == [
        {"name": "age", "kind": "categorical", "dtype": "int64"},
        {"name": "country", "kind": "categorical", "dtype": "string"},
        {"name": "score", "kind": "float"},
    ]
    assert "age: 52 distinct ints" not in text and "; kind: float if it is a quantity" in text
    config = load_config("bandit", str(out))
    assert (config.experience_gen.bandit_columns.action, config.trainer.num_actions) == ("action", 5)


def test_what_is_left_to_the_user_is_one_decide_line_each(tmp_path, capsys):
    logs = plain_log(tmp_path, propensity=False)
    out = tmp_path / "no_prob.yaml"
    assert init("--from", logs, "--out", str(out)) == 0
    (decide,) = decisions(out.read_text())
    assert decide.startswith("no propensity column found: off-policy evaluation needs")
    assert f"DECIDE: {decide}" in capsys.readouterr().out  # printed too, not only in the file
    assert yaml.safe_load(out.read_text())["experience_gen"]["bandit_columns"]["propensity"] is None
    load_config("bandit", str(out))  # loads; ingestion then says the same in one line

    # Text item ids and no item table: the action cannot be an integer id.
    text_ids = tmp_path / "text_ids.csv"
    text_ids.write_text(
        "user,shown_sku,clicked,p\n" + "".join(f"u{i % 7},sku{i % 4},{i % 2},0.25\n" for i in range(60))
    )
    assert init("--from", str(text_ids), "--out", "-") == 0
    text = capsys.readouterr().out
    assert guesses(text)["action"].startswith("shown_sku  (likely: name match; 4 distinct text ids")
    (decide,) = decisions(text)
    assert decide.startswith("the action column 'shown_sku' holds text ids: give the item table (--items")


def test_ragged_rows_are_skipped_as_ingestion_does(tmp_path):
    logs = plain_log(tmp_path)
    lines = open(logs).read().splitlines()
    lines[3] += ",extra"  # a field too many
    lines[10] = lines[10].rsplit(",", 2)[0]  # two too few
    lines[-1] = "x"
    with open(logs, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = tmp_path / "ragged.yaml"
    assert init("--from", logs, "--out", str(out)) == 0
    text = out.read_text()
    assert f"# from {ROWS - 3} sampled rows of plain.csv" in text
    assert guesses(text)["action"] == "action  (sure: name match; 5 distinct ints, 0..4)"
    # Ingestion reads the config unchanged: every good row written, the three bad ones quarantined.
    from rlops.components.experience_gen import run_experience_gen

    config = load_config("bandit", str(out)).experience_gen
    r = run_experience_gen(config, str(tmp_path / "examples"), str(tmp_path / "quarantine"))
    assert (r.records_written, r.records_quarantined, r.reasons) == (ROWS - 3, 3, {"parse_error": 3})


def test_a_stray_text_value_leaves_a_number_column_a_number_column(tmp_path, capsys):
    """The same typo in two ages and one in an action (of 400 rows): the columns stay ints (the action
    an action, not text ids that need an item table), the config says how many rows ingestion will
    quarantine and when the run stops, and ingestion does exactly that. Many text values: text."""
    logs = plain_log(tmp_path)
    lines = open(logs).read().splitlines()
    for i in (5, 7):
        lines[i] = "abc," + lines[i].split(",", 1)[1]  # age
    lines[9] = ",".join(lines[9].split(",")[:3] + ["one"] + lines[9].split(",")[4:])  # action
    with open(logs, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = tmp_path / "stray.yaml"
    assert init("--from", logs, "--out", str(out)) == 0
    text = out.read_text()
    assert guesses(text)["action"] == (
        "action  (sure: name match; 5 distinct ints, 0..4; 1 not a number ('one'): "
        "ingestion quarantines those rows (wrong_type))"
    )
    assert decisions(text) == []
    assert (
        "2 not a number ('abc')" in text
        and "(age (2), action (1)) make their rows quarantined" in capsys.readouterr().out
    )
    raw = yaml.safe_load(text)["experience_gen"]
    assert raw["action_spec"]["maximum"] == 4
    assert raw["bandit_columns"]["features"][0] == {"name": "age", "kind": "categorical", "dtype": "int64"}
    from rlops.components.experience_gen import run_experience_gen

    config = load_config("bandit", str(out)).experience_gen  # 3 of 400: under the default 1%, the run goes on
    r = run_experience_gen(config, str(tmp_path / "examples"), str(tmp_path / "quarantine"))
    assert (r.records_written, r.records_quarantined, r.reasons) == (ROWS - 3, 3, {"wrong_type": 3})

    # A column whose text values are more than a stray few stays text.
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(
        "code,action,reward,p\n" + "".join(f"{'A' if i % 10 == 0 else ''}{i % 20},{i % 3},0,0.3\n" for i in range(200))
    )
    assert init("--from", str(mixed), "--out", "-") == 0
    assert "{name: code, kind: categorical, dtype: string}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, message",
    [
        ("age,action,reward,prob\n", "no records to read: '{path}' is header-only (a CSV header, no records)"),
        ("", "no records to read: '{path}' is empty"),
    ],
    ids=["header-only", "empty"],
)
def test_files_without_records_exit_2_in_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "logs.csv"
    path.write_text(content)
    assert init("--from", str(path), "--out", str(tmp_path / "x.yaml")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"rlops: error: --from {path}: " + message.format(path=path)
    assert not (tmp_path / "x.yaml").exists()


def test_a_missing_file_exits_2_naming_it_and_the_closest_files(tmp_path, capsys):
    logs = plain_log(tmp_path)
    missing = os.path.join(tmp_path, "plian.csv")
    assert init("--from", missing) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"rlops: error: --from {missing}: file not found (closest: 'plain.csv')"
    assert init("--from", logs, "--items", str(tmp_path / "items.csv")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"rlops: error: --items {tmp_path / 'items.csv'}: file not found")


def test_an_item_table_that_joins_nothing_exits_2_naming_it(tmp_path, capsys):
    logs, _ = obd_like(tmp_path)
    items = tmp_path / "other_items.csv"
    items.write_text("sku,price\n" + "".join(f"sku{i},{i}.5\n" for i in range(ITEMS)))
    assert init("--from", logs, "--items", str(items), "--out", str(tmp_path / "x.yaml")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"rlops: error: --items {items}: no column of it is an id column")
    assert not (tmp_path / "x.yaml").exists()


def test_an_existing_out_file_is_kept_unless_forced(tmp_path, capsys):
    logs = plain_log(tmp_path)
    out = tmp_path / "mine.yaml"
    out.write_text("# my edits\n")
    assert init("--from", logs, "--out", str(out)) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "# my edits\n"
    assert init("--from", logs, "--out", str(out), "--force") == 0
    assert "action: action" in out.read_text()
    assert init("--from", logs, "--out", str(tmp_path / "nowhere" / "x.yaml")) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"rlops: error: --out {tmp_path}/nowhere/x.yaml: no such folder: {tmp_path}/nowhere"
    )


def _with_affinities(logs: str, num_items: int = ITEMS) -> None:
    """OBD's user-item_affinity_<item> columns: counts of past clicks, the first one 0/1 in the
    sample and the others reaching 3."""
    import pandas as pd

    frame = pd.read_csv(logs, index_col=0)
    rng = np.random.default_rng(3)
    for i in range(num_items):
        counts = rng.integers(0, 2, size=len(frame)) if i == 0 else np.minimum(rng.poisson(0.4, len(frame)), 3)
        frame[f"user-item_affinity_{i}"] = counts
    assert frame[[f"user-item_affinity_{i}" for i in range(1, num_items)]].to_numpy().max() == 3
    frame.to_csv(logs)


def test_per_item_columns_are_described_by_all_of_them_not_the_first(tmp_path):
    """The affinity columns reach 3: the per_arm_columns line says so, even though the first one
    the sample holds is 0/1."""
    logs, items = obd_like(tmp_path)
    _with_affinities(logs)
    out = tmp_path / "my.yaml"
    assert init("--from", logs, "--items", items, "--out", str(out)) == 0
    (line,) = [ln for ln in out.read_text().splitlines() if "per_arm_columns" not in ln and "affinity_{item_id}" in ln]
    assert line.endswith(f"# {ITEMS} columns (user-item_affinity_0, ...: ints, 0..3)"), line
    assert "0/1" not in line
    config = load_config("bandit", str(out))
    assert config.experience_gen.bandit_columns.per_arm_columns == {
        "user-item_affinity": "user-item_affinity_{item_id}"
    }
    import pyarrow as pa

    from rlops.pipelines.infer_columns import describe_columns, profile

    columns = profile({"a": pa.chunked_array([[0, 1, 1]]), "b": pa.chunked_array([[1, 0, 0]])})
    assert describe_columns(columns) == "0/1"
    columns = profile({"a": pa.chunked_array([[0, 1, 1]]), "b": pa.chunked_array([[0, 2, 1]])})
    assert describe_columns(columns) == "ints, 0..2" and columns[1].describe() == "3 distinct ints, 0..2"


def _trainer_and_columns(path) -> tuple:
    config = load_config("bandit", str(path))
    return config.trainer, config.experience_gen.bandit_columns


def test_zero_one_rewards_set_the_click_loss_and_an_item_table_the_two_tower_network(tmp_path):
    """0/1 rewards (clicks) and an item table: the config sets the log loss and the dot_product
    network instead of leaving them commented out, and it is the same config the per-arm defaults
    gave when they were left unset (the item id an item feature, the same budget and sizes)."""
    logs, items = obd_like(tmp_path)
    out = tmp_path / "my.yaml"
    assert init("--from", logs, "--items", items, "--out", str(out)) == 0
    text = out.read_text()
    trainer = yaml.safe_load(text)["trainer"]
    assert trainer["network"] == "dot_product" and trainer["reward_loss"] == "sigmoid_cross_entropy"
    assert "# reward_loss:" not in text and "# network:" not in text
    assert "click is 0/1 in the sample" in text
    loaded, columns = _trainer_and_columns(out)
    assert (loaded.network, loaded.reward_loss, tuple(loaded.hidden_sizes)) == (
        "dot_product",
        "sigmoid_cross_entropy",
        (8,),
    )
    # Without the written lines, the loader's per-arm defaults give exactly this config.
    bare = tmp_path / "bare.yaml"
    bare.write_text(
        "\n".join(
            ln
            for ln in text.splitlines()
            if not ln.startswith(("  network:", "  reward_loss:")) and "{name: item_id, kind: categorical}" not in ln
        )
    )
    assert "network" not in yaml.safe_load(bare.read_text())["trainer"]
    assert _trainer_and_columns(bare) == (loaded, columns)

    # A single-item log of 0/1 rewards: the log loss, no per-arm network.
    plain = tmp_path / "plain.yaml"
    assert init("--from", plain_log(tmp_path), "--out", str(plain)) == 0
    trainer = yaml.safe_load(plain.read_text())["trainer"]
    assert trainer["reward_loss"] == "sigmoid_cross_entropy" and "network" not in trainer
    assert _trainer_and_columns(plain)[0].reward_loss == "sigmoid_cross_entropy"


def test_rewards_that_are_not_zero_one_set_squared_error_over_the_per_arm_log_loss(tmp_path):
    """Ratings 0..4 with an item table: the per-arm default's log loss is for 0/1 rewards, so the
    config sets squared_error (and keeps the two-tower network)."""
    import pandas as pd

    logs, items = obd_like(tmp_path)
    frame = pd.read_csv(logs, index_col=0)
    frame["click"] = np.random.default_rng(5).integers(0, 5, size=len(frame))
    frame.to_csv(logs)
    out = tmp_path / "my.yaml"
    assert init("--from", logs, "--items", items, "--out", str(out)) == 0
    text = out.read_text()
    trainer = yaml.safe_load(text)["trainer"]
    assert trainer["network"] == "dot_product" and trainer["reward_loss"] == "squared_error"
    assert "rewards are not 0/1: click is 5 distinct ints, 0..4 in the sample" in text
    loaded, _ = _trainer_and_columns(out)
    assert (loaded.network, loaded.reward_loss) == ("dot_product", "squared_error")


@pytest.mark.slow
def test_the_generated_per_arm_config_runs_to_a_verified_push_unchanged(tmp_path, monkeypatch):
    """`rlops run bandit --config <generated>`, nothing edited or overridden: ingest, train, evaluate,
    and (5,000 rows of 5 items, the last clicked most: enough for an interval) bless and push."""
    monkeypatch.chdir(tmp_path)  # the config's root, pipeline_root/bandit, lands here
    logs, items = obd_like(tmp_path, rows=5_000, num_items=5)
    assert init("--from", logs, "--items", items, "--out", "my.yaml") == 0
    assert cli.main(["run", "bandit", "--config", "my.yaml", "--summary-json", "summary.json"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["records_written_train"] + summary["records_written_eval"] == 5_000
    assert summary["records_quarantined"] == 0
    assert summary["pushed"], summary.get("blessing_reason")
    assert os.listdir(tmp_path / "pipeline_root" / "bandit" / "serving")


# --- --events: rewards from a stream of events ------------------------------------------------------

DECISIONS = 120


def impressions_and_events(directory, epoch: bool = False, item_ids: bool = False) -> tuple[str, str, dict]:
    """An impressions table (impression_id, ts, two user features, action or item_id, propensity)
    and a clicks + purchases (+ views) table (impression_id, event_time, event_type, amount,
    event_id). ISO-8601 times with an offset, or (epoch) seconds in the decisions and milliseconds
    in the events. Returns the paths and each impression's expected reward (settled or not)."""
    import datetime

    rng = np.random.default_rng(4)
    start = datetime.datetime(2026, 12, 1, 8, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))

    def when(t: datetime.datetime, millis: bool) -> str:
        if not epoch:
            return t.isoformat()
        return str(int(t.timestamp() * 1000)) if millis else str(int(t.timestamp()))

    action = "item_id" if item_ids else "action"
    decisions = [f"impression_id,ts,age,country,{action},propensity"]
    events = ["impression_id,event_time,event_type,amount,event_id"]
    expected: dict[str, float] = {}
    for i in range(DECISIONS):
        imp, t = f"imp-{i:05d}", start + datetime.timedelta(minutes=i)
        a = int(rng.integers(0, 4))
        decisions.append(
            f"{imp},{when(t, False)},{int(rng.integers(18, 70))},{['fr', 'de', 'us'][i % 3]},"
            f"{f'sku{a}' if item_ids else a},0.25"
        )
        reward = 0.0
        if i % 4 == 0:  # seen: a type with no reward
            events.append(f"{imp},{when(t, True)},view,,ev-{len(events)}")
        if i % 3 == 0:
            events.append(f"{imp},{when(t + datetime.timedelta(minutes=2), True)},click,,ev-{len(events)}")
            reward += 1.0
            if i % 9 == 0:
                amount = 10 + i % 7 + 0.5
                events.append(
                    f"{imp},{when(t + datetime.timedelta(minutes=5), True)},purchase,{amount},ev-{len(events)}"
                )
                reward += amount  # rewards add up over types
        expected[imp] = reward
    d_path, e_path = os.path.join(directory, "decisions.csv"), os.path.join(directory, "events.csv")
    with open(d_path, "w") as f:
        f.write("\n".join(decisions) + "\n")
    with open(e_path, "w") as f:
        f.write("\n".join(events) + "\n")
    return d_path, e_path, expected


def test_events_propose_the_join_times_types_and_rewards_and_ingestion_runs_on_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the config's root (and the events' waiting decisions) land here
    logs, events, expected = impressions_and_events(tmp_path)
    out = tmp_path / "cfg.yaml"
    assert init("--from", logs, "--events", events, "--out", str(out)) == 0
    printed = capsys.readouterr().out
    text = out.read_text()
    g = guesses(text)
    assert g["reward"] == "the events of events.csv (experience_gen.events)"
    assert g["decision_id"].startswith(
        "impression_id  (sure: 60 of the events' 60 sampled impression_id values are among its values"
    )
    assert g["events.decision_id"].startswith("impression_id  (sure: 100% of its sampled values")
    assert g["decision_time"] == "ts  (sure: name match; date-times)"
    assert g["events.time"] == "event_time  (sure: name match; date-times)"
    assert g["events.type"].startswith("event_type  (sure")
    assert g["events.value"].startswith("amount  (sure")
    assert g["events.event_id"].startswith("event_id  (sure")
    assert decisions(text) == []
    assert "# event types in the sample: click (40), view (30), purchase (14)" in text
    assert "      # view: 1.0                   # 30 in the sample: no reward (unmapped_type)" in text
    assert "note: event types view (30) give no reward" in printed
    assert "window: 30m" in text and "the window defines the reward" in text

    raw = yaml.safe_load(text)["experience_gen"]
    cols = raw["bandit_columns"]
    assert "reward" not in cols
    assert (cols["decision_id"], cols["decision_time"], cols["action"], cols["propensity"]) == (
        "impression_id",
        "ts",
        "action",
        "propensity",
    )
    assert [f["name"] for f in cols["features"]] == ["age", "country"]  # not the id, not the time
    assert raw["events"] == {
        "source": {"kind": "file", "pattern": events, "format": "csv"},
        "columns": {
            "decision_id": "impression_id",
            "time": "event_time",
            "type": "event_type",
            "value": "amount",
            "event_id": "event_id",
        },
        "window": "30m",
        "rewards": {"click": 1.0, "purchase": "value"},
        "aggregate": "max",
        "default_reward": 0.0,
        "cutoff": "auto",
    }

    from rlops.components.experience_gen import run_experience_gen
    from rlops.pipelines.cli_examples import read_examples

    config = load_config("bandit", str(out)).experience_gen  # the strict loader, the file unchanged
    assert config.events is not None and config.events.rewards == {"click": 1.0, "purchase": "value"}
    assert (config.bandit_columns.decision_id, config.bandit_columns.decision_time) == ("impression_id", "ts")
    r = run_experience_gen(config, str(tmp_path / "examples"), str(tmp_path / "quarantine"))
    assert r.records_quarantined == 0 and r.records_written + r.records_pending == DECISIONS
    # cutoff auto: the last event (impression 117's purchase, minute 122); windows closed by then: 0..92
    assert (r.records_written, r.records_pending) == (93, 27)
    assert r.events["unmapped_type"] > 0 and r.events["malformed"] == r.events["unknown_decision"] == 0
    _, rows = read_examples(str(tmp_path / "examples"), columns=["decision_id", "reward"])
    rewards = {d: float(v) for d, v in rows}
    assert len(rewards) == r.records_written
    assert rewards["imp-00003"] == 1.0  # clicked
    assert rewards["imp-00001"] == 0.0 and rewards["imp-00004"] == 0.0  # nothing, a view only
    assert rewards["imp-00009"] == pytest.approx(1.0 + 12.5)  # a click and a purchase of 12.5
    assert all(rewards[d] == pytest.approx(expected[d]) for d in rewards)


def test_epoch_times_an_item_table_and_a_reward_column_in_the_decisions(tmp_path):
    """Epoch seconds in the decisions, milliseconds in the events; text item ids joined to an item
    table; a `clicked` column in the decisions is neither the reward nor a feature."""
    logs, events, _ = impressions_and_events(tmp_path, epoch=True, item_ids=True)
    lines = open(logs).read().splitlines()
    lines = [lines[0] + ",clicked"] + [line + f",{i % 2}" for i, line in enumerate(lines[1:])]
    with open(logs, "w") as f:
        f.write("\n".join(lines) + "\n")
    items = tmp_path / "items.csv"
    items.write_text("item_id,price\n" + "".join(f"sku{i},{i}.5\n" for i in range(4)))
    out = tmp_path / "cfg.yaml"
    assert init("--from", logs, "--items", str(items), "--events", events, "--out", str(out)) == 0
    text = out.read_text()
    g = guesses(text)
    assert g["decision_time"] == "ts  (sure: name match; epoch seconds, 2026-12-01 07:00..2026-12-01 08:59 UTC)"
    assert g["events.time"] == (
        "event_time  (sure: name match; epoch milliseconds, 2026-12-01 07:00..2026-12-01 09:02 UTC)"
    )
    assert g["item_id"].startswith("item_id  (sure")
    assert decisions(text) == []
    cols = yaml.safe_load(text)["experience_gen"]["bandit_columns"]
    assert "reward" not in cols and (cols["decision_id"], cols["decision_time"]) == ("impression_id", "ts")
    assert [f["name"] for f in cols["features"]] == ["age", "country"]
    (clicked,) = [line for line in text.splitlines() if "{name: clicked" in line]
    assert (
        clicked.lstrip().startswith("# - ") and "left out: named like a reward (0/1): the rewards come from" in clicked
    )
    config = load_config("bandit", str(out)).experience_gen
    assert config.events is not None and config.events.columns.time == "event_time"
    assert config.bandit_columns.item_id == "item_id"


def test_events_that_join_nothing_and_have_no_type_column_say_so(tmp_path, capsys):
    logs, _, _ = impressions_and_events(tmp_path)
    clicks = tmp_path / "clicks.csv"  # other ids, one kind of event: no type column
    clicks.write_text("impression_id,clicked_at\n" + "".join(f"x{i},2026-12-01T08:{i:02d}:30Z\n" for i in range(30)))
    out = tmp_path / "cfg.yaml"
    assert init("--from", logs, "--events", str(clicks), "--out", str(out)) == 0
    text = out.read_text()
    (decide,) = decisions(text)
    assert decide.startswith(
        f"the sampled values of {clicks}'s 'impression_id' and {logs}'s 'impression_id' did not overlap"
    )
    assert f"DECIDE: {decide}" in capsys.readouterr().out
    g = guesses(text)
    assert g["decision_id"].startswith("impression_id  (a guess: an id column of the same name")
    assert g["events.time"].startswith("clicked_at  (likely: name match; date-times")
    assert g["events.type"] == g["events.value"] == g["events.event_id"] == "(none found)"
    ev = yaml.safe_load(text)["experience_gen"]["events"]
    assert ev["columns"] == {
        "decision_id": "impression_id",
        "time": "clicked_at",
        "type": None,
        "value": None,
        "event_id": None,
    }
    assert ev["rewards"] == {"click": 1.0}  # one type: named after the file
    config = load_config("bandit", str(out)).experience_gen
    assert config.events is not None and config.events.columns.type is None

    # Types none of which reads as a click or a purchase: the most frequent rewards 1.0, a DECIDE line.
    views = tmp_path / "views.csv"
    views.write_text(
        "impression_id,event_time,kind\n"
        + "".join(f"imp-{i:05d},2026-12-01T08:{i:02d}:30Z,{'view' if i % 3 else 'share'}\n" for i in range(30))
    )
    assert init("--from", logs, "--events", str(views), "--out", "-") == 0
    text = capsys.readouterr().out
    (decide,) = decisions(text)
    assert decide.startswith(f"no event type of {views} reads as a click or a purchase (view (20), share (10))")
    assert yaml.safe_load(text)["experience_gen"]["events"]["rewards"] == {"view": 1.0}


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "file not found (closest: 'events.csv', 'decisions.csv')"),
        ("", "no records to read: '{path}' is empty"),
        (
            "impression_id,event_time,event_type\n",
            "no records to read: '{path}' is header-only (a CSV header, no records)",
        ),
    ],
    ids=["missing", "empty", "header-only"],
)
def test_an_events_file_without_events_exits_2_in_one_line(tmp_path, capsys, content, message):
    logs, events, _ = impressions_and_events(tmp_path)
    path = tmp_path / "evnts.csv" if content is None else tmp_path / "events.csv"
    if content is not None:
        path.write_text(content)
    assert init("--from", logs, "--events", str(path), "--out", str(tmp_path / "x.yaml")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"rlops: error: --events {path}: " + message.format(path=path)
    assert not (tmp_path / "x.yaml").exists()


def test_a_decision_id_column_becomes_the_split_key(tmp_path):
    """Logs with an impression id: the config maps it as bandit_columns.decision_id, so the split
    does not move when the user selects other features (docs/ingestion.md, "Comparing configs");
    logs without one map none."""
    import pandas as pd

    plain = pd.read_csv(plain_log(tmp_path))
    plain.insert(0, "impression_id", [f"imp-{i:05d}" for i in range(len(plain))])
    path = tmp_path / "with_ids.csv"
    plain.to_csv(path, index=False)
    out = tmp_path / "with_ids.yaml"
    assert init("--from", str(path), "--out", str(out)) == 0
    assert "    decision_id: impression_id   # each decision's id: the split is drawn from it" in out.read_text()
    cols = load_config("bandit", str(out)).experience_gen.bandit_columns
    assert cols.decision_id == "impression_id" and "impression_id" not in [f.name for f in cols.features]
    bare = tmp_path / "bare.yaml"
    assert init("--from", plain_log(tmp_path), "--out", str(bare)) == 0
    assert load_config("bandit", str(bare)).experience_gen.bandit_columns.decision_id is None
