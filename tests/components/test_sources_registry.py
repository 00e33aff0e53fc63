"""The source registry is the one list of source kinds: every member of the config's tagged union
has its Source, and a new kind plugs in with its class and its registry entry alone (planned,
read, validated, split, written, fingerprinted and dated without any other edit)."""

import dataclasses
import datetime
from typing import Any, ClassVar

import pytest

from rlops.components.experience_gen import config as gen_config, sources
from rlops.components.experience_gen.config import (
    BanditColumns,
    BigQuerySource,
    ExperienceGenConfig,
    FileSource,
    SimulationSource,
    SpecConfig,
)
from rlops.components.experience_gen.core import apply_runtime_params
from rlops.components.experience_gen.sources.base import SourcePlan, create_items, rows_block
from rlops.components.json_config import tagged_members


def test_every_source_kind_of_the_config_has_its_source_and_no_other():
    assert set(tagged_members(gen_config.Source)) == set(sources.SOURCES)
    for kind, source in sources.SOURCES.items():
        assert source.kind == kind and source.label


def test_runtime_parameters_come_from_each_sources_fields():
    assert sources.runtime_parameters(FileSource("gs://b/{date}/*.csv")) == {
        "data_pattern": (str, "gs://b/{date}/*.csv"),
        "data_date": (str, ""),
    }
    assert sources.runtime_parameters(BigQuerySource(table="p:d.t")) == {"data_date": (str, "")}
    assert sources.runtime_parameters(SimulationSource(num_records=7)) == {"num_records": (int, 7)}


def test_a_runtime_parameter_the_source_does_not_take_names_the_kinds_that_do():
    config = ExperienceGenConfig(source=BigQuerySource(table="p:d.t"), action_spec=SpecConfig.discrete(3))
    with pytest.raises(ValueError, match=r"^data_pattern: the source is 'bigquery'.*kind=file$"):
        apply_runtime_params(config, data_pattern="gs://x/*.csv")
    with pytest.raises(ValueError, match=r"^num_records: .*kind=simulation$"):
        apply_runtime_params(config, num_records=5)


# --- a new source kind: its config dataclass and its Source, nothing else ----------------------


@dataclasses.dataclass(frozen=True)
class MemorySource:
    rows: tuple = ()
    day: str = ""  # a dated field: {date} becomes the run's data date
    kind: str = "memory"


class Memory:
    kind: ClassVar[str] = "memory"
    label: ClassVar[str] = "memory"
    dated_fields: ClassVar[tuple[str, ...]] = ("day",)
    runtime_fields: ClassVar[dict[str, str]] = {}
    cacheable: ClassVar[bool] = True

    def plan(self, config):
        rows = config.source.rows
        return SourcePlan(config, tuple((list(rows[i : i + 2]), f"memory:{i}") for i in range(0, len(rows), 2)))

    def peek(self, config, inputs):
        return None

    def columns(self, config, inputs):
        from rlops.components.experience_gen.layout import SourceSchema

        return SourceSchema(), None

    def fingerprint(self, config) -> list[list]:
        return [[len(config.source.rows), config.source.day]]

    def read(self, p, config, items):
        return create_items(p, items)

    def read_item(self, config, layout, item: Any):
        rows, name = item
        yield rows_block(rows, layout.columns, name)

    def cloud_inputs(self, config) -> list[str]:
        return []


ROWS = tuple(
    {"f1": 0.1 * i, "f2": 1.0, "action": i % 3, "reward": float(i % 2), "propensity": 1 / 3} for i in range(9)
) + ({"f1": 0.0, "f2": 1.0, "action": 7, "reward": 1.0, "propensity": 1 / 3},)  # action out of range


@pytest.fixture
def memory(monkeypatch):
    monkeypatch.setitem(sources.SOURCES, Memory.kind, Memory())
    return ExperienceGenConfig(
        source=MemorySource(ROWS, day="logs-{date}"),
        bandit_columns=BanditColumns(context=("f1", "f2")),
        action_spec=SpecConfig.discrete(3),
        max_bad_record_ratio=0.2,
    )


def test_a_new_source_is_dated_and_fingerprinted_through_its_class(memory):
    from rlops.components.experience_gen.fingerprint import input_fingerprint

    dated = apply_runtime_params(memory, data_date="2026-01-31")
    assert dated.source.day == "logs-2026-01-31"
    yesterday = datetime.date(2026, 3, 1) - datetime.timedelta(days=1)
    assert apply_runtime_params(memory, today=datetime.date(2026, 3, 1)).source.day == f"logs-{yesterday}"
    fewer = dataclasses.replace(memory, source=MemorySource(ROWS[:4], day="logs-{date}"))
    assert input_fingerprint(memory) == input_fingerprint(memory) != input_fingerprint(fewer)


def test_a_new_source_runs_through_the_whole_ingestion(memory, tmp_path):
    from rlops.components.experience_gen.core import run_experience_gen

    result = run_experience_gen(memory, str(tmp_path / "examples"), str(tmp_path / "quarantine"))
    assert result.records_read == len(ROWS)
    assert result.records_quarantined == 1 and result.reasons == {"action_out_of_range": 1}
    assert sum(result.written_per_split.values()) == len(ROWS) - 1
