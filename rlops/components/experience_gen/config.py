"""ExperienceGen configuration: plain dataclasses that round-trip through JSON.

JSON because every face passes the config the same way: the TFX component as an execution
property string, the KFP v2 component as a string parameter, the CLI as a file.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Union

from rlops.components.common.decision_kinds import BANDIT, SLATE, TRAJECTORY, decision_kind
from rlops.components.json_config import build

FILE_FORMATS = ("csv", "jsonl", "parquet", "tfrecord")
SPLIT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class SpecConfig:
    """A JSON-friendly (Bounded)TensorSpec: what the action (or observation) must look like."""

    shape: tuple[int, ...] = ()  # the action's shape; `[]` is one scalar (a discrete action is one scalar id)
    dtype: str = "int32"  # TF dtype name; an integer dtype makes the action discrete (ids), a float one continuous
    minimum: float | None = None  # the smallest valid action, inclusive (discrete: the first id); null: unbounded
    # The largest valid action, inclusive (discrete ids: minimum..maximum); null: unbounded
    maximum: float | None = None

    @classmethod
    def discrete(cls, num_actions: int) -> "SpecConfig":
        return cls((), "int32", 0, num_actions - 1)

    @classmethod
    def from_tensor_spec(cls, spec: Any) -> "SpecConfig":
        from rlops.agents import specs

        d = specs.spec_to_json(spec)
        return cls(tuple(d["shape"]), d["dtype"], _scalar(d.get("minimum")), _scalar(d.get("maximum")))

    def to_tensor_spec(self, name: str = "action") -> Any:
        import tensorflow as tf

        from rlops.agents import specs

        if self.minimum is None and self.maximum is None:
            return tf.TensorSpec(self.shape, tf.as_dtype(self.dtype), name)
        return specs.BoundedTensorSpec(self.shape, tf.as_dtype(self.dtype), self.minimum, self.maximum, name=name)

    @property
    def is_discrete(self) -> bool:
        return self.dtype.startswith("int") or self.dtype.startswith("uint")

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _scalar(v: Any) -> Any:
    if isinstance(v, list):  # scalar bounds only; a per-element bound is reduced to its envelope
        return min(v) if v else None
    return v


FEATURE_KINDS = ("auto", "float", "float_list", "categorical")


@dataclass(frozen=True)
class FeatureColumn:
    """One named context feature of bandit records (rlops.features.FeatureSpec is what it becomes).

    kind "auto" infers it from the data: strings and integers -> categorical, numbers -> float,
    numeric lists -> float_list. Categoricals get a vocabulary of the `vocab_size` most frequent
    values (computed in the Beam pipeline) plus `num_oov_buckets`, or `hash_buckets` > 0 for
    hashing. Floats are normalized by their mean/std unless `normalize` is False. In JSON/YAML a
    bare string is a feature whose column has its name and whose kind is inferred.

    Multivalent categoricals (a user's interest ids, an item's categories): Parquet list<string>
    (or list<int64> with kind categorical), JSON Lines arrays, or text cells split on `separator`
    (e.g. "|"; setting it makes the feature multivalent). Every value counts toward the
    vocabulary; an empty list is a valid record. `dim` is the most values a record keeps (default:
    the `dim_percentile` of the list lengths in the first file's sample). A record with more keeps
    its first `dim` values and is counted (IngestResult.truncated): truncating, not quarantining,
    keeps the decision's reward and propensity (quarantine would drop heavy users' decisions and
    bias training and OPE), and serving applies the same rule. Empty strings, nulls (and -1, the
    int64 padding) inside a list are padding, not values.
    """

    SHORTHAND_FIELD: ClassVar[str] = "name"  # in JSON/YAML, "user_a" means {"name": "user_a"}
    # The feature's name in the records and the served model's inputs; also its source column unless `column` is set
    name: str
    column: str | None = None  # source column; default: the feature's name
    kind: str = "auto"  # auto | float | float_list | categorical; auto infers it from the data (see above)
    dtype: str = "auto"  # categorical: auto | string | int64
    dim: int | None = None  # float_list width / most values of a multivalent categorical (default: data)
    # Categorical: the most frequent values that get their own id (a vocabulary computed over the data)
    vocab_size: int = 1000
    # Categorical: ids shared by values outside the vocabulary (unseen at serving, or rarer ones)
    num_oov_buckets: int = 1
    # Categorical: > 0 hashes values into this many ids instead of building a vocabulary; 0: vocabulary
    hash_buckets: int = 0
    normalize: bool = True  # float features: scale by the data's mean and standard deviation; false keeps raw values
    multivalent: bool = False  # a list of categorical values per record (implied by `separator`)
    separator: str | None = None  # text cells holding several values, e.g. "|"
    dim_percentile: float = 99.0  # multivalent dim inferred as this percentile of list lengths

    @property
    def is_multivalent(self) -> bool:
        return self.multivalent or bool(self.separator)

    @property
    def source_column(self) -> str:
        return self.column or self.name


@dataclass(frozen=True)
class BanditColumns:
    """Where each bandit-feedback field lives in the user's records.

    Context: `context` names the columns (scalars, or one list-valued column), or
    `context_prefix` picks every column starting with it (ordered by numeric suffix).
    `context_dim` fixes the width; left None it is taken from the first file.
    Timestamps: integers are kept as logged (any unit); date-times (ISO 8601 text, Parquet or
    BigQuery TIMESTAMP) become epoch microseconds. Every mapped field is required per record.
    """

    context: tuple[str, ...] = ()  # columns of the dense float context (scalars, or one list-valued column)
    context_prefix: str | None = None  # every column starting with this is a context column (ordered by numeric suffix)
    context_dim: int | None = None  # the context's width; null: taken from the first file
    # Column of the logged action id (an integer in action_spec's range); per-arm logs map item_id instead
    action: str = "action"
    # Column of the decision's reward (a number); not read with `events`, whose join gives the reward
    reward: str = "reward"
    # Column of the logging policy's probability of the logged action; null: none (require_propensity: false)
    propensity: str | None = "propensity"
    action_mask: tuple[str, ...] = ()  # one list-valued column, or one 0/1 column per action
    # Every column starting with this is an action_mask column (one 0/1 per action)
    action_mask_prefix: str | None = None
    # Column of a per-record weight (>= 0) that training and the evaluator's estimates apply; null: all 1
    weight: str | None = None
    # Column kept in each record as `timestamp` (integers as logged, date-times as epoch microseconds)
    timestamp: str | None = None
    # Named context features (strings, ids, floats), each stored under its own name; an
    # alternative to the dense float `context` above (give one or the other).
    features: tuple[FeatureColumn, ...] = ()
    # Per-arm features (with ExperienceGenConfig.item_source): the logged item's id column, an
    # optional "|"-separated candidate ids column (default: every item of the item table, in its
    # order), and the item table's feature columns, written per record as per_arm/<name> [K(, dim)].
    # The logged action becomes the index of the logged item among the candidates.
    item_id: str | None = None
    # Column of the decision's candidate item ids, joined by "|" (null: every item of the item table)
    candidates: str | None = None
    # The item table's feature columns, written per record as per_arm/<name>
    item_features: tuple[FeatureColumn, ...] = ()
    item_table_id: str | None = None  # the item table's id column (default: item_id's name)
    # Per-arm columns of the log itself (with item_source): {name: pattern}, the pattern naming one
    # numeric column per item by its id, e.g. {"affinity": "user-item_affinity_{item_id}"}. Each
    # becomes one per-arm float feature per_arm/<name> [K], gathered per candidate like an item
    # feature (and served as per_arm_<name> [B, K]); those columns are not global features. Every
    # item of the item table needs its column (else an error at planning); a record whose cell is
    # empty or not a number is quarantined.
    per_arm_columns: dict[str, str] = field(default_factory=dict)
    # The decision's own id, written into every record as `decision_id` (events join on it; when
    # no split key is set the split is drawn from it, so configs that select different features
    # split the same rows).
    decision_id: str | None = None
    # When the decision was made (ISO-8601 with an offset, epoch seconds or milliseconds, a
    # BigQuery TIMESTAMP): the start of its events' attribution window. Needed with `events`.
    decision_time: str | None = None


ITEM_ID_PLACEHOLDER = "{item_id}"


def per_arm_column(pattern: str, item_id: str) -> str:
    """The log column of per-arm pattern `pattern` for item `item_id`."""
    return pattern.replace(ITEM_ID_PLACEHOLDER, item_id)


def per_arm_pattern_regex(pattern: str) -> re.Pattern[str]:
    """Matches the columns a per-arm pattern names; group 1 is the item id."""
    head, tail = pattern.split(ITEM_ID_PLACEHOLDER)
    return re.compile(re.escape(head) + "(.+)" + re.escape(tail))


@dataclass(frozen=True)
class TrajectoryColumns:
    """Where each trajectory-step field lives. One record = one environment step.

    The episode ends at its highest step; `terminal` (or `discount`) says whether it ended
    in a terminal state (discount 0) or was cut off (discount 1).
    """

    episode_id: str = "episode_id"  # column naming the episode a step belongs to
    # Column of the step's index in its episode: 0, 1, ... without gaps (else the episode is quarantined)
    step: str = "step"
    observation: tuple[str, ...] = ("observation",)  # columns of the observation (scalars, or one list-valued column)
    # Every column starting with this is an observation column (ordered by numeric suffix)
    observation_prefix: str | None = None
    observation_dim: int | None = None  # the observation's width; null: taken from the first file
    # Column of the action: one integer column for a discrete action_spec, else one per element or one list column
    action: tuple[str, ...] = ("action",)
    # Every column starting with this is an action column (a vector action, ordered by numeric suffix)
    action_prefix: str | None = None
    reward: str = "reward"  # column of the step's reward
    discount: str | None = None  # column of the step's discount (0 after a terminal step); null: derived from terminal
    # Column of a boolean: the episode ended in a terminal state (discount 0 at its last step), not cut off. Null: every
    # episode counts as cut off (its last step bootstraps); only the last step of an episode may be terminal
    terminal: str | None = "terminated"
    # Column of the logging policy's log-probability of the action (offline PPO needs it or dist_params logits)
    log_probability: str | None = None
    # Column of the logging policy's value estimate, kept as policy_info/value_prediction
    value_prediction: str | None = None
    # policy_info/dist_params/<name> <- a column (scalar or list-valued), columns joined by "|"
    # ("mu_0|mu_1"), or a prefix ending in "*" ("logit_*").
    dist_params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SlateColumns:
    """Where each slate-log field lives (record_kind: slate). A slate is the ordered list of items
    one request showed; its value is the sum of its slot rewards.

    Two shapes, told apart by `position`: with a position column, one row per shown item, grouped
    into slates by `slate_id` (as public e-commerce logs publish them); without one (position:
    null), one row per slate whose `item_id`, `reward`, `propensity` (and `propensity_cascade`)
    columns are lists in display order (JSON Lines or Parquet lists, or text cells joined by
    `separator`). Slates shorter than `experience_gen.slate_length` are valid (padded, masked).

    `propensity` is the logging policy's marginal probability of showing that item at that
    position (required); `propensity_cascade` the probability of the whole slate up to and
    including that slot (optional; non-increasing down the slate). Item ids are integers in
    [0, K), K from `experience_gen.action_spec`, or any ids listed by the item table
    (`experience_gen.item_source`, K = its rows, an item's index = its row). Positions count from `first_position` (0 or 1);
    left null it is read from the data's sample when the sample decides it (a 0 seen: 0-based; a
    position equal to slate_length seen: 1-based)."""

    slate_id: str | None = "slate_id"  # required with `position`; else optional (default: the row)
    # Column of the item's slot (rows per shown item); null: one row per slate, slot fields as lists
    position: str | None = "position"
    first_position: int | None = None  # the first slot's number, 0 or 1; null: read from the data's sample
    item_id: str = "item_id"  # column of the shown item's id (a list in display order without `position`)
    reward: str = "reward"  # column of the slot's reward (e.g. a click); not read with `events`, whose join gives it
    # Column of the logging policy's marginal probability of showing that item in that slot
    propensity: str = "propensity"
    # Column of the probability of the slate up to and including the slot (optional)
    propensity_cascade: str | None = None
    separator: str = "|"  # list cells in text files (rows per slate)
    features: tuple[FeatureColumn, ...] = ()  # the request's context, as for bandit logs
    # Column kept in each record as `timestamp` (integers as logged, date-times as epoch microseconds)
    timestamp: str | None = None
    item_table_id: str | None = None  # with item_source: the table's id column (default: item_id's name)
    # When the page was shown (rows per shown item, with experience_gen.events): the start of its
    # events' window; the same forms as bandit_columns.decision_time.
    decision_time: str | None = None


@dataclass(frozen=True)
class FileSource:
    """Files matched by Beam filesystems (local paths, gs://, ...); comma-separated patterns.

    CSV: one record per line (no newlines inside values), a header row unless csv_column_names.
    JSON Lines: one object per line. TFRecord: tf.Example records. Uncompressed CSV/JSONL files
    are split into `range_bytes` work items; Parquet, TFRecord and compressed files are one each.
    """

    # Path or glob of the files (local, gs://, any Beam filesystem); several separated by commas; required
    pattern: str = ""
    format: str = "csv"  # one of FILE_FORMATS
    compression: str = "auto"  # auto (by extension) | gzip | none
    csv_delimiter: str = ","  # CSV field separator, one character (e.g. ";" or a tab)
    csv_header: bool = True  # the first line of each CSV file names the columns; false: name them in csv_column_names
    csv_column_names: tuple[str, ...] = ()  # when the files have no header row
    block_bytes: int = 16 << 20  # parse unit for text files
    range_bytes: int = 128 << 20  # uncompressed text files are split into ranges this big
    kind: str = "file"  # `file` selects this source


@dataclass(frozen=True)
class BigQuerySource:
    """A query or a table read through beam.io.ReadFromBigQuery."""

    query: str | None = None  # SQL whose result rows are the records (give query or table, not both)
    table: str | None = None  # "project:dataset.table" or "project.dataset.table"
    # Google Cloud project the BigQuery jobs run in; null: Beam's default (the pipeline's project)
    project: str | None = None
    use_standard_sql: bool = True  # run `query` as GoogleSQL (standard SQL); false: legacy SQL
    method: str = "EXPORT"  # EXPORT | DIRECT_READ
    gcs_location: str | None = None  # temp location for EXPORT
    batch_size: int = 10_000  # the most rows per batch handed to parsing (records; batches grow from 1000 to it)
    kind: str = "bigquery"  # `bigquery` selects this source


@dataclass(frozen=True)
class SimulationSource:
    """Logged experience generated by running a logging policy in an environment.

    env: "digits", "linear" (StationaryLinearBandit) or "gym:<id>" (e.g. "gym:CartPole-v1").
    policy: "random" (uniform) or "epsilon_greedy" around the SavedModel at `policy_path`.
    Same seed, same records, except epsilon-greedy bandit logging: EpsilonGreedyPolicy draws its
    exploration from TF's global RNG.
    """

    env: str = "digits"  # digits | linear (bandits) | slates (record_kind: slate) | gym:<id> (trajectories)
    # Keyword arguments of the environment (gym:<id>: of gym.make; slates: the world's and its logging policy's)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    # The logging policy: random (uniform) | epsilon_greedy (around policy_path); slates: set in env_kwargs
    policy: str = "random"
    policy_path: str | None = None  # the SavedModel policy that epsilon_greedy logging follows
    epsilon: float = 0.1  # epsilon_greedy: the probability of a uniformly random action instead of the saved policy's
    num_records: int = 10_000  # bandit decisions
    num_episodes: int = 10  # gym episodes
    num_shards: int = 1  # work items the records are generated in, in parallel (records divided evenly among them)
    batch_size: int = 1024  # bandits and slates: records generated per batch (gym: unused, episodes step one env)
    seed: int = 0  # seeds the environment and the logging policy, per shard: same seed, same records (but see above)
    kind: str = "simulation"  # `simulation` selects this source


# Tagged by `kind`: a source section the user gives replaces the default member, never merges.
Source = Union[FileSource, BigQuerySource, SimulationSource]
EventsSource = Union[FileSource, BigQuerySource]

AGGREGATES = ("first", "max", "sum", "count")
VALUE = "value"  # a `rewards` entry that takes the event's value column


@dataclass(frozen=True)
class EventsColumns:
    """Where each event field lives in the events source. `type`, `value` and `event_id` are
    optional (null): with no type every event is one type (`rewards` then has one entry); with no
    event id, exact repeats of a row are repeats."""

    decision_id: str = "decision_id"  # the decision the event is about (bandit_columns.decision_id's values)
    time: str = "time"  # when it happened (the same forms as bandit_columns.decision_time)
    type: str | None = "type"  # e.g. click, purchase
    value: str | None = None  # a number per event, e.g. a purchase's amount (rewards: {purchase: value})
    event_id: str | None = None  # repeated ids (an event sent twice) count once
    # Slates (record_kind: slate): the item the event is about; with decision_id (the page's id)
    # it names the slot whose reward it makes.
    item: str | None = None


@dataclass(frozen=True)
class EventsConfig:
    """Rewards from a second stream of events, joined to the decisions by decision id
    (docs/events.md). An event counts when decision_time <= time <= decision_time + window."""

    # Where the events are read: files or BigQuery, as experience_gen.source
    source: EventsSource = field(default_factory=FileSource)
    columns: EventsColumns = field(default_factory=EventsColumns)  # which events column holds each event field
    # How long after a decision its events count, e.g. 30m, 2h, 1d (s, m, h, d; a bare number is
    # seconds). Events after it are `late`: the window defines the reward, so keep it fixed.
    window: str = "30m"
    # Per event type: a constant reward (click: 1.0) or `value` (the event's value column). Types
    # not listed are counted as `unmapped_type` and give no reward.
    rewards: dict[str, Union[float, str]] = field(default_factory=lambda: {"click": 1.0})
    # Per type (or one word for all) how its counted events combine, after repeats are dropped:
    # first (the earliest's), max, sum, or count (their number).
    aggregate: Union[str, dict[str, str]] = "max"
    default_reward: float = 0.0  # the reward of a decision none of whose events counts
    # Decisions whose window is still open at the cutoff wait for the next run. `auto`: the latest
    # event time read; or a time (ISO-8601 with offset, epoch seconds or milliseconds).
    cutoff: str = "auto"
    # Where waiting decisions (and their events so far) are kept between runs; the pipelines set
    # it under the pipeline root (Vertex: the GCS root). Required when running ExperienceGen alone.
    pending_dir: str | None = None

    def aggregate_of(self, event_type: str) -> str:
        if isinstance(self.aggregate, str):
            return self.aggregate
        return self.aggregate.get(event_type, "max")


@dataclass(frozen=True)
class Split:
    name: str  # the split's name: letters, digits, _ or - (its directory is Split-<name>)
    # Its share of the hash buckets: a record lands in it with probability hash_buckets / the total
    hash_buckets: int = 1


@dataclass(frozen=True)
class SplitConfig:
    """Deterministic split: hash of `key` (None: the record's content; trajectories: the
    episode id) into buckets, or by time when `time_column` is set: split i holds records with
    boundaries[i-1] <= t < boundaries[i] (units as in the data)."""

    # The output splits, each a name and its share of hash buckets (default 9:1, a 90% / 10% train / eval split)
    splits: tuple[Split, ...] = (Split("train", 9), Split("eval", 1))
    # Column hashed to pick a record's split (e.g. a user id keeps a user's records in one split); null: see above
    key: str | None = None
    # Split by time instead of by hash: the column whose value places a record (see time_boundaries)
    time_column: str | None = None
    # Ascending, len(splits) - 1 of them; units as the time column's (date-times: epoch microseconds)
    time_boundaries: tuple[float, ...] = ()

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.splits]


@dataclass(frozen=True)
class ExperienceGenConfig:
    record_kind: str = BANDIT  # bandit | trajectory | slate (rlops.components.common.decision_kinds)
    # Where the records are read: files, a BigQuery query or table, or a simulation (`kind` picks one)
    source: Source = field(default_factory=FileSource)
    # Which source column holds each bandit-feedback field (record_kind: bandit)
    bandit_columns: BanditColumns = field(default_factory=BanditColumns)
    # Which source column holds each slate-log field (record_kind: slate)
    slate_columns: SlateColumns = field(default_factory=SlateColumns)
    slate_length: int | None = None  # slate: the most items a page shows (L)
    # A second, small source: the item-features table joined to the impressions by item id.
    item_source: FileSource | None = None
    # Which source column holds each trajectory-step field (record_kind: trajectory)
    trajectory_columns: TrajectoryColumns = field(default_factory=TrajectoryColumns)
    action_spec: SpecConfig | None = None  # actions are checked against it (a simulation's env sets it)
    require_propensity: bool = True  # bandit: off-policy evaluation needs it
    # How records are divided into output splits (train / eval by default)
    splits: SplitConfig = field(default_factory=SplitConfig)
    max_bad_record_ratio: float = 0.01  # fail above this share of quarantined records
    # split -> fewest valid records it must get (e.g. 1 for "train" and "eval"); the
    # pipelines set it, a split left out has no minimum (an input with no records always fails).
    min_split_records: dict[str, int] = field(default_factory=dict)
    # Bandit propensities below this floor (float32 would round 1e-46 to 0) are quarantined, or
    # raised to the floor when propensity_floor_action is "clip".
    propensity_floor: float = 1e-6
    propensity_floor_action: str = "quarantine"  # quarantine | clip
    compression_level: int = 1  # gzip level of the output shards (1: fastest)
    num_shards: int = 0  # per split; 0 lets the runner decide
    reshuffle: bool = False  # redistribute parsed batches (helps Dataflow with few big files)
    # Rewards from a stream of events joined by decision id, instead of a reward column (bandit).
    events: EventsConfig | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        kind = decision_kind(self.record_kind)
        ours = KIND_CONFIGS[kind.name]  # the kind's own rules on this config
        src = self.source
        if isinstance(src, SimulationSource):
            gym = src.env.startswith("gym:")
            if gym != ours.gym_simulation:
                raise ValueError(
                    f"SimulationSource env {src.env!r} logs "
                    f"{'trajectories' if gym else 'bandit feedback'}; set record_kind accordingly"
                )
        elif self.action_spec is None and self.item_source is None:  # a simulation takes it from its env
            raise ValueError("action_spec is required (e.g. SpecConfig.discrete(num_actions))")
        if kind.logged_probabilities and self.action_spec is not None and not self.action_spec.is_discrete:
            raise ValueError(f"{kind.name} records need a discrete action_spec, got dtype {self.action_spec.dtype}")
        if isinstance(src, FileSource):
            if not src.pattern:
                raise ValueError("FileSource.pattern is empty")
            if src.format not in FILE_FORMATS:
                raise ValueError(f"FileSource.format must be one of {FILE_FORMATS}, got {src.format!r}")
            if src.format == "csv" and not src.csv_header and not src.csv_column_names:
                raise ValueError("FileSource.csv_header is False: name the columns in csv_column_names")
            if src.compression not in ("auto", "gzip", "none"):
                raise ValueError(f"FileSource.compression must be auto|gzip|none, got {src.compression!r}")
        ours.validate(self)  # what the kind's columns section must say
        if self.events is not None:
            _validate_events(self)
        if isinstance(src, BigQuerySource) and bool(src.query) == bool(src.table):
            raise ValueError("BigQuerySource needs exactly one of query or table")
        if not 0.0 < self.propensity_floor <= 1.0:
            raise ValueError(f"propensity_floor must be in (0, 1], got {self.propensity_floor}")
        if self.propensity_floor_action not in ("quarantine", "clip"):
            raise ValueError(
                f"propensity_floor_action must be 'quarantine' or 'clip', got {self.propensity_floor_action!r}"
            )
        if not 0.0 <= self.max_bad_record_ratio <= 1.0:
            raise ValueError(f"max_bad_record_ratio must be in [0, 1], got {self.max_bad_record_ratio}")
        s = self.splits
        if not s.splits or len(set(s.names)) != len(s.names):
            raise ValueError(f"split names must be non-empty and unique, got {s.names}")
        bad_names = [n for n in s.names if not isinstance(n, str) or not SPLIT_NAME.fullmatch(n)]
        if bad_names:  # split names become directory names (Split-<name>)
            raise ValueError(
                f"splits: split name {bad_names[0]!r} must be letters, digits, '_' or '-' (it names a directory)"
            )
        unknown = sorted(set(self.min_split_records) - set(s.names))
        if unknown:
            raise ValueError(f"min_split_records: {unknown[0]!r} is not a split; splits: {s.names}")
        if any(not isinstance(v, int) or v < 0 for v in self.min_split_records.values()):
            raise ValueError(f"min_split_records: values must be integers >= 0, got {self.min_split_records}")
        if any(sp.hash_buckets < 1 for sp in s.splits):
            raise ValueError("every split needs hash_buckets >= 1")
        if s.time_column and len(s.time_boundaries) != len(s.splits) - 1:
            raise ValueError(
                f"time split over {len(s.splits)} splits needs {len(s.splits) - 1} "
                f"time_boundaries, got {list(s.time_boundaries)}"
            )
        if list(s.time_boundaries) != sorted(s.time_boundaries):
            raise ValueError(f"time_boundaries must ascend, got {list(s.time_boundaries)}")

    @property
    def columns(self) -> Any:
        """The column mapping of this config's decision kind (bandit_columns, slate_columns, ...)."""
        return getattr(self, decision_kind(self.record_kind).columns_section)

    # --- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict, key: str = "experience_gen") -> "ExperienceGenConfig":
        """Strict: unknown keys, wrong types and unknown source kinds name the key path
        (rlops.components.json_config.build, the loader every config section uses)."""
        d = json.loads(text) if isinstance(text, str) else text
        return build(cls, d, key)


def validate_features(c: BanditColumns) -> None:
    from rlops.features.schema import RESERVED

    if c.features and (c.context or c.context_prefix):
        raise ValueError(
            "bandit_columns: give either `features` (named context features) or the dense "
            "float `context` / `context_prefix`, not both"
        )
    seen: set[str] = set()
    for f in c.features:
        where = f"bandit_columns.features['{f.name}']"
        if f.name in RESERVED:
            raise ValueError(
                f"{where}: '{f.name}' is a reserved bandit field ({', '.join(RESERVED)}); "
                f"name the context feature differently (column={f.name!r} keeps the source column)"
            )
        if f.name in seen:
            raise ValueError(f"{where}: the feature is listed twice")
        seen.add(f.name)
        if f.kind not in FEATURE_KINDS:
            raise ValueError(f"{where}.kind must be one of {FEATURE_KINDS}, got {f.kind!r}")
        if f.dtype not in ("auto", "string", "int64"):
            raise ValueError(f"{where}.dtype must be auto|string|int64, got {f.dtype!r}")
        if f.vocab_size < 0 or f.num_oov_buckets < 0 or f.hash_buckets < 0:
            raise ValueError(f"{where}: vocab_size, num_oov_buckets and hash_buckets must be >= 0")
        if f.is_multivalent:
            if f.kind not in ("auto", "categorical"):
                raise ValueError(f"{where}: multivalent / separator needs kind 'categorical' (or auto), got {f.kind!r}")
            if f.separator == "":
                raise ValueError(f"{where}.separator is empty")
            if f.dim is not None and f.dim < 1:
                raise ValueError(f"{where}.dim must be >= 1 (the most values a record keeps), got {f.dim}")
            if not 0.0 < f.dim_percentile <= 100.0:
                raise ValueError(f"{where}.dim_percentile must be in (0, 100], got {f.dim_percentile}")


def _validate_events(config: "ExperienceGenConfig") -> None:
    """The events section: its source, a positive window, rewards and aggregates by name."""
    from rlops.components.experience_gen import events as events_join  # the join parses windows and times

    ev = config.events
    assert ev is not None
    validate_events = KIND_CONFIGS[config.record_kind].validate_events
    if validate_events is None:
        joined = " or ".join(k for k, rules in KIND_CONFIGS.items() if rules.validate_events is not None)
        raise ValueError(
            f"experience_gen.events: joins events to {joined} decisions; record_kind is {config.record_kind!r}"
        )
    validate_events(config)
    if isinstance(ev.source, FileSource) and not ev.source.pattern:
        raise ValueError("experience_gen.events.source.pattern is empty")
    if isinstance(ev.source, FileSource) and ev.source.format not in ("csv", "jsonl", "parquet"):
        raise ValueError(f"experience_gen.events.source.format must be csv, jsonl or parquet, got {ev.source.format!r}")
    if isinstance(ev.source, BigQuerySource) and bool(ev.source.query) == bool(ev.source.table):
        raise ValueError("experience_gen.events.source: a BigQuery source needs exactly one of query or table")
    events_join.parse_window(ev.window)  # a one-line error naming experience_gen.events.window
    if ev.cutoff != "auto":
        events_join.parse_cutoff(ev.cutoff)
    if not ev.rewards:
        raise ValueError(
            "experience_gen.events.rewards: name at least one event type and its reward, e.g. {click: 1.0}"
        )
    for name, reward in ev.rewards.items():
        if isinstance(reward, str) and reward != VALUE:
            raise ValueError(
                f"experience_gen.events.rewards['{name}']: a number or 'value' (the event's value column), got {reward!r}"
            )
        if reward == VALUE and not ev.columns.value:
            raise ValueError(
                f"experience_gen.events.rewards['{name}']: 'value' needs experience_gen.events.columns.value "
                "(the column holding each event's value)"
            )
    if ev.columns.type is None and len(ev.rewards) != 1:
        raise ValueError(
            "experience_gen.events.rewards: with no type column (events.columns.type: null) every event is one "
            f"type, so give exactly one entry; got {sorted(ev.rewards)}"
        )
    words = [ev.aggregate] if isinstance(ev.aggregate, str) else list(ev.aggregate.values())
    for word in words:
        if word not in AGGREGATES:
            raise ValueError(
                f"experience_gen.events.aggregate: {word!r} is not one of {', '.join(AGGREGATES)}"
                f"{_did_you_mean(word, AGGREGATES)}"
            )
    if isinstance(ev.aggregate, dict):
        unknown = sorted(set(ev.aggregate) - set(ev.rewards))
        if unknown:
            raise ValueError(
                f"experience_gen.events.aggregate['{unknown[0]}']: not a type in events.rewards "
                f"({', '.join(sorted(ev.rewards))}){_did_you_mean(unknown[0], tuple(ev.rewards))}"
            )


def _did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    import difflib

    near = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f"; did you mean {near[0]!r}?" if near else ""


# --- each decision kind's rules on the config ---------------------------------------------------
# The config's own table: what a kind's columns section must say, what the events join needs of it,
# and whether its simulations step a Gymnasium env. Here, beside the sections they check, so that
# reading a config imports nothing of the Beam pipeline (experience_gen/kinds/ builds on this).


def validate_items(config: ExperienceGenConfig) -> None:
    c, src = config.bandit_columns, config.item_source
    if src is None:
        if c.item_id or c.candidates or c.item_features:
            raise ValueError(
                "bandit_columns.item_id / candidates / item_features need experience_gen.item_source "
                "(the item-features table)"
            )
        if c.per_arm_columns:
            raise ValueError(
                "bandit_columns.per_arm_columns: needs experience_gen.item_source, the item table whose ids "
                f"fill {ITEM_ID_PLACEHOLDER} (a table of one id column will do)"
            )
        return
    if not isinstance(src, FileSource) or not src.pattern:
        raise ValueError("item_source: needs a file source with a pattern (kind: file)")
    if src.format not in ("csv", "jsonl", "parquet"):
        raise ValueError(f"item_source.format must be csv, jsonl or parquet, got {src.format!r}")
    if not c.item_id:
        raise ValueError("item_source is set: bandit_columns.item_id must name the logged item's id column")
    if not c.item_features and not c.per_arm_columns:
        raise ValueError(
            "item_source is set: bandit_columns.item_features must list the item table's features "
            "(or per_arm_columns the log's per-item columns)"
        )
    if not c.features:
        raise ValueError("item_source is set: bandit_columns.features must list the named global features")
    if c.action_mask or c.action_mask_prefix:
        raise ValueError(
            "bandit_columns.action_mask: with per-arm features the candidates say which arms a "
            "decision had (bandit_columns.candidates)"
        )
    if c.candidates and config.action_spec is None:
        raise ValueError(
            "bandit_columns.candidates: set action_spec (SpecConfig.discrete(K), K = the most "
            "candidates a decision has)"
        )
    validate_features(BanditColumns(features=c.item_features))
    validate_per_arm_columns(c)


def validate_per_arm_columns(c: BanditColumns) -> None:
    """Each per-arm pattern names one column per item; its name is a new per-arm feature; no
    global feature reads one of its columns (they are per-arm now)."""
    from rlops.features.schema import RESERVED

    item_names = {f.name for f in c.item_features}
    for name, pattern in c.per_arm_columns.items():
        where = f"bandit_columns.per_arm_columns['{name}']"
        if not name or name in RESERVED:
            raise ValueError(f"{where}: name the per-arm feature (not empty, not one of {', '.join(RESERVED)})")
        if name in item_names:
            raise ValueError(f"{where}: the item table's features already have '{name}'; name it differently")
        if pattern.count(ITEM_ID_PLACEHOLDER) != 1:
            raise ValueError(
                f"{where}: {pattern!r} must hold {ITEM_ID_PLACEHOLDER} once, where each column has "
                f"the item's id (e.g. 'user-item_affinity_{ITEM_ID_PLACEHOLDER}')"
            )
        regex = per_arm_pattern_regex(pattern)
        for f in c.features:
            if regex.fullmatch(f.source_column):
                raise ValueError(
                    f"bandit_columns.features['{f.name}']: column {f.source_column!r} is one of "
                    f"per_arm_columns['{name}'] ({pattern!r}), a per-arm feature now; remove it from features"
                )


def validate_slates(config: ExperienceGenConfig) -> None:
    c = config.slate_columns
    if config.slate_length is None or config.slate_length < 1:
        raise ValueError(f"experience_gen.slate_length must be a positive number of slots, got {config.slate_length!r}")
    if config.item_source is None and config.action_spec is None:
        raise ValueError(
            "experience_gen.action_spec: slates need the number of items (SpecConfig.discrete(K)) or an item_source"
        )
    src = config.item_source
    if src is not None and (not isinstance(src, FileSource) or not src.pattern):
        raise ValueError("item_source: needs a file source with a pattern (kind: file)")
    if c.position and not c.slate_id:
        raise ValueError("slate_columns.slate_id: rows per shown item need a slate id column to group them")
    if c.first_position not in (None, 0, 1):
        raise ValueError(f"slate_columns.first_position must be 0 or 1, got {c.first_position!r}")
    if not c.separator:
        raise ValueError("slate_columns.separator is empty")
    validate_features(BanditColumns(features=c.features))


def _validate_bandit(config: ExperienceGenConfig) -> None:
    validate_features(config.bandit_columns)
    validate_items(config)


def _bandit_events(config: ExperienceGenConfig) -> None:
    c = config.bandit_columns
    if not c.decision_id or not c.decision_time:
        missing = "decision_id" if not c.decision_id else "decision_time"
        raise ValueError(
            f"experience_gen.bandit_columns.{missing}: events join on the decision's id and time; map both columns"
        )


def _slate_events(config: ExperienceGenConfig) -> None:
    assert config.events is not None
    s = config.slate_columns
    if not s.position or not s.decision_time:
        raise ValueError(
            "experience_gen.events: slate logs join events per shown item: rows per item (slate_columns.position) "
            "and slate_columns.decision_time (when the page was shown) are needed"
        )
    if not config.events.columns.item:
        raise ValueError(
            "experience_gen.events.columns.item: slate events name the page (columns.decision_id) and the item "
            "they are about; map the events' item column"
        )


def _no_rules(config: ExperienceGenConfig) -> None:
    return None


@dataclass(frozen=True)
class KindConfig:
    """One decision kind's rules on an ExperienceGenConfig."""

    validate: Callable[[ExperienceGenConfig], None]  # what its columns section and other keys must say
    validate_events: Callable[[ExperienceGenConfig], None] | None  # None: events do not join to it
    gym_simulation: bool = False  # its simulations step a Gymnasium env (`gym:<id>`)


KIND_CONFIGS: dict[str, KindConfig] = {
    BANDIT: KindConfig(_validate_bandit, _bandit_events),
    TRAJECTORY: KindConfig(_no_rules, None, gym_simulation=True),
    SLATE: KindConfig(validate_slates, _slate_events),
}
