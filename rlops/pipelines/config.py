"""Pipeline configuration: a YAML file per pipeline kind, overlaid by a user file and by
`--set key=value` overrides, validated completely before any component runs.

Errors name the key (`trainer.agent: unknown agent 'dqn'; ...`), because a nightly job that
fails at step four of five for a typo in step one wastes a night. Unknown keys list the closest
known ones: `<key.path>: unknown key; closest: <names>`.

Overlays merge section by section, except a choice between kinds (experience_gen.source: file,
bigquery or simulation): a mapping that names a `kind` replaces the default's member whole, and
`--set experience_gen.source.kind=x` switches it without keeping the old member's fields. Which
keys are such unions is read from the config dataclasses' type hints (json_config.tagged_members).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from rlops.components.common.decision_kinds import (
    BANDIT,
    KINDS as DECISION_KINDS,
    PIPELINES,
    SLATE,
    TRAJECTORY,
    DecisionKind,
    decision_kind,
)
from rlops.components.json_config import ConfigValueError, build, check, merge_raw, set_path, unknown_key
from rlops.components.pusher.registry import RegistryConfig
from rlops.features.schema import needs_string_hash
from rlops.pipelines.config_types import load_yaml

if TYPE_CHECKING:
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig
    from rlops.components.experience_gen.config import BanditColumns, ExperienceGenConfig
    from rlops.components.trainer.config import TrainerConfig

log = logging.getLogger(__name__)

KINDS = tuple(PIPELINES)  # the pipelines, `rlops run <name>`: a decision kind plus its default agent
TOP_LEVEL_KEYS = (
    "name",
    "root",
    "serving_dir",
    "enable_cache",
    "warm_start",
    "beam_args",
    "experience_gen",
    "trainer",
    "evaluator",
    "pusher",
)


class ConfigError(ValueError):
    """A bad pipeline config; the message starts with the offending key."""


@dataclass(frozen=True)
class PusherConfig:
    """Where blessed policies go besides `serving_dir`, and how many versions stay there."""

    keep_last: int = 5  # newest rlops versions kept in serving_dir (>= 1)
    vertex_upload: RegistryConfig | None = None  # also register (and deploy) in Vertex AI Model Registry
    litert_allow_flex: bool = False  # publish a policy.tflite needing Flex ops instead of failing
    # FOR INTEGRATION TESTS ONLY: a directory (local or gs://) a candidate that did NOT bless is
    # published to, verified as a blessed push is, with an UNBLESSED file and `unblessed: true` in
    # its marker; never serving_dir (refused). null: an unblessed candidate is not published at all.
    stage_unblessed: str | None = None

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise ConfigValueError(f"pusher.keep_last: must be >= 1 (versions to keep), got {self.keep_last}")
        if self.stage_unblessed is not None and not self.stage_unblessed.strip():
            raise ConfigValueError("pusher.stage_unblessed: empty; give a directory for unblessed candidates, or null")


@dataclass
class PipelineConfig:
    kind: str  # bandit | ppo | ranking
    name: str  # the pipeline's name (ML Metadata, Vertex)
    root: str  # artifacts + metadata.sqlite
    serving_dir: str  # where the Pusher publishes versions
    enable_cache: bool  # TFX caching of unchanged steps
    warm_start: bool  # retrain from the last blessed model
    beam_args: list[str]  # Beam pipeline options, '--flag=value'
    experience_gen: ExperienceGenConfig | None  # the bandit and ranking pipelines' ingestion; None for ppo
    trainer: TrainerConfig  # the Trainer's settings (the agent, its network and training budget)
    # The Evaluator's settings: off-policy evaluation and the blessing gate
    evaluator: EvaluatorConfig | SlateEvaluatorConfig
    # Where blessed policies are published besides serving_dir, and how many versions stay
    pusher: PusherConfig = field(default_factory=PusherConfig)
    raw: dict[str, object] = field(default_factory=dict, repr=False)  # the merged YAML, as given

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.root, "metadata.sqlite")

    @property
    def pipeline_root(self) -> str:
        return os.path.join(self.root, "artifacts")

    @property
    def num_actions(self) -> int | None:
        return self.trainer.num_actions


def schema(kind: str) -> dict[str, Any]:
    """The pipeline YAML's top-level keys and their types: what overlays, `--set` and the type
    check walk (tagged unions, e.g. experience_gen.source, are found from these hints)."""
    from rlops.components.evaluator.kinds import evaluation_path
    from rlops.components.experience_gen.config import ExperienceGenConfig
    from rlops.components.trainer.config import TrainerConfig

    row = pipeline_kind(kind)
    return {
        "name": str | None,
        "root": str | None,
        "serving_dir": str | None,
        "enable_cache": bool,
        "warm_start": bool,
        "beam_args": list[str] | None,
        "experience_gen": ExperienceGenConfig | None if row.ingests else dict | None,
        "trainer": TrainerConfig | None,
        "evaluator": evaluation_path(row.kind.name).config_class | None,
        "pusher": PusherConfig | None,
    }


def default_config(kind: str) -> dict:
    pipeline_kind(kind)
    text = resources.files("rlops.pipelines").joinpath("configs").joinpath(f"{kind}.yaml").read_text()
    return load_yaml(text)


def apply_override(config: dict, assignment: str, kind: str | None = None) -> None:
    """`a.b.c=value`: value parsed as YAML (numbers, booleans, lists, null), else a string.
    With the pipeline `kind`, the value overlays the key as a YAML file would (a mapping that
    names a `kind` replaces a tagged union's member; `a.b.kind=x` switches it, dropping the old
    member's fields); `build_config` then checks its type against the key's."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment}: expected key=value")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {assignment}: empty key segment")
    try:
        value = load_yaml(text)
    except yaml.YAMLError:
        value = text
    try:
        set_path(schema(kind) if kind else Any, config, parts, value)
    except ConfigValueError as e:
        raise ConfigError(str(e)) from None


def read_yaml_mapping(path: str, flag: str = "--config", error: type[ValueError] = ConfigError) -> dict:
    """A YAML file whose top level is a mapping; errors name the flag that gave the path."""
    if not os.path.exists(path):
        raise error(f"{flag}: file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = load_yaml(f.read()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"{flag} {path}:{where}: invalid YAML: {problem}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{flag} {path}: cannot read: {e}") from None
    if not isinstance(data, dict):
        raise error(f"{flag} {path}: expected a mapping at the top level")
    return data


def load_raw(kind: str, path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The defaults, overlaid by the file at `path`, then by each `--set` override: the merged
    YAML, not yet validated (cheap: no TensorFlow, no file checks)."""
    raw = default_config(kind)
    if path:
        raw = merge_raw(schema(kind), raw, read_yaml_mapping(path))
    for assignment in overrides:
        apply_override(raw, assignment, kind)
    return raw


def _check_litert_convertible(columns: BanditColumns) -> None:
    """The Pusher publishes policy.tflite beside every SavedModel, and no TFLite builtin reads a
    string's bytes: a hashed feature needs TensorFlow's Flex op, and the first blessed night's push
    would fail on it after ingest and training. Found here, at load time, instead."""
    for section in ("features", "item_features"):
        for f in getattr(columns, section):
            if needs_string_hash(f.hash_buckets or f.num_oov_buckets):  # hash_buckets replace the OOV ones
                how = f"hash_buckets: {f.hash_buckets}" if f.hash_buckets else f"num_oov_buckets: {f.num_oov_buckets}"
                raise ConfigError(
                    f"experience_gen.bandit_columns.{section}['{f.name}']: {how} hashes strings, which the "
                    "pushed LiteRT policy cannot (TensorFlow's StringToHashBucketFast is a Flex op); use a "
                    "vocabulary (vocab_size, one OOV bucket) or set pusher.litert_allow_flex: true"
                )


def load_config(kind: str, path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> PipelineConfig:
    """`load_raw`, validated into typed configs."""
    return build_config(kind, load_raw(kind, path, overrides))


def _section(raw: dict, key: str, make) -> Any:
    try:
        return make(raw.get(key) or {})
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        message = str(e)
        prefix = f"{key}."
        raise ConfigError(
            message if message.startswith(prefix) or message.startswith(key + ":") else f"{key}: {message}"
        ) from e


def build_config(kind: str, raw: dict) -> PipelineConfig:
    """Validates every section (and what the paths point at) into typed configs."""
    from rlops.components.evaluator.kinds import evaluation_path, evaluator_config_from_dict
    from rlops.components.evaluator.reward_models import NETWORK, REWARD_MODEL_CHOICES
    from rlops.components.trainer.agents.registry import AGENTS, agent_names
    from rlops.components.trainer.config import TrainerConfig

    unknown = [k for k in raw if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise ConfigError(str(unknown_key("", unknown[0], TOP_LEVEL_KEYS)))
    check_types(kind, raw)
    root = str(raw.get("root") or f"pipeline_root/{kind}")
    _check_writable("root", root)
    experience_gen = None
    trainer_raw = dict(raw.get("trainer") or {})
    row = pipeline_kind(kind)
    if row.ingests:
        experience_gen = _section(raw, "experience_gen", _experience_gen_config)
        trained_by = decision_kind(experience_gen.record_kind).pipeline
        if trained_by != kind:  # the kind table says which pipeline trains on such records
            raise ConfigError(
                f"experience_gen.record_kind: '{experience_gen.record_kind}' records train a {trained_by} "
                f"policy, not a {kind} one; `rlops run {trained_by}` trains on them"
            )
    given = raw.get("experience_gen")
    columns_given = given.get("bandit_columns") if isinstance(given, dict) else None
    columns_given = columns_given if isinstance(columns_given, dict) else {}
    if experience_gen is not None and experience_gen.events is not None and "reward" in columns_given:
        raise ConfigError(
            "experience_gen.bandit_columns.reward: the rewards come from experience_gen.events; map one or the other"
        )
    if experience_gen is not None and experience_gen.events is not None and not experience_gen.events.pending_dir:
        pending_dir = os.path.join(root, "events_pending")  # decisions that wait for the next night
        experience_gen = dataclasses.replace(
            experience_gen, events=dataclasses.replace(experience_gen.events, pending_dir=pending_dir)
        )
    if experience_gen is not None:  # what the logs say about the learner (the kind's own rule)
        experience_gen, trainer_raw = row.fit_trainer(experience_gen, trainer_raw)
    agent = str(trainer_raw.get("agent", TrainerConfig.agent))
    if agent in AGENTS and AGENTS[agent].pipeline != kind:  # the registry says which pipeline trains an agent
        names = agent_names(kind)
        raise ConfigError(
            f"trainer.agent: '{agent}' is not a {kind} agent; the {kind} pipeline trains "
            + (f"'{names[0]}'" if len(names) == 1 else f"one of {', '.join(names)}")
        )
    trainer = _section({"trainer": trainer_raw}, "trainer", TrainerConfig.from_dict)
    if experience_gen is not None:
        experience_gen = _with_split_minimums(experience_gen, 1)  # the Trainer takes a partial last batch
    try:
        trainer.check_inputs(has_examples=row.ingests)  # the ppo pipeline trains online
    except ValueError as e:
        raise ConfigError(str(e)) from e
    evaluator_raw = {"kind": row.kind.name, **(raw.get("evaluator") or {})}
    evaluator = _section({"evaluator": evaluator_raw}, "evaluator", evaluator_config_from_dict)
    if evaluation_path(evaluator.kind) is not evaluation_path(row.kind.name):
        raise ConfigError(f"evaluator.kind: '{evaluator_raw['kind']}' does not match the {kind} pipeline")
    if getattr(evaluator, "reward_model", None) == NETWORK:  # at load time, not after training
        fitted = ", ".join(c for c in REWARD_MODEL_CHOICES if c != NETWORK)
        raise ConfigError(
            f"evaluator.reward_model: '{NETWORK}' needs a candidate exported with its predicted rewards, "
            f"and the pipeline's Trainer exports none; choose one of {fitted} "
            f"('{NETWORK}' is for the Python API and `rlops evaluate` on such a policy)"
        )
    pusher = _section(raw, "pusher", lambda d: build(PusherConfig, d, "pusher"))
    if experience_gen is not None:
        row.check(experience_gen, trainer, pusher)
    serving_dir = str(raw.get("serving_dir") or os.path.join(root, "serving"))
    _check_writable("serving_dir", serving_dir)
    beam_args = raw.get("beam_args") or []
    if not all(a.startswith("--") for a in beam_args):
        raise ConfigError(f"beam_args: expected a list of '--flag=value' strings, got {beam_args!r}")
    return PipelineConfig(
        kind=kind,
        name=str(raw.get("name") or f"rlops-{kind}"),
        root=root,
        serving_dir=serving_dir,
        enable_cache=bool(raw.get("enable_cache", True)),
        warm_start=bool(raw.get("warm_start", True)),
        beam_args=list(beam_args),
        experience_gen=experience_gen,
        trainer=trainer,
        evaluator=evaluator,
        pusher=pusher,
        raw=raw,
    )


def _check_fillable(config: ExperienceGenConfig) -> None:
    """A page of slate_length slots needs at least that many items (the action spec's, or the item
    table's rows), and a simulated world its known settings: found at load time, not after ingestion."""
    from rlops.components.experience_gen.config import SimulationSource
    from rlops.components.experience_gen.slate_simulation import slate_world

    length = int(config.slate_length or 0)
    spec = config.action_spec
    items, where = None, ""
    if spec is not None and spec.maximum is not None:
        items, where = int(spec.maximum) - int(spec.minimum or 0) + 1, "experience_gen.action_spec"
    elif config.item_source is not None and "://" not in config.item_source.pattern:
        from rlops.components.experience_gen.slates import resolve_items

        items, where = len(resolve_items(config)[1]), f"the item table {config.item_source.pattern}"
    if items is not None and length > items:
        raise ConfigError(
            f"experience_gen.slate_length: {length} slots, but {where} has {items} items; no page can be filled"
        )
    if isinstance(config.source, SimulationSource):  # slate records simulate only the slates world
        try:
            slate_world(config)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _per_arm_trainer(trainer_raw: dict) -> dict:
    """Per-arm logs (an item table): the trainer section with the per-arm defaults where it leaves
    them unset (trainer.config.PER_ARM_DEFAULTS); a linear agent, which cannot personalise over
    concatenated user and item features, trains as asked, with a one-line warning saying so."""
    from rlops.components.trainer.config import apply_per_arm_defaults, linear_per_arm_note

    note = linear_per_arm_note(str(trainer_raw.get("agent", "neural_epsilon_greedy")))
    if note:
        log.warning(note)  # one line on stderr (logging's last-resort handler, or the host's)
    return apply_per_arm_defaults(trainer_raw)


def _with_item_id_feature(config: ExperienceGenConfig, trainer_raw: dict) -> ExperienceGenConfig:
    """Per-arm logs for the per-arm default learner (neural_epsilon_greedy, trainer.network left
    unset: the dot_product default): the item table's id column is one more (categorical) item
    feature unless item_features already list it, so the item tower learns each item's own
    embedding beside what its features say (a measurable share of the gap on click logs:
    benchmarks/defaults_vs_vw.py). Servers then send `per_arm/<id column>` with the other item features; a new
    item's id falls in the out-of-vocabulary bucket and is scored by its features. A trainer
    section that chooses its network keeps the item features it lists."""
    from rlops.components.experience_gen.config import FeatureColumn
    from rlops.components.trainer.config import PER_ARM_DEFAULT_AGENT

    agent = trainer_raw.get("agent", PER_ARM_DEFAULT_AGENT)
    if agent != PER_ARM_DEFAULT_AGENT or "network" in trainer_raw:
        return config
    cols = config.bandit_columns
    id_col = cols.item_table_id or cols.item_id
    if not id_col or any(f.source_column == id_col or f.name == id_col for f in cols.item_features):
        return config
    item_features = (*cols.item_features, FeatureColumn(name=id_col, kind="categorical"))
    return dataclasses.replace(config, bandit_columns=dataclasses.replace(cols, item_features=item_features))


def _fit_bandit_trainer(config: ExperienceGenConfig, trainer_raw: dict) -> tuple[ExperienceGenConfig, dict]:
    """Bandit logs: a context mapped, the action space from the action spec; per-arm logs (an item
    table) get a learner that personalises."""
    from rlops.components.experience_gen.config import FileSource

    cols = config.bandit_columns
    if isinstance(config.source, FileSource) and not cols.context and not cols.context_prefix and not cols.features:
        raise ConfigError(
            "experience_gen.bandit_columns.context: no context columns mapped; set `features` "
            "(named context features), `context` (column names) or `context_prefix`"
        )
    spec = config.action_spec
    assert spec is not None and spec.maximum is not None  # ExperienceGenConfig checks bandit logs have one
    trainer_raw.setdefault("num_actions", int(spec.maximum) - int(spec.minimum or 0) + 1)
    trainer_raw.setdefault("action_minimum", int(spec.minimum or 0))
    if config.item_source is not None:
        config = _with_item_id_feature(config, trainer_raw)
        trainer_raw = _per_arm_trainer(trainer_raw)
    return config, trainer_raw


def _fit_slate_trainer(config: ExperienceGenConfig, trainer_raw: dict) -> tuple[ExperienceGenConfig, dict]:
    """Pages of L of K items: pages that can be filled, and a learner that scores each item per request."""
    from rlops.components.trainer.config import apply_per_arm_defaults

    _check_fillable(config)
    return config, apply_per_arm_defaults(trainer_raw, default_agent=decision_kind(config.record_kind).default_agent)


def _check_bandit(config: ExperienceGenConfig, trainer: TrainerConfig, pusher: PusherConfig) -> None:
    """A dot-product learner needs item features, and the LiteRT policy a feature it can convert."""
    if trainer.network == "dot_product" and not config.bandit_columns.item_features:
        raise ConfigError(
            "trainer.network: 'dot_product' scores each item by its features, and the examples have none; "
            "give experience_gen.bandit_columns.item_features (with item_source), or use 'common_tower'"
        )
    if not pusher.litert_allow_flex:
        _check_litert_convertible(config.bandit_columns)


def _unchanged(config: ExperienceGenConfig, trainer_raw: dict) -> tuple[ExperienceGenConfig, dict]:
    return config, trainer_raw


def _no_check(config: ExperienceGenConfig, trainer: TrainerConfig, pusher: PusherConfig) -> None:
    return None


@dataclass(frozen=True)
class PipelineKind:
    """One pipeline (`rlops run <name>`): the decision kind it trains on and its own load-time rules."""

    kind: DecisionKind
    ingests: bool  # ExperienceGen first (else the Trainer collects online, in an environment)
    # the logs' facts -> the trainer section's defaults (given experience_gen, the raw trainer section)
    fit_trainer: Any = _unchanged
    check: Any = _no_check  # (experience_gen, trainer, pusher) -> None, or a ConfigError


PIPELINE_KINDS: dict[str, PipelineKind] = {
    row.kind.pipeline: row
    for row in (
        PipelineKind(DECISION_KINDS[BANDIT], True, _fit_bandit_trainer, _check_bandit),
        PipelineKind(DECISION_KINDS[TRAJECTORY], False),
        PipelineKind(DECISION_KINDS[SLATE], True, _fit_slate_trainer),
    )
}


def pipeline_kind(name: str) -> PipelineKind:
    row = PIPELINE_KINDS.get(name)
    if row is None:
        raise ConfigError(f"pipeline: unknown kind '{name}'; choose one of {', '.join(KINDS)}")
    return row


def check_types(kind: str, raw: dict) -> None:
    """Every value has its key's type (no "fasle" read as True, no 2.5 train steps found only
    after ingestion), every key is known (closest names otherwise); the error names the key path.
    Runs before any section is built."""
    try:
        for key, tp in schema(kind).items():
            if key in raw:
                check(tp, raw[key], key)
    except ConfigValueError as e:
        raise ConfigError(str(e)) from None


def _with_split_minimums(config: ExperienceGenConfig, min_train: int) -> ExperienceGenConfig:
    """A train split under `min_train` records (or an empty eval split) fails in ExperienceGen,
    saying which split, instead of as an obscure error steps later; explicit values win."""
    names = config.splits.names
    defaults = {name: n for name, n in (("train", min_train), ("eval", 1)) if name in names}
    return dataclasses.replace(config, min_split_records={**defaults, **config.min_split_records})


def _experience_gen_config(d: dict) -> ExperienceGenConfig:
    from rlops.components.experience_gen.config import ExperienceGenConfig, FileSource

    config = ExperienceGenConfig.from_json(d)
    if isinstance(config.source, FileSource):
        _check_matches("experience_gen.source.pattern", config.source.pattern)
        if isinstance(config.item_source, FileSource) and "://" not in config.source.pattern:
            # local logs: their item table is checked as they are (logs in the cloud: `rlops
            # compile` refuses a local item table in its own words)
            _check_matches("experience_gen.item_source.pattern", config.item_source.pattern)
    if config.events is not None and isinstance(config.events.source, FileSource):
        _check_matches("experience_gen.events.source.pattern", config.events.source.pattern)
    return config


def _check_matches(key: str, pattern: str) -> None:
    """Each part of a comma-separated local pattern matches a file (gs:// is listed by the run)."""
    import tensorflow as tf

    for part in (p.strip() for p in pattern.split(",")):
        if part and "://" not in part and "{date" not in part and not tf.io.gfile.glob(part):
            raise ConfigError(f"{key}: no files match '{part}'")


def _check_writable(key: str, path: str) -> None:
    if "://" in path:
        return  # buckets are checked by the runner that has the credentials
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
        raise ConfigError(f"{key}: cannot create '{path}' ({probe} is not a writable directory)")


# --- the effective config, printed (`rlops config`) ----------------------------------------------

# The top level's docs (PipelineConfig's fields; the YAML's keys).
TOP_LEVEL_DOCS = {
    "name": "the pipeline's name (ML Metadata, Vertex AI)",
    "root": "where artifacts and metadata.sqlite go",
    "serving_dir": "where the Pusher publishes versions",
    "enable_cache": "TFX caching of unchanged steps",
    "warm_start": "retrain from the last blessed model",
    "beam_args": "Beam pipeline options, '--flag=value'",
}
_FIELD_COMMENT = re.compile(r"^\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$")


def field_docs(cls: type) -> dict[str, str]:
    """A config dataclass's field docs, from its source: the comment lines above a field and the
    comment after it (how the config classes document their fields)."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    above: list[str] = []
    names = {f.name for f in dataclasses.fields(cls)}
    for line in lines[1:]:
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("# ").strip())
            continue
        match = _FIELD_COMMENT.match(line)
        if match and match.group(1) in names and match.group(1) not in docs:
            docs[match.group(1)] = " ".join(above + [match.group(2) or ""]).strip()
        above = []
    return docs


def _scalar(value: Any) -> str:
    """One value in YAML's flow style (what `--set key=value` takes back)."""
    text = yaml.safe_dump(_plain(value), default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _documented(obj: Any, indent: str, docs: dict[str, str]) -> list[str]:
    """`name: value  # doc` per field; a nested config dataclass as a block of its own fields."""
    lines = []
    items = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else obj
    for name, value in items:
        doc = docs.get(name, "")
        comment = f"  # {doc}" if doc else ""
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            lines.append(f"{indent}{name}:{comment}")
            lines += _documented(value, indent + "  ", field_docs(type(value)))
        else:
            lines.append(f"{indent}{name}: {_scalar(value)}{comment}")
    return lines


def _class_doc(cls: type) -> list[str]:
    """A class's own docstring as comment lines (none for a dataclass's generated signature)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    return [] if not doc or doc.startswith(cls.__name__ + "(") else [f"# {line}".rstrip() for line in doc.splitlines()]


def render_effective_config(config: PipelineConfig) -> str:
    """The full effective config, defaults included, as YAML with each field's doc as a comment
    (`rlops config`): what the pipeline runs with, not only what was set."""
    top = [(name, getattr(config, name)) for name in TOP_LEVEL_DOCS]
    lines = _documented(top, "", TOP_LEVEL_DOCS)
    for section in ("experience_gen", "trainer", "evaluator", "pusher"):
        value = getattr(config, section)
        if value is None:
            continue
        lines += _class_doc(type(value))
        lines.append(f"{section}:")
        lines += _documented(value, "  ", field_docs(type(value)))
    return "\n".join(lines)
