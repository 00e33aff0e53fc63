"""`rlops` command line.

    rlops run bandit|ppo|ranking [--config FILE] [--set key=value ...]   run locally (LocalDagRunner)
    rlops lineage bandit|ppo|ranking [--config FILE] [--version V]        where a pushed policy came from
    rlops config bandit|ppo|ranking [--config FILE] [--set ...]           print the resolved config
    rlops init --from LOGS [--items ITEMS] [--out my.yaml]        a commented starter config from a log file
    rlops examples DIR [--split NAME] [--columns a,b] [--limit N] an Examples directory's records as CSV
    rlops ingest --config C.yaml [--set k=v] [--out DIR] [--summary-json F]   ExperienceGen alone, with its counts

    rlops compile bandit|ppo|ranking --output pipeline.json [--image IMG] [--vertex-config FILE] [--vertex-set k=v]
                  [--notify-url URL]                              Vertex AI PipelineJob JSON
    rlops submit pipeline.json --project P --region R --pipeline-root gs://B/P [--param k=v] [--label k=v]
    rlops schedule create pipeline.json --cron "0 3 * * *" --time-zone Europe/Berlin [target flags]
    rlops schedule list|pause|resume|delete [SCHEDULE] --project P --region R
    rlops runs list|show|wait [JOB] --project P --region R       (and `rlops submit ... --wait`)

Errors print one line (`rlops: ...`) and exit 2 for bad input (config, data, flags), 1 for
anything else; `--debug` (anywhere on the command line) shows the Python traceback instead. A
reader that closes stdout early (`rlops config bandit | head`) ends it quietly, status 141.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rlops.components.common.decision_kinds import PIPELINES
from rlops.quiet import entry_point_setup

entry_point_setup()  # before cli_* import TensorFlow / TFX: Keras mode, quiet start-up

from rlops.pipelines import (
    cli_evaluate,  # noqa: E402
    cli_examples,  # noqa: E402
    cli_ingest,  # noqa: E402
    cli_init,  # noqa: E402
    cli_runs,  # noqa: E402
    cli_serving,  # noqa: E402
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlops", description="RL pipelines on TFX / Kubeflow")
    parser.add_argument(
        "--debug", action="store_true", help="show Python tracebacks (also accepted after the subcommand)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("run", "run a pipeline locally end to end"),
        ("lineage", "show which data and training run produced a pushed policy"),
        ("config", "print the full effective config (defaults included), each field with its doc"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("kind", choices=list(PIPELINES))
        p.add_argument("--config", help="YAML file overlaid on the defaults")
        p.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one value, e.g. --set trainer.train_steps=500 (repeatable)",
        )
        if name == "lineage":
            p.add_argument("--version", type=int, help="pushed version (default: the latest)")
        if name == "run":
            p.add_argument("--summary-json", help="also write the run summary here")
        if name == "config":
            p.add_argument(
                "--given",
                action="store_true",
                help="print only the merged YAML as given (the pipeline's YAML, --config, --set) as JSON, "
                "instead of every field with its default and doc",
            )
    _add_cloud_commands(sub)
    # Subcommands from other modules: one `module.add_parser(sub)` call each, below this line;
    # they set_defaults(handler=fn), and main() calls fn(args) -> exit status.
    cli_evaluate.add_parser(sub)
    cli_serving.add_parser(sub)
    cli_init.add_parser(sub)
    cli_examples.add_parser(sub)
    cli_ingest.add_parser(sub)
    return parser


def _add_target_flags(p: argparse.ArgumentParser, job: bool = True) -> None:
    p.add_argument("--project", help="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT, then ADC's)")
    p.add_argument("--region", help="Vertex AI region, e.g. us-central1 (default: $GOOGLE_CLOUD_REGION)")
    if job:
        p.add_argument("--pipeline-root", help="gs://BUCKET/PATH where runs keep their artifacts")
        p.add_argument("--service-account", help="service account the runs act as")
        p.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="runtime parameter value, e.g. --param data_date=2026-01-31 (repeatable)",
        )
        p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="job label (repeatable)")
        p.add_argument("--network", help="VPC to peer with: projects/PROJECT_NUMBER/global/networks/NAME")
        p.add_argument(
            "--reserved-ip-range",
            dest="reserved_ip_ranges",
            action="append",
            default=[],
            help="name of a reserved IP range on --network (repeatable)",
        )
        p.add_argument("--kms-key", help="CMEK: projects/P/locations/REGION/keyRings/R/cryptoKeys/K")


def _add_cloud_commands(sub) -> None:
    p = sub.add_parser("compile", help="compile a pipeline for Vertex AI Pipelines (PipelineJob JSON)")
    p.add_argument("kind", choices=list(PIPELINES))
    p.add_argument("--config", help="YAML file overlaid on the defaults")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one pipeline config value (repeatable); root must be gs://...",
    )
    p.add_argument("--output", required=True, help="where to write the PipelineJob JSON")
    p.add_argument("--image", help="container image every step runs in (default: the Dockerfile's, rlops:<version>)")
    p.add_argument("--vertex-config", help="YAML of Vertex settings: steps, custom_job, dataflow, caching")
    p.add_argument(
        "--vertex-set",
        dest="vertex_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one Vertex setting, e.g. --vertex-set steps.Trainer.accelerator_count=2",
    )
    p.add_argument("--project", help="project for the custom training job / Dataflow")
    p.add_argument("--region", help="region for the custom training job / Dataflow")
    p.add_argument("--notify-url", help="exit handler: POST a JSON note here when a run does not succeed")

    p = sub.add_parser("submit", help="run a compiled pipeline once on Vertex AI Pipelines")
    p.add_argument("template", help="compiled pipeline (rlops compile output, or KFP YAML)")
    _add_target_flags(p)
    p.add_argument("--caching", choices=["on", "off"], help="override every task's compiled cache setting")
    p.add_argument("--display-name")
    p.add_argument("--job-id")
    cli_runs.add_wait_flags(p)

    p = sub.add_parser("schedule", help="create, list, pause, resume or delete Vertex AI pipeline schedules")
    actions = p.add_subparsers(dest="action", required=True)
    q = actions.add_parser("create", help="run a compiled pipeline on a cron schedule")
    q.add_argument("template")
    _add_target_flags(q)
    q.add_argument("--cron", required=True, help='five-field cron, e.g. "0 3 * * *" (03:00 daily)')
    q.add_argument("--time-zone", default="UTC", help="IANA time zone the cron is read in (default UTC)")
    q.add_argument("--max-concurrent-runs", type=int, default=1)
    q.add_argument("--max-runs", type=int, help="stop after this many runs")
    q.add_argument("--start-time", help="ISO 8601; first run not before (default: now)")
    q.add_argument("--end-time", help="ISO 8601; no runs after")
    q.add_argument("--allow-queueing", action="store_true", help="queue runs beyond --max-concurrent-runs")
    q.add_argument("--display-name")
    q = actions.add_parser("list", help="list schedules")
    _add_target_flags(q, job=False)
    q.add_argument("--filter", help='Vertex AI list filter, e.g. display_name="rlops-bandit-schedule"')
    for action in ("pause", "resume", "delete"):
        q = actions.add_parser(action, help=f"{action} a schedule")
        q.add_argument("schedule", help="schedule id or projects/P/locations/R/schedules/ID")
        _add_target_flags(q, job=False)
    cli_runs.add_parser(sub)


def _compile(args) -> int:
    from rlops.pipelines.config import load_config
    from rlops.pipelines.vertex.compile import compile_pipeline, summary
    from rlops.pipelines.vertex.settings import load_vertex_config

    config = load_config(args.kind, args.config, args.overrides)  # ConfigError: one line, see main()
    vertex = load_vertex_config(
        args.vertex_config,
        args.vertex_overrides,
        image=args.image,
        project=args.project,
        region=args.region,
        notify_url=args.notify_url,
    )
    job = compile_pipeline(config, vertex, args.output)
    print("\n".join(summary(job)))
    print(f"wrote {args.output}")
    if "/" not in vertex.image.split(":")[0]:
        print(
            f"note: image '{vertex.image}' has no registry; Vertex AI pulls images from a registry: push it "
            "(see the guide, docs/vertex.md) and pass --image REGION-docker.pkg.dev/PROJECT/REPO/rlops:TAG",
            file=sys.stderr,
        )
    return 0


def _cloud(args) -> int:
    from rlops.pipelines.vertex import schedule as vertex_schedule, submit as vertex_submit

    job_command = args.command == "submit" or args.action == "create"
    try:
        spec = _schedule_spec(args) if args.command == "schedule" and args.action == "create" else None
        # What needs no network first: a bad cron or --param is not hidden behind the credentials.
        if args.command == "submit":
            vertex_submit.check_offline(args.template, args.param, args.label, args.job_id)
        elif spec is not None:
            vertex_schedule.check_offline(args.template, spec, args.param, args.label)
        target = vertex_submit.resolve_target(
            args.project,
            args.region,
            getattr(args, "pipeline_root", None),
            getattr(args, "service_account", None),
            need_root=job_command,
            network=getattr(args, "network", None),
            reserved_ip_ranges=getattr(args, "reserved_ip_ranges", ()),
            kms_key=getattr(args, "kms_key", None),
        )
        if args.command == "submit":
            caching = {"on": True, "off": False}.get(args.caching)
            job = vertex_submit.submit_pipeline(
                args.template, target, args.param, args.label, caching, args.display_name, args.job_id
            )
            print(json.dumps({"pipeline_job": job.resource_name, "state": job._gca_resource.state.name}))
            if args.wait:
                return cli_runs.exit_code(cli_runs.watch(job, args.poll_seconds))
        elif spec is not None:
            schedule = vertex_schedule.create_schedule(args.template, target, spec, args.param, args.label)
            print(json.dumps(vertex_schedule.describe(schedule)))
        elif args.action == "list":
            print(json.dumps(vertex_schedule.list_schedules(target, args.filter), indent=1))
        elif args.action == "delete":
            print(json.dumps({"deleted": vertex_schedule.delete_schedule(target, args.schedule)}))
        else:
            action = {"pause": vertex_schedule.pause_schedule, "resume": vertex_schedule.resume_schedule}[args.action]
            print(json.dumps(action(target, args.schedule)))
    except vertex_submit.SubmitError as e:
        print(f"rlops: {e}", file=sys.stderr)
        return 2
    return 0


def _schedule_spec(args):
    from rlops.pipelines.vertex.schedule import ScheduleSpec

    return ScheduleSpec(
        cron=args.cron,
        time_zone=args.time_zone,
        max_concurrent_runs=args.max_concurrent_runs,
        start_time=args.start_time,
        end_time=args.end_time,
        max_runs=args.max_runs,
        allow_queueing=args.allow_queueing,
        display_name=args.display_name,
    )


# Exceptions that mean bad input (config, data, flags, missing files, no credentials), not a bug in
# rlops: (module, class). Looked up only in modules already imported -- an exception cannot be an
# instance of a class whose module was never loaded, and importing ExperienceGen's core (Beam,
# TensorFlow) just to classify an error would cost seconds before the one line is printed.
USER_ERRORS = (
    ("rlops.pipelines.config", "ConfigError"),
    ("rlops.components.experience_gen.core", "ExperienceGenError"),
    ("rlops.components.experience_gen.errors", "InputError"),
    ("rlops.components.experience_gen.sources.base", "SourceError"),
    ("rlops.components.trainer.warm_start", "WarmStartError"),
    ("rlops.components.evaluator.baseline", "BaselineModelError"),
    ("rlops.train.litert", "LiteRTConversionError"),
)  # a policy needing Flex ops (pusher.litert_allow_flex)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The user-error classes of USER_ERRORS that are loaded, and FileNotFoundError."""
    loaded = [getattr(sys.modules[module], name, None) for module, name in USER_ERRORS if module in sys.modules]
    return tuple(c for c in loaded if isinstance(c, type)) + (FileNotFoundError,)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    args = _parser().parse_args([a for a in argv if a != "--debug"])
    if debug:
        try:
            return _dispatch(args)
        except BrokenPipeError:
            if _stdout_reader_gone():
                return _reader_gone()
            raise
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        print("rlops: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line for the user; --debug shows the traceback
        if isinstance(e, BrokenPipeError) and _stdout_reader_gone():
            return _reader_gone()  # `rlops config bandit | head`: the reader has had what it wanted
        user = isinstance(e, _user_errors())
        text = " ".join(str(e).split()) or type(e).__name__
        if len(text) > 2000:
            text = text[:2000] + " ..."
        config_error = getattr(sys.modules.get("rlops.pipelines.config"), "ConfigError", ())
        kind = "config error" if isinstance(e, config_error) else "error" if user else f"error: {type(e).__name__}"
        print(f"rlops: {kind}: {text}", file=sys.stderr)
        if not user:
            print(
                "rlops: this looks like a bug in rlops or its environment; re-run with --debug for the traceback",
                file=sys.stderr,
            )
        return 2 if user else 1


# The status a shell reports for a writer whose reader went away (128 + SIGPIPE: `yes | head`).
# Not 0: a command cut short did not finish (`rlops run ... | head -1` may stop before its
# summary), and `set -o pipefail` scripts see what they see for any other Unix tool.
EXIT_READER_GONE = 141


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (`rlops config bandit | head`), rather
    than some other pipe or socket having broken (a failure to report)."""
    try:
        sys.stdout.flush()  # what could not be written is still buffered: writing it fails again
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        return False
    try:
        import select

        poll = select.poll()  # a pipe without a reader polls POLLERR (Linux, macOS)
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), stdout without a descriptor
        return False


def _reader_gone() -> int:
    """Ends quietly: stdout onto /dev/null, so the interpreter's last flush of what is still
    buffered does not print 'Exception ignored ... BrokenPipeError' on its way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_READER_GONE


def _dispatch(args: argparse.Namespace) -> int:
    if getattr(args, "handler", None) is not None:
        return int(args.handler(args) or 0)
    if args.command == "compile":
        return _compile(args)
    if args.command in ("submit", "schedule"):
        return _cloud(args)
    if args.command == "serving":
        return cli_serving.main(args)
    from rlops.pipelines.config import load_config

    if args.command == "run":
        _check_cloud_credentials_first(args)
    config = load_config(args.kind, args.config, args.overrides)
    if args.command == "config":
        from rlops.pipelines.config import render_effective_config

        print(json.dumps(config.raw, indent=2, default=str) if args.given else render_effective_config(config))
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
        os.makedirs(os.path.dirname(os.path.abspath(args.summary_json)), exist_ok=True)
        with open(args.summary_json, "w") as f:
            json.dump(summary.as_dict(), f, indent=1, default=str)
    return 0


def _check_cloud_credentials_first(args: argparse.Namespace) -> None:
    """gs:// or BigQuery input without credentials: exit 2 in a second or two. Checked on the
    merged YAML, before load_config builds the typed config (which loads TensorFlow); whatever
    is wrong with the YAML itself, load_config reports next. ExperienceGen checks again."""
    from rlops.components.experience_gen.cloud import check_credentials
    from rlops.pipelines.config import load_raw

    try:
        raw = load_raw(args.kind, args.config, args.overrides)
    except Exception:  # noqa: BLE001 - load_config reports it, in one line
        return
    if isinstance(raw.get("experience_gen"), dict):
        check_credentials(raw["experience_gen"])


if __name__ == "__main__":
    sys.exit(main())
