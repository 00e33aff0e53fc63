"""The one config loader: a section that names a `kind` replaces the default's member (YAML and
`--set`), unions are found from the dataclasses' type hints, and every unknown key or wrong type
is one line `<key.path>: <problem>; closest: <names>`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import pytest

from rlops.components.experience_gen.config import (
    BigQuerySource,
    ExperienceGenConfig,
    FileSource,
    SimulationSource,
    Source,
)
from rlops.components.json_config import ConfigValueError, build, merge_raw, set_path, tagged_members
from rlops.components.pusher.registry import RegistryConfig
from rlops.pipelines.config import ConfigError, PusherConfig, load_config
from rlops.pipelines.vertex.settings import VertexConfigError, load_vertex_config


@pytest.fixture
def logs(tmp_path):
    path = tmp_path / "logs.csv"
    path.write_text("user,action,reward,propensity\nu1,0,1,0.5\nu2,1,0,0.5\n")
    return str(path)


def bandit(tmp_path, yaml_text: str | None = None, overrides: tuple[str, ...] = ()):
    path = None
    if yaml_text is not None:
        path = tmp_path / "my.yaml"
        path.write_text(yaml_text)
    return load_config("bandit", str(path) if path else None, [f"root={tmp_path}/root", *overrides])


def test_yaml_file_source_replaces_the_default_simulation(tmp_path, logs):
    config = bandit(
        tmp_path,
        f"experience_gen:\n  source: {{kind: file, pattern: '{logs}', format: csv}}\n"
        "  bandit_columns: {features: [user]}\n",
    )
    assert config.experience_gen.source == FileSource(pattern=logs, format="csv")
    assert config.raw["experience_gen"]["source"] == {"kind": "file", "pattern": logs, "format": "csv"}


def test_yaml_section_without_kind_edits_the_default_member(tmp_path):
    config = bandit(tmp_path, "experience_gen:\n  source: {num_records: 500}\n")
    assert config.experience_gen.source == SimulationSource(env="digits", policy="random", num_records=500, seed=0)


def test_yaml_same_kind_replaces_too(tmp_path):
    # The default's num_records (20000) is not merged in: the member is the user's, with its class defaults.
    config = bandit(tmp_path, "experience_gen:\n  source: {kind: simulation, seed: 3}\n")
    assert config.experience_gen.source == SimulationSource(seed=3)


def test_set_a_whole_member_replaces(tmp_path, logs):
    config = bandit(
        tmp_path,
        overrides=(
            f"experience_gen.source={{kind: file, pattern: '{logs}'}}",
            "experience_gen.bandit_columns.features=[user]",
        ),
    )
    assert config.experience_gen.source == FileSource(pattern=logs)


def test_set_kind_switches_member_without_old_fields(tmp_path):
    config = bandit(tmp_path, overrides=("experience_gen.source.kind=bigquery", "experience_gen.source.table=p.d.t"))
    assert config.experience_gen.source == BigQuerySource(table="p.d.t")
    assert config.raw["experience_gen"]["source"] == {"kind": "bigquery", "table": "p.d.t"}
    with pytest.raises(ConfigError, match=r"^experience_gen\.source\.num_records: unknown key; known: .*table"):
        bandit(
            tmp_path,
            overrides=(
                "experience_gen.source.num_records=5",
                "experience_gen.source.kind=bigquery",
                "experience_gen.source.num_records=5",
            ),
        )


def test_set_one_field_of_the_same_kind_edits_it(tmp_path):
    config = bandit(
        tmp_path, overrides=("experience_gen.source.num_records=700", "experience_gen.source.kind=simulation")
    )
    assert config.experience_gen.source == SimulationSource(num_records=700)  # same kind again: nothing dropped
    assert config.raw["experience_gen"]["source"]["env"] == "digits"


def test_nested_sections_still_merge(tmp_path):
    config = bandit(tmp_path, "trainer: {learning_rate: 0.01}\n", ("trainer.hidden_sizes=[8, 8]",))
    assert config.trainer.learning_rate == 0.01 and config.trainer.hidden_sizes == (8, 8)
    assert (
        config.trainer.agent == "neural_epsilon_greedy" and config.trainer.exploration_epsilon == 0.1
    )  # from the defaults


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("trainer.lerning_rate=0.1",), "trainer.lerning_rate: unknown key; closest: learning_rate"),
        (("experience_gen.sourc.kind=file",), "experience_gen.sourc: unknown key; closest: source, item_source"),
        (
            ("experience_gen.source.kind=bq",),
            "experience_gen.source.kind: unknown kind 'bq'; known: bigquery, file, simulation",
        ),
        (("experience_gen.source.seeds=1",), "experience_gen.source.seeds: unknown key; closest: seed"),
        (
            ("experience_gen.bandit_columns.features=[{name: a, knd: float}]",),
            "experience_gen.bandit_columns.features[0].knd: unknown key; closest: kind",
        ),
        (("evaluator.min_es=3",), "evaluator.min_es: unknown key; closest: min_ess"),
        (("pusher.keep=3",), "pusher.keep: unknown key; closest: keep_last"),
        (
            ("pusher.vertex_upload={project: p, region: r, display_name: d, endpint: '1'}",),
            "pusher.vertex_upload.endpint: unknown key; closest: endpoint",
        ),
        (("pusher.keep_last=0",), "pusher.keep_last: must be >= 1"),
        (("enable_caching=false",), "enable_caching: unknown key; closest: enable_cache"),
        (("trainer.epsilon=[1]",), "trainer.epsilon: expected a number, got [1] (list)"),
        # Found when the config loads, not after ingest and training as a ValueError (exit 1).
        (("evaluator.reward_model=network",), "evaluator.reward_model: 'network' needs a candidate exported"),
    ],
)
def test_errors_name_the_key_path_and_closest_names(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as e:
        bandit(tmp_path, overrides=overrides)
    assert str(e.value) == message or str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_ppo_options_are_checked_against_ppo_config(tmp_path):
    with pytest.raises(ConfigError, match=r"^trainer\.ppo\.num_env: unknown key; closest: num_envs"):
        load_config("ppo", overrides=[f"root={tmp_path}", "trainer.ppo.num_env=4"])
    config = load_config("ppo", overrides=[f"root={tmp_path}", "trainer.ppo.num_envs=4"])
    assert config.trainer.ppo == {"env_id": "CartPole-v1", "total_env_steps": 100000, "num_envs": 4}


def test_pusher_config_is_typed(tmp_path):
    config = bandit(tmp_path, overrides=("pusher.vertex_upload={project: p, region: r, display_name: d}",))
    assert config.pusher == PusherConfig(
        keep_last=5, vertex_upload=RegistryConfig(project="p", region="r", display_name="d")
    )


def test_vertex_settings_use_the_same_format():
    with pytest.raises(VertexConfigError, match=r"^steps\.Trainer\.machine: unknown key; closest: machine_type"):
        load_vertex_config(overrides=["steps={Trainer: {machine: n1-standard-4}}"])


@dataclass(frozen=True)
class Ridge:
    alpha: float = 1.0
    kind: str = "ridge"


@dataclass(frozen=True)
class Forest:
    trees: int = 10
    kind: str = "forest"


@dataclass(frozen=True)
class Model:
    """A config with a union of its own: nothing registers it; the type hints say it."""

    model: Union[Ridge, Forest] = field(default_factory=Ridge)
    name: str = "m"


def test_unions_are_found_from_type_hints():
    assert tagged_members(Source) == {"file": FileSource, "bigquery": BigQuerySource, "simulation": SimulationSource}
    assert tagged_members(FileSource | None) is None  # one member: a plain section

    base = {"model": {"kind": "ridge", "alpha": 2.0}, "name": "x"}
    assert merge_raw(Model, base, {"model": {"kind": "forest"}}) == {"model": {"kind": "forest"}, "name": "x"}
    assert merge_raw(Model, base, {"model": {"alpha": 3.0}}) == {"model": {"kind": "ridge", "alpha": 3.0}, "name": "x"}
    set_path(Model, base, ["model", "kind"], "forest")
    assert base == {"model": {"kind": "forest"}, "name": "x"}
    assert build(Model, {"model": {"kind": "forest", "trees": 3}}, "m") == Model(model=Forest(trees=3))
    assert build(Model, {"model": {"alpha": 0.5}}, "m") == Model(model=Ridge(alpha=0.5))  # no kind: the default's
    with pytest.raises(ConfigValueError, match=r"^m\.model\.trees: unknown key; known: alpha, kind$"):
        build(Model, {"model": {"trees": 3}}, "m")


def test_experience_gen_json_round_trips_through_the_loader(logs):
    config = ExperienceGenConfig.from_json(
        {
            "source": {"kind": "file", "pattern": logs},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": 1},
            "bandit_columns": {"features": ["user", {"name": "x", "kind": "float"}]},
        }
    )
    assert ExperienceGenConfig.from_json(config.to_json()) == config
    assert config.bandit_columns.features[0].name == "user"


@pytest.mark.parametrize(
    "feature, how",
    [
        ("{name: user_id, hash_buckets: 1024}", "hash_buckets: 1024"),
        ("{name: user_id, num_oov_buckets: 4}", "num_oov_buckets: 4"),
    ],
)
def test_a_hashed_feature_is_refused_at_load_unless_flex_is_allowed(tmp_path, logs, feature, how):
    """The pushed LiteRT policy cannot hash strings: found at load, not by the first blessed push
    after ingest and training (the guide's named-features example, docs/ingestion.md, did exactly that)."""
    text = f"experience_gen:\n  source: {{kind: file, pattern: '{logs}', format: csv}}\n  bandit_columns: {{features: [user, {feature}]}}\n"
    with pytest.raises(ConfigError) as e:
        bandit(tmp_path, text)
    message = str(e.value)
    assert message.startswith(f"experience_gen.bandit_columns.features['user_id']: {how} hashes strings")
    assert "litert_allow_flex" in message and "\n" not in message
    config = bandit(tmp_path, text, overrides=("pusher.litert_allow_flex=true",))
    assert config.pusher.litert_allow_flex and config.experience_gen.bandit_columns.features[1].name == "user_id"


@pytest.mark.parametrize("feature", ["{name: user_id, hash_buckets: 1}", "{name: user_id, num_oov_buckets: 1}"])
def test_one_bucket_needs_no_hash_and_loads(tmp_path, logs, feature):
    """One bucket takes no string hash (the encoder puts every value in it), so nothing to refuse:
    the check and the encoder share `needs_string_hash`."""
    text = f"experience_gen:\n  source: {{kind: file, pattern: '{logs}', format: csv}}\n  bandit_columns: {{features: [user, {feature}]}}\n"
    assert bandit(tmp_path, text).experience_gen.bandit_columns.features[1].name == "user_id"


def test_the_bandit_pipeline_refuses_slate_logs_in_one_line(tmp_path):
    pages = tmp_path / "pages.csv"
    pages.write_text("slate_id,position,item_id,reward,propensity\ns1,1,0,1,0.25\n")
    yaml_text = f"""
experience_gen:
  record_kind: slate
  source: {{kind: file, pattern: "{pages}", format: csv}}
  slate_length: 3
  action_spec: {{shape: [], dtype: int32, minimum: 0, maximum: 3}}
"""
    with pytest.raises(ConfigError) as e:
        bandit(tmp_path, yaml_text)
    assert str(e.value).startswith("experience_gen.record_kind: 'slate' records train a ranking policy, not a bandit")
    assert "\n" not in str(e.value)


def test_reading_a_config_imports_no_beam(tmp_path):
    """Loading and checking a pipeline config (what `rlops config`, `rlops init` and every run do
    first) reads each kind's config rules from experience_gen.config's own table: Apache Beam and
    TensorFlow stay unimported (about 2 s of start-up when the kinds' Beam stages came with them)."""
    import subprocess
    import sys

    from helpers import child_env

    code = (
        "import sys; from rlops.pipelines.config import load_config; load_config('bandit'); "
        "print(sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
