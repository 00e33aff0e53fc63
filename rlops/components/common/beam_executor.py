"""TFX Beam executors without TFX's sdist when Beam runs in this process.

Given Beam args, TFX's BaseBeamExecutor packs TFX's own source into an sdist for remote workers
(`dependency_utils.make_beam_dependency_flags`): ~49 MB in a new temporary directory per execution,
never removed, and seconds of CPU. A runner that runs in this process imports TFX from here, so
the executors of rlops' Beam components skip it for those runners (and keep it for Dataflow).
"""

from __future__ import annotations

from typing import Any

from tfx.dsl.components.base import base_beam_executor

# Beam runners that run in this process's environment, with TFX importable as it is here.
IN_PROCESS_RUNNERS = {"", "directrunner", "direct", "interactiverunner", "prismrunner"}


def runs_in_process(beam_pipeline_args: list[Any]) -> bool:
    """Whether the Beam args pick a runner whose workers import this process's packages."""
    if not all(isinstance(a, str) for a in beam_pipeline_args):
        return False  # placeholders resolved later: leave it to TFX
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    runner = PipelineOptions(flags=beam_pipeline_args).view_as(StandardOptions).runner or ""
    return str(runner).lower() in IN_PROCESS_RUNNERS


def init_beam_executor(
    executor: base_beam_executor.BaseBeamExecutor, context: base_beam_executor.BaseBeamExecutor.Context | None
) -> None:
    """BaseBeamExecutor.__init__(executor, context), without the sdist for an in-process runner.
    The executor's `_beam_pipeline_args` are the pipeline's args either way."""
    args = list((context.beam_pipeline_args if context is not None else None) or [])
    if context is None or not args or not runs_in_process(args):
        base_beam_executor.BaseBeamExecutor.__init__(executor, context)
        return
    context.beam_pipeline_args = []
    try:
        base_beam_executor.BaseBeamExecutor.__init__(executor, context)
    finally:
        context.beam_pipeline_args = args
    executor._beam_pipeline_args = args
