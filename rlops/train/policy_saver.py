"""Policy export: a SavedModel that plain TensorFlow loads and serves, plus checkpoint-only updates.

    saver = PolicySaver(agent.policy, train_step=agent.train_step_counter)
    saver.save("export/policy")                       # once: graph + variables + policy_specs.json
    saver.save_checkpoint("export/ckpt_000100")       # often: variables only (small, fast)

Serving with TensorFlow alone (no rlops import):

    policy = tf.saved_model.load("export/policy")
    out = policy.signatures["action"](step_type=..., reward=..., discount=..., observation=...)
    out["action"]                                     # [B, ...]; also "info/...", "state/..."
    # apply a newer checkpoint-only update:
    tf.train.Checkpoint(model_variables=policy.model_variables, train_step=policy.train_step,
                        metadata=policy.metadata).read("export/ckpt_000100/variables/variables")

Signatures: `action` (flat TimeStep [+ policy_state] inputs named by nest path joined with "_",
e.g. `observation_mask`; outputs `action`, `info/<path>`, `state/<path>`),
`get_initial_state` (batch_size), `get_train_step`, `get_metadata`.
With `serving_epsilon` (stateless discrete policies): `serving_default`, what TF Serving's REST
`instances` API and Vertex's prebuilt TensorFlow containers call: one input per raw feature,
named by `rlops.features.serving_names.serving_input_name` (the feature name; `per_arm_<name>` for
an item feature; a single dense observation is one input named by its spec), outputs `action`
(drawn from the epsilon-greedy exploring policy, freshly on every call and in every process),
`propensity` (the probability it was drawn with), `greedy_action` (always an allowed action; the
rules are rlops.heads.epsilon_greedy's) and `policy_version` (int64 per row: the version number the Pusher
published this SavedModel as, read at load time from the asset `assets/rlops_policy_version.txt`,
which the Pusher writes; -1 in a SavedModel no Pusher published); plus `serving_masked`, the same
with an `action_mask` [B, K] input; plus `serving_replay`, serving_default taking `uniforms` [B, 2]
(float32 in [0, 1)) instead of drawing its own, so a caller that keeps them replays a decision
exactly. A policy trained with action masks has `action_mask` in its
observation (TF-Agents' way): then every signature takes it and `serving_masked` is
`serving_default`. The epsilon is `get_metadata()["serving_epsilon"]`. The attribute
`serving_core` is `serving_default` less `policy_version` (no asset table): what
rlops.train.litert converts into `policy.tflite`.
With `item_catalog` (a per-arm feature policy and its item table, rlops.features.item_catalog):
the table is baked in, `serving_default` takes the global features plus `candidate_ids` [B, C] and
returns `item_id`, `propensity`, `greedy_item_id`, `action`, `policy_version` (rlops.train.by_id);
the feature-array signature above is then `serving_features` (policy_files.FEATURES_SIGNATURE),
and `serving_core` stays its core. `get_metadata` adds `item_table_rows` / `item_table_sha256`,
the specs file `item_table`. With `page_size` L as well: `serving_page` (by_id.page_function).
A ranking policy (rlops.agents.ranking.RankingPolicy, bare or inside a feature policy) gets
`serving_ranked`, `serving_ranked_masked` and `serving_ranked_replay` instead (raw features in;
slate, its exact per-position and cascade propensities, greedy slate, scores, seed, policy_version
out) and ranking constants in `get_metadata`: rlops.train.ranked_serving. The same functions are attributes taking nests:
`policy.action(time_step, policy_state)`, `policy.get_initial_state(b)`, `policy.get_train_step()`,
`policy.get_metadata()`.

Latency: call `signatures["action"]` with tensors; it is a single concrete function with a
fixed input signature (no retracing or Python in the path). The polymorphic attribute
`policy.action` does extra Python argument matching and is about twice as slow per call.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import tempfile
import uuid
import weakref
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf
from tensorflow.python.util import nest as tf_nest

from rlops.agents import specs as specs_lib
from rlops.agents.policies import Policy
from rlops.agents.trajectories import PolicyStep
from rlops.features.serving_names import serving_input_for_record_key, serving_input_name
from rlops.train.policy_files import (
    DECISION_KIND,
    FEATURES_SIGNATURE,
    ITEM_TABLE,
    LEGACY_BANDIT,
    LEGACY_SLATE,
    SPECS_FILE,
    SPECS_FORMAT,
    UNPUBLISHED_VERSION,
    VERSION_ASSET,
)

SERVING_EPSILON = "serving_epsilon"
UNIFORMS = "uniforms"  # serving_replay's input: [B, 2] uniforms in [0, 1) the decision is drawn with
POLICY_VERSION = "policy_version"
CHECKPOINT_PREFIX = "policy_checkpoint_"

__all__ = [
    "PolicySaver",
    "SavedPolicy",
    "load",
    "restore_checkpoint",
    "latest_checkpoint",
    "load_specs",
    "model_decision_kind",
    "SPECS_FILE",
    "CHECKPOINT_PREFIX",
    "VERSION_ASSET",
    "POLICY_VERSION",
    "UNPUBLISHED_VERSION",
]


def _unique(variables: Sequence[tf.Variable]) -> list[tf.Variable]:
    seen, out = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _resources(policy: Any, model_variables: Sequence[tf.Variable]) -> list[Any]:
    """What the signatures may capture besides `model_variables`: the policy's other variables and
    its resources (lookup tables with their vocabulary assets), found through its checkpoint
    dependencies. Tracked instead of the policy itself: given the policy, tf.saved_model.save
    reads every attribute of every object the policy holds (Keras layers, networks) looking for
    functions, which cost a per-arm export a third of its time."""
    from tensorflow.python.trackable.resource import CapturableResource

    known = {id(v) for v in model_variables}
    return [
        obj
        for obj in tf.train.TrackableView(policy).descendants()
        if isinstance(obj, (tf.Variable, CapturableResource)) and id(obj) not in known
    ]


def _batched(spec_nest: Any, batch_size: int | None) -> Any:
    return tf.nest.map_structure(lambda s: tf.TensorSpec([batch_size] + s.shape.as_list(), s.dtype, s.name), spec_nest)


def _flat_with_paths(nest: Any, prefix: str) -> list[tuple[str, Any]]:
    pairs = tf_nest.flatten_with_joined_string_paths(nest, separator="/")
    return [(f"{prefix}/{p}" if p else prefix, v) for p, v in pairs]


class PolicySaver:
    """Builds the exportable module around a policy.

    Args:
      policy: an rlops policy (`action`, `get_initial_state`, `time_step_spec`, `action_spec`,
        `policy_state_spec`, `info_spec`, tf.Module variables).
      batch_size: fixed batch size of the signatures, or None (any batch size).
      use_nest_path_signatures, seed, input_fn_and_spec: TF-Agents' arguments; only their
        defaults (True, None, None) are supported, other values raise and say why.
      train_step: int64 variable reported by `get_train_step` and stored in checkpoints.
      metadata: name -> tf.Variable (or initial value) returned by `get_metadata` and stored in
        checkpoints, e.g. evaluation metrics at export time.
      variables: the variables checkpoints save, in a fixed order. Default: the policy's own.
        Savers whose checkpoints must load into each other (policy, collect policy, greedy
        policy) must be given the same list.
    """

    def __init__(
        self,
        policy: Any,
        batch_size: int | None = None,
        use_nest_path_signatures: bool = True,
        seed: int | None = None,
        train_step: tf.Variable | None = None,
        input_fn_and_spec: Any = None,
        metadata: Mapping[str, Any] | None = None,
        variables: Sequence[tf.Variable] | None = None,
        serving_epsilon: float | None = None,
        decision_kind: str | None = None,
        item_catalog: Any = None,
        page_size: int | None = None,
    ):
        # TF-Agents' arguments, in TF-Agents' order; the unsupported values raise with the reason.
        if not use_nest_path_signatures:
            raise ValueError(
                "use_nest_path_signatures=False is not supported: rlops signatures always name "
                "inputs and outputs by nest path (TF-Agents' default, True), which servers rely on"
            )
        if seed is not None:
            raise ValueError(
                "seed is not supported: exported rlops policies draw fresh randomness on every call "
                "and in every process (rlops.heads.epsilon_greedy); a seed baked into the graph "
                "would repeat the same draws"
            )
        if input_fn_and_spec is not None:
            raise NotImplementedError(
                "input_fn_and_spec is not supported: raw-input serving goes through the "
                "exported preprocessing (the `serving_default` signature of rlops.features)"
            )
        self.policy = policy
        if serving_epsilon is not None:
            if not 0.0 <= serving_epsilon <= 1.0:
                raise ValueError(f"serving_epsilon must be in [0, 1], got {serving_epsilon}")
            metadata = {SERVING_EPSILON: tf.constant(float(serving_epsilon)), **(metadata or {})}
        self.serving_epsilon = serving_epsilon
        self.decision_kind = decision_kind
        if item_catalog is not None and serving_epsilon is None:
            raise ValueError("item_catalog: serving by id needs serving_epsilon (the bandit head's exploration)")
        self.item_catalog = item_catalog
        if page_size is not None and item_catalog is None:
            raise ValueError("page_size: serving_page serves candidate ids and needs item_catalog")
        self.page_size = page_size
        self.batch_size = batch_size
        if train_step is None:
            train_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="train_step")
        if train_step.dtype != tf.int64 or train_step.shape.rank != 0:
            raise TypeError(f"train_step must be a scalar int64 variable, got {train_step!r}")
        self.metadata = {
            k: v if isinstance(v, tf.Variable) else tf.Variable(v, trainable=False, name=k)
            for k, v in (metadata or {}).items()
        }
        model_variables = _unique(variables if variables is not None else policy.variables)
        missing = [v.name for v in policy.variables if id(v) not in {id(m) for m in model_variables}]
        if missing:
            raise ValueError(f"`variables` lacks policy variables {missing}; checkpoints could not update them")

        self.time_step_spec = policy.time_step_spec
        self.action_spec = policy.action_spec
        self.policy_state_spec = getattr(policy, "policy_state_spec", ())
        self.info_spec = getattr(policy, "info_spec", ())

        module = tf.Module(name="saved_policy")
        module.model_variables = model_variables
        module.train_step = train_step
        module.metadata = self.metadata
        module.resources = _resources(policy, model_variables)
        self._module = module
        self._signatures = self._build_functions(module)

    # ---- functions ---------------------------------------------------------------------------
    def _build_functions(self, module: tf.Module) -> dict[str, Any]:
        policy = self.policy
        ts_spec = _batched(self.time_step_spec, self.batch_size)
        state_spec = _batched(self.policy_state_spec, self.batch_size)
        flat_ts = _flat_with_paths(ts_spec, "")
        flat_state = _flat_with_paths(state_spec, "policy_state") if tf.nest.flatten(state_spec) else []
        # Signature inputs are named by nest path with "_" ("observation", "observation_mask",
        # "policy_state_h") through the one naming rule, which TF leaves unchanged (serving_names.py).
        input_specs = [
            tf.TensorSpec(s.shape, s.dtype, name=serving_input_name(p.strip("/"))) for p, s in flat_ts + flat_state
        ]
        n_ts = len(flat_ts)
        self._action_input_names = [s.name for s in input_specs]

        def flat_outputs(step: Any) -> dict[str, tf.Tensor]:
            out = dict(_flat_with_paths(step.action, "action"))
            if tf.nest.flatten(step.state):
                out.update(_flat_with_paths(step.state, "state"))
            if tf.nest.flatten(step.info):
                out.update(_flat_with_paths(step.info, "info"))
            return out

        def action(time_step, policy_state=()):
            _unseeded_graph()
            return policy.action(time_step, policy_state)

        # The policy's graph, traced once: TF-Agents' `action` function, the `action` signature and
        # the serving signatures call it, so the SavedModel holds it once rather than once per
        # signature (a concrete function is saved as it is; a tf.function is traced again).
        policy_action = tf.function(action, input_signature=[ts_spec, state_spec], autograph=False)
        policy_action = policy_action.get_concrete_function()
        module.action = tf.function(
            lambda time_step, policy_state=(): policy_action(time_step, policy_state),
            input_signature=[ts_spec, state_spec],
            autograph=False,
        )

        def action_signature(*flat):
            time_step = tf.nest.pack_sequence_as(ts_spec, list(flat[:n_ts]))
            state = tf.nest.pack_sequence_as(state_spec, list(flat[n_ts:]))
            return flat_outputs(policy_action(time_step, state))

        action_sig = tf.function(action_signature, input_signature=input_specs, autograph=False)

        batch_spec = tf.TensorSpec((), tf.int32, name="batch_size")

        def get_initial_state(batch_size):
            return policy.get_initial_state(batch_size)

        module.get_initial_state = tf.function(get_initial_state, input_signature=[batch_spec], autograph=False)
        initial_state_sig = tf.function(
            lambda batch_size: (
                dict(_flat_with_paths(policy.get_initial_state(batch_size), "state"))
                if tf.nest.flatten(self.policy_state_spec)
                else {}
            ),
            input_signature=[batch_spec],
            autograph=False,
        )

        module.get_train_step = tf.function(lambda: module.train_step.read_value(), input_signature=[])
        train_step_sig = tf.function(lambda: {"train_step": module.train_step.read_value()}, input_signature=[])
        ranking = _ranking(policy)

        def get_metadata() -> dict[str, tf.Tensor]:
            out = {k: v.read_value() for k, v in module.metadata.items()}
            if self.decision_kind:  # a constant: what the policy decides, never a checkpoint's to change
                out[DECISION_KIND] = tf.constant(self.decision_kind)
            if ranking is not None:  # constants: they describe this graph, no checkpoint may change them
                from rlops.train import ranked_serving

                out.update(ranked_serving.ranked_metadata(ranking))
            if self.item_catalog is not None:  # the baked item table's row count and hash: constants too
                from rlops.train import by_id

                out.update(by_id.catalog_metadata(self.item_catalog))
                if self.page_size is not None:
                    out[by_id.PAGE_SIZE] = tf.constant(self.page_size, tf.int64)
            return out

        module.get_metadata = tf.function(get_metadata, input_signature=[])
        out = {
            "action": action_sig.get_concrete_function(),
            "get_initial_state": initial_state_sig.get_concrete_function(),
            "get_train_step": train_step_sig.get_concrete_function(),
            "get_metadata": module.get_metadata.get_concrete_function(),
        }
        if self.serving_epsilon is not None:
            out.update(self._serving_functions(module, policy_action))
        if ranking is not None:
            out.update(self._ranked_functions(module))
        return out

    def _ranked_functions(self, module: tf.Module) -> dict[str, Any]:
        """serving_ranked / _masked / _replay (rlops.train.ranked_serving), with policy_version."""
        from rlops.train import ranked_serving

        version = self._version_table(module)

        def with_version(out: dict) -> dict:
            number = tf.strings.to_number(version.lookup(tf.constant(0, tf.int64)), tf.int64)
            return {**out, POLICY_VERSION: tf.fill(tf.shape(out["slate"])[:1], number)}

        return ranked_serving.ranked_functions(module, self.policy, self.batch_size, _unseeded_graph, with_version)

    def _serving_functions(self, module: tf.Module, policy_action: Any) -> dict[str, Any]:
        """serving_default / serving_masked: raw named inputs -> exploring action + propensity, drawn
        by the serving head (rlops.heads.epsilon_greedy: the allowed actions, the draw, its probability)."""
        from rlops.features import serving_candidates
        from rlops.heads import epsilon_greedy

        spec = self.action_spec
        if not specs_lib.is_discrete(spec) or spec.shape.rank != 0 or tf.nest.flatten(self.policy_state_spec):
            raise ValueError("serving_epsilon: serving_default needs a stateless policy with one discrete action")
        num_actions, minimum = specs_lib.num_actions(spec), int(spec.minimum)
        obs_spec = self.time_step_spec.observation
        if isinstance(obs_spec, Mapping):  # inputs named by the one rule (an rlops policy's keys already are)
            key_of = {serving_input_name(k): k for k in obs_spec}
            inputs = {
                n: tf.TensorSpec([self.batch_size] + obs_spec[k].shape.as_list(), obs_spec[k].dtype, name=n)
                for n, k in key_of.items()
            }
        else:
            name = serving_input_name(obs_spec.name or "observation")
            inputs = {name: tf.TensorSpec([self.batch_size] + obs_spec.shape.as_list(), obs_spec.dtype, name=name)}
        ts_type = type(self.time_step_spec)
        version = self._version_table(module)

        def head(features: dict, mask: tf.Tensor | None, uniforms: tf.Tensor | None = None) -> dict:
            _unseeded_graph()
            observation = (
                {key_of[n]: v for n, v in features.items()}
                if isinstance(obs_spec, Mapping)
                else next(iter(features.values()))
            )
            batch = tf.shape(next(iter(features.values())))[:1]
            time_step = ts_type(
                step_type=tf.zeros(batch, self.time_step_spec.step_type.dtype),
                reward=tf.zeros(batch, self.time_step_spec.reward.dtype),
                discount=tf.ones(batch, self.time_step_spec.discount.dtype),
                observation=observation,
            )
            greedy = policy_action(time_step, ()).action  # the policy's graph, traced once (_build_functions)
            eps = module.metadata[SERVING_EPSILON].read_value()
            # the mask argument (serving_masked) or input (a policy trained with masks); per-arm candidates
            allowed = serving_candidates.allowed_actions_tf(features, num_actions, mask)
            return epsilon_greedy.head(greedy, num_actions, eps, minimum, allowed, uniforms)

        def with_version(out: dict) -> dict:
            number = tf.strings.to_number(version.lookup(tf.constant(0, tf.int64)), tf.int64)
            batch = tf.shape(next(iter(out.values())))[:1]  # every output is [B, ...]
            return {**out, POLICY_VERSION: tf.fill(batch, number)}

        # The signatures are only signatures: a module attribute would be traced again when saved
        # (a second copy of each in the SavedModel).
        serving = tf.function(
            lambda **features: with_version(head(features, None)), input_signature=None, autograph=False
        )
        # serving_default less its version lookup (an asset-initialized table LiteRT cannot load):
        # what rlops.train.litert converts, baking the published version in as a constant.
        core = tf.function(lambda **features: head(features, None), input_signature=None, autograph=False)
        module.serving_core = core
        core.get_concrete_function(**inputs)
        # serving_default drawing with caller-supplied uniforms: a decision the caller can replay
        uniforms_spec = tf.TensorSpec([self.batch_size, epsilon_greedy.NUM_UNIFORMS], tf.float32, name=UNIFORMS)
        replay = tf.function(lambda uniforms, **features: with_version(head(features, None, uniforms)), autograph=False)
        out = {
            "serving_default": serving.get_concrete_function(**inputs),
            "serving_replay": replay.get_concrete_function(uniforms=uniforms_spec, **inputs),
        }
        if self.item_catalog is not None:  # serving_default takes candidate ids; feature arrays stay
            from rlops.train import by_id

            out[FEATURES_SIGNATURE] = out.pop("serving_default")
            out["serving_default"] = by_id.by_id_function(
                module, self.policy, self.item_catalog, self.batch_size, _unseeded_graph, with_version
            )
            if self.page_size is not None:
                out[by_id.PAGE_SIGNATURE] = by_id.page_function(
                    module,
                    self.policy,
                    self.item_catalog,
                    self.page_size,
                    self.batch_size,
                    _unseeded_graph,
                    with_version,
                )
        if "action_mask" in inputs:  # the mask is already an input: serving_masked is the feature signature
            return {**out, "serving_masked": serving.get_concrete_function(**inputs)}
        mask_spec = tf.TensorSpec([self.batch_size, num_actions], tf.int64, name="action_mask")
        masked = tf.function(lambda action_mask, **features: with_version(head(features, action_mask)), autograph=False)
        return {**out, "serving_masked": masked.get_concrete_function(action_mask=mask_spec, **inputs)}

    def _version_table(self, module: tf.Module) -> tf.lookup.StaticHashTable:
        """{0: the version line} from the asset VERSION_ASSET, read when the SavedModel loads (so a
        rewritten asset -- the Pusher's -- is what serving_default reports). The source file here
        holds UNPUBLISHED_VERSION; saving copies it into assets/."""
        tmp = tempfile.mkdtemp(prefix="rlops_version_")
        weakref.finalize(self, shutil.rmtree, tmp, True)
        path = os.path.join(tmp, VERSION_ASSET)
        with open(path, "w") as f:
            f.write(f"{UNPUBLISHED_VERSION}\n")
        init = tf.lookup.TextFileInitializer(
            path, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE
        )
        module.version_table = tf.lookup.StaticHashTable(init, default_value=str(UNPUBLISHED_VERSION))
        return module.version_table

    # ---- saving ------------------------------------------------------------------------------
    def save(self, export_dir: str) -> None:
        """Writes the SavedModel and `policy_specs.json` (replacing what was there, atomically
        on local disks)."""
        with _atomic_dir(export_dir) as tmp:
            tf.saved_model.save(
                self._module,
                tmp,
                signatures=self._signatures,
                options=tf.saved_model.SaveOptions(experimental_custom_gradients=False),
            )
            with tf.io.gfile.GFile(os.path.join(tmp, SPECS_FILE), "w") as f:
                json.dump(self.specs_json(), f, indent=1)
            if self.item_catalog is not None:  # the baked table, readable without TensorFlow (its hash: sha256)
                from rlops.features.item_catalog import write_item_catalog

                write_item_catalog(tmp, self.item_catalog)

    def save_checkpoint(self, export_dir: str) -> str:
        """Writes only the variables (model variables, train step, metadata) as
        `export_dir/variables/variables.*`; returns the checkpoint prefix."""
        with _atomic_dir(export_dir) as tmp:
            _policy_checkpoint(self._module).write(os.path.join(tmp, "variables", "variables"))
        return os.path.join(export_dir, "variables", "variables")

    def specs_json(self) -> dict:
        names = {k: list(v.structured_outputs) for k, v in self._signatures.items()}
        inputs = {
            "action": self._action_input_names,
            "get_initial_state": ["batch_size"],
            "get_train_step": [],
            "get_metadata": [],
        }
        for k in self._signatures:
            if k.startswith("serving_"):
                inputs[k] = sorted(self._signatures[k].structured_input_signature[1])
        return {
            "format": SPECS_FORMAT,
            "batch_size": self.batch_size,
            "time_step_spec": _encode(self.time_step_spec),
            "action_spec": _encode(self.action_spec),
            "policy_state_spec": _encode(self.policy_state_spec),
            "info_spec": _encode(self.info_spec),
            "signatures": {k: {"inputs": inputs[k], "outputs": names[k]} for k in self._signatures},
            "metadata": sorted(self.metadata),
            "num_model_variables": len(self._module.model_variables),
            **({DECISION_KIND: self.decision_kind} if self.decision_kind else {}),
            **({ITEM_TABLE: _catalog_specs(self.item_catalog)} if self.item_catalog is not None else {}),
        }


def _catalog_specs(catalog: Any) -> dict:
    from rlops.train import by_id

    return by_id.catalog_specs(catalog)


def _ranking(policy: Any) -> Any:
    """The RankingPolicy `policy` is or wraps, else None (rlops.train.ranked_serving.find_ranking);
    checked only when its module is loaded, so other exports do not import the ranking agents."""
    if "rlops.agents.ranking.ranking_policy" not in sys.modules:
        return None  # no RankingPolicy can exist
    from rlops.train import ranked_serving

    found = ranked_serving.find_ranking(policy)
    return None if found is None else found[0]


def _unseeded_graph() -> None:
    """Called first while a function traces: its unseeded random ops get seeds (0, 0), fresh in
    every process and call, rather than ones a tf.random.set_seed in the exporting process (the
    Trainer's) would bake into the graph (rlops.heads.epsilon_greedy says why that repeats draws)."""
    tf.compat.v1.get_default_graph().seed = None


def _policy_checkpoint(module: Any) -> tf.train.Checkpoint:
    # The same three names on both sides (saver module and loaded SavedModel) make the object
    # graph of a checkpoint-only update match the SavedModel's.
    return tf.train.Checkpoint(
        model_variables=module.model_variables, train_step=module.train_step, metadata=module.metadata
    )


class _atomic_dir:
    """Write into a sibling temp dir, then move it into place: readers never see half an export.
    Falls back to writing in place where directory renames are unsupported (object stores)."""

    def __init__(self, path: str):
        self.path = path.rstrip("/")
        self.local = "://" not in path
        self.tmp = f"{self.path}.tmp-{uuid.uuid4().hex[:8]}" if self.local else self.path

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.local:
            return
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if os.path.exists(self.path):
            old = f"{self.path}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.path, old)
            os.replace(self.tmp, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.tmp, self.path)


# ---- loading ---------------------------------------------------------------------------------
def restore_checkpoint(saved_policy: Any, checkpoint_path: str) -> Any:
    """Loads a checkpoint-only update (a dir from `save_checkpoint`, or its prefix) into a loaded
    SavedModel policy; raises ValueError when the two do not match."""
    prefix = checkpoint_path
    if tf.io.gfile.isdir(checkpoint_path):
        prefix = os.path.join(checkpoint_path, "variables", "variables")
    try:
        _policy_checkpoint(saved_policy).read(prefix).assert_consumed()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise ValueError(f"checkpoint {checkpoint_path} does not match the saved policy's variables: {e}") from e
    return saved_policy


def load(saved_model_dir: str, checkpoint_path: str | None = None) -> Any:
    """`tf.saved_model.load` plus, optionally, a newer checkpoint-only update of its variables."""
    saved_policy = tf.saved_model.load(saved_model_dir)
    if checkpoint_path:
        restore_checkpoint(saved_policy, checkpoint_path)
    return saved_policy


class SavedPolicy(Policy):
    """An exported policy SavedModel as an rlops Policy, acting through its `action` signature
    only (what a server does). Specs come from the specs file beside it, so it composes like any
    policy (e.g. EpsilonGreedyPolicy(SavedPolicy(dir), 0.1) logs around a pushed model)."""

    def __init__(self, saved_model_dir: str, checkpoint_path: str | None = None):
        saved_specs = load_specs(saved_model_dir)
        super().__init__(saved_specs["time_step_spec"], saved_specs["action_spec"], name="saved_policy")
        self.path = saved_model_dir
        self.loaded = load(saved_model_dir, checkpoint_path)
        self._signature = self.loaded.signatures["action"]
        self._inputs = self._signature.structured_input_signature[1]

    def _action(self, time_step: Any, seed: Any) -> PolicyStep:
        return PolicyStep(self.signature_outputs(time_step)["action"], (), ())

    def signature_outputs(self, time_step: Any) -> dict[str, tf.Tensor]:
        """Every output of the `action` signature (`action`, `info/...`) for a TimeStep nest."""
        feeds = {}
        for path, value in _flat_with_paths(time_step, ""):
            name = path.lstrip("/")
            if name not in self._inputs:  # a record key (observation/per_arm/x): its input's name
                head, _, key = name.partition("/")
                name = head + "_" + serving_input_for_record_key(key) if key else serving_input_name(name)
            want = self._inputs[name].dtype
            feeds[name] = tf.constant(value, want) if want == tf.string else tf.cast(value, want)
        return self._signature(**feeds)

    def observation(self, observations: Any, action_mask: Any = None) -> Any:
        """What this policy's observation needs from logged inputs: a policy trained with action
        masks takes `action_mask` beside its features (a dense array goes under its input's name);
        any other policy takes `observations` as they are (the caller applies a mask itself)."""
        spec = self.time_step_spec.observation
        if not (isinstance(spec, Mapping) and "action_mask" in spec):
            return observations
        if action_mask is None:
            from rlops.features.schema import FeatureSchemaError

            raise FeatureSchemaError(
                f"feature 'action_mask' is missing: the policy at {self.path} was trained with "
                "action masks and takes them as part of its observation"
            )
        if not isinstance(observations, Mapping):
            names = [k for k in spec if k != "action_mask"]
            observations = {names[0]: observations}
        return {**observations, "action_mask": action_mask}

    def by_input(self, features: Mapping[str, Any]) -> dict[str, Any]:
        """Columns keyed by record key (`per_arm/<name>`) or by serving input name -> keyed as this
        policy's observation is (its serving input names; a policy exported before they existed
        keeps its record keys). Columns it has no use for stay as they are."""
        spec = self.time_step_spec.observation
        if not isinstance(spec, Mapping):
            return dict(features)
        out = dict(features)
        for key in features:
            name = serving_input_for_record_key(key)
            target = name if name in spec else next((k for k in spec if serving_input_for_record_key(k) == name), None)
            if target is not None and target not in out:
                out[target] = out.pop(key)
        return out

    def actions(self, observations: Any, batch_size: int = 4096, action_mask: Any = None) -> Any:
        """Greedy actions (numpy) for a batch of observations, in chunks of batch_size: one dense
        array, or {feature name: array} of raw features (a policy exported with its features;
        matched by name, extra columns ignored). `action_mask` [N, K]: fed to a policy trained
        with masks (see `observation`), ignored by others."""
        import numpy as np

        from rlops.agents.trajectories import restart

        observations = self.observation(observations, action_mask)
        if isinstance(observations, Mapping):
            return self._feature_actions(self.by_input(observations), batch_size)
        out = [
            self.action(restart(observations[i : i + batch_size], len(observations[i : i + batch_size]))).action.numpy()
            for i in range(0, len(observations), batch_size)
        ]
        return np.concatenate(out) if out else np.zeros((0,), self.action_spec.dtype.as_numpy_dtype)

    def _feature_actions(self, features: Mapping[str, Any], batch_size: int) -> Any:
        import numpy as np

        from rlops.agents.trajectories import restart
        from rlops.features.schema import FeatureSchemaError

        spec = self.time_step_spec.observation
        if not isinstance(spec, Mapping):
            raise ValueError(f"{self.path}: this policy takes one dense observation, not named features")
        missing = sorted(set(spec) - set(features))
        if missing:
            raise FeatureSchemaError(
                f"feature '{missing[0]}' is missing: the policy at {self.path} needs "
                f"{sorted(spec)}, got {sorted(features)}"
            )
        for name, want in spec.items():  # retyped: strings where numbers are expected, or back
            text = np.asarray(features[name]).dtype.kind in "SUO"
            if text != (want.dtype == tf.string):
                got = "strings" if text else f"{np.asarray(features[name]).dtype} numbers"
                raise FeatureSchemaError(
                    f"feature '{name}' is {want.dtype.name} in the policy at {self.path} but arrives as {got}"
                )
        n = len(next(iter(features.values())))
        out = []
        for i in range(0, n, batch_size):
            chunk = {k: features[k][i : i + batch_size] for k in spec}
            m = len(next(iter(chunk.values())))
            out.append(self.action(restart(chunk, m)).action.numpy())
        return np.concatenate(out) if out else np.zeros((0,), self.action_spec.dtype.as_numpy_dtype)


def latest_checkpoint(checkpoints_dir: str) -> str | None:
    """The newest `policy_checkpoint_<step>` directory in `checkpoints_dir`, or None."""
    if not tf.io.gfile.isdir(checkpoints_dir):
        return None
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(checkpoints_dir)]
    steps = [n for n in names if n.startswith(CHECKPOINT_PREFIX) and n[len(CHECKPOINT_PREFIX) :].isdigit()]
    return os.path.join(checkpoints_dir, max(steps, key=lambda n: int(n[len(CHECKPOINT_PREFIX) :]))) if steps else None


def model_decision_kind(saved_model_dir: str) -> str:
    """The decision kind the exported policy was trained for (`decision_kind` in its specs). A
    policy exported without one (by hand, or before the kind travelled) is read by the one probe
    left: a policy that serves pages (`serving_ranked`) is a slate policy, any other a bandit one."""
    specs = load_specs(saved_model_dir)
    if specs.get(DECISION_KIND):
        return str(specs[DECISION_KIND])
    return LEGACY_SLATE if "serving_ranked" in specs.get("signatures", {}) else LEGACY_BANDIT


def load_specs(saved_model_dir: str) -> dict:
    """Reads `policy_specs.json`, turning spec entries back into (Bounded)TensorSpecs."""
    with tf.io.gfile.GFile(os.path.join(saved_model_dir, SPECS_FILE)) as f:
        raw = json.load(f)
    out = dict(raw)
    for key in ("time_step_spec", "action_spec", "policy_state_spec", "info_spec"):
        out[key] = _decode(raw[key])
    return out


# Nest <-> JSON: specs are {"shape", "dtype", "name"[, "minimum", "maximum"]}; containers are
# tagged so namedtuples (TimeStep) come back with their field names.
def _encode(nest: Any) -> Any:
    if isinstance(nest, tf.TensorSpec):
        return {"spec": specs_lib.spec_to_json(nest)}
    if isinstance(nest, tuple) and hasattr(nest, "_fields"):
        return {"namedtuple": type(nest).__name__, "fields": {k: _encode(getattr(nest, k)) for k in nest._fields}}
    if isinstance(nest, Mapping):
        return {"dict": {str(k): _encode(v) for k, v in nest.items()}}
    if isinstance(nest, (list, tuple)):
        return {"list" if isinstance(nest, list) else "tuple": [_encode(v) for v in nest]}
    raise TypeError(f"cannot encode {type(nest).__name__} in a spec nest")


_NAMEDTUPLES: dict[str, Callable] = {}


def _decode(obj: Any) -> Any:
    if "spec" in obj:
        return specs_lib.spec_from_json(obj["spec"])
    if "namedtuple" in obj:
        name, fields = obj["namedtuple"], obj["fields"]
        cls = _known_namedtuple(name, tuple(fields))
        return cls(**{k: _decode(v) for k, v in fields.items()})
    if "dict" in obj:
        return {k: _decode(v) for k, v in obj["dict"].items()}
    if "list" in obj:
        return [_decode(v) for v in obj["list"]]
    return tuple(_decode(v) for v in obj["tuple"])


def _known_namedtuple(name: str, fields: tuple[str, ...]) -> Callable:
    from rlops.agents import trajectories

    cls = getattr(trajectories, name, None)
    if cls is not None and getattr(cls, "_fields", None) == fields:
        return cls
    return _NAMEDTUPLES.setdefault(f"{name}{fields}", collections.namedtuple(name, fields))
