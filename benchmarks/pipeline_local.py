"""Wall time of the local bandit pipeline (LocalDagRunner + sqlite MLMD), cold and re-run.

cold_s:     a fresh pipeline root: every component runs.
cached_s:   the same pipeline again with warm start off, so unchanged inputs hit TFX's cache
            (ExperienceGen and Trainer cached; Evaluator and Pusher re-run because the
            baseline -- the latest blessed model -- changed).
overhead_s: cold wall time minus the time spent inside the components' own work (the core
            functions every executor calls), i.e. orchestration: TFX launcher, MLMD, Beam
            setup, imports.
Prints one JSON line.
"""
import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

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
    emit("pipeline_local", cold_s=round(cold_s, 2), cached_s=round(cached_s, 2), overhead_s=round(overhead_s, 2),
         overhead_share=round(overhead_s / cold_s, 3), component_work_s={k: round(v, 2) for k, v in cold_work.items()},
         cached_components={k: v for k, v in cached.components.items()}, blessed=cold.blessed, pushed=cold.pushed,
         peak_rss_mb=round(peak_rss_mb(), 1))


if __name__ == "__main__":
    main()
