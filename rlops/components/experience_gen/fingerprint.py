"""What a local run's cache keys ExperienceGen on besides its config: the input files' fingerprints.

TFX serves an execution from cache when its config and inputs are unchanged; a file replaced in
place changes neither, so local pipelines pass `input_fingerprint(config)` as an execution
property: every matched file's path, size and modification time (local files: st_mtime_ns and
inode; Cloud Storage: the object's update time, which every new generation changes). New or
replaced files give a new fingerprint and a new ingestion. A source that cannot be fingerprinted
(BigQuery rows: Source.cacheable False) gets a fresh nonce each run, so it is never served from
cache. Simulations are their config.
"""

from __future__ import annotations

import hashlib
import json
import uuid

from rlops.components.experience_gen import sources
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.sources.base import file_stamps


def input_fingerprint(config: ExperienceGenConfig) -> str | None:
    """A digest of the inputs the run will read (the source's fingerprint, then the item table's
    files); None: nothing beyond the config (a simulation)."""
    from rlops.components.experience_gen.cloud import check_credentials
    from rlops.components.experience_gen.core import apply_runtime_params

    if not sources.source_of(config.source).cacheable:
        return f"{config.source.kind}-never-cached-{uuid.uuid4().hex}"
    check_credentials(config)  # before listing gs:// files: no minutes of retries
    config = apply_runtime_params(config)  # the {date} the executor will read today
    stamps = sources.source_of(config.source).fingerprint(config)
    if config.item_source is not None:
        stamps = stamps + file_stamps(config.item_source.pattern)
    if not stamps:
        return None
    digest = hashlib.sha256()
    for stamp in stamps:
        digest.update(json.dumps(stamp).encode())
    return digest.hexdigest()[:32]
