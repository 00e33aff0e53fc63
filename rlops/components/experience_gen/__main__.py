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

from rlops.components.experience_gen.config import ExperienceGenConfig  # noqa: E402
from rlops.components.experience_gen.core import ExperienceGenError, run_experience_gen  # noqa: E402
from rlops.components.experience_gen.errors import InputError  # noqa: E402


def read_config(text: str) -> ExperienceGenConfig:
    """JSON or YAML text -> the config (strict: unknown keys and wrong types name the key path)."""
    import yaml

    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"--config: neither JSON nor YAML ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(raw, dict):
        raise ValueError("--config: expected a mapping of ExperienceGen settings")
    if isinstance(raw.get("experience_gen"), dict):  # a pipeline YAML: its experience_gen section
        raw = raw["experience_gen"]
    return ExperienceGenConfig.from_json(raw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m rlops.components.experience_gen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--config",
        required=True,
        help="ExperienceGenConfig as a JSON string, or a JSON or YAML file: the section itself or a "
        "pipeline YAML whose `experience_gen` section it is",
    )
    ap.add_argument("--examples-uri", required=True)
    ap.add_argument("--quarantine-uri", required=True)
    args, beam_args = ap.parse_known_args(argv)
    text = args.config
    if not text.lstrip().startswith("{"):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(text) as f:
            text = f.read().decode("utf-8")
    try:
        config = read_config(text)
    except ValueError as e:  # an unknown key, a wrong type, a bad value: one line naming it
        print(f"ExperienceGen: {e}", file=sys.stderr)
        return 2
    try:
        result = run_experience_gen(config, args.examples_uri, args.quarantine_uri, beam_args)
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
