"""Wall time of the local bandit pipeline (LocalDagRunner + sqlite MLMD), cold and re-run.

cold_s:     a fresh pipeline root: every component runs.
cached_s:   the same pipeline again with warm start off, so unchanged inputs hit TFX's cache
            (ExperienceGen and Trainer cached; Evaluator and Pusher re-run because the
            baseline -- the latest blessed model -- changed).
overhead_s: cold wall time minus the time spent inside the components' own work (the core
            functions every executor calls), i.e. orchestration: TFX launcher, MLMD, Beam
            setup, imports.
emulated_night_s: the same pipeline compiled for Vertex AI (`rlops compile`) and run as one
            night by rlops.testing.vertex_emulator: every step a subprocess through TFX's v2
            container launcher, as on Vertex (per-step times in emulated_steps_s). --no-emulated
            skips it.
gc_s, gc_collections: time in CPython's cycle collector during the cold and cached runs, and
            how many times it ran, at the thresholds rlops' entry points set (--gc rlops, as
            `rlops run` does) or at CPython's defaults (--gc default).
Prints one JSON line.
"""

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, peak_rss_mb  # noqa: E402


def _timed(module, name: str, bucket: dict) -> None:
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            bucket[name] = bucket.get(name, 0.0) + time.perf_counter() - start

    setattr(module, name, wrapper)


class _CollectorClock:
    """Sums the wall time of CPython's cycle collections (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds, self.collections, self._start = 0.0, 0, 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--no-emulated", action="store_true", help="skip the emulated Vertex AI night")
    parser.add_argument("--gc", choices=("rlops", "default"), default="rlops", help="cycle-collector thresholds")
    args = parser.parse_args()
    if args.gc == "rlops":
        from rlops.quiet import collect_cycles_less_often

        collect_cycles_less_often()
    collector = _CollectorClock()

    from rlops.components.evaluator import executor as evaluator_executor
    from rlops.components.experience_gen import executor as gen_executor
    from rlops.components.pusher import executor as pusher_executor
    from rlops.components.trainer import executor as trainer_executor
    from rlops.pipelines.config import load_config
    from rlops.pipelines.local import run_local

    work: dict[str, float] = {}
    _timed(gen_executor, "run_experience_gen", work)
    _timed(trainer_executor, "run_trainer", work)
    _timed(evaluator_executor, "run_evaluator", work)
    _timed(pusher_executor.core, "push_policy", work)

    root = tempfile.mkdtemp(prefix="rlops-bench-")
    config = load_config("bandit", overrides=[f"root={root}", "warm_start=false"] + args.overrides)
    devnull = open("/dev/null", "w")
    start = time.perf_counter()
    cold = run_local(config, stream=devnull)
    cold_s = time.perf_counter() - start
    cold_work = dict(work)
    work.clear()
    start = time.perf_counter()
    cached = run_local(config, stream=devnull)
    cached_s = time.perf_counter() - start
    overhead_s = cold_s - sum(cold_work.values())
    gc_s, gc_collections = collector.seconds, collector.collections
    emulated = {} if args.no_emulated else emulated_night(args.overrides)
    emit(
        "pipeline_local",
        cold_s=round(cold_s, 2),
        cached_s=round(cached_s, 2),
        overhead_s=round(overhead_s, 2),
        overhead_share=round(overhead_s / cold_s, 3),
        component_work_s={k: round(v, 2) for k, v in cold_work.items()},
        cached_components={k: v for k, v in cached.components.items()},
        blessed=cold.blessed,
        pushed=cold.pushed,
        peak_rss_mb=round(peak_rss_mb(), 1),
        gc=args.gc,
        gc_threshold=list(gc.get_threshold()),
        gc_s=round(gc_s, 2),
        gc_collections=gc_collections,
        **emulated,
    )


def emulated_night(overrides: list) -> dict:
    """One night of the compiled pipeline on the Vertex emulator (Cloud Storage: a temp dir)."""
    from rlops.pipelines.config import load_config
    from rlops.pipelines.vertex.compile import compile_pipeline
    from rlops.pipelines.vertex.settings import load_vertex_config
    from rlops.testing.vertex_emulator import VertexEmulator

    config = load_config("bandit", overrides=["root=gs://rlops-bench/bandit", "warm_start=false"] + overrides)
    job = compile_pipeline(config, load_vertex_config())
    emulator = VertexEmulator(tempfile.mkdtemp(prefix="rlops-vertex-"))
    run = emulator.run(job)
    if run.state != "SUCCEEDED":
        failed = {n: t.error[-500:] for n, t in run.tasks.items() if t.state == "FAILED"}
        raise SystemExit(f"emulated night failed: {failed}")
    return {
        "emulated_night_s": round(run.wall_s, 2),
        "emulated_steps_s": {n: round(t.wall_s, 2) for n, t in run.tasks.items() if t.argv},
    }


if __name__ == "__main__":
    main()
