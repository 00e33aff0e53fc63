"""CLI: python -m rlops.components.experience_gen --config cfg.json --examples-uri DIR \
    --quarantine-uri DIR [Beam options, e.g. --runner=DataflowRunner --project=...]

Prints the run's counts as one JSON line; exits 1 (with the reasons) when the run fails its checks,
2 (one line) when the config does not fit the data or cloud inputs lack credentials.
"""

from __future__ import annotations

import argparse
import json
import sys

from rlops.quiet import entry_point_setup

entry_point_setup()  # an entry point: Keras mode and quiet start-up before TensorFlow / Beam load

from rlops.components.experience_gen.core import ExperienceGenError, run_experience_gen  # noqa: E402
from rlops.components.experience_gen.errors import InputError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m rlops.components.experience_gen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--config", required=True, help="ExperienceGenConfig as a JSON file path or a JSON string")
    ap.add_argument("--examples-uri", required=True)
    ap.add_argument("--quarantine-uri", required=True)
    args, beam_args = ap.parse_known_args(argv)
    text = args.config
    if not text.lstrip().startswith("{"):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(text) as f:
            text = f.read().decode("utf-8")
    try:
        result = run_experience_gen(text, args.examples_uri, args.quarantine_uri, beam_args)
    except ExperienceGenError as e:
        print(json.dumps(e.result.properties()))
        print(f"ExperienceGen failed: {e}", file=sys.stderr)
        return 1
    except InputError as e:  # the config does not fit the data, or no credentials: one line
        print(f"ExperienceGen: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.properties()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
