"""Cloud inputs check their credentials before the first request.

Without credentials, Beam's Cloud Storage and BigQuery clients retry for minutes (120 s of
RetryError and Beam tracebacks) before failing. `check_credentials` asks Application Default
Credentials once, bounded by a timeout (the metadata-server probe of google.auth retries), and
fails in one line with the fix, as `rlops submit` does.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.errors import CredentialsError

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
TIMEOUT_S = 4.0
FIX = (
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service "
    "account key file (on Google Cloud: run as a service account allowed to read the data)"
)


def cloud_inputs(config: ExperienceGenConfig) -> list[str]:
    """The config keys (with their values) that read from Google Cloud."""
    from rlops.components.experience_gen import sources

    out = sources.source_of(config.source).cloud_inputs(config)
    item = config.item_source
    if item is not None and any(p.strip().startswith("gs://") for p in item.pattern.split(",")):
        out.append(f"experience_gen.item_source.pattern '{item.pattern}'")
    events = config.events
    if events is not None:  # the events source reads from the cloud the same ways
        out += [
            "experience_gen.events." + where.removeprefix("experience_gen.")
            for where in sources.source_of(events.source).cloud_inputs(
                dataclasses.replace(config, source=events.source)
            )
        ]
    return out


def raw_cloud_inputs(section: dict) -> list[str]:
    """cloud_inputs of an experience_gen section still in its YAML form (a dict): a check that can
    run before the typed config is built (which imports TensorFlow, seconds)."""
    out = []
    events = section.get("events")
    if isinstance(events, dict) and isinstance(events.get("source"), dict):
        out += [
            "experience_gen.events." + where.removeprefix("experience_gen.")
            for where in raw_cloud_inputs({"source": events["source"]})
        ]
    for key in ("source", "item_source"):
        s = section.get(key)
        if not isinstance(s, dict):
            continue
        if key == "source" and s.get("kind") == "bigquery":
            out.append(f"experience_gen.source (BigQuery {s.get('table') or 'query'})")
        pattern = s.get("pattern")
        if (
            s.get("kind", "file") == "file"
            and isinstance(pattern, str)
            and any(p.strip().startswith("gs://") for p in pattern.split(","))
        ):
            out.append(f"experience_gen.{key}.pattern '{pattern}'")
    return out


def check_credentials(config: ExperienceGenConfig | dict, timeout_s: float = TIMEOUT_S) -> None:
    """Raises CredentialsError (naming the input and the fix) when the config (typed, or an
    experience_gen section as a dict) reads from Google Cloud and no credentials are found within
    `timeout_s`. Storage emulators need none."""
    inputs = raw_cloud_inputs(config) if isinstance(config, dict) else cloud_inputs(config)
    if not inputs or (os.environ.get("STORAGE_EMULATOR_HOST") and "BigQuery" not in inputs[0]):
        return
    problem = default_credentials_problem(timeout_s)
    if problem:
        raise CredentialsError(f"{inputs[0]} is on Google Cloud, but {problem}: {FIX}")


def default_credentials_problem(timeout_s: float = TIMEOUT_S) -> str | None:
    """None when google.auth.default() finds credentials within `timeout_s`, else why not."""
    outcome: dict[str, Any] = {}

    def ask() -> None:
        try:
            import google.auth

            outcome["credentials"] = google.auth.default(scopes=list(SCOPES))
        except Exception as e:  # noqa: BLE001 - DefaultCredentialsError, or a broken key file
            outcome["error"] = e

    thread = threading.Thread(target=ask, name="rlops-credentials", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "credentials" in outcome:
        return None
    if "error" in outcome:
        first = " ".join(str(outcome["error"]).split()).split(". ")[0].rstrip(".")
        return f"no Google Cloud credentials were found ({first})"
    return f"no Google Cloud credentials were found within {timeout_s:.0f} s"
