"""The DirectRunner as ExperienceGen runs it: the in-process FnApiRunner with the pipeline's
options, never Beam's Prism attempt (a worker pool and a binary fetched from GitHub per run)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from rlops.components.common.direct_runner import in_process_runner


@pytest.mark.parametrize("args", [[], ["--runner=DirectRunner", "--direct_num_workers=1"], ["--runner=direct"]])
def test_direct_runner_args_run_in_process_without_prism(args, monkeypatch):
    tried: list[str] = []  # the DirectRunner swallows Prism's failures, so count the attempts
    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", lambda *a, **k: tried.append("prism"))
    options = PipelineOptions([*args, "--job_name=in-process"])
    runner = in_process_runner(options)
    assert isinstance(runner, fn_runner.FnApiRunner)
    assert "in-process" in str(runner._provision_info.provision_info.pipeline_options)  # the options travel
    with beam.Pipeline(runner=runner, options=options) as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 2), equal_to([2, 4]))
    assert tried == []


@pytest.mark.parametrize("runner", ["DataflowRunner", "PrismRunner"])
def test_other_runners_are_left_to_beam(runner):
    assert in_process_runner(PipelineOptions([f"--runner={runner}"])) is None
