"""The few storage operations publishing needs, on a local disk and on Cloud Storage.

A `Store` addresses files by '/'-separated keys under one root (a directory, or gs://bucket/prefix).
Cloud Storage goes through google-cloud-storage because it offers what publishing needs and
tf.io.gfile does not: create-if-absent (`if_generation_match=0`) for version claims, control over
copy order, and an endpoint a test can point at an emulator.

Where an endpoint is accepted (checked on this stack: TF 2.16.2, tensorflow-io-gcs-filesystem 0.37.1,
google-cloud-storage 2.19):
- google-cloud-storage: yes, `STORAGE_EMULATOR_HOST` (what `storage.Client()` in production code
  honours) or `client_options={"api_endpoint": ...}`.
- tf.io.gfile gs:// (TF's built-in tsl/platform/cloud/gcs_file_system.cc): no. The JSON API base
  `https://www.googleapis.com/storage/v1/` is compiled in; its environment knobs (GCS_READ_CACHE_*,
  GCS_STAT_CACHE_*, GCS_REQUEST_*_TIMEOUT_SECS, GCS_ADDITIONAL_REQUEST_HEADER, ...) name no endpoint.
  Against the emulator it still dials www.googleapis.com ("Couldn't resolve host" offline).
- tf.io.gfile gs:// with TF_USE_MODULAR_FILESYSTEM=1 (tensorflow-io's plugin, google-cloud-cpp):
  reads CLOUD_STORAGE_EMULATOR_ENDPOINT, but its first gs:// call segfaults (exit 139) with TF 2.16.2.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from typing import Any


class Store(ABC):
    url: str  # the root, as a user would write it

    def join(self, *keys: str) -> str:
        return "/".join(k.strip("/") for k in keys if k)

    def full(self, key: str) -> str:
        return self.url.rstrip("/") + ("/" + key if key else "")

    @abstractmethod
    def list_files(self, prefix: str) -> list[str]:
        """Keys of every file under `prefix` (recursive), relative to the root, sorted."""

    @abstractmethod
    def children(self, prefix: str = "") -> set[str]:
        """Names directly under `prefix` (files and directories)."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def read(self, key: str) -> bytes: ...

    @abstractmethod
    def write(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def create(self, key: str, data: bytes) -> bool:
        """Atomically writes `key` only if it does not exist; False if it did (someone else won)."""

    @abstractmethod
    def put_file(self, local_path: str, key: str) -> None: ...

    @abstractmethod
    def get_file(self, key: str, local_path: str) -> None: ...

    @abstractmethod
    def copy(self, src_key: str, dst_key: str) -> None:
        """Copies one file within this store."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Removes one file (no error if it is gone)."""

    @abstractmethod
    def modified(self, prefix: str) -> float | None:
        """Newest modification time (epoch seconds) of any file under `prefix` (an empty local
        directory: its own); None if nothing is there."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Removes everything under `prefix` (no error if nothing is there)."""

    @abstractmethod
    def move_dir(self, src_prefix: str, dst_prefix: str, last: tuple[str, ...]) -> None:
        """Makes `src_prefix`'s files appear under `dst_prefix`: one rename where the store has
        one, else per-file copies with the names in `last` copied at the very end (in that order)."""


class LocalStore(Store):
    def __init__(self, root: str):
        self.url = root
        self.root = root

    def _p(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def list_files(self, prefix: str) -> list[str]:
        base = self._p(prefix)
        out = []
        for dirpath, _, files in os.walk(base):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                out.append(rel.replace(os.sep, "/"))
        return sorted(out)

    def children(self, prefix: str = "") -> set[str]:
        path = self._p(prefix)
        return set(os.listdir(path)) if os.path.isdir(path) else set()

    def exists(self, key: str) -> bool:
        return os.path.exists(self._p(key))

    def read(self, key: str) -> bytes:
        with open(self._p(key), "rb") as f:
            return f.read()

    def write(self, key: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(self._p(key)), exist_ok=True)
        with open(self._p(key), "wb") as f:
            f.write(data)

    def create(self, key: str, data: bytes) -> bool:
        os.makedirs(os.path.dirname(self._p(key)), exist_ok=True)
        try:
            fd = os.open(self._p(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True

    def put_file(self, local_path: str, key: str) -> None:
        os.makedirs(os.path.dirname(self._p(key)), exist_ok=True)
        shutil.copyfile(local_path, self._p(key))

    def get_file(self, key: str, local_path: str) -> None:
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        shutil.copyfile(self._p(key), local_path)

    def copy(self, src_key: str, dst_key: str) -> None:
        self.put_file(self._p(src_key), dst_key)

    def delete(self, key: str) -> None:
        try:
            os.remove(self._p(key))
        except FileNotFoundError:
            pass

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._p(prefix), ignore_errors=True)

    def modified(self, prefix: str) -> float | None:
        base = self._p(prefix)
        times = []
        for key in self.list_files(prefix):
            try:
                times.append(os.stat(self._p(key)).st_mtime)
            except FileNotFoundError:  # removed meanwhile
                pass
        if not times and os.path.isdir(base):
            times.append(os.stat(base).st_mtime)
        return max(times) if times else None

    def move_dir(self, src_prefix: str, dst_prefix: str, last: tuple[str, ...]) -> None:
        # rename(2) of a directory is atomic; it would replace an EMPTY target directory, so refuse
        # any existing target explicitly (the version claim already makes this unreachable for rlops).
        dst = self._p(dst_prefix)
        if os.path.exists(dst):
            raise FileExistsError(f"{dst} already exists")
        os.rename(self._p(src_prefix), dst)


class GCSStore(Store):
    """gs://bucket/prefix through google-cloud-storage. `client` is injectable; by default
    `storage.Client()`, which honours STORAGE_EMULATOR_HOST (the emulator) like production ADC."""

    def __init__(self, url: str, client: Any = None) -> None:  # client: google.cloud.storage.Client
        if not url.startswith("gs://"):
            raise ValueError(f"not a gs:// URL: {url}")
        bucket, _, prefix = url[len("gs://") :].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {url}")
        if client is None:
            from google.cloud import storage

            client = storage.Client()
        self.url, self.client, self.prefix = url.rstrip("/"), client, prefix.strip("/")
        self.bucket = client.bucket(bucket)

    def _k(self, key: str) -> str:
        return "/".join(p for p in (self.prefix, key.strip("/")) if p)

    def _rel(self, name: str) -> str:
        return name[len(self.prefix) + 1 :] if self.prefix else name

    def list_files(self, prefix: str) -> list[str]:
        base = self._k(prefix) + "/"
        return sorted(
            self._rel(b.name) for b in self.client.list_blobs(self.bucket, prefix=base) if not b.name.endswith("/")
        )

    def children(self, prefix: str = "") -> set[str]:
        base = self._k(prefix)
        base = base + "/" if base else ""
        it = self.client.list_blobs(self.bucket, prefix=base, delimiter="/")
        names = {b.name[len(base) :] for b in it}
        names |= {p[len(base) :].rstrip("/") for p in it.prefixes}
        return {n for n in names if n}

    def exists(self, key: str) -> bool:
        return self.bucket.blob(self._k(key)).exists()

    def read(self, key: str) -> bytes:
        return self.bucket.blob(self._k(key)).download_as_bytes()

    def write(self, key: str, data: bytes) -> None:
        self.bucket.blob(self._k(key)).upload_from_string(data)

    def create(self, key: str, data: bytes) -> bool:
        from google.api_core import exceptions

        try:  # generation 0 = "no live object": the server refuses if anyone created it first
            self.bucket.blob(self._k(key)).upload_from_string(data, if_generation_match=0)
        except exceptions.PreconditionFailed:
            return False
        return True

    def put_file(self, local_path: str, key: str) -> None:
        self.bucket.blob(self._k(key)).upload_from_filename(local_path)

    def get_file(self, key: str, local_path: str) -> None:
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        self.bucket.blob(self._k(key)).download_to_filename(local_path)

    def copy(self, src_key: str, dst_key: str) -> None:
        self.bucket.copy_blob(self.bucket.blob(self._k(src_key)), self.bucket, self._k(dst_key))

    def delete(self, key: str) -> None:
        from google.api_core import exceptions

        try:
            self.bucket.blob(self._k(key)).delete()
        except exceptions.NotFound:
            pass

    def delete_prefix(self, prefix: str) -> None:
        for key in self.list_files(prefix):
            self.delete(key)

    def modified(self, prefix: str) -> float | None:
        base = self._k(prefix) + "/"
        times = [b.updated.timestamp() for b in self.client.list_blobs(self.bucket, prefix=base) if b.updated]
        return max(times) if times else None

    def move_dir(self, src_prefix: str, dst_prefix: str, last: tuple[str, ...]) -> None:
        # No rename on Cloud Storage: copy object by object, each complete before the next starts
        # (GCS is strongly consistent), with `last` (saved_model.pb, then the rlops marker) at the end.
        files = self.list_files(src_prefix)
        rel = [k[len(src_prefix.strip("/")) + 1 :] for k in files]
        order = sorted(rel, key=lambda r: (last.index(r) + 1) if r in last else 0)
        for r in order:
            self.copy(self.join(src_prefix, r), self.join(dst_prefix, r))
        self.delete_prefix(src_prefix)


class SubStore(Store):
    """Read-only view of one directory of a store (a version as a publish source)."""

    def __init__(self, store: Store, prefix: str):
        self.store, self.prefix, self.url = store, prefix, store.full(prefix)

    def list_files(self, prefix: str) -> list[str]:
        return [k[len(self.prefix) + 1 :] for k in self.store.list_files(self.store.join(self.prefix, prefix))]

    def children(self, prefix: str = "") -> set[str]:
        return self.store.children(self.store.join(self.prefix, prefix))

    def exists(self, key: str) -> bool:
        return self.store.exists(self.store.join(self.prefix, key))

    def read(self, key: str) -> bytes:
        return self.store.read(self.store.join(self.prefix, key))

    def get_file(self, key: str, local_path: str) -> None:
        self.store.get_file(self.store.join(self.prefix, key), local_path)

    def modified(self, prefix: str) -> float | None:
        return self.store.modified(self.store.join(self.prefix, prefix))

    def _readonly(self, *args, **kwargs):
        raise PermissionError("read-only view")

    write = create = put_file = copy = delete = delete_prefix = move_dir = _readonly


def open_store(url: str, gcs_client: Any = None) -> Store:
    """LocalStore for paths, GCSStore for gs://. Other schemes are refused by name."""
    if url.startswith("gs://"):
        return GCSStore(url, gcs_client)
    if "://" in url:
        raise ValueError(f"unsupported destination scheme in {url!r}: use a local path or gs://bucket/path")
    return LocalStore(url)


def transfer(src: Store, src_key: str, dst: Store, dst_key: str) -> None:
    """One file from any store to any store (server-side copy within one store)."""
    if isinstance(src, SubStore) and src.store is dst:  # e.g. a rollback: server-side copy
        dst.copy(dst.join(src.prefix, src_key), dst_key)
    elif src is dst:
        dst.copy(src_key, dst_key)
    elif isinstance(src, LocalStore):
        dst.put_file(src._p(src_key), dst_key)
    elif isinstance(dst, LocalStore):
        src.get_file(src_key, dst._p(dst_key))
    elif isinstance(src, GCSStore) and isinstance(dst, GCSStore):
        src.bucket.copy_blob(src.bucket.blob(src._k(src_key)), dst.bucket, dst._k(dst_key))
    else:
        dst.write(dst_key, src.read(src_key))
