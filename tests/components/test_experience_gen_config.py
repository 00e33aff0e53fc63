"""Config round trips through JSON, bad configs fail early naming the field, column mapping
resolves as documented; BigQuery is checked as far as it goes without a cloud."""

from __future__ import annotations

import datetime

import apache_beam as beam
import numpy as np
import pytest

from rlops.components.experience_gen import (
    BanditColumns,
    BigQuerySource,
    ExperienceGenConfig,
    FileSource,
    SimulationSource,
    SpecConfig,
    Split,
    SplitConfig,
    TrajectoryColumns,
    batches,
    kinds,
    layout,
    pipeline,
)
from rlops.components.experience_gen.sources import Quarantined
from rlops.components.experience_gen.sources.bigquery import bigquery_read


def test_json_round_trip_for_every_source_kind():
    for source in (
        FileSource("gs://b/logs/*.parquet", format="parquet"),
        BigQuerySource(table="p:d.t"),
        SimulationSource(env="gym:CartPole-v1", env_kwargs={"max_episode_steps": 50}),
    ):
        kind = "trajectory" if isinstance(source, SimulationSource) else "bandit"
        config = ExperienceGenConfig(
            record_kind=kind,
            source=source,
            action_spec=SpecConfig.discrete(3),
            bandit_columns=BanditColumns(context_prefix="f_", weight="w", timestamp="ts"),
            trajectory_columns=TrajectoryColumns(dist_params={"logits": "logit_*"}),
            splits=SplitConfig(splits=(Split("train", 8), Split("eval", 2)), key="user"),
        )
        again = ExperienceGenConfig.from_json(config.to_json())
        assert again == config and isinstance(again.source, type(source))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"record_kind": "episodes"}, "record_kind"),
        ({"action_spec": None}, "action_spec is required"),
        ({"source": FileSource("x.csv", format="xml")}, "FileSource.format"),
        ({"source": FileSource("x.csv", compression="zip")}, "compression"),
        ({"source": BigQuerySource(query="SELECT 1", table="p.d.t")}, "exactly one of query or table"),
        ({"max_bad_record_ratio": 1.5}, "max_bad_record_ratio"),
        ({"splits": SplitConfig(splits=(Split("a"), Split("a")))}, "unique"),
        ({"splits": SplitConfig(time_column="ts", time_boundaries=(1, 2))}, "needs 1 time_boundaries"),
        ({"source": SimulationSource(env="gym:CartPole-v1")}, "set record_kind"),
    ],
)
def test_bad_configs_fail_naming_the_field(change, message):
    base = dict(source=FileSource("x.csv"), action_spec=SpecConfig.discrete(3))
    with pytest.raises(ValueError, match=message):
        ExperienceGenConfig(**{**base, **change})


def test_unknown_json_field_is_named():
    with pytest.raises(ValueError, match=r"^experience_gen\.colums: unknown key"):
        ExperienceGenConfig.from_json('{"colums": {}, "action_spec": {"shape": [], "dtype": "int32"}}')


def test_layout_from_prefix_list_and_names():
    schema = layout.SourceSchema(("id", "x_10", "x_2", "x_1", "a", "r", "p", "emb"), {"emb": 5})
    cfg = ExperienceGenConfig(
        source=FileSource("x"),
        action_spec=SpecConfig.discrete(3),
        bandit_columns=BanditColumns(context_prefix="x_", action="a", reward="r", propensity="p"),
        splits=SplitConfig(key="id"),
    )
    lay = kinds.resolve_layout(cfg, schema)
    assert lay.field("context").columns == ("x_1", "x_2", "x_10") and lay.field("context").width == 3
    assert lay.split_key.columns == ("id",) and lay.columns[:4] == ["x_1", "x_2", "x_10", "a"]
    cfg = ExperienceGenConfig(
        source=FileSource("x"),
        action_spec=SpecConfig.discrete(3),
        bandit_columns=BanditColumns(context=("emb",), action="a", reward="r", propensity="p"),
    )
    assert kinds.resolve_layout(cfg, schema).field("context").width == 5
    with pytest.raises(ValueError, match="no column starts with prefix 'y_'"):
        kinds.resolve_layout(
            ExperienceGenConfig(
                source=FileSource("x"),
                action_spec=SpecConfig.discrete(3),
                bandit_columns=BanditColumns(context_prefix="y_"),
            ),
            schema,
        )
    with pytest.raises(ValueError, match="CSV has no list cells"):
        kinds.resolve_layout(
            ExperienceGenConfig(
                source=FileSource("x"),
                action_spec=SpecConfig.discrete(3),
                bandit_columns=BanditColumns(context=("c",), context_dim=4),
            ),
            layout.SourceSchema(("c",), text=True),
        )
    with pytest.raises(ValueError, match="require_propensity"):
        kinds.resolve_layout(
            ExperienceGenConfig(
                source=FileSource("x"),
                action_spec=SpecConfig.discrete(3),
                bandit_columns=BanditColumns(context=("c",), propensity=None),
            ),
            layout.SourceSchema(("c",)),
        )


def _bq_config(**kw) -> ExperienceGenConfig:
    return ExperienceGenConfig(
        source=BigQuerySource(
            query="SELECT * FROM `proj.logs.decisions`", project="proj", gcs_location="gs://bucket/tmp", **kw
        ),
        bandit_columns=BanditColumns(context=("f1", "f2"), timestamp="ts"),
        action_spec=SpecConfig.discrete(3),
    )


def test_bigquery_read_transform_and_graph():
    plan = pipeline.make_plan(_bq_config())
    read = bigquery_read(plan.config.source)
    assert isinstance(read, beam.io.ReadFromBigQuery)
    assert read._kwargs["query"].startswith("SELECT") and read._kwargs["use_standard_sql"]
    assert read._kwargs["project"] == "proj" and read.gcs_location.get() == "gs://bucket/tmp"
    assert read.method == "EXPORT" and not read.use_native_datetime  # EXPORT gives text timestamps
    table = bigquery_read(BigQuerySource(table="proj:logs.decisions", method="DIRECT_READ"))
    assert table._kwargs["table"] == "proj:logs.decisions" and table.method == "DIRECT_READ"
    assert table.use_native_datetime
    p = beam.Pipeline()
    pipeline.build(p, plan, "gs://bucket/examples", "gs://bucket/quarantine")  # graph only: no cloud here
    names = {t.unique_name for t in p.to_runner_api().components.transforms.values()}
    assert {"ReadBigQuery", "Ingest", "EncodeSplit", "Write[train]", "Write[eval]"} <= names


def test_bigquery_rows_are_validated_like_any_other():
    ts = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    rows = [
        {"f1": 0.1, "f2": 0.2, "action": 1, "reward": 1.0, "propensity": 0.5, "ts": ts},
        {"f1": 0.3, "f2": 0.4, "action": 2, "reward": 0.0, "propensity": 0.5, "ts": "2024-01-01 00:00:00 UTC"},
        {"f1": 0.1, "f2": None, "action": 1, "reward": 1.0, "propensity": 0.5, "ts": ts},
        {"f1": 0.1, "f2": 0.2, "action": 5, "reward": 1.0, "propensity": 0.5, "ts": ts},
    ]
    plan = pipeline.make_plan(_bq_config())
    out = list(pipeline.ingest(plan, (rows, "bigquery:query")))
    assert sum(n for n, _ in out) == 4
    bad = [o for _, o in out if isinstance(o, Quarantined)]
    assert [(q.line, q.code) for q in bad] == [(3, "missing_value"), (4, "action_out_of_range")]
    assert '"action": 5' in bad[1].payload.decode() and bad[1].source_file == "bigquery:query"
    [valid] = [o for _, o in out if isinstance(o, batches.ValidBatch)]
    assert valid.columns["timestamp"].tolist() == [int(ts.timestamp() * 1e6)] * 2  # datetime or EXPORT's text
    np.testing.assert_allclose(valid.columns["context"], [[0.1, 0.2], [0.3, 0.4]])
