"""The Beam engine: the same estimators (estimators.py) as a Beam pipeline over the eval split's
TFRecords, with memory independent of the split's size. DirectRunner here, Dataflow in the cloud,
with the `beam_pipeline_args` ExperienceGen takes.

Two passes over the split:
  1. the reward-model sample: every record's key hash, the bottom-k records (a bounded CombineFn),
     and the record count; for per-arm records also the distinct item feature combinations over
     the candidate slots (a bounded CombineFn) and whether any record's candidates differ from
     another's. The driver numbers the items as the in-memory engine does (feedback.item_keys over
     the split's sorted distinct values), parses the sample, fits the cross-fitted reward model on
     it (reward_models.FoldModels) and the DM refits (on its dm_refit_records smallest-hash records).
  2. the sums: batches of records are parsed and scored on the workers (each SavedModel loaded
     once per worker in DoFn.setup: one load per process, then batches of 16,384 records through
     it), every record gets its columns (estimators.record_columns) and `TermsCombineFn` sums
     them, with the hash-derived Poisson bootstrap's per-replicate sums [B, J].
The driver turns the sums into the same Comparison the in-memory engine gives (<= 1e-9 apart).

Record keys: (file basename, index within the file), as the in-memory loader numbers them.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from rlops.components.common import feedback
from rlops.components.common.feedback import LoggedFeedback, split_files
from rlops.components.common.heap import trim_heap
from rlops.components.common.record_keys import file_record_keys, unit_record_keys
from rlops.components.common.records import PER_ARM_PREFIX
from rlops.components.evaluator import estimators, reward_models
from rlops.components.evaluator.action_ids import check_actions, check_policy_fits_logs, policy_action_minimum
from rlops.components.evaluator.comparisons import (
    LOGGING_BASELINE,
    LogsRun,
    bandit_metrics,
    comparisons,
    dm_refits,
    policy_grids,
)
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.estimate import Estimate
from rlops.components.evaluator.estimators import LOGGING_POLICY, Sums
from rlops.components.evaluator.scoring import PolicyProbs, policy_probs, serving_epsilon

if TYPE_CHECKING:  # TensorFlow: imported on the workers, when they load a policy
    from rlops.train.policy_saver import SavedPolicy

BATCH_SIZE = 16384
MAX_ARM_VALUES = 1_000_000  # distinct values of one per-arm feature (the item catalog is small)
ERROR_MARK = "rlops-evaluator-error: "  # worker errors carry it; the driver raises the line after it


class WorkerError(ValueError):
    """A user-facing problem found on a worker (bad record, policy that does not load)."""


# ---- reading and parsing records -------------------------------------------------------------------


def read_batches(path: str, batch_size: int = BATCH_SIZE):
    """(file basename, index of the first record, [serialized records]) of one gzipped shard."""
    import tensorflow as tf

    base, start = os.path.basename(path), 0
    for batch in tf.data.TFRecordDataset(path, compression_type="GZIP").batch(batch_size).as_numpy_iterator():
        yield base, start, list(batch)
        start += len(batch)


@dataclass
class ArmCatalog:
    """The split's items (per-arm records whose candidates vary), as feedback.per_arm_candidates
    numbers them: per per-arm feature its sorted distinct values over the candidate slots, the
    items' sorted keys and their dense arm features [M, Da] in that order."""

    uniques: dict[str, np.ndarray]
    keys: np.ndarray
    item_features: np.ndarray


@dataclass
class Parser:
    """Serialized bandit records -> LoggedFeedback (what feedback.load_logged_feedback gives for the
    same records; the per-arm item identities when given the split's `catalog`)."""

    examples_uri: str
    split: str
    action_minimum: int
    catalog: ArmCatalog | None = None

    def setup(self, first_record: bytes | None = None) -> None:
        """The parse spec, from the split's first record (`first_record`, serialized, when the
        caller has read it already; None: read here)."""
        import tensorflow as tf

        from rlops.components.common import records
        from rlops.features import FeatureSchema, Preprocessor, load as load_schema

        if first_record is None:
            first = records.first_example(records.split_file_pattern(self.examples_uri, self.split))
        else:
            first = tf.train.Example.FromString(first_record)
        present = first.features.feature
        if records.PROPENSITY not in present:
            raise ValueError(
                f"examples: the {self.split} split has no 'propensity' feature; off-policy evaluation "
                "needs the logging policy's probability of each logged action"
            )
        schema = load_schema(self.examples_uri)
        if schema is None:
            if records.CONTEXT not in present:  # read_logged_bandit's line
                raise ValueError(
                    f"examples: no feature schema and no dense '{records.CONTEXT}' feature in {self.examples_uri}"
                )
            schema = FeatureSchema.legacy(len(present[records.CONTEXT].float_list.value))
        mask_width = len(present[records.ACTION_MASK].int64_list.value) if records.ACTION_MASK in present else None
        self.logs_width = mask_width  # the logs' number of actions where the records carry it
        spec = records.bandit_feature_spec(1, mask_width, propensity=True, weight=records.WEIGHT in present)
        del spec[records.CONTEXT]
        spec.update(records.feature_parse_spec(schema))
        self.per_arm_names: list[str] = []
        self.arm_spec: dict[str, Any] = {}
        if schema.per_arm:
            from rlops.features.per_arm import per_arm_key

            f0 = schema.per_arm[0]
            feat = present[per_arm_key(f0.name)]
            k = len(getattr(feat, feat.WhichOneof("kind")).value) // (f0.dim if f0.multivalent else 1)
            arm_spec = records.per_arm_parse_spec(schema, k)
            self.logs_width = self.logs_width or k
            spec.update(arm_spec)
            self.per_arm_names, self.arm_spec = list(arm_spec), arm_spec
        self.split_hash = records.split_hash_name(first)  # the split hash the records carry (batch_keys)
        if self.split_hash is not None:  # parsed with the rest: parse_batch keys the records by it
            import tensorflow as tf

            spec[self.split_hash] = tf.io.FixedLenFeature([], tf.int64)
        self.spec, self.schema = spec, schema
        self.widths = {f.name: f.dim for f in schema.features if f.multivalent}
        self.pre = None if schema.is_legacy else Preprocessor(schema)

    def parse_arms(self, serialized: Sequence[bytes]) -> dict[str, np.ndarray]:
        """The per-arm features and num_actions only, as parse gives them."""
        return self.columns(serialized, self.arm_spec)

    def columns(self, serialized: Sequence[bytes], spec: dict | None = None) -> dict[str, np.ndarray]:
        """Serialized records -> {feature: [n, ...]} under `spec` (default: every column parse
        reads), multivalent features padded to their dim and strings as bytes."""
        import tensorflow as tf

        parsed = tf.io.parse_example(tf.constant(list(serialized)), self.spec if spec is None else spec)
        cols = {}
        for k, v in parsed.items():
            if isinstance(v, tf.RaggedTensor):
                v = v.to_tensor(tf.constant("" if v.dtype == tf.string else -1, v.dtype))
            v = v.numpy()
            if k in self.widths:  # pad to the feature's dim, as read_logged_bandit does
                w = self.widths[k]
                v = (
                    np.concatenate([v, np.full((len(v), w - v.shape[1]), b"" if v.dtype == object else -1, v.dtype)], 1)
                    if v.shape[1] < w
                    else v[:, :w]
                )
            cols[k] = v.astype(bytes) if v.dtype == object else v
        return cols

    def parse(
        self, serialized: Sequence[bytes], keys: np.ndarray, copy_keys: np.ndarray | None = None
    ) -> LoggedFeedback:
        """Records with the keys given (the driver's sample, drawn from every file)."""
        return self._feedback(self.columns(serialized, self.spec), keys, copy_keys)

    def parse_batch(self, serialized: Sequence[bytes], base: str, start: int) -> LoggedFeedback:
        """Records start.. of file `base`, parsed once and keyed as batch_keys keys them."""
        cols = self.columns(serialized, self.spec)
        units = None if self.split_hash is None else cols[self.split_hash]
        return self._feedback(cols, *batch_keys(serialized, base, start, self.split_hash, units))

    def _feedback(self, cols: dict[str, np.ndarray], keys: np.ndarray, copy_keys: np.ndarray | None) -> LoggedFeedback:
        from rlops.components.common import records

        features = None
        if self.pre is None:
            contexts = cols[records.CONTEXT]
        else:
            raw = self.schema.names + self.per_arm_names
            features = {k: cols[k] for k in raw}
            contexts = self.pre({k: features[k] for k in self.schema.names}).numpy()
        actions = cols[records.ACTION].astype(int) - self.action_minimum
        arms: dict[str, Any] = {}
        if self.catalog is not None and features is not None:
            arms = catalog_items(self.catalog, features, self.examples_uri)
        return logged_feedback(cols, contexts, actions, features, arms, keys=keys, copy_keys=copy_keys)


def logged_feedback(
    cols: dict[str, np.ndarray],
    contexts: np.ndarray,
    actions: np.ndarray,
    features: dict[str, np.ndarray] | None,
    arms: dict[str, Any],
    **keys: Any,
) -> LoggedFeedback:
    """Parsed columns as LoggedFeedback (what both engines' parsers end in): `actions` less the
    action spec's minimum, `arms` the per-arm candidates ({} without), `keys` the record keys."""
    from rlops.components.common import records

    return LoggedFeedback(
        contexts,
        actions,
        cols[records.REWARD].astype(float),
        cols[records.PROPENSITY].astype(float),
        weights=cols[records.WEIGHT].astype(float) if records.WEIGHT in cols else None,
        action_mask=arms.get("action_mask", cols.get(records.ACTION_MASK)),
        features=features,
        items=arms.get("items"),
        item_features=arms.get("item_features"),
        **keys,
    )


def batch_keys(
    serialized: Sequence[bytes], base: str, start: int, split_hash: str | None, units: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(keys, copy keys) of records start.. of file `base`, as feedback.feedback_keys gives them:
    of the split hash the records carry (`split_hash`: its feature name; `units`: its values when
    already parsed), else of (file, index)."""
    from rlops.components.common import records

    files = file_record_keys(base, start, len(serialized))
    if split_hash is None:
        return files, None
    if units is None:
        units = records.read_split_hashes(list(serialized), split_hash)
    return unit_record_keys(units), (files if split_hash == records.SPLIT_CONTENT else None)


def catalog_items(catalog: ArmCatalog, features: dict, examples_uri: str) -> dict[str, np.ndarray]:
    """A batch's candidate mask and item indices in the split's catalog (feedback.per_arm_candidates
    gives the same for the same records)."""

    candidate = feedback.candidate_mask(features, examples_uri)
    valid = candidate.reshape(-1)
    slots = {name: feedback.arm_slot_values(features, name, valid) for name in catalog.uniques}
    key = feedback.item_keys(slots, catalog.uniques, examples_uri)
    at = np.minimum(np.searchsorted(catalog.keys, key), len(catalog.keys) - 1)
    if not (catalog.keys[at] == key).all():  # the first pass saw every record: never, unless files changed
        raise ValueError("a candidate item is missing from the first pass's catalog (did the split change?)")
    return {
        "items": feedback.slot_items(key, catalog.keys, candidate),
        "item_features": catalog.item_features,
        "action_mask": candidate.astype(np.float32),
    }


# ---- policies on a batch ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySource:
    """How a worker gets one policy's probabilities: a SavedModel's served or greedy policy,
    the uniform policy, or the logging policy."""

    kind: str  # "saved_model" | "uniform" | "logging"
    path: str | None = None  # the SavedModel (serving) directory
    uri: str | None = None  # what errors name (the model URI the user gave)
    greedy: bool = False
    epsilon: float | None = None  # served at this epsilon instead of its own (comparisons.certify)


def load_policies(
    sources: Sequence[PolicySource], where: str = "on a Beam worker", preloaded: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Each SavedModel source loaded once (unless `preloaded` holds its path); a failure is a
    WorkerError naming the policy and `where`."""
    from rlops.train.policy_saver import SavedPolicy

    loaded: dict[str, Any] = dict(preloaded or {})
    for src in sources:
        if src.kind == "saved_model" and str(src.path) not in loaded:
            try:
                loaded[str(src.path)] = SavedPolicy(str(src.path))
            except Exception as e:  # noqa: BLE001 - any load failure is the same user-facing fact
                detail = " ".join(str(e).split())[:200] or type(e).__name__
                raise WorkerError(
                    f"{ERROR_MARK}policy {src.uri or src.path} cannot be loaded {where}: {detail}"
                ) from None
    return loaded


def batch_policies(
    sources: Sequence[PolicySource], loaded: dict, data: LoggedFeedback, num_actions: int
) -> tuple[list, dict[str, Any]]:
    """Each source's probabilities on the batch ([n, K] or LOGGING_POLICY), and per SavedModel
    its PolicyProbs (greedy shares, epsilon)."""
    probs: dict[str, PolicyProbs] = {}
    out: list[Any] = []
    for src in sources:
        if src.kind == "logging":
            out.append(LOGGING_POLICY)
        elif src.kind == "uniform":
            out.append(estimators.uniform_probs(len(data.actions), num_actions, data.action_mask))
        else:
            path = str(src.path)
            if path not in probs:
                probs[path] = policy_probs(loaded[path], data, num_actions)
            if src.greedy:
                out.append(probs[path].greedy)
            else:
                out.append(probs[path].served if src.epsilon is None else probs[path].served_at(src.epsilon))
    return out, probs


# ---- the CombineFns -------------------------------------------------------------------------------------


@dataclass
class Partial:
    """A batch's (or many batches') contribution: the sums, and the greedy shares of policy 0's
    model (candidate_action_share)."""

    sums: Sums
    share: np.ndarray

    def merge(self, other: "Partial") -> "Partial":
        return Partial(self.sums.merge(other.sums), self.share + other.share)


def terms_combine_fn():
    import apache_beam as beam

    class TermsCombineFn(beam.CombineFn):
        """(columns [n, width], bootstrap keys [n] or [2, n], share [K][, the rewards' (min, max)])
        batches -> Partial: the columns' sums and their hash-derived bootstrap sums, whatever the
        batches' order or grouping (without the rewards' range the intervals are not clipped)."""

        def __init__(self, layout: estimators.Layout, num_bootstrap: int, seed: int):
            self.layout, self.num_bootstrap, self.seed = layout, num_bootstrap, seed

        def create_accumulator(self):
            return None

        def add_input(self, acc, element):
            columns, keys, share, *reward_range = element
            rng = reward_range[0] if reward_range else None
            part = Partial(Sums.of(columns, keys, self.layout, self.num_bootstrap, self.seed, rng), share)
            return part if acc is None else acc.merge(part)

        def merge_accumulators(self, accumulators):
            out = None
            for acc in accumulators:
                if acc is not None:
                    out = acc if out is None else out.merge(acc)
            return out

        def extract_output(self, acc):
            return acc

    return TermsCombineFn


def bottom_k_combine_fn():
    import apache_beam as beam

    class BottomKCombineFn(beam.CombineFn):
        """(hashes, keys, serialized) batches -> the k records with the smallest hashes (sorted),
        and the number of records seen."""

        def __init__(self, k: int):
            self.k = k

        def create_accumulator(self):
            return (np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, object), 0)

        def _keep(self, h, keys, recs, n):
            if len(h) > self.k:
                order = np.argsort(h, kind="stable")[: self.k]
                h, keys, recs = h[order], keys[order], recs[order]
            return h, keys, recs, n

        def add_input(self, acc, element):
            h, keys, recs = element
            return self._keep(
                np.concatenate([acc[0], h]),
                np.concatenate([acc[1], keys]),
                np.concatenate([acc[2], recs]),
                acc[3] + len(h),
            )

        def merge_accumulators(self, accumulators):
            accs = list(accumulators)
            return self._keep(
                np.concatenate([a[0] for a in accs]),
                np.concatenate([a[1] for a in accs]),
                np.concatenate([a[2] for a in accs]),
                sum(a[3] for a in accs),
            )

        def extract_output(self, acc):
            order = np.argsort(acc[0], kind="stable")
            return acc[0][order], acc[1][order], acc[2][order], acc[3]

    return BottomKCombineFn


@dataclass
class ArmValues:
    """Per-arm records seen so far: the first one's per-arm features and num_actions (`ref`),
    whether any record differs from it, the distinct item feature combinations over the
    candidate slots ({per-arm key: [C, ...]}, one row per combination), and the first record
    (file basename, index in the file, num_actions, K) whose num_actions is outside [1, K]."""

    ref: dict[str, np.ndarray]
    varies: bool
    combos: dict[str, np.ndarray]
    bad: tuple[str, int, int, int] | None = None

    @staticmethod
    def of(features: dict[str, np.ndarray], base: str = "", start: int = 0) -> "ArmValues":
        from rlops.features.serving_names import NUM_ACTIONS

        names = feedback.per_arm_feature_keys(features)
        k = features[names[0]].shape[1]
        num_actions = np.asarray(features[NUM_ACTIONS]).astype(int)
        # Lenient here: a bad num_actions is remembered, and named only if the candidates vary
        # (as feedback.per_arm_candidates does).
        valid = (np.arange(k)[None, :] < num_actions[:, None]).reshape(-1)
        slots = {name: feedback.arm_slot_values(features, name, valid) for name in names}
        bad = np.flatnonzero((num_actions < 1) | (num_actions > k))
        return ArmValues(
            {name: features[name][0] for name in names + [NUM_ACTIONS]},
            feedback.per_arm_varies(features),
            distinct_combinations(slots),
            (base, start + int(bad[0]), int(num_actions[bad[0]]), k) if len(bad) else None,
        )

    def merge(self, others: Sequence["ArmValues"]) -> "ArmValues":
        varies = self.varies or any(
            o.varies
            or any(a.shape != b.shape or bool((a != b).any()) for a, b in zip(self.ref.values(), o.ref.values()))
            for o in others
        )
        combos = {name: np.concatenate([self.combos[name]] + [o.combos[name] for o in others]) for name in self.combos}
        bad = [v.bad for v in [self, *others] if v.bad is not None]
        return ArmValues(self.ref, varies, distinct_combinations(combos), min(bad) if bad else None)


def distinct_combinations(slots: dict[str, np.ndarray], cap: int = MAX_ARM_VALUES) -> dict[str, np.ndarray]:
    """The distinct rows of {per-arm key: values [S, ...]} (one row = one item), in key order; a
    feature with more than `cap` distinct values (or more than `cap` rows) is named."""

    uniques = {}
    for name, values in slots.items():
        uniques[name] = _sorted_distinct(values)
        if len(uniques[name]) > cap:
            raise WorkerError(
                f"{ERROR_MARK}per-arm feature '{name}' has more than {cap:,} distinct values over the candidate "
                "slots: too many items to identify on the Beam engine"
            )
    key = feedback.item_keys(slots, uniques, "the eval split")
    _, first = np.unique(key, return_index=True)
    if len(first) > cap:
        raise WorkerError(
            f"{ERROR_MARK}per-arm features {sorted(slots)} have more than {cap:,} distinct combinations "
            "over the candidate slots: too many items to identify on the Beam engine"
        )
    return {name: values[first] for name, values in slots.items()}


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """feedback.sorted_uniques, hashing before sorting: a batch's slots hold few distinct values, and
    sorting all of them (bytes above all) is what would bound the first pass's speed."""

    if values.ndim == 2 and values.shape[1] > 1:
        return feedback.sorted_uniques(values)
    import pandas as pd

    flat = values.reshape(-1)
    few = pd.unique(flat.astype(object) if flat.dtype.kind == "S" else flat)
    return np.unique(np.asarray(few, dtype=flat.dtype))


def arm_values_combine_fn():
    import apache_beam as beam

    class ArmValuesCombineFn(beam.CombineFn):
        """ArmValues of batches -> ArmValues of the split (None: no records)."""

        def create_accumulator(self):
            return None

        def add_input(self, acc, element):
            return element if acc is None else acc.merge([element])

        def merge_accumulators(self, accumulators):
            accs = [a for a in accumulators if a is not None]
            return accs[0].merge(accs[1:]) if accs else None

        def extract_output(self, acc):
            return acc

    return ArmValuesCombineFn


def arm_catalog(values: "ArmValues | None", examples_uri: str) -> ArmCatalog | None:
    """The split's items when the records' candidates vary (else None: the per-action models)."""

    if values is None or not values.varies:
        return None
    if values.bad is not None:
        base, i, num, k = values.bad
        raise ValueError(
            f"examples at {examples_uri}: record {i} of {base} has num_actions {num}, outside [1, {k}] "
            "(the per-arm features' width)"
        )
    uniques = {name: feedback.sorted_uniques(v) for name, v in values.combos.items()}
    keys = feedback.item_keys(values.combos, uniques, examples_uri)
    order = np.argsort(keys, kind="stable")
    raw = {name[len(PER_ARM_PREFIX) :]: v[order] for name, v in values.combos.items()}
    return ArmCatalog(uniques, keys[order], feedback.encode_arms(raw, examples_uri))


# ---- the pipelines --------------------------------------------------------------------------------------


def _worker_error(e: Exception) -> Exception:
    """The one line a worker meant for the user (ERROR_MARK ...), else `e` itself."""
    text = str(e)
    if ERROR_MARK in text:
        return ValueError(text.split(ERROR_MARK, 1)[1].splitlines()[0].strip().rstrip("'\""))
    return e


def run_pipeline(build, beam_pipeline_args: Sequence[str] | None, out_dir: str) -> Any:
    """Build a pipeline whose result is written (pickled) under out_dir, run it, read it back."""
    import apache_beam as beam
    import tensorflow as tf
    from apache_beam.options.pipeline_options import PipelineOptions

    path = os.path.join(out_dir, f"result-{uuid.uuid4().hex}.pkl")

    def write(value):
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(pickle.dumps(value))

    p = beam.Pipeline(options=PipelineOptions(list(beam_pipeline_args or [])))
    build(p) | "Write" >> beam.Map(write)
    try:
        p.run().wait_until_finish()
    except Exception as e:  # noqa: BLE001 - a worker's user-facing error becomes one line
        raise _worker_error(e) from None
    with tf.io.gfile.GFile(path, "rb") as f:
        value = pickle.loads(f.read())
    tf.io.gfile.remove(path)
    trim_heap()  # the DirectRunner's in-process runner read every record here and freed it
    return value


def max_action(batch) -> int:
    """The largest action id in a batch of serialized records (-1 for none)."""
    import tensorflow as tf

    from rlops.components.common import records

    _, _, recs = batch
    spec = {records.ACTION: tf.io.FixedLenFeature([], tf.int64)}
    actions = tf.io.parse_example(tf.constant(list(recs)), spec)[records.ACTION].numpy()
    return int(actions.max()) if len(actions) else -1


def _sample_pass(
    files: list[str], k: int, seed: int, parser: Parser | None, split_hash: str | None, args, out_dir: str
):
    """(the bottom-k sample and record count, the split's ArmValues or None, the largest logged
    action id). `parser`: set up on each worker to read the per-arm features (None: records
    without them). `split_hash`: the split hash the records carry (batch_keys)."""
    import apache_beam as beam

    combine = bottom_k_combine_fn()

    class Arms(beam.DoFn):
        def setup(self):
            assert parser is not None
            parser.setup()

        def process(self, batch):
            base, start, recs = batch
            try:
                yield ArmValues.of(parser.parse_arms(recs), base, start)
            except WorkerError:
                raise
            except ValueError as e:
                raise WorkerError(
                    f"{ERROR_MARK}examples {base}, records {start}..{start + len(recs) - 1}: {e}"
                ) from None

    def hashed(batch):
        base, start, recs = batch
        keys, _ = batch_keys(recs, base, start, split_hash)
        obj = np.empty(len(recs), object)
        obj[:] = recs
        return reward_models.sample_hashes(keys, seed), keys, obj

    def build(p):
        batches = (
            p | "Files" >> beam.Create(files) | "Spread" >> beam.Reshuffle() | "Read" >> beam.FlatMap(read_batches)
        )
        sample = batches | "Hash" >> beam.Map(hashed) | "BottomK" >> beam.CombineGlobally(combine(k))
        # The logs' number of actions, read from every record (as the in-memory engine reads it).
        top = (
            batches | "MaxAction" >> beam.Map(max_action) | "Max" >> beam.CombineGlobally(lambda v: max(v, default=-1))
        )
        top_side = beam.pvalue.AsSingleton(top)
        if parser is None:
            return sample | "NoArms" >> beam.Map(lambda s, t: (s, None, t), t=top_side)
        arms = batches | "Arms" >> beam.ParDo(Arms()) | "ArmValues" >> beam.CombineGlobally(arm_values_combine_fn()())
        return sample | "Join" >> beam.Map(lambda s, a, t: (s, a, t), a=beam.pvalue.AsSingleton(arms), t=top_side)

    return run_pipeline(build, args, out_dir)


def _sums_pass(
    files: list[str],
    parser: Parser,
    sources: list[PolicySource],
    num_actions: int,
    model: reward_models.FoldModels | None,
    layout: estimators.Layout,
    num_bootstrap: int,
    seed: int,
    args,
    out_dir: str,
) -> Partial | None:
    import apache_beam as beam

    combine = terms_combine_fn()

    class Score(beam.DoFn):
        """Parse and score a batch: the SavedModels and the parser are set up once per worker."""

        def setup(self):
            parser.setup()
            self.loaded = load_policies(sources)

        def process(self, batch):
            base, start, recs = batch
            try:
                data = parser.parse_batch(recs, base, start)
                check_actions(data.actions, num_actions, parser.action_minimum, start)
                policies, probs = batch_policies(sources, self.loaded, data, num_actions)
                policies = [
                    p if isinstance(p, str) else estimators.prepare_policy(p, data, None, "policy") for p in policies
                ]
            except WorkerError:
                raise
            except ValueError as e:
                raise WorkerError(
                    f"{ERROR_MARK}examples {base}, records {start}..{start + len(recs) - 1}: {e}"
                ) from None
            q = None if model is None else model.predict(data.contexts, data.record_keys, data.items)
            columns = estimators.record_columns(
                data.actions, data.rewards, data.propensities, data.record_weights, policies, q, layout.grids
            )
            share = np.zeros(num_actions)
            first = next(iter(probs.values()), None)
            if first is not None:
                share = np.bincount(first.greedy.argmax(1), minlength=num_actions).astype(float)
            yield columns, data.bootstrap_keys, share, estimators.observed_range(data.rewards)

    def build(p):
        return (
            p
            | "Files" >> beam.Create(files)
            | "Spread" >> beam.Reshuffle()
            # Read, Score and the combiner's partial sums fuse into one stage: no shuffle of
            # records (the DirectRunner would hold a shuffled PCollection in memory).
            | "Read" >> beam.FlatMap(read_batches)
            | "Score" >> beam.ParDo(Score())
            | "Sum" >> beam.CombineGlobally(combine(layout, num_bootstrap, seed))
        )

    return run_pipeline(build, args, out_dir)


@dataclass
class BeamRun:
    """What the Beam engine hands back: sums over every policy, the refits, the sample."""

    sums: Sums
    refits: tuple[np.ndarray, float] | None
    num_records: int
    action_share: list[float]
    reward_model: str
    sample: LoggedFeedback
    num_actions: int


def run_split(
    config: EvaluatorConfig,
    examples_uri: str,
    split: str,
    sources: list[PolicySource],
    num_actions: int | None,
    action_minimum: int,
    beam_pipeline_args: Sequence[str] | None = None,
    out_dir: str | None = None,
    loaded: Sequence[SavedPolicy] = (),
    first_record: bytes | None = None,
) -> BeamRun:
    """Both passes over the split, and the driver's work between them. `num_actions` None: the
    logs' own (their action mask's or per-arm width, else the largest logged action + 1).
    `loaded`: SavedPolicies the caller has loaded already, which the driver scores the sample with
    instead of loading them again; `first_record`: the split's first record, serialized, when the
    caller has read it (the parse spec; None: the driver reads it)."""
    if out_dir is None:  # the passes' side files; nothing in them outlives the run
        with tempfile.TemporaryDirectory(prefix="rlops-evaluator-") as scratch:
            return run_split(
                config,
                examples_uri,
                split,
                sources,
                num_actions,
                action_minimum,
                beam_pipeline_args,
                scratch,
                loaded,
                first_record,
            )
    files = split_files(examples_uri, split)
    if not files:
        raise FileNotFoundError(f"examples: no '{split}' split files under {examples_uri}")
    if config.reward_model == reward_models.NETWORK:
        raise ValueError(
            "evaluator.reward_model: 'network' runs on the in-memory engine only; set "
            "evaluator.engine: memory, or choose auto, ridge or logistic"
        )
    parser = Parser(examples_uri, split, action_minimum)
    parser.setup(first_record)  # here too: a missing propensity column is one line before any pipeline starts
    k = max(config.reward_model_sample, config.dm_refit_records)
    per_arm = Parser(examples_uri, split, action_minimum) if parser.per_arm_names else None
    (_, keys, recs, n), arms, top = _sample_pass(
        files, k, config.seed, per_arm, parser.split_hash, beam_pipeline_args, out_dir
    )
    if n == 0:
        raise ValueError(f"examples: the {split} split has no records")
    logged = top - action_minimum + 1  # actions the records take
    in_logs = max(parser.logs_width or 0, logged)
    if num_actions is None:
        num_actions = in_logs
    elif logged > num_actions:  # a logged action the policy does not have: named before any scoring
        check_policy_fits_logs(num_actions, in_logs)
    parser.catalog = catalog = arm_catalog(arms, examples_uri)
    sample = parser.parse(list(recs), keys)
    del recs  # parsed, the serialized sample is not read again: its pages go back before the fit
    trim_heap()
    kind = reward_models.resolve_reward_model(config.reward_model, sample.rewards)
    fit_rows = np.arange(min(config.reward_model_sample, len(keys)))
    # The balancing weights and the refits need every policy on the sample: scored here, in the driver.
    on_sample, target = None, None
    if config.reward_model_balance or config.dm_refits:
        try:
            driver = load_policies(sources, "by the Evaluator's driver", {str(p.path): p for p in loaded})
        except WorkerError as e:
            raise _worker_error(e) from None
        on_sample, _ = batch_policies(sources, driver, sample, num_actions)
        target = reward_models.evaluated_probability(on_sample, sample.actions)
    model = reward_models.fit_fold_models(
        reward_models.subset(sample, fit_rows),
        num_actions,
        kind,
        config.seed,
        config.reward_model_balance,
        target=None if target is None else target[fit_rows],
    )
    refits = None
    if config.dm_refits and on_sample is not None:
        refits = dm_refits(config, sample, kind, on_sample, num_actions, population=n)
    layout = estimators.Layout(len(sources), policy_grids(config))
    fresh = Parser(examples_uri, split, action_minimum, catalog)  # set up on each worker (TF state does not pickle)
    part = _sums_pass(
        files,
        fresh,
        sources,
        num_actions,
        model,
        layout,
        config.num_bootstrap,
        config.seed,
        beam_pipeline_args,
        out_dir,
    )
    assert part is not None  # the sample pass saw n > 0 records
    return BeamRun(part.sums, refits, n, part.share.tolist(), kind, sample, num_actions)


# ---- the faces' entry points ----------------------------------------------------------------------------


def policy_source(saved: SavedPolicy, uri: str | None, greedy: bool = False) -> PolicySource:
    return PolicySource("saved_model", saved.path, uri, greedy)


def evaluate_policy_on_logs(
    config: EvaluatorConfig,
    examples_uri: str,
    split: str,
    policy: str,
    saved: SavedPolicy | None,
    num_actions: int | None,
    action_minimum: int,
    beam_pipeline_args: Sequence[str] | None = None,
    first_record: bytes | None = None,
) -> LogsRun:
    """`rlops evaluate` on the Beam engine (memory.evaluate_policy_on_logs's twin); `first_record`
    as run_split takes it."""
    if saved is not None:
        sources = [policy_source(saved, policy), PolicySource("logging"), policy_source(saved, policy, greedy=True)]
    else:
        sources = [PolicySource(policy if policy == "uniform" else "logging"), PolicySource("logging")]
    run = run_split(
        config,
        examples_uri,
        split,
        sources,
        num_actions,
        action_minimum,
        beam_pipeline_args,
        loaded=[saved] if saved else [],
        first_record=first_record,
    )
    main, greedy = comparisons(config, run.sums, [s.kind == "logging" for s in sources], True, run.refits)
    epsilon = serving_epsilon(saved) if saved is not None else None
    return LogsRun(main, greedy, run.num_records, run.num_actions, run.reward_model, epsilon, "beam")


def evaluate_bandit(
    config: EvaluatorConfig,
    examples_uri: str,
    candidate: SavedPolicy,
    model_uri: str,
    baseline: SavedPolicy | None,
    baseline_uri: str | None,
    num_actions: int,
    beam_pipeline_args: Sequence[str] | None = None,
    first_record: bytes | None = None,
) -> tuple[dict[str, Any], Estimate]:
    """The Evaluator component on the Beam engine: (metrics, improvement) as memory.evaluate_logged
    gives them. `baseline`: a SavedPolicy, or None for the logging policy; `first_record` as
    run_split takes it."""
    minimum = policy_action_minimum(candidate)
    sources = [
        policy_source(candidate, model_uri),
        PolicySource("logging") if baseline is None else policy_source(baseline, baseline_uri),
        policy_source(candidate, model_uri, greedy=True),
    ]
    loaded = [candidate] if baseline is None else [candidate, baseline]
    run = run_split(
        config,
        examples_uri,
        "eval",
        sources,
        num_actions,
        minimum,
        beam_pipeline_args,
        loaded=loaded,
        first_record=first_record,
    )
    main, greedy = comparisons(config, run.sums, [s.kind == "logging" for s in sources], True, run.refits)
    assert greedy is not None and main.difference is not None
    epsilons = (serving_epsilon(candidate), None if baseline is None else serving_epsilon(baseline))
    name = baseline_uri if baseline is not None and baseline_uri else LOGGING_BASELINE
    metrics = bandit_metrics(
        config, main, greedy, run.num_records, name, run.reward_model, epsilons, run.action_share, "beam"
    )
    return metrics, main.difference[config.estimator]
