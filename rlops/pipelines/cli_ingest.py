"""`rlops ingest`: ExperienceGen alone, from the same config `rlops run` reads.

    rlops ingest --config C.yaml [--set key=value ...] [--out DIR] [--summary-json F]

The same component and the same counts as a pipeline run (records read, written per split,
quarantined with reasons, pending; with an events section, every event's category), without
training: users check what their logs become before the first night, and `rlops examples DIR`
prints the records. Examples go to DIR (default: <root>/ingest/examples), the quarantine to
DIR/quarantine; waiting decisions to the config's events.pending_dir, as in a pipeline run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

QUARANTINE_DIR = "quarantine"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("ingest", help="run ExperienceGen alone: logs (and events) into Examples, with the counts")
    p.add_argument("--config", required=True, help="the pipeline's YAML file (its experience_gen section is used)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one value, e.g. --set experience_gen.events.window=1h (repeatable)",
    )
    p.add_argument("--out", help="where the Examples go (default: <root>/ingest/examples); printed at the end")
    p.add_argument("--summary-json", help="also write the counts here (records, events, per split, reasons)")
    p.set_defaults(handler=main)
    return p


def pipeline_kind(path: str) -> str:
    """The pipeline whose config this is: the one that trains its experience_gen.record_kind."""
    from rlops.components.common.decision_kinds import BANDIT, decision_kind
    from rlops.pipelines.config import ConfigError, read_yaml_mapping

    raw = read_yaml_mapping(path)
    section = raw.get("experience_gen") or {}
    record_kind = section.get("record_kind", BANDIT) if isinstance(section, dict) else BANDIT
    try:
        return decision_kind(str(record_kind), "experience_gen.record_kind").pipeline
    except ValueError as e:
        raise ConfigError(str(e)) from e


def main(args: argparse.Namespace) -> int:
    from rlops.components.experience_gen.core import ExperienceGenError, run_experience_gen
    from rlops.pipelines.config import ConfigError, load_config

    config = load_config(pipeline_kind(args.config), args.config, args.overrides)
    if config.experience_gen is None:
        raise ConfigError("experience_gen: this pipeline has no ingestion (ppo trains online)")
    out = args.out or os.path.join(config.root, "ingest", "examples")
    quarantine = os.path.join(out, QUARANTINE_DIR)
    try:
        result = run_experience_gen(config.experience_gen, out, quarantine, config.beam_args)
    except ExperienceGenError as e:  # the counts still print: what was read, and why it failed
        _report(counts_of(e.result), args.summary_json)
        raise
    counts = counts_of(result)
    _report(counts, args.summary_json)
    print(f"examples: {out}  (rlops examples {out})")
    print(f"quarantine: {quarantine}")
    return 0


def counts_of(result: Any) -> dict:
    """IngestResult -> the counts `rlops run` prints and writes (local.ingest_counts' shape)."""
    props = result.properties()
    out: dict[str, Any] = {k: props[k] for k in ("records_read", "records_written", "records_quarantined")}
    out.update({f"records_written_{s}": result.written_per_split.get(s, 0) for s in result.split_names})
    out["quarantine_reasons"] = dict(result.reasons)
    if result.events is not None:
        out["records"] = {
            "read": result.records_read,
            "written": result.records_written,
            "quarantined": result.records_quarantined,
            "pending": result.records_pending,
        }
        out["events"] = dict(result.events)
        out["events_read"] = result.events_read
        out["events_carried"] = result.events_carried
        out["notes"] = list(result.notes)
    if result.constant_reward is not None:
        out["constant_reward"] = result.constant_reward
    return out


def _report(counts: dict, summary_json: str | None) -> None:
    from rlops.pipelines.local import render_ingest

    print(render_ingest(counts))
    if summary_json:
        os.makedirs(os.path.dirname(os.path.abspath(summary_json)), exist_ok=True)
        with open(summary_json, "w") as f:
            json.dump(counts, f, indent=1)
    sys.stdout.flush()
