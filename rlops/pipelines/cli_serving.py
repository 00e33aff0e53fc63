"""`rlops serving`: what a serving directory holds, and putting an earlier version back in front.

    rlops serving list SERVING_DIR [--json]          versions, which one is served, their artifacts
                                                     (saved_model, litert: policy.tflite), lineage
    rlops serving rollback SERVING_DIR VERSION       re-publish VERSION as the new highest version

SERVING_DIR is a local path or gs://bucket/path (Cloud Storage through google-cloud-storage with
Application Default Credentials; STORAGE_EMULATOR_HOST points it at an emulator).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("serving", help="list the served policy versions, or roll back to an earlier one")
    actions = p.add_subparsers(dest="action", required=True)
    q = actions.add_parser("list", help="versions in a serving directory with their lineage")
    q.add_argument("serving_dir", help="local path or gs://bucket/path the Pusher publishes to")
    q.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    q = actions.add_parser("rollback", help="atomically put an earlier version back in front")
    q.add_argument("serving_dir")
    q.add_argument("version", type=int, help="the rlops version to serve again")


def describe(serving_dir: str, gcs_client=None) -> list[dict]:
    """One row per numeric directory, oldest first."""
    from rlops.components.pusher import publish
    from rlops.components.pusher.storage import open_store

    store = open_store(serving_dir, gcs_client)
    versions = publish.scan(store)
    served = publish.served_version(versions)
    rows = []
    for v in versions:
        marker = v.marker or {}
        if v.is_rlops:
            state = "served" if v.number == served else "rlops"
        elif v.marker is not None:
            state = "being removed"
        elif v.has_saved_model:
            state = ("served, " if v.number == served else "") + "not rlops (no marker)"
        else:
            state = "incomplete (no saved_model.pb)"
        pushed_at = marker.get("pushed_at")
        rows.append(
            {
                "version": v.number,
                "state": state,
                "artifacts": _artifacts(marker.get("files", [])),
                "pushed_at": datetime.datetime.fromtimestamp(pushed_at, datetime.timezone.utc).isoformat(
                    timespec="seconds"
                )
                if pushed_at
                else None,
                "lineage": marker.get("lineage", {}),
            }
        )
    return rows


def _artifacts(files: list[str]) -> list[str]:
    """What a version serves from: the SavedModel (TF Serving, Vertex) and its LiteRT twin
    (in-process, edge, mobile), as the version's marker lists its files."""
    from rlops.train.policy_files import LITERT_FILE  # the name only: no TensorFlow to list versions

    return [name for name, file in (("saved_model", "saved_model.pb"), ("litert", LITERT_FILE)) if file in files]


def _table(rows: list[dict]) -> str:
    lines = [f"{'version':>12}  {'state':<30}  {'artifacts':<19}  {'pushed (UTC)':<25}  lineage"]
    for r in rows:
        lineage = "; ".join(f"{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in r["lineage"].items())
        artifacts = "+".join(r["artifacts"]) or "-"
        lines.append(
            f"{r['version']:>12}  {r['state']:<30}  {artifacts:<19}  {r['pushed_at'] or '-':<25}  {lineage or '-'}"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace, gcs_client=None) -> int:
    from rlops.components.pusher import publish

    if "://" not in args.serving_dir and not os.path.isdir(args.serving_dir):
        print(f"rlops: serving {args.action}: no directory {args.serving_dir}", file=sys.stderr)
        return 2
    try:
        if args.action == "list":
            rows = describe(args.serving_dir, gcs_client)
            if not rows:
                print(f"rlops: no versions in {args.serving_dir}", file=sys.stderr)
                return 1
            print(json.dumps(rows, indent=1) if args.json else _table(rows))
            return 0
        result = publish.rollback(args.serving_dir, args.version, gcs_client=gcs_client)
        print(json.dumps({"rolled_back_to": args.version, "published_as": result.version, "url": result.url}))
        return 0
    except (LookupError, ValueError, FileNotFoundError) as e:  # the user's version or path: exit 2
        print(f"rlops: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"rlops: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # storage errors (permissions, missing bucket): one line, not a traceback
        if getattr(args, "debug", False):
            raise
        print(f"rlops: serving {args.action} {args.serving_dir}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
