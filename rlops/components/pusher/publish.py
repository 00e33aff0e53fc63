"""Atomic, ordered publishing of SavedModel versions into a serving directory (local or gs://).

Layout (what TF Serving's version policy and Vertex read: numeric subdirectories):

    <serving>/<N>/                   a version: the SavedModel + rlops_version.json (the marker)
    <serving>/.staging-<uuid>/       a push in progress (not a number: servers ignore it)
    <serving>/.rlops/claims/<N>      version N is taken (created if-absent: O_EXCL / ifGenerationMatch=0)
    <serving>/.rlops/leases/<uuid>   the push owning .staging-<uuid> is alive (renewed while it works)

Leftovers of killed pushes (a staging directory is a whole SavedModel copy; a local removal killed
mid-way leaves a .trash-* directory) are removed by every later push (its prune): only once their
lease -- or, without one, their newest file -- is older than `stale_after_s` (1 hour by default),
so a concurrent push, which renews its lease at least every LEASE_RENEW_S, is never touched.

A push: copy the model into staging -> verify the staged copy -> claim the next number -> write
<N> into the staged SavedModel's version asset (serving_default's `policy_version` reads it at load
time) and the marker into staging -> make it visible as <N>.

Invariant a poller can rely on: **whenever <N>/saved_model.pb exists, every other file of the
SavedModel already exists under <N>/ with its final content.** rlops counts <N> as a version only
when it also holds rlops_version.json (copied after saved_model.pb). Local disk: the whole staging directory is renamed in one rename(2), so <N>
appears complete or not at all. Cloud Storage has no rename (a "directory rename" is a copy+delete per
object in whatever order the tool picks): objects are copied one by one, each finished before the next
starts (GCS is strongly consistent for reads and listings after a write), with saved_model.pb second
to last and the marker last. That is enough because a SavedModel cannot be loaded without
saved_model.pb (TF Serving's and Vertex's loaders read it first) and rlops counts only versions with a
marker. A push that fails after its claim deletes what it copied; one killed mid-copy leaves a numeric
prefix with no saved_model.pb and no marker, which nobody loads and `rlops serving list` shows as
incomplete.

Ordering: the number is claimed only after verification, as max(now, every number seen or claimed)+1
with an if-absent create, retried upward on conflict. Claims are linearizable, so a push that claims
after another finished claiming gets a higher number, and two pushes never share one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rlops.components.pusher.storage import LocalStore, Store, SubStore, open_store, transfer
from rlops.train import policy_files

log = logging.getLogger(__name__)

MARKER = "rlops_version.json"
SAVED_MODEL = "saved_model.pb"
CLAIMS = ".rlops/claims"
STAGING = ".staging-"
LEASES = ".rlops/leases"
LEFTOVER_PREFIXES = (STAGING, ".incoming-", ".trash-")  # .incoming-: an earlier layout's staging
STALE_AFTER_S = 3600.0
LEASE_RENEW_S = 60.0
MARKER_FORMAT = 1
MAX_CLAIM_TRIES = 1000


@dataclass
class Version:
    number: int
    marker: dict | None  # rlops' marker, None if the directory has none (not an rlops version)
    has_saved_model: bool

    @property
    def is_rlops(self) -> bool:
        """Published by rlops and not half-removed (removal deletes saved_model.pb first)."""
        return self.marker is not None and self.has_saved_model


@dataclass
class PublishResult:
    version: int
    url: str
    removed_versions: tuple[int, ...] = ()
    marker: dict = field(default_factory=dict)


def validate_keep_last(keep_last: object) -> int:
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an integer >= 1 (versions to keep), got {keep_last!r}")
    return keep_last


def _read_marker(store: Store, name: str) -> dict | None:
    try:
        marker = json.loads(store.read(store.join(name, MARKER)))
    except Exception:  # absent or unreadable: not (yet) an rlops version
        return None
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or marker.get("version") != int(name):
        return None
    return marker


def scan(store: Store) -> list[Version]:
    """Every numeric directory, oldest first, with its marker (if rlops wrote it)."""
    out = []
    for name in store.children(""):
        if name.isdigit():
            children = store.children(name)
            out.append(
                Version(int(name), _read_marker(store, name) if MARKER in children else None, SAVED_MODEL in children)
            )
    return sorted(out, key=lambda v: v.number)


def rlops_versions(store: Store) -> list[int]:
    return [v.number for v in scan(store) if v.is_rlops]


def served_version(versions: list[Version]) -> int | None:
    """What TF Serving's default (latest) policy loads: the highest number with a SavedModel."""
    loadable = [v.number for v in versions if v.has_saved_model]
    return loadable[-1] if loadable else None


def _claimed(store: Store) -> list[int]:
    return [int(n) for n in store.children(CLAIMS) if n.isdigit()]


def allocate_version(store: Store, owner: str, now: Callable[[], float] = time.time) -> int:
    """Claims the next version number atomically; higher than any number in the directory or claimed
    before (seconds since the epoch when the clock is ahead, TFX Pusher's convention)."""
    seen = [int(n) for n in store.children("") if n.isdigit()] + _claimed(store)
    number = max([int(now())] + [n + 1 for n in seen])
    for _ in range(MAX_CLAIM_TRIES):
        if store.create(store.join(CLAIMS, str(number)), json.dumps({"owner": owner, "at": now()}).encode()):
            return number
        number += 1
    raise RuntimeError(f"could not claim a version in {store.url} after {MAX_CLAIM_TRIES} tries")


def _local_copy(store: Store, prefix: str, tmp: str) -> str:
    """A local directory holding `prefix` (the store's own path on local disk, else a download)."""
    if isinstance(store, LocalStore):
        return store._p(prefix)
    local = os.path.join(tmp, "staged")
    for key in store.list_files(prefix):
        store.get_file(key, os.path.join(local, *key[len(prefix) + 1 :].split("/")))
    return local


def publish(
    source: str | Store,
    destination: str | Store,
    verify: Callable[[str], None] | None,
    keep_last: int = 5,
    lineage: dict | None = None,
    gcs_client: Any = None,
    source_url: str | None = None,
    extra_files: Mapping[str, bytes] | None = None,
) -> PublishResult:
    """Publishes the SavedModel at `source` as a new version of `destination`. The marker names
    `source_url` as its source when given (a local copy rewritten before publishing names the
    model it was made from). `extra_files` (name -> content) are written beside the SavedModel
    after verification and listed in the marker (the UNBLESSED file of a staged candidate).

    `verify(local_dir)` is called on the staged copy and raises to refuse it (then nothing becomes
    visible). Older rlops versions beyond `keep_last` are then removed (see `prune`).
    """
    validate_keep_last(keep_last)
    src = source if isinstance(source, Store) else open_store(source, gcs_client)
    dst = destination if isinstance(destination, Store) else open_store(destination, gcs_client)
    files = [k for k in src.list_files("") if k != MARKER]
    if SAVED_MODEL not in files:
        raise FileNotFoundError(f"no SavedModel at {src.url} ({SAVED_MODEL} missing)")
    owner = uuid.uuid4().hex
    staging = STAGING + owner
    lease = _Lease(dst, owner)
    version: int | None = None
    try:
        lease.renew(force=True)  # before the first byte of staging exists
        for key in sorted(files, key=lambda k: k == SAVED_MODEL):
            transfer(src, key, dst, dst.join(staging, key))
            lease.renew()
        if verify is not None:
            lease.renew(force=True)
            with tempfile.TemporaryDirectory() as tmp:
                local = _local_copy(dst, staging, tmp)
                verify(local)
                files += _keep_added(dst, staging, local, files)  # e.g. policy.tflite beside the SavedModel
        for key, content in (extra_files or {}).items():
            if key in files or key == MARKER:
                raise ValueError(f"extra file {key!r} would replace a file of the SavedModel or the marker")
            dst.write(dst.join(staging, key), content)
            files.append(key)
        lease.renew(force=True)
        version = allocate_version(dst, owner)
        _write_version_asset(dst, staging, files, version)
        _write_litert_version(dst, staging, files, version)
        marker = {
            "format": MARKER_FORMAT,
            "version": version,
            "pushed_at": time.time(),
            "source": source_url or src.url,
            "files": sorted(files),
            "lineage": dict(lineage or {}),
        }
        dst.write(dst.join(staging, MARKER), json.dumps(marker, indent=1, default=str).encode())
        dst.move_dir(staging, str(version), last=(SAVED_MODEL, MARKER))
    except BaseException:
        _cleanup(dst, staging, version)
        lease.release()
        raise
    lease.release()
    removed = prune(dst, keep_last, protect=(version,))
    return PublishResult(version, dst.full(str(version)), removed, marker)


def version_asset_key() -> str:
    """The SavedModel file serving_default reads its `policy_version` from (policy_saver.py)."""
    return f"assets/{policy_files.VERSION_ASSET}"


def _write_version_asset(store: Store, staging: str, files: list[str], version: int) -> None:
    """Version <N> answers N: the staged copy's version asset gets the claimed number before it
    becomes visible (SavedModels exported without the asset are published as they are)."""
    key = version_asset_key()
    if key in files:
        store.write(store.join(staging, key), f"{version}\n".encode())


def _keep_added(store: Store, staging: str, local: str, files: list[str]) -> list[str]:
    """Files the verifier wrote into the staged copy (the LiteRT policy): uploaded into staging when
    the store is remote (a local store's copy is staging itself); returns their keys."""
    added = []
    for root, _, names in os.walk(local):
        for name in names:
            key = os.path.relpath(os.path.join(root, name), local).replace(os.sep, "/")
            if key not in files and key != MARKER:
                added.append(key)
                if not isinstance(store, LocalStore):
                    with open(os.path.join(root, name), "rb") as f:
                        store.write(store.join(staging, key), f.read())
    return sorted(added)


def _write_litert_version(store: Store, staging: str, files: list[str], version: int) -> None:
    """The LiteRT policy answers N too: its version constant and its description get the number."""
    if policy_files.LITERT_FILE not in files or policy_files.LITERT_SPEC_FILE not in files:
        return
    from rlops.train import litert  # TensorFlow: only for a policy exported with its LiteRT copy

    model_key = store.join(staging, policy_files.LITERT_FILE)
    spec_key = store.join(staging, policy_files.LITERT_SPEC_FILE)
    model, description = litert.published(store.read(model_key), json.loads(store.read(spec_key)), version)
    store.write(model_key, model)
    store.write(spec_key, json.dumps(description, indent=1).encode())


def _cleanup(store: Store, staging: str, version: int | None) -> None:
    """Best effort after a failed push (the original error is what the caller needs to see). A
    version whose saved_model.pb already landed is complete and may be loaded: finish its marker
    rather than take it away; one without is a partial copy of ours: remove it (the claim stays)."""
    try:
        if version is not None and _read_marker(store, str(version)) is None:
            name = str(version)
            if store.exists(store.join(name, SAVED_MODEL)):
                store.copy(store.join(staging, MARKER), store.join(name, MARKER))
            else:
                store.delete_prefix(name)
        store.delete_prefix(staging)
    except Exception as e:  # noqa: BLE001
        log.warning("could not clean up after a failed push in %s: %s", store.url, e)


class _Lease:
    """`.rlops/leases/<owner>` holds the time a live push last worked on its staging directory."""

    def __init__(self, store: Store, owner: str, now: Callable[[], float] = time.time):
        self.store, self.key, self.now = store, store.join(LEASES, owner), now
        self.last: float | None = None  # when this push last wrote its lease

    def renew(self, force: bool = False) -> None:
        t = self.now()
        if force or self.last is None or t - self.last >= LEASE_RENEW_S:
            self.store.write(self.key, json.dumps({"at": t}).encode())
            self.last = t

    def release(self) -> None:
        try:
            self.store.delete(self.key)
        except Exception as e:  # noqa: BLE001 - a leftover lease is removed by a later prune
            log.warning("could not remove lease %s: %s", self.store.full(self.key), e)


def _lease_time(store: Store, owner: str) -> float | None:
    try:
        return float(json.loads(store.read(store.join(LEASES, owner)))["at"])
    except Exception:  # absent or unreadable
        return None


def remove_stale_staging(
    store: Store, stale_after_s: float = STALE_AFTER_S, now: Callable[[], float] = time.time
) -> tuple[str, ...]:
    """Removes what killed pushes left behind (staging copies, half-removed versions, leases), once
    their lease -- or without a lease their newest file -- is older than `stale_after_s`."""
    if not stale_after_s > 0:
        raise ValueError(f"stale_after_s must be > 0 seconds, got {stale_after_s!r}")
    t = now()
    removed = []
    names = store.children("")
    for name in sorted(names):
        prefix = next((p for p in LEFTOVER_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        owner = name[len(prefix) :]
        seen = [x for x in (_lease_time(store, owner), store.modified(name)) if x is not None]
        if seen and t - max(seen) < stale_after_s:
            continue  # alive, or died too recently to be sure
        store.delete_prefix(name)
        store.delete(store.join(LEASES, owner))
        removed.append(name)
    live = {n[len(p) :] for n in names for p in LEFTOVER_PREFIXES if n.startswith(p)}
    for owner in store.children(LEASES) - live:  # a push killed after its staging was renamed
        at = _lease_time(store, owner)
        if at is None or t - at >= stale_after_s:
            store.delete(store.join(LEASES, owner))
    return tuple(removed)


def prune(
    store: Store, keep_last: int, protect: tuple[int, ...] = (), stale_after_s: float = STALE_AFTER_S
) -> tuple[int, ...]:
    """Removes rlops versions older than the newest `keep_last`. Never removes the newest rlops
    version, the served one (highest loadable number), anything in `protect`, or any directory
    without rlops' marker (someone else's, or a push in progress). Stale leftovers of killed
    pushes go too (`remove_stale_staging`)."""
    validate_keep_last(keep_last)
    try:
        stale = remove_stale_staging(store, stale_after_s)
        if stale:
            log.info("removed %d stale leftover(s) of killed pushes in %s: %s", len(stale), store.url, stale)
    except Exception as e:  # noqa: BLE001 - housekeeping never fails a push that already published
        log.warning("could not remove stale staging directories in %s: %s", store.url, e)
    versions = scan(store)
    ours = [v.number for v in versions if v.is_rlops]
    keep = set(ours[-keep_last:]) | set(protect) | {served_version(versions)}
    removed = tuple(n for n in ours if n not in keep)
    half_removed = [v.number for v in versions if v.marker is not None and not v.has_saved_model]
    for n in removed + tuple(half_removed):  # (an interrupted earlier removal is finished here)
        remove_version(store, n)
    return removed


def remove_version(store: Store, number: int) -> None:
    """saved_model.pb first (no server starts loading a half-deleted version), the marker last (an
    interrupted removal keeps the marker, so the next prune recognizes it and finishes)."""
    name = str(number)
    if isinstance(store, LocalStore):  # local: one rename takes it out of view, then delete at leisure
        trash = store.join(f".trash-{uuid.uuid4().hex}")
        os.rename(store._p(name), store._p(trash))
        shutil.rmtree(store._p(trash), ignore_errors=True)
        return
    keys = store.list_files(name)
    first, last = store.join(name, SAVED_MODEL), store.join(name, MARKER)
    for key in sorted(keys, key=lambda k: (k != first, k == last)):
        store.delete(key)


def rollback(
    destination: str | Store, version: int, keep_last: int | None = None, gcs_client: Any = None
) -> PublishResult:
    """Puts rlops version `version` back in front by re-publishing it as a new, highest version.

    Why a new number rather than deleting the newer versions: TF Serving (and a Vertex model
    pointing at the directory) serve the highest number, deleting several directories is not one
    atomic step (and on GCS is many), and the newer versions stay available for a roll-forward.
    The new version's marker carries the old lineage plus `rolled_back_from`.
    """
    dst = destination if isinstance(destination, Store) else open_store(destination, gcs_client)
    marker = _read_marker(dst, str(version))
    if marker is None:
        known = rlops_versions(dst)
        raise LookupError(f"version {version} is not an rlops version in {dst.url} (rlops versions: {known})")
    source = SubStore(dst, str(version))
    missing = [f for f in marker["files"] if not dst.exists(dst.join(str(version), f))]
    if missing:
        raise RuntimeError(f"version {version} in {dst.url} is incomplete: missing {missing[:5]}")
    lineage = {**marker.get("lineage", {}), "rolled_back_from": version}
    keep = max(keep_last or 0, len(rlops_versions(dst)) + 1)  # a rollback removes nothing by default
    return publish(source, dst, verify=None, keep_last=keep, lineage=lineage)
