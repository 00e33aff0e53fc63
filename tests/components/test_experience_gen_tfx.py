"""The TFX face: ExperienceGen in a LocalDagRunner pipeline (sqlite ML Metadata), with TFX's own
StatisticsGen reading its Examples; plus the KFP entry function and the CLI faces."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from rlops.components.experience_gen import BanditColumns, ExperienceGenConfig, FileSource, SpecConfig


def _csv_config(eg_data, tmp_path, bad_rows: int = 0, **kw) -> ExperienceGenConfig:
    logs = eg_data.bandit_logs(200, seed=4)
    path = eg_data.write_logs(str(tmp_path / "logs" / "part.csv"), "csv", logs, "context", "x")
    if bad_rows:  # an action outside the spec, every other field fine
        header = open(path).readline().strip().replace('"', "").split(",")
        line = ",".join("99" if c == "action" else "0.5" for c in header) + "\n"
        with open(path, "a") as f:
            f.write(line * bad_rows)
    return ExperienceGenConfig(
        source=FileSource(pattern=path),
        bandit_columns=BanditColumns(context_prefix="x"),
        action_spec=SpecConfig.discrete(eg_data.K),
        **kw,
    )


@pytest.mark.slow  # a LocalDagRunner pipeline with TFX's StatisticsGen (~20 s)
def test_local_dag_runner_with_statistics_gen(tmp_path, eg_data):
    from tfx import v1 as tfx
    from tfx.orchestration import metadata

    from rlops.components.experience_gen import ExperienceGen

    gen = ExperienceGen(config=_csv_config(eg_data, tmp_path, bad_rows=1))
    stats = tfx.components.StatisticsGen(examples=gen.outputs["examples"])
    db = str(tmp_path / "mlmd.sqlite")
    pipe = tfx.dsl.Pipeline(
        pipeline_name="ingest",
        pipeline_root=str(tmp_path / "root"),
        components=[gen, stats],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(db),
        beam_pipeline_args=["--runner=DirectRunner"],
    )
    tfx.orchestration.LocalDagRunner().run(pipe)

    with metadata.Metadata(metadata.sqlite_metadata_connection_config(db)) as m:
        [examples] = m.store.get_artifacts_by_type("Examples")
        [stats_artifact] = m.store.get_artifacts_by_type("ExampleStatistics")
        [quarantine] = m.store.get_artifacts_by_type("rlops.ExperienceQuarantine")
    props = {k: v.int_value or v.string_value or v.double_value for k, v in examples.custom_properties.items()}
    assert props["records_read"] == 201 and props["records_written"] == 200 and props["records_quarantined"] == 1
    assert json.loads(props["quarantine_reasons"]) == {"action_out_of_range": 1}
    assert props["payload_format"] == "FORMAT_TF_EXAMPLE"
    assert json.loads(examples.properties["split_names"].string_value) == ["train", "eval"]
    assert quarantine.custom_properties["records_quarantined"].int_value == 1
    for split in ("train", "eval"):
        path = os.path.join(stats_artifact.uri, f"Split-{split}", "FeatureStats.pb")
        assert os.path.getsize(path) > 0
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import statistics_pb2

    s = statistics_pb2.DatasetFeatureStatisticsList()
    s.ParseFromString(
        tf.io.gfile.GFile(os.path.join(stats_artifact.uri, "Split-train", "FeatureStats.pb"), "rb").read()
    )
    features = {f.path.step[0] for f in s.datasets[0].features}
    assert features == {"context", "action", "reward", "propensity", "split_content"}


def test_kfp_entry_records_counts_in_artifact_metadata(tmp_path, eg_data):
    from rlops.components.experience_gen.kfp import run_for_kfp

    examples = SimpleNamespace(uri=str(tmp_path / "ex"), metadata={})
    quarantine = SimpleNamespace(uri=str(tmp_path / "q"), metadata={})
    run_for_kfp(_csv_config(eg_data, tmp_path).to_json(), ["--runner=DirectRunner"], examples, quarantine)
    assert examples.metadata["records_written"] == 200 and examples.metadata["split_names"] == ["train", "eval"]
    assert examples.metadata["payload_format"] == "FORMAT_TF_EXAMPLE"
    assert examples.metadata["record_kind"] == "bandit"
    assert quarantine.metadata["records_quarantined"] == 0
    assert sorted(os.listdir(examples.uri)) == [
        "Split-eval",
        "Split-train",
        "record_kind.json",
        "rlops_feature_schema.json",
        "schema.pbtxt",
    ]


def test_cli(tmp_path, eg_data, capsys):
    from rlops.components.experience_gen.__main__ import main

    config = tmp_path / "config.json"
    config.write_text(_csv_config(eg_data, tmp_path, bad_rows=50, max_bad_record_ratio=0.1).to_json())
    code = main(
        [
            "--config",
            str(config),
            "--examples-uri",
            str(tmp_path / "ex"),
            "--quarantine-uri",
            str(tmp_path / "q"),
            "--runner=DirectRunner",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out)["records_quarantined"] == 50
    assert "action_out_of_range: 50" in err and "max_bad_record_ratio" in err


def test_component_rejects_bad_config_at_definition():
    from rlops.components.experience_gen import ExperienceGen

    with pytest.raises(ValueError, match="action_spec is required"):
        ExperienceGen(config=json.dumps({"source": {"kind": "file", "pattern": "x.csv"}}))


@pytest.mark.parametrize("component", ["experience_gen", "evaluator"])
def test_a_local_runner_does_not_pack_tfx_for_remote_workers(monkeypatch, component):
    """Given Beam args, TFX's BaseBeamExecutor builds an sdist of TFX for remote workers (~49 MB in
    a temporary directory per execution, never removed: 29 of them after one suite run, 14 more from
    the Evaluator's executor the next day). The DirectRunner imports TFX from this process, so
    rlops' Beam executors skip it there, and only there."""
    import importlib

    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import dependency_utils

    Executor = importlib.import_module(f"rlops.components.{component}.executor").Executor
    built = []
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: built.append(1) or "/tmp/tfx.tar.gz")
    local = ["--runner=DirectRunner", "--direct_num_workers=1"]
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=list(local))
    assert Executor(context)._beam_pipeline_args == local and not built
    assert context.beam_pipeline_args == local  # the context is left as it was given
    remote = ["--runner=DataflowRunner", "--project=p", "--region=us-central1"]
    executor = Executor(base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=list(remote)))
    assert "--extra_package=/tmp/tfx.tar.gz" in executor._beam_pipeline_args and built == [1]
