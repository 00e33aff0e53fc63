"""Beam's DirectRunner without its Prism attempt.

Beam 2.74's DirectRunner first tries Prism: it starts a worker pool, fetches Prism's binary from
GitHub (with network access the pipeline then runs on Prism; without, the fetch fails) and only
then falls back to the in-process FnApiRunner. Here that attempt cost ~0.4 s of CPU per run (about
a third of a small ExperienceGen run's fixed cost). `in_process_runner` returns the runner the
DirectRunner falls back to, built the same way (pipeline options in its provision info), for
pipelines the FnApiRunner runs: batch ones without TestStream or real-time timers.
"""

from __future__ import annotations

from typing import Any

DIRECT_RUNNER_NAMES = {"", "directrunner", "direct"}


def in_process_runner(options: Any) -> Any | None:
    """The FnApiRunner for options that ask for the DirectRunner (or no runner); None for any other
    runner (Dataflow, Prism asked for by name, ...): Beam builds that one from the options."""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    if not isinstance(runner, (str, type(None))) or str(runner or "").lower() not in DIRECT_RUNNER_NAMES:
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    info = beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(info))
