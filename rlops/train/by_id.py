"""Serving a catalog by item id: a per-arm bandit policy's `serving_default` when its export holds the
item table (rlops.features.item_catalog).

Inputs: the global raw features (named as every signature names them, rlops.features.serving_names),
`candidate_ids` [B, C] (int64 or string, the logged ids' dtype; any C per call; `-1` / `""` pads a
row, never chosen) and, for a per-arm feature the item table does not hold (a per-user affinity
column of the log), `per_arm_<name>` [B, C] aligned with `candidate_ids`.

Each candidate's row is looked up in the baked table (a StaticHashTable id -> row), its raw item
features gathered and preprocessed by the policy's own item preprocessor, and only those C
candidates are scored by the policy's network (`arm_scores`); the bandit head
(rlops.heads.epsilon_greedy) draws among the valid candidates. An id neither in the table nor a
pad fails the call (InvalidArgumentError naming the unknown ids); so does a row with no candidate.

Outputs: `item_id` [B] (the chosen id), `propensity` (its probability among the row's valid
candidates), `greedy_item_id`, `action` [B] int64 (the index into `candidate_ids`), plus the
policy's `policy_version` (PolicySaver adds it).

With a page size L, `serving_page` takes the same inputs and returns a page of L distinct
candidate ids drawn without replacement by the slate head (rlops.heads.slate, epsilon per slot at
the serving epsilon) with its exact per-position marginals and prefix probabilities
(`page_function`).
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from rlops.agents.bandits import utils
from rlops.features.item_catalog import ID_PAD, INT64, ItemCatalog
from rlops.features.serving_names import NUM_ACTIONS, PER_ARM_INPUT_PREFIX, serving_input_name
from rlops.heads import epsilon_greedy
from rlops.heads.slate.head import (
    GREEDY_SLATE,
    PROPENSITY_CASCADE,
    PROPENSITY_ITEM_POSITION,
    SEED,
    SLATE,
    slate_head,
)
from rlops.heads.slate.probabilities import EpsilonPerSlot

CANDIDATE_IDS = "candidate_ids"
SERVING_EPSILON = "serving_epsilon"  # the exploration both heads read (PolicySaver's metadata variable)
PAGE, GREEDY_PAGE, SCORES = "page", "greedy_page", "scores"
PAGE_SIGNATURE = "serving_page"
PAGE_SIZE = "page_size"  # get_metadata: serving_page's L
ITEM_ID, GREEDY_ITEM_ID = "item_id", "greedy_item_id"
ITEM_TABLE_ROWS, ITEM_TABLE_SHA256 = "item_table_rows", "item_table_sha256"  # get_metadata's names
UNKNOWN_IDS_MESSAGE = "unknown candidate_ids, not in the item table of this policy:"


def find_scorer(policy: Any) -> tuple[Any, Callable[[dict], tf.Tensor]] | None:
    """(the per-arm preprocessor, the greedy policy's `arm_scores`) of a per-arm feature policy
    (rlops.features.export.PerArmFeaturePolicy around a policy that scores any number of arms), else None."""
    pre = getattr(policy, "preprocessor", None)
    scores = getattr(getattr(policy, "wrapped_policy", None), "arm_scores", None)
    if scores is None or not hasattr(pre, "arm_preprocessor"):
        return None
    return pre, scores


def catalog_metadata(catalog: ItemCatalog) -> dict[str, tf.Tensor]:
    """Constants `get_metadata` adds: the table's row count and content hash."""
    return {
        ITEM_TABLE_ROWS: tf.constant(catalog.num_rows, tf.int64),
        ITEM_TABLE_SHA256: tf.constant(catalog.sha256),
    }


def catalog_specs(catalog: ItemCatalog) -> dict[str, Any]:
    """What policy_specs.json says of the table."""
    return {"num_rows": catalog.num_rows, "sha256": catalog.sha256, "id_dtype": catalog.id_dtype}


class _ByIdScorer:
    """What serving_default and serving_page share: the baked table, the inputs, and a request's
    candidates scored by the policy (the table is tracked on `module`, so it is saved with it)."""

    def __init__(self, module: tf.Module, policy: Any, catalog: ItemCatalog, batch_size: int | None):
        found = find_scorer(policy)
        if found is None:
            raise ValueError(f"serving by id needs a per-arm feature policy whose policy scores arms; got {policy!r}")
        self.pre, self.arm_scores = found
        raw = self.pre.raw_specs(batch_size)
        self.baked = {f.name for f in self.pre.schema.per_arm if f.name in catalog.columns}
        # inputs: the global features, candidate_ids, and the per-arm features the table does not hold
        arm_inputs = {
            serving_input_name(f.name, per_arm=True) for f in self.pre.schema.per_arm if f.name not in self.baked
        }
        self.inputs = {
            n: s
            for n, s in raw.items()
            if n != NUM_ACTIONS and (not n.startswith(PER_ARM_INPUT_PREFIX) or n in arm_inputs)
        }
        id_dtype = tf.int64 if catalog.id_dtype == INT64 else tf.string
        self.inputs[CANDIDATE_IDS] = tf.TensorSpec([batch_size, None], id_dtype, name=CANDIDATE_IDS)
        if not hasattr(module, "item_table"):  # one table for both signatures
            ids = tf.constant(catalog.ids.tolist(), id_dtype)
            module.item_table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(ids, tf.range(catalog.num_rows, dtype=tf.int64)), default_value=-1
            )
        self.table = module.item_table
        self.columns = {
            name: tf.constant(catalog.columns[name].tolist(), raw[serving_input_name(name, per_arm=True)].dtype)
            for name in self.baked
        }
        self.wanted = set(self.pre.global_preprocessor.input_names) | set(self.pre.schema.names)
        self.pad = tf.constant(ID_PAD[catalog.id_dtype], id_dtype)

    def __call__(self, features: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(candidate_ids [B, C], valid [B, C] bool, scores [B, C]); unknown ids fail the call."""
        pre, candidates = self.pre, features[CANDIDATE_IDS]
        rows = self.table.lookup(candidates)  # [B, C], -1 where unknown
        valid = tf.not_equal(candidates, self.pad)
        unknown = tf.logical_and(valid, rows < 0)
        checks = [
            tf.debugging.Assert(
                tf.logical_not(tf.reduce_any(unknown)),
                [UNKNOWN_IDS_MESSAGE, tf.boolean_mask(candidates, unknown)],
                summarize=20,
            ),
            tf.debugging.Assert(
                tf.reduce_all(tf.reduce_any(valid, -1)), ["a row of candidate_ids holds no candidate (only pads)"]
            ),
        ]
        with tf.control_dependencies(checks):
            rows = tf.identity(tf.maximum(rows, 0))
        shape = tf.shape(candidates)
        arms = {}
        for f in pre.schema.per_arm:  # one row per candidate through the item preprocessor
            if f.name in self.baked:
                x = tf.gather(self.columns[f.name], rows)  # [B, C] (or [B, C, W])
            else:
                x = tf.convert_to_tensor(features[serving_input_name(f.name, per_arm=True)])
            arms[f.name] = tf.reshape(x, [-1, tf.shape(x)[-1]]) if f.multivalent else tf.reshape(x, [-1])
        per_arm = tf.reshape(pre.arm_preprocessor(arms), tf.concat([shape, [pre.arm_dim]], 0))
        g = pre.global_preprocessor({k: v for k, v in features.items() if k in self.wanted})
        scores = self.arm_scores({utils.GLOBAL_FEATURE_KEY: g, utils.PER_ARM_FEATURE_KEY: per_arm})  # [B, C]
        return candidates, valid, scores


def by_id_function(
    module: tf.Module,
    policy: Any,
    catalog: ItemCatalog,
    batch_size: int | None,
    before_trace: Callable[[], None],
    with_version: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]],
) -> Any:
    """serving_default's concrete function (see the module docstring)."""
    scorer = _ByIdScorer(module, policy, catalog, batch_size)

    def serve(**features: tf.Tensor) -> dict[str, tf.Tensor]:
        before_trace()
        candidates, valid, scores = scorer(features)
        greedy = utils.masked_argmax(scores, valid, tf.int32)
        eps = module.metadata[SERVING_EPSILON].read_value()
        out = epsilon_greedy.head(greedy, tf.shape(candidates)[1], eps, 0, valid)
        action = tf.cast(out["action"], tf.int64)
        return with_version(
            {
                ITEM_ID: tf.gather(candidates, action, batch_dims=1),
                "propensity": out["propensity"],
                GREEDY_ITEM_ID: tf.gather(candidates, tf.cast(out["greedy_action"], tf.int64), batch_dims=1),
                "action": action,
            }
        )

    return tf.function(serve, autograph=False).get_concrete_function(**scorer.inputs)


def page_function(
    module: tf.Module,
    policy: Any,
    catalog: ItemCatalog,
    page_size: int,
    batch_size: int | None,
    before_trace: Callable[[], None],
    with_version: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]],
) -> Any:
    """serving_page's concrete function: a page of `page_size` distinct candidate ids, drawn by the
    slate head's epsilon-per-slot rule at the serving epsilon (each slot: the best remaining
    candidate with probability 1 - epsilon, else a uniform remaining one; its first slot is
    serving_default's decision rule), with the head's exact per-position marginals and prefix
    probabilities. Outputs as serving_ranked's: `page` (ids), `slate` (indices into
    candidate_ids), `propensity_item_position`, `propensity_cascade`, `greedy_page`, `scores`
    [B, C], `seed`, `policy_version`. A row with fewer than `page_size` valid candidates fails naming the length."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    scorer = _ByIdScorer(module, policy, catalog, batch_size)

    def serve(**features: tf.Tensor) -> dict[str, tf.Tensor]:
        before_trace()
        candidates, valid, scores = scorer(features)
        eps = tf.cast(module.metadata[SERVING_EPSILON].read_value(), tf.float64)
        out = slate_head(scores, page_size, EpsilonPerSlot(), valid, parameter=eps)
        slate = tf.cast(out[SLATE], tf.int64)
        return with_version(
            {
                PAGE: tf.gather(candidates, slate, batch_dims=1),
                SLATE: slate,
                PROPENSITY_ITEM_POSITION: out[PROPENSITY_ITEM_POSITION],
                PROPENSITY_CASCADE: out[PROPENSITY_CASCADE],
                GREEDY_PAGE: tf.gather(candidates, tf.cast(out[GREEDY_SLATE], tf.int64), batch_dims=1),
                SEED: out[SEED],
                SCORES: tf.cast(scores, tf.float32),
            }
        )

    return tf.function(serve, autograph=False).get_concrete_function(**scorer.inputs)
