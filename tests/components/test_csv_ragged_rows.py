"""Ragged CSV rows (more or fewer fields than the header) through the whole ExperienceGen run:
each is quarantined as a parse error holding its raw line, in bandit and slate logs alike, on
the fast (Arrow) path and the careful line-by-line one, and the counts add up."""

from __future__ import annotations

import pytest

from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SlateColumns,
    SpecConfig,
    read_quarantine,
    run_experience_gen,
)
from rlops.components.experience_gen.config import FeatureColumn

BANDIT_HEADER = "age,country,action,reward,propensity"
SLATE_HEADER = "request,pos,item,click,pscore,user"
RAGGED = {"extra": ",extra", "extra_empty": ",", "short": None}


def bandit_rows(n: int) -> list[str]:
    return [f"{20 + i % 50},{('us', 'fr', 'de')[i % 3]},{i % 5},{i % 2},0.2" for i in range(n)]


def slate_rows(n: int) -> list[str]:
    """n pages of two slots each."""
    return [f"r{i},{pos},{(i + pos) % 6},{i % 2},0.1666666667,u{i % 4}" for i in range(n) for pos in (1, 2)]


def ragged(line: str, kind: str) -> str:
    suffix = RAGGED[kind]
    return line + suffix if suffix is not None else line[: line.rindex(",")]


def bandit_config(path: str, block_bytes: int) -> ExperienceGenConfig:
    return ExperienceGenConfig(
        source=FileSource(pattern=path, format="csv", block_bytes=block_bytes),
        bandit_columns=BanditColumns(
            features=(
                FeatureColumn("age", kind="categorical", dtype="int64"),
                FeatureColumn("country", kind="categorical", dtype="string"),
            )
        ),
        action_spec=SpecConfig.discrete(5),
        max_bad_record_ratio=0.5,
    )


def slate_config(path: str, block_bytes: int) -> ExperienceGenConfig:
    return ExperienceGenConfig(
        record_kind="slate",
        source=FileSource(pattern=path, format="csv", block_bytes=block_bytes),
        slate_columns=SlateColumns(
            slate_id="request",
            position="pos",
            item_id="item",
            reward="click",
            propensity="pscore",
            features=(FeatureColumn("user"),),
        ),
        slate_length=2,
        action_spec=SpecConfig.discrete(6),
        max_bad_record_ratio=0.5,
    )


# block_bytes: 1 MiB keeps the file in one Arrow parse (the bad rows bisected out of it); 64 bytes
# puts each line in its own chunk, so a ragged line meets Arrow alone.
@pytest.mark.parametrize("block_bytes", [1 << 20, 64])
@pytest.mark.parametrize("kind", list(RAGGED))
def test_bandit_ragged_row_is_quarantined_with_its_line(tmp_path, kind, block_bytes):
    rows = bandit_rows(600)
    bad_at = {0, 299, 599}  # first, middle, last data row
    lines = [ragged(r, kind) if i in bad_at else r for i, r in enumerate(rows)]
    path = tmp_path / "logs.csv"
    path.write_text("\n".join([BANDIT_HEADER, *lines]) + "\n")
    result = run_experience_gen(
        bandit_config(str(path), block_bytes), str(tmp_path / "examples"), str(tmp_path / "quarantine")
    )
    assert result.records_read == 600
    assert (result.records_written, result.records_quarantined) == (597, 3)
    assert result.reasons == {"parse_error": 3}
    assert sum(result.written_per_split.values()) == result.records_written
    quarantined = sorted(read_quarantine(str(tmp_path / "quarantine")), key=lambda q: q["line"])
    assert [q["line"] for q in quarantined] == [i + 2 for i in sorted(bad_at)]  # 1-based, after the header
    assert [q["payload"] for q in quarantined] == [lines[i] for i in sorted(bad_at)]
    expected = "got 6" if kind.startswith("extra") else "got 4"
    assert all(q["reason"] == "parse_error" and expected in q["message"] for q in quarantined)


@pytest.mark.parametrize("block_bytes", [1 << 20, 64])
def test_slate_ragged_row_is_quarantined_with_its_line(tmp_path, block_bytes):
    rows = slate_rows(300)
    extra, short = 101, 400  # page r50's second slot, page r200's first
    lines = list(rows)
    lines[extra], lines[short] = ragged(rows[extra], "extra"), ragged(rows[short], "short")
    path = tmp_path / "pages.csv"
    path.write_text("\n".join([SLATE_HEADER, *lines]) + "\n")
    result = run_experience_gen(
        slate_config(str(path), block_bytes), str(tmp_path / "examples"), str(tmp_path / "quarantine")
    )
    assert result.records_read == len(lines) == result.records_written + result.records_quarantined
    quarantined = {q["line"]: q for q in read_quarantine(str(tmp_path / "quarantine"))}
    assert {ln: (q["reason"], q["payload"]) for ln, q in quarantined.items()} == {
        extra + 2: ("parse_error", lines[extra]),
        short + 2: ("parse_error", lines[short]),
        # r200 lost its first slot: its second cannot form a page; r50 keeps a one-slot page.
        short + 3: ("slate_missing_position", lines[short + 1]),
    }
    assert "got 7" in quarantined[extra + 2]["message"] and "got 5" in quarantined[short + 2]["message"]
    assert (result.records_written, sum(result.outputs_per_split.values())) == (597, 299)
