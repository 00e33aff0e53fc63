"""`rlops compile` refuses every local path a cloud run would read, and `rlops submit` /
`rlops schedule create` check what needs no network (the template, --param, --cron) before the
credentials."""

import dataclasses
import json

import pytest

from rlops.pipelines.cli import main
from rlops.pipelines.config import ConfigError, load_config
from rlops.pipelines.vertex.compile import _check_cloud_paths, local_inputs

CLOUD = [
    "experience_gen.source={kind: file, pattern: 'gs://logs/{date}/*.csv', format: csv}",
    "root=gs://my-bucket/rlops/bandit",
    "serving_dir=gs://my-bucket/serving",
]


def _with_items(pattern: str):
    """A per-arm config whose item table is at `pattern`."""
    return load_config(
        "bandit",
        overrides=CLOUD
        + [
            f"experience_gen.item_source={{kind: file, pattern: '{pattern}', format: csv}}",
            "experience_gen.bandit_columns.item_id=item_id",
            "experience_gen.bandit_columns.features=[{name: user, kind: categorical}]",
            "experience_gen.bandit_columns.item_features=[{name: price, kind: float}]",
        ],
    )


def test_a_local_item_table_is_refused_in_one_line_naming_its_key():
    _check_cloud_paths(_with_items("gs://logs/items.csv"))  # all in Cloud Storage: fine
    with pytest.raises(ConfigError) as e:
        _check_cloud_paths(_with_items("data/items.csv"))
    assert str(e.value) == (
        "experience_gen.item_source.pattern: a cloud step cannot read local files; use gs:// (got 'data/items.csv')"
    )


def test_every_part_of_a_comma_separated_pattern_is_checked():
    config = _with_items("items.csv")
    mixed = dataclasses.replace(config.experience_gen.source, pattern="gs://logs/a.csv,logs/b.csv")
    config = dataclasses.replace(config, experience_gen=dataclasses.replace(config.experience_gen, source=mixed))
    assert local_inputs(config) == [
        ("experience_gen.source.pattern", "logs/b.csv"),
        ("experience_gen.item_source.pattern", "items.csv"),
    ]
    with pytest.raises(ConfigError, match=r"^experience_gen.source.pattern: .*'logs/b.csv'\); also experience_gen"):
        _check_cloud_paths(config)


@pytest.mark.parametrize(
    "source, key, path",
    [
        (
            "{kind: bigquery, table: 'p.d.logs', gcs_location: '/tmp/bq-export'}",
            "source.gcs_location",
            "/tmp/bq-export",
        ),
        ("{kind: simulation, policy: epsilon_greedy, policy_path: 'models/42'}", "source.policy_path", "models/42"),
    ],
)
def test_a_local_export_location_or_logging_policy_is_refused(source, key, path):
    in_the_cloud = source.replace(f"'{path}'", f"'gs://b/{path.lstrip('/')}'")
    _check_cloud_paths(load_config("bandit", overrides=CLOUD[1:] + [f"experience_gen.source={in_the_cloud}"]))
    config = load_config("bandit", overrides=CLOUD[1:] + [f"experience_gen.source={source}"])
    with pytest.raises(ConfigError) as e:
        _check_cloud_paths(config)
    assert str(e.value) == f"experience_gen.{key}: a cloud step cannot read local files; use gs:// (got '{path}')"


# --- offline checks before the credentials ------------------------------------------------------------


@pytest.fixture
def template(tmp_path, monkeypatch):
    """A minimal PipelineJob with one runtime parameter, and no credentials anywhere."""
    job = {
        "pipelineSpec": {
            "pipelineInfo": {"name": "p"},
            "root": {"inputDefinitions": {"parameters": {"data_date": {"parameterType": "STRING"}}}},
        },
        "runtimeConfig": {},
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    return str(path)


TARGET = ["--project", "my-proj", "--region", "us-central1", "--pipeline-root", "gs://my-bucket/root"]


def test_unknown_param_is_named_before_the_credentials(template, capsys):
    assert main(["submit", template, *TARGET, "--param", "data_dat=2024-01-01"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlops: --param data_dat: the pipeline has no runtime parameter 'data_dat'"), err
    # with the flags right, the credentials are what is missing
    assert main(["submit", template, *TARGET, "--param", "data_date=2024-01-01"]) == 2
    assert capsys.readouterr().err.startswith("rlops: credentials:")


def test_bad_cron_is_named_before_the_credentials(template, capsys):
    assert main(["schedule", "create", template, *TARGET, "--cron", "0 3 * *"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlops: --cron: '0 3 * *' is not a 5-field cron expression"), err


def _with_events(pattern: str, pending_dir: str | None = None):
    """A config whose rewards come from an events stream at `pattern`."""
    events = f"{{source: {{kind: file, pattern: '{pattern}', format: csv}}, columns: {{decision_id: imp, time: t}}}}"
    overrides = CLOUD + [
        f"experience_gen.events={events}",
        "experience_gen.bandit_columns.decision_id=imp",
        "experience_gen.bandit_columns.decision_time=ts",
        "experience_gen.bandit_columns.context=[f1]",
    ]
    if pending_dir:
        overrides.append(f"experience_gen.events.pending_dir={pending_dir}")
    return load_config("bandit", overrides=overrides)


def test_events_are_carried_to_the_cloud_and_a_local_events_path_is_refused(tmp_path):
    """The events section travels in the compiled spec, its waiting decisions under the gs:// root;
    a local events pattern or pending_dir is one line naming its key."""
    config = _with_events("gs://logs/events/{date}/*.csv")
    assert config.experience_gen.events.pending_dir == "gs://my-bucket/rlops/bandit/events_pending"
    _check_cloud_paths(config)
    local = tmp_path / "today.csv"
    local.write_text("imp,t\n")
    with pytest.raises(ConfigError) as e:
        _check_cloud_paths(_with_events(str(local)))
    assert str(e.value) == (
        f"experience_gen.events.source.pattern: a cloud step cannot read local files; use gs:// (got '{local}')"
    )
    with pytest.raises(ConfigError) as e:
        _check_cloud_paths(_with_events("gs://logs/events/*.csv", pending_dir="/tmp/pending"))
    assert str(e.value).startswith("experience_gen.events.pending_dir: a cloud step cannot read local files")
    from rlops.pipelines.vertex.compile import compile_pipeline
    from rlops.pipelines.vertex.settings import load_vertex_config

    spec = json.dumps(compile_pipeline(config, load_vertex_config()))
    assert "gs://my-bucket/rlops/bandit/events_pending" in spec and "gs://logs/events/{date}/*.csv" in spec
