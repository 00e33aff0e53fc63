"""What a local run's cache keys ExperienceGen on besides its config: the input files' fingerprints.

TFX serves an execution from cache when its config and inputs are unchanged; a file replaced in
place changes neither, so local pipelines pass `input_fingerprint(config)` as an execution
property: every matched file's path, size and modification time (local files: st_mtime_ns and
inode; Cloud Storage: the object's update time, which every new generation changes). New or
replaced files give a new fingerprint and a new ingestion. BigQuery rows cannot be fingerprinted:
a fresh nonce each run, so they are never served from cache. Simulations are their config.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid

from rlops.components.experience_gen.config import BigQuerySource, ExperienceGenConfig, FileSource


def input_fingerprint(config: ExperienceGenConfig) -> str | None:
    """A digest of the files the run will read (None: nothing to fingerprint, a simulation)."""
    from rlops.components.experience_gen.cloud import check_credentials
    from rlops.components.experience_gen.executor import apply_runtime_params

    if isinstance(config.source, BigQuerySource):
        return f"bigquery-never-cached-{uuid.uuid4().hex}"
    check_credentials(config)  # before listing gs:// files: no minutes of retries
    config = apply_runtime_params(config)  # the {date} the executor will read today
    sources = [s for s in (config.source, config.item_source) if isinstance(s, FileSource)]
    if not sources:
        return None
    digest = hashlib.sha256()
    for source in sources:
        for stamp in file_stamps(source.pattern):
            digest.update(json.dumps(stamp).encode())
    return digest.hexdigest()[:32]


def file_stamps(pattern: str) -> list[list]:
    """[path, size, modification stamp...] of every file a comma-separated pattern matches."""
    from apache_beam.io.filesystems import FileSystems

    parts = [p.strip() for p in pattern.split(",")]
    if not all(parts):
        raise FileNotFoundError(f"source pattern {pattern!r} has an empty part")
    out = []
    for part, result in zip(parts, FileSystems.match(parts)):
        if not result.metadata_list:  # as sources.match_files says it
            raise FileNotFoundError(f"source pattern part {part!r} (of {pattern!r}) matched no files")
        for m in result.metadata_list:
            if "://" in m.path:
                out.append([m.path, m.size_in_bytes, m.last_updated_in_seconds])
            else:
                st = os.stat(m.path)
                out.append([m.path, st.st_size, st.st_mtime_ns, st.st_ino])
    return sorted(out)
