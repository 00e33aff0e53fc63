"""`rlops` command line.

    rlops run bandit|ppo [--config FILE] [--set key=value ...]   run locally (LocalDagRunner)
    rlops lineage bandit|ppo [--config FILE] [--version V]        where a pushed policy came from
    rlops config bandit|ppo [--config FILE] [--set ...]           print the resolved config
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlops", description="RL pipelines on TFX / Kubeflow")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("run", "run a pipeline locally end to end"),
                            ("lineage", "show which data and training run produced a pushed policy"),
                            ("config", "print the resolved, validated config")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("kind", choices=["bandit", "ppo"])
        p.add_argument("--config", help="YAML file overlaid on the defaults")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override one value, e.g. --set trainer.train_steps=500 (repeatable)")
        if name == "lineage":
            p.add_argument("--version", type=int, help="pushed version (default: the latest)")
        if name == "run":
            p.add_argument("--summary-json", help="also write the run summary here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from rlops.pipelines.config import ConfigError, load_config
    try:
        config = load_config(args.kind, args.config, args.overrides)
    except ConfigError as e:
        print(f"rlops: config error: {e}", file=sys.stderr)
        return 2
    if args.command == "config":
        print(json.dumps(config.raw, indent=2, default=str))
        return 0
    if args.command == "lineage":
        from rlops.pipelines.local import lineage
        try:
            print("\n".join(lineage(config, args.version)))
        except LookupError as e:
            print(f"rlops: {e}", file=sys.stderr)
            return 1
        return 0
    import warnings
    warnings.filterwarnings("ignore")
    from rlops.pipelines.local import run_local
    summary = run_local(config)
    print(summary.render())
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary.as_dict(), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
