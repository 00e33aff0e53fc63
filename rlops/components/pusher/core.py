"""The Pusher's work as a plain function: blessed policy -> verified, atomically published version.

Publishing itself (layout, the invariant servers rely on, version claims, retention) lives in
`publish.py`; this module adds the Pusher's policy: blessed only, verified in a fresh process on at
least one real input, lineage in the version's marker, and a LiteRT twin (policy.tflite, checked
under ai-edge-litert alone against the SavedModel: litert_stage).

`stage_unblessed` (pusher.stage_unblessed): a candidate that did NOT bless is published, verified
the same way, to that staging directory instead, never to the serving directory, for integration
tests only; its version carries an UNBLESSED file and `unblessed: true` in its marker's lineage.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from rlops.components.common.decision_kinds import BANDIT, SLATE, TRAJECTORY, read_record_kind
from rlops.components.common.feedback import load_logged_feedback
from rlops.components.common.keys import PUSHED_MODEL_KEY
from rlops.components.common.model import BLESSED_PROPERTY, SERVING_EPSILON_PROPERTY, is_blessed, serving_dir
from rlops.components.common.slates import read_slate_contexts
from rlops.components.pusher import epsilon as certified, publish
from rlops.components.pusher.storage import open_store
from rlops.features import serving_candidates
from rlops.features.serving_names import serving_inputs_from_records
from rlops.heads import epsilon_greedy
from rlops.heads.draws import confirmed
from rlops.train.processes import at_once

log = logging.getLogger(__name__)


@dataclass
class PushResult:
    pushed: bool
    version: int | None = None
    destination: str | None = None
    reason: str = ""
    removed_versions: tuple[int, ...] = ()
    vertex_model: str | None = None  # the Vertex AI Model Registry version, when uploaded
    vertex_endpoint: str | None = None  # ... and the endpoint it was deployed to
    staged_version: int | None = None  # not blessed, staged under stage_unblessed: its version there
    staged_destination: str | None = None  # ... and that version's directory

    def properties(self, model_uri: str, model_id: int | str) -> dict[str, dict[str, Any]]:
        """The output artifact's properties by output key, as both faces write them (TFX Pusher's
        names): `pushed`, and `reason` when nothing was pushed (with where an unblessed candidate
        was staged: `staged_unblessed_destination`, `_version`); else where and which version, the
        model pushed and its id (`model_id`: its ML Metadata id locally, its resource name on
        Vertex AI), and the Model Registry version (and endpoint) when uploaded."""
        if not self.pushed:
            staged: dict[str, Any] = {}
            if self.staged_destination:  # an unblessed candidate staged for integration tests
                staged = {
                    "staged_unblessed_destination": self.staged_destination,
                    "staged_unblessed_version": self.staged_version,
                }
            return {PUSHED_MODEL_KEY: {"pushed": 0, "reason": self.reason, **staged}}
        out: dict[str, Any] = {
            "pushed": 1,
            "pushed_destination": self.destination,
            "pushed_version": self.version,
            "pushed_model": model_uri,
            "pushed_model_id": model_id,
        }
        if self.vertex_model:
            out["vertex_model"] = self.vertex_model
        if self.vertex_endpoint:
            out["vertex_endpoint"] = self.vertex_endpoint
        return {PUSHED_MODEL_KEY: out}


def existing_versions(destination: str, gcs_client: Any = None) -> list[int]:
    """rlops versions (numeric directories carrying rlops' marker), oldest first."""
    store = open_store(destination, gcs_client)
    return publish.rlops_versions(store)


NUM_VERIFY_INPUTS = 64


def verification_inputs(examples_uri: str | None, env_id: str | None) -> dict[str, np.ndarray] | None:
    """Real observations for the pushed policy to act on: eval-split contexts, read as the
    Examples' decision kind lays them out (PUSH_KINDS), or env observations."""
    if examples_uri:
        return push_kind(read_record_kind(examples_uri).name).read_inputs(examples_uri)
    if env_id:
        from rlops.envs.gym_env import GymVectorEnv

        env = GymVectorEnv(env_id, 8)
        obs = env.observation
        env.close()
        return {"observation": obs}
    return None


def decision_inputs(examples_uri: str) -> dict[str, np.ndarray]:
    """The first records' contexts, keyed for the `action` signature (and serving_default's
    features): raw named features when the policy was exported with them."""
    data = load_logged_feedback(
        examples_uri,
        max_records=NUM_VERIFY_INPUTS,  # not the whole split
        action_minimum=None,
    )  # inputs only: any action ids
    # A policy trained with action masks takes `observation_action_mask` too (others ignore it).
    mask = {} if data.action_mask is None else {"observation_action_mask": data.action_mask}
    if data.features is not None:  # a policy exported with its features takes them raw, by serving name
        return {**{f"observation_{k}": v for k, v in serving_inputs_from_records(data.features).items()}, **mask}
    dense = data.contexts.astype(np.float32)
    return {"observation": dense, **({"observation_context": dense, **mask} if mask else {})}


def page_inputs(examples_uri: str) -> dict[str, np.ndarray]:
    """The first pages' contexts, for a ranking policy to rank the K items for."""
    return read_slate_contexts(examples_uri, "eval", NUM_VERIFY_INPUTS)


def check_verify_inputs(inputs: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    if not inputs:
        raise ValueError("Pusher verification needs inputs: give `examples` (bandits) or `verify_env_id` (PPO)")
    empty = [name for name, value in inputs.items() if len(value) == 0]
    if empty:
        raise ValueError(f"Pusher verification needs at least one input; {', '.join(empty)} has 0 rows")
    return inputs


# The interpreter the pushed policy is verified with (default: this one). Point it at the serving
# image's Python, or, in tests, at rlops.testing.warm_python's client (a fresh process forked from
# one that has imported only TensorFlow: the same check without the import's seconds).
VERIFY_PYTHON_ENV = "RLOPS_VERIFY_PYTHON"


def verify_in_subprocess(
    saved_model_dir: str, inputs: dict[str, np.ndarray], timeout_s: float = 300, draws: bool = False
) -> dict:
    """Loads the (local) SavedModel in a fresh Python process and calls `action` on `inputs`; with
    `draws`, also serving_default repeatedly (rlops.components.pusher.verify), its answers under
    the result's "draws" key."""
    python = os.environ.get(VERIFY_PYTHON_ENV) or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        npz, out = os.path.join(tmp, "inputs.npz"), os.path.join(tmp, "draws.npz")
        # strings as bytes: an object array would need pickling to load
        np.savez(
            npz,
            **{
                k: np.asarray(v).astype(np.bytes_) if np.asarray(v).dtype.kind in "OU" else v for k, v in inputs.items()
            },
        )
        extra = [out, str(DRAW_CALLS_MANY), str(DRAW_ROWS)] if draws else []
        proc = subprocess.run(
            [python, "-m", "rlops.components.pusher.verify", saved_model_dir, npz, *extra],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            return {"ok": False, "error": f"verifier exited {proc.returncode}: {proc.stderr[-2000:]}"}
        result = json.loads(lines[-1])
        if result.get("draws"):
            with np.load(out) as f:
                result["draws"] = {k: f[k] for k in f.files}
    return result


DRAW_ROWS, DRAW_CALLS_MANY = 64, 8  # as rlops.train.litert checks its file


def subprocess_verifier(inputs: dict[str, np.ndarray] | None) -> Callable[[str], None]:
    """Verifies the staged SavedModel in two fresh processes: each acts on `inputs` and calls
    serving_default repeatedly at batch 1 and batch DRAW_ROWS; the draws of both must follow the
    serving head's probabilities and not repeat across calls or processes (draws_error; a chance
    failure is confirmed on fresh draws, rlops.heads.draws.confirmed). No
    inputs (or an empty one) fail here, naming what to give (check_verify_inputs)."""
    checked = check_verify_inputs(inputs)

    def verify(local_dir: str) -> None:
        model_push_kind(local_dir).verify(local_dir, checked)

    return verify


def verify_decisions(local_dir: str, checked: dict[str, np.ndarray]) -> None:
    """One decision per row: `action` on the inputs and serving_default's draws, in two fresh
    processes (subprocess_verifier)."""
    answered: list[int] = []

    def check() -> str | None:
        checks = at_once(lambda: verify_in_subprocess(local_dir, checked, draws=True))
        for check in checks:
            if not check.get("ok"):
                raise RuntimeError(f"pushed policy failed verification in a fresh process: {check.get('error')}")
        answered.append(checks[0]["num_actions"])
        return draws_error(local_dir, [c["draws"] for c in checks]) if checks[0].get("draws") else None

    error = confirmed(check)
    if error:
        raise RuntimeError(f"pushed policy failed verification in two fresh processes: {error}")
    log.info("verified the staged policy in two fresh processes on %d inputs", answered[-1])


def verify_slates(local_dir: str, inputs: dict[str, np.ndarray]) -> None:
    """A ranking policy: serving_ranked's pages in two fresh processes (rlops.train.verify_ranked):
    only allowed items, none twice, the exact propensities reported, per-slot frequencies that
    match them, no repeats across calls or processes."""
    from rlops.train.verify_ranked import verify_ranked

    try:
        verify_ranked(local_dir, inputs)
    except RuntimeError as e:
        raise RuntimeError(f"pushed ranking policy failed verification: {e}") from None
    log.info("verified the staged ranking policy in two fresh processes")


def draws_error(saved_model_dir: str, draws: list[dict[str, np.ndarray]]) -> str | None:
    """serving_default's draws (verify.py's output, one dict per process) against the serving
    head's probabilities for the same rows: greedy actions the same on every call, frequencies
    matching, no repeats across calls or processes, each propensity the probability drawn with."""
    from rlops.train.policy_saver import load_specs

    spec = load_specs(saved_model_dir)["action_spec"]
    minimum, num_actions = int(spec.minimum), int(spec.maximum) - int(spec.minimum) + 1
    feeds = {k[len("feed_") :]: v for k, v in draws[0].items() if k.startswith("feed_")}
    allowed = serving_candidates.allowed_actions(feeds, num_actions)
    epsilon = float(draws[0]["epsilon"])
    for part in ("one", "many"):
        greedy = [d[f"{part}_greedy_action"] for d in draws]
        if any((g != greedy[0][0]).any() for g in greedy):
            return f"serving_default's greedy_action changes from call to call at batch {greedy[0].shape[1]}"
        index = greedy[0][0].astype(np.int64) - minimum
        probs = epsilon_greedy.epsilon_greedy_probs(index, epsilon, allowed[: len(index)])
        error = epsilon_greedy.draws_error(
            [d[f"{part}_action"].astype(np.int64) - minimum for d in draws],
            probs,
            f"serving_default at batch {len(index)}",
            [d[f"{part}_propensity"] for d in draws],
        )
        if error:
            return error
    return None


UNSEEN_PREFIX = "__rlops_unseen__"
NUM_UNSEEN_ROWS = 16


def litert_inputs(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The verification inputs (keyed for the `action` signature) under serving input names, plus
    up to NUM_UNSEEN_ROWS copies of the first rows whose every string is one no vocabulary holds:
    out-of-vocabulary strings must behave the same in both artifacts."""
    out = {k[len("observation_") :] if k.startswith("observation_") else k: np.asarray(v) for k, v in inputs.items()}
    strings = [k for k, v in out.items() if v.dtype.kind in "OSU"]
    if not strings:
        return out
    n = min(NUM_UNSEEN_ROWS, min(len(v) for v in out.values()))
    extra = {k: v[:n].copy() for k, v in out.items()}
    for k in strings:
        v = extra[k].astype(object)
        flat = v.reshape(-1)
        for i, value in enumerate(flat):
            if value not in ("", b""):  # padding stays padding
                flat[i] = f"{UNSEEN_PREFIX}{k}_{i}"
        extra[k] = v
    return {k: np.concatenate([out[k].astype(object) if k in strings else out[k], extra[k]]) for k in out}


def litert_stage(inputs: dict[str, np.ndarray] | None, allow_flex: bool = False) -> Callable[[str], None]:
    """Writes policy.tflite + policy_litert.json beside the staged SavedModel and checks them against
    it in fresh processes that run ai-edge-litert alone (rlops.train.litert.compare; a ranking
    policy's pages: rlops.train.litert_ranked.compare_ranked, serving_ranked's checks). A model that
    needs Flex ops fails here with one line naming them, unless `allow_flex` (then the standalone
    runtime cannot run it, and only the conversion is checked)."""
    from rlops.train import litert

    checked = check_verify_inputs(inputs)

    def stage(local_dir: str) -> None:
        rows = checked
        limit = model_push_kind(local_dir).litert_rows
        if limit is not None:
            rows = {k: np.asarray(v)[:limit] for k, v in checked.items()}
        import tensorflow as tf

        loaded = tf.saved_model.load(local_dir)  # once, for the conversion and the comparison
        policy = litert.convert_policy(local_dir, allow_flex=allow_flex, loaded=loaded)
        policy.save(local_dir)
        if allow_flex:
            log.warning(
                "litert_allow_flex: %s is not checked (ai-edge-litert has no Flex delegate)", litert.LITERT_FILE
            )
            return
        error = litert.compare(local_dir, os.path.join(local_dir, litert.LITERT_FILE), litert_inputs(rows), loaded)
        if error:
            raise RuntimeError(error)
        log.info("verified %s under ai-edge-litert alone", litert.LITERT_FILE)

    return stage


def _both(first: Callable[[str], None], second: Callable[[str], None]) -> Callable[[str], None]:
    def run(local_dir: str) -> None:
        first(local_dir)
        second(local_dir)

    return run


@dataclass(frozen=True)
class PushKind:
    """The Pusher's row for one decision kind: how its Examples give verification inputs, how its
    staged policy's draws are verified, and on how many rows its LiteRT file is compared."""

    read_inputs: Callable[[str], dict[str, np.ndarray]]  # the Examples' URI -> the verification inputs
    verify: Callable[[str, dict[str, np.ndarray]], None]  # (staged dir, inputs) -> None, or RuntimeError
    litert_rows: int | None = None  # None: every input row


PUSH_KINDS: dict[str, PushKind] = {
    BANDIT: PushKind(decision_inputs, verify_decisions),
    TRAJECTORY: PushKind(decision_inputs, verify_decisions),
    # pages: checked on the first ROWS_MANY rows (the out-of-vocabulary copies come on top)
    SLATE: PushKind(page_inputs, verify_slates, DRAW_ROWS - NUM_UNSEEN_ROWS),
}


def push_kind(kind: str) -> PushKind:
    row = PUSH_KINDS.get(kind)
    if row is None:
        raise ValueError(f"the Pusher cannot verify {kind} policies yet")
    return row


def model_push_kind(saved_model_dir: str) -> PushKind:
    """The row of the decision kind the staged policy was trained for (its policy_specs.json)."""
    from rlops.train.policy_saver import model_decision_kind

    return push_kind(model_decision_kind(saved_model_dir))


# The Evaluator's blessing properties a version marker keeps (both Evaluator faces write them;
# `latest_published` reads current_model_id back).
BLESSING_KEYS = (
    "blessed",
    "current_model",
    "current_model_id",
    "reason",
    "baseline_model",
    "baseline_model_id",
    SERVING_EPSILON_PROPERTY,  # the certified exploration the policy is published serving (epsilon.py)
)


def lineage(model_uri: str, examples_uri: str | None, blessing: Mapping[str, Any]) -> dict:
    """What the version marker records about where a policy came from: the data, the training run
    (the Model artifact's directory) and the Evaluator's verdict (BLESSING_KEYS of the blessing's
    properties). The one builder both Pusher faces (TFX, KFP) call, so their markers agree."""
    evaluation = {k: blessing[k] for k in BLESSING_KEYS if k in blessing}
    return {
        "data": examples_uri,
        "training_run": model_uri,
        "evaluation": {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in evaluation.items()},
    }


def run_pusher(
    model_uri: str,
    push_destination: str,
    blessing_uri: str,
    blessing: Mapping[str, Any],
    examples_uri: str | None = None,
    verify_env_id: str | None = None,
    keep_last: int = 5,
    vertex_upload: str | None = None,
    litert_allow_flex: bool = False,
    stage_unblessed: str | None = None,
) -> PushResult:
    """The Pusher's work, the one both faces (TFX executor, KFP entry point) call: the blessing's
    verdict (`blessing`: its properties; `blessing_uri`: its directory, for TFX's marker file),
    verification inputs from the eval split or the environment, the version marker's lineage, the
    push (at the serving epsilon the blessing certified: epsilon.py), and the Vertex AI Model
    Registry upload (`vertex_upload`: RegistryConfig JSON). `stage_unblessed`: a directory a
    candidate that did not bless is published to instead (stage_unblessed_policy; never uploaded)."""
    blessed = is_blessed(blessing_uri, blessing.get(BLESSED_PROPERTY))
    if stage_unblessed:
        check_staging_dir(stage_unblessed, push_destination)
    staging = bool(stage_unblessed) and not blessed
    inputs = verification_inputs(examples_uri, verify_env_id) if blessed or staging else None
    marker_lineage = lineage(model_uri, examples_uri, blessing)
    if staging:
        assert stage_unblessed is not None  # staging: stage_unblessed is set
        return stage_unblessed_policy(
            serving_dir(model_uri),
            stage_unblessed,
            inputs,
            serving=push_destination,
            why=str(blessing.get("reason") or ""),
            keep_last=keep_last,
            lineage=marker_lineage,
            litert_allow_flex=litert_allow_flex,
            serving_epsilon=certified.certified_epsilon(blessing),  # none certified: as the Trainer exported it
        )
    result = push_policy(
        serving_dir(model_uri),
        push_destination,
        blessed,
        inputs,
        keep_last=keep_last,
        lineage=marker_lineage,
        litert_allow_flex=litert_allow_flex,
        serving_epsilon=certified.certified_epsilon(blessing) if blessed else None,
    )
    if result.pushed and vertex_upload:  # alias, parent model, optional deployment
        from rlops.components.pusher import registry

        assert result.destination is not None  # a pushed result names its version (push_policy)
        uploaded = registry.upload_version(
            result.destination, registry.RegistryConfig.from_json(vertex_upload), marker_lineage
        )
        result = dataclasses.replace(
            result, vertex_model=uploaded["versioned_name"], vertex_endpoint=uploaded.get("endpoint")
        )
    return result


NOT_BLESSED = "model not blessed"


def push_policy(
    policy_dir: str,
    destination: str,
    blessed: bool,
    verify_inputs: dict[str, np.ndarray] | None,
    keep_last: int = 5,
    lineage: dict | None = None,
    verifier: Callable[[str], None] | None = None,
    gcs_client: Any = None,
    litert: bool = True,
    litert_allow_flex: bool = False,
    serving_epsilon: float | None = None,
) -> PushResult:
    """Publishes `policy_dir` (a policy SavedModel) as a new version under `destination`, serving
    `serving_epsilon` when given (the one the Evaluator certified; epsilon.serving_at).

    Not blessed: nothing is written and the current versions stay. The staged copy is verified by
    `verifier` (default: a fresh process acting on `verify_inputs`, which must hold >= 1 row); on
    failure no version appears and a RuntimeError says why. With `litert` (the default), the
    version also carries policy.tflite, converted from the staged SavedModel and checked against
    it on `verify_inputs` (litert_stage); a conversion needing Flex ops fails the push unless
    `litert_allow_flex`.
    """
    if not blessed:
        return PushResult(pushed=False, reason=NOT_BLESSED)
    result = _publish_verified(
        policy_dir,
        destination,
        verify_inputs,
        keep_last=keep_last,
        lineage=lineage,
        verifier=verifier,
        gcs_client=gcs_client,
        litert=litert,
        litert_allow_flex=litert_allow_flex,
        serving_epsilon=serving_epsilon,
    )
    return PushResult(
        pushed=True, version=result.version, destination=result.url, removed_versions=result.removed_versions
    )


def _publish_verified(
    policy_dir: str,
    destination: str,
    verify_inputs: dict[str, np.ndarray] | None,
    keep_last: int,
    lineage: dict | None,
    verifier: Callable[[str], None] | None,
    gcs_client: Any,
    litert: bool,
    litert_allow_flex: bool,
    serving_epsilon: float | None,
    extra_files: Mapping[str, bytes] | None = None,
) -> publish.PublishResult:
    """The one publishing path of a blessed push and a staged unblessed candidate: the verifier
    (fresh processes, draws against propensities) and the LiteRT twin on the staged copy."""
    publish.validate_keep_last(keep_last)
    if verifier is None:
        verifier = subprocess_verifier(verify_inputs)
    if litert:
        verifier = _both(verifier, litert_stage(verify_inputs, litert_allow_flex))
    with tempfile.TemporaryDirectory(prefix="rlops-pusher-") as scratch:
        source = policy_dir
        if serving_epsilon is not None:
            source = certified.serving_at(policy_dir, serving_epsilon, scratch, gcs_client)
        return publish.publish(
            source,
            destination,
            verifier,
            keep_last=keep_last,
            lineage=lineage,
            gcs_client=gcs_client,
            source_url=open_store(policy_dir, gcs_client).url,
            extra_files=extra_files,
        )


# --- an unblessed candidate, staged for integration tests (pusher.stage_unblessed) ------------------

STAGE_UNBLESSED_KEY = "stage_unblessed"  # the TFX component's execution parameter
UNBLESSED_FILE = "UNBLESSED"  # beside the staged SavedModel (as TFX's blessing has BLESSED / NOT_BLESSED)
UNBLESSED_LINEAGE_KEY = "unblessed"  # true in a staged version's marker lineage (`rlops serving list` shows it)
UNBLESSED_WARNING = (
    "UNBLESSED candidate: it did not pass the Evaluator's gate and is published here for integration "
    "tests only; never serve it to users"
)


def _same_place(a: str, b: str) -> bool:
    def norm(path: str) -> str:
        path = path.rstrip("/")
        return path if "://" in path else os.path.realpath(os.path.abspath(path))

    return norm(a) == norm(b)


def check_staging_dir(staging: str, serving: str | None) -> None:
    """ValueError unless `staging` may take unblessed candidates: not the serving directory."""
    if not staging:
        raise ValueError("pusher.stage_unblessed: empty; give a directory (or gs:// prefix) for unblessed candidates")
    if serving and _same_place(staging, serving):
        raise ValueError(
            f"pusher.stage_unblessed: {staging} is the serving directory; unblessed candidates must go "
            "elsewhere (servers load the highest version there)"
        )


def stage_unblessed_policy(
    policy_dir: str,
    staging: str,
    verify_inputs: dict[str, np.ndarray] | None,
    serving: str | None = None,
    why: str = "",
    keep_last: int = 5,
    lineage: dict | None = None,
    verifier: Callable[[str], None] | None = None,
    gcs_client: Any = None,
    litert: bool = True,
    litert_allow_flex: bool = False,
    serving_epsilon: float | None = None,
) -> PushResult:
    """Publishes a candidate that did NOT bless to `staging` (pusher.stage_unblessed), never to
    `serving`: verified as a blessed push is (push_policy: fresh processes, draws against
    propensities, LiteRT), with an UNBLESSED file beside the SavedModel and `unblessed: true` in
    the marker's lineage. A `staging` that is `serving`, or that holds rlops versions not so
    marked (a serving directory by mistake), is refused. The result says nothing was pushed
    (`pushed` stays 0) and where the candidate was staged."""
    check_staging_dir(staging, serving)
    store = open_store(staging, gcs_client)
    blessed_there = [v.number for v in publish.scan(store) if v.is_rlops and not _marked_unblessed(v.marker)]
    if blessed_there:
        raise ValueError(
            f"pusher.stage_unblessed: {store.url} holds rlops versions that are not unblessed candidates "
            f"({', '.join(map(str, blessed_there[:3]))}): it looks like a serving directory; give a directory "
            "only unblessed candidates go to"
        )
    log.warning("%s: publishing to %s (not to the serving directory %s)", UNBLESSED_WARNING, store.url, serving)
    text = f"{UNBLESSED_WARNING}.\nEvaluator: {why or NOT_BLESSED}\n"
    result = _publish_verified(
        policy_dir,
        staging,
        verify_inputs,
        keep_last=keep_last,
        lineage={**(lineage or {}), UNBLESSED_LINEAGE_KEY: True},
        verifier=verifier,
        gcs_client=gcs_client,
        litert=litert,
        litert_allow_flex=litert_allow_flex,
        serving_epsilon=serving_epsilon,
        extra_files={UNBLESSED_FILE: text.encode()},
    )
    log.warning(
        "staged the UNBLESSED candidate as version %d at %s: for integration tests only", result.version, result.url
    )
    return PushResult(
        pushed=False,
        reason=f"{NOT_BLESSED}; staged as UNBLESSED version {result.version} at {result.url} (integration tests only)",
        removed_versions=result.removed_versions,
        staged_version=result.version,
        staged_destination=result.url,
    )


def _marked_unblessed(marker: dict | None) -> bool:
    return bool(((marker or {}).get("lineage") or {}).get(UNBLESSED_LINEAGE_KEY))


def is_unblessed_version(version_dir: str, gcs_client: Any = None) -> bool:
    """Whether the published version at `version_dir` is a staged unblessed candidate."""
    store = open_store(version_dir, gcs_client)
    if store.exists(UNBLESSED_FILE):
        return True
    try:
        return _marked_unblessed(json.loads(store.read(publish.MARKER)))
    except Exception:  # noqa: BLE001 - no marker: not an rlops version, so not one of ours
        return False
