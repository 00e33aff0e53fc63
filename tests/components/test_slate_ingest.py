"""Slate logs through ExperienceGen (record_kind: slate): one row per shown item, grouped into pages
by a slate id; every bad row or page quarantined with its reason, the counts adding up, and the
written slates read back as the Evaluator reads them."""

from __future__ import annotations

import numpy as np
import pytest

from rlops.components.common.slates import read_slate_logs
from rlops.components.experience_gen import (
    ExperienceGenConfig,
    FileSource,
    SlateColumns,
    SpecConfig,
    read_quarantine,
    run_experience_gen,
)
from rlops.components.experience_gen.config import FeatureColumn
from rlops.components.experience_gen.errors import InputError

K, L = 6, 3
HEADER = "request,pos,item,click,pscore,pscore_cascade,user"


def page_rows(n: int, seed: int = 0, first: int = 1) -> list[str]:
    """n pages of uniform-without-replacement logging, 1-based positions, some pages shorter."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        length = L if i % 5 else 2
        items = rng.permutation(K)[:length]
        prefix = 1.0
        for pos, item in enumerate(items):
            prefix /= K - pos
            lines.append(f"r{i},{pos + first},{item},{int(rng.random() < 0.3)},{1 / K:.10f},{prefix:.10f},u{i % 4}")
    return lines


def slate_config(path: str, **kw) -> ExperienceGenConfig:
    columns = dict(
        slate_id="request",
        position="pos",
        item_id="item",
        reward="click",
        propensity="pscore",
        propensity_cascade="pscore_cascade",
        features=(FeatureColumn("user"),),
    )
    columns.update(kw.pop("columns", {}))
    settings = dict(record_kind="slate", slate_length=L, action_spec=SpecConfig.discrete(K))
    settings.update(kw)
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format="csv"), slate_columns=SlateColumns(**columns), **settings
    )


def run(tmp_path, lines: list[str], **kw):
    path = tmp_path / "pages.csv"
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    config = slate_config(str(path), **kw)
    examples, quarantine = str(tmp_path / "examples"), str(tmp_path / "quarantine")
    return run_experience_gen(config, examples, quarantine), examples, quarantine


def test_pages_become_slates_that_read_back_exactly(tmp_path):
    lines = page_rows(200)
    result, examples, _ = run(tmp_path, lines)
    assert result.record_kind == "slate"
    assert result.records_read == len(lines) == result.records_written
    assert sum(result.outputs_per_split.values()) == 200
    assert_pages_read_back(lines, examples, 200)


def assert_pages_read_back(lines: list[str], examples: str, pages: int) -> None:
    """Every written slate equals its rows in position order (whatever the first position), padded
    past a short page."""
    logs = {s: read_slate_logs(examples, s) for s in ("train", "eval")}
    assert sum(len(x) for x in logs.values()) == pages
    by_id: dict[str, list] = {}
    for line in lines:
        rid, pos, item, click, p, pc, _ = line.split(",")
        by_id.setdefault(rid, []).append((int(pos), int(item), float(click), float(p), float(pc)))
    for split_logs in logs.values():
        assert split_logs.num_items == K and split_logs.slate_length == L
        for i, rid in enumerate(split_logs.slate_ids):
            rows = sorted(by_id[rid])
            n = len(rows)
            np.testing.assert_array_equal(split_logs.slates[i, :n], [r[1] for r in rows])
            assert (split_logs.slates[i, n:] == -1).all()
            np.testing.assert_allclose(split_logs.rewards[i, :n], [r[2] for r in rows])
            np.testing.assert_allclose(split_logs.propensity[i, :n], [r[3] for r in rows], rtol=1e-6)
            np.testing.assert_allclose(split_logs.propensity_cascade[i, :n], [r[4] for r in rows], rtol=1e-6)
            assert split_logs.slot_mask[i].sum() == n


def test_first_position_is_read_from_the_data_when_it_decides(tmp_path):
    lines = page_rows(50, first=0)
    result, examples, _ = run(tmp_path, lines)
    assert result.records_quarantined == 0
    assert_pages_read_back(lines, examples, 50)  # position 0 is the first slot, not an error


def test_positions_that_cannot_tell_the_base_ask_which(tmp_path):
    """Pages of at most 2 items under slate_length 3, positions 1..2: 0- or 1-based? One line."""
    lines = [line for line in page_rows(30) if line.split(",")[1] in ("1", "2")]
    with pytest.raises(Exception, match="could be 0- or 1-based; set 0 or 1"):
        run(tmp_path, lines)


def test_bad_rows_and_pages_are_quarantined_with_reasons(tmp_path):
    good = page_rows(300, seed=1)
    bad = [
        "b1,1,0,1,1.5,0.1,u0",  # propensity outside (0, 1]
        "b1,2,1,0,0.1,0.05,u0",  # ... so the rest of its page goes too
        "b2,1,0,0,0.2,0.2,u0",
        "b2,1,1,0,0.2,0.1,u0",  # position twice
        "b3,1,2,0,0.2,0.2,u0",
        "b3,3,3,0,0.2,0.1,u0",  # position 2 missing
        "b4,1,4,0,0.2,0.2,u0",
        "b4,2,4,0,0.2,0.1,u0",  # item twice
        "b5,1,4,0,0.2,0.1,u0",
        "b5,2,5,0,0.2,0.15,u0",  # cascade rises
        "b6,4,1,0,0.2,0.2,u0",  # position outside 1..3
        "b7,1,9,0,0.2,0.2,u0",  # item outside the spec
        "b8,1,two,0,0.2,0.2,u0",  # not a number
    ]
    result, _, quarantine = run(tmp_path, good + bad, max_bad_record_ratio=0.5)
    assert result.records_read == len(good) + len(bad)
    assert result.records_written == len(good)
    assert result.records_quarantined == len(bad)
    reasons = result.reasons
    assert reasons["propensity_out_of_range"] == 1 and reasons["slate_has_bad_row"] == 1
    assert reasons["slate_duplicate_position"] == 2
    assert reasons["slate_missing_position"] == 2
    assert reasons["slate_duplicate_item"] == 2
    assert reasons["slate_cascade_increases"] == 2
    assert reasons["out_of_range"] == 1 and reasons["action_out_of_range"] == 1
    assert reasons["wrong_type"] == 1
    records = read_quarantine(quarantine)
    assert all(r["line"] > 1 and r["source_file"].endswith("pages.csv") for r in records)
    assert any("slate 'b2': position 1 appears 2 times" in r["message"] for r in records)
    assert any("slate 'b3': position(s) [2] missing" in r["message"] for r in records)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(slate_length=0), "slate_length must be a positive number"),
        (dict(columns=dict(position="rank")), "column 'rank' is not in"),
        (dict(columns=dict(slate_id=None)), "slate_columns.slate_id"),
        (dict(record_kind="slates"), "did you mean 'slate'"),
    ],
)
def test_whole_run_mistakes_are_one_line(tmp_path, change, message):
    path = tmp_path / "pages.csv"
    path.write_text("\n".join([HEADER, *page_rows(20)]) + "\n")
    with pytest.raises(Exception) as e:
        config = slate_config(str(path), **change)
        run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_slate_id_column_that_does_not_group_is_one_line(tmp_path):
    """A per-row id mapped as the slate id: every page would be one row, most of them past the first
    position. That is the config's mistake, not 360 bad rows: one line naming the column."""
    path = tmp_path / "pages.csv"
    rows = page_rows(200)
    path.write_text("\n".join([HEADER + ",row_id", *[f"{r},x{i}" for i, r in enumerate(rows)]]) + "\n")
    config = slate_config(str(path), columns=dict(slate_id="row_id"))
    with pytest.raises(InputError) as e:
        run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("experience_gen.slate_columns.slate_id: column 'row_id' does not group rows into pages")
    assert f"each of its {len(rows)} ids held one row" in message


def test_pages_of_one_item_at_the_first_position_are_valid(tmp_path):
    """Every page one row long, each at the first position: short pages, not a grouping mistake."""
    rows = [f"r{i},1,{i % K},{i % 2},{1 / K:.10f},{1 / K:.10f},u0" for i in range(40)]
    result, _, _ = run(tmp_path, rows, columns=dict(first_position=1))
    assert result.records_written == 40 and result.records_quarantined == 0


def test_generator_files_with_an_item_table_ingest_unchanged(tmp_path):
    """The slate generator's own files (string item ids, an item table, 1-based positions, user
    features) as a user would point ExperienceGen at them; an id the table lacks is quarantined
    with the rest of its page."""
    from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator

    logs = SlateLogGenerator(SlateConfig(num_items=8, num_slots=3, seed=1)).sample(300, seed=2)
    paths = logs.to_files(str(tmp_path / "logs"), layout="item", format="csv")
    lines = open(paths["impressions"]).read().splitlines()
    header = lines[0].split(",")
    row = dict(zip(header, lines[1].split(",")))
    row.update(slate_id="999999", item_id="no_such_item")  # a page whose item the table lacks
    with open(paths["impressions"], "a") as f:
        f.write(",".join(row[c] for c in header) + "\n")
    config = ExperienceGenConfig(
        record_kind="slate",
        source=FileSource(pattern=paths["impressions"], format="csv"),
        item_source=FileSource(pattern=paths["items"], format="csv"),
        slate_columns=SlateColumns(
            propensity_cascade="propensity_cascade",
            features=tuple(FeatureColumn(c) for c in header if c.startswith("user_")),
        ),
        slate_length=3,
        max_bad_record_ratio=0.05,
    )
    result = run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert result.records_written == 900 and sum(result.outputs_per_split.values()) == 300
    assert result.reasons == {"unknown_item": 1}
    back = {s: read_slate_logs(str(tmp_path / "ex"), s) for s in ("train", "eval")}
    ids = logs.items["item_id"]
    for split in back.values():
        assert split.num_items == 8
        for i, sid in enumerate(split.slate_ids):
            np.testing.assert_array_equal(ids[split.slates[i]], logs.items["item_id"][logs.slates[int(sid)]])


def test_one_row_per_slate_with_list_columns(tmp_path):
    """The generator's slates.jsonl (lists in display order, string item ids, an item table), and
    rows that break the list rules, each quarantined with its reason."""
    import json

    from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator

    logs = SlateLogGenerator(SlateConfig(num_items=8, num_slots=3, seed=1)).sample(200, seed=5)
    paths = logs.to_files(str(tmp_path / "logs"), layout="slate", format="jsonl")
    rows = [json.loads(x) for x in open(paths["slates"])]
    short = dict(rows[0], slate_id=10_001, slate=rows[0]["slate"][:2], reward=[0, 1])
    short.update(propensity=rows[0]["propensity"][:2], propensity_cascade=rows[0]["propensity_cascade"][:2])
    bad = [
        dict(rows[1], slate_id=10_002, reward=[1, 0]),  # two rewards for three items
        dict(rows[1], slate_id=10_003, slate=[rows[1]["slate"][0]] * 3),  # an item thrice
        dict(rows[1], slate_id=10_004, slate=["nope", *rows[1]["slate"][1:]]),  # not in the item table
        dict(rows[1], slate_id=10_005, propensity=[0.5, 0.0, 0.5]),
    ]
    with open(paths["slates"], "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in [short, *bad])
    config = ExperienceGenConfig(
        record_kind="slate",
        source=FileSource(pattern=paths["slates"], format="jsonl"),
        item_source=FileSource(pattern=paths["items"], format="csv"),
        slate_columns=SlateColumns(
            position=None, item_id="slate", item_table_id="item_id", propensity_cascade="propensity_cascade"
        ),
        slate_length=3,
        max_bad_record_ratio=0.05,
    )
    result = run_experience_gen(config, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert result.records_read == 205 and result.records_written == 201
    assert result.reasons == {
        "slate_lists_differ": 1,
        "slate_duplicate_item": 1,
        "unknown_item": 1,
        "propensity_out_of_range": 1,
    }
    back = {s: read_slate_logs(str(tmp_path / "ex"), s) for s in ("train", "eval")}
    ids = logs.items["item_id"]
    seen = 0
    for split in back.values():
        for i, sid in enumerate(split.slate_ids):
            seen += 1
            if sid == "10001":  # the short page: padded, its cascade carried past its end
                np.testing.assert_array_equal(split.slates[i], [*split.slates[i, :2], -1])
                assert split.propensity_cascade[i, 2] == split.propensity_cascade[i, 1]
                continue
            np.testing.assert_array_equal(ids[split.slates[i]], ids[logs.slates[int(sid)]])
            np.testing.assert_allclose(split.propensity[i], logs.propensity[int(sid)], rtol=1e-6)
    assert seen == 201
