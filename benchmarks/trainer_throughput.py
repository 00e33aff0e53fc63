"""Bandit Trainer throughput from gzipped TFRecords: records/s of the training loop.

    python benchmarks/trainer_throughput.py --records 200000 --agent lin_ucb
    python benchmarks/trainer_throughput.py --records 200000 --agent lin_ucb --set batch_size=32

Simulated digits-bandit records (64 float features, 10 actions) go through ExperienceGen once
(kept in --work, reused by later runs with the same --records); the Trainer then trains `--agent`
on the train split with its default config (`--set key=value` overrides, JSON values). Prints one
JSON line: agent, records (train records consumed), wall_s (the training loop, from the Trainer's
own clock: no export, no tracing of the export) and records_per_s; plus cpu_s, the process's CPU
seconds (all threads: tf.data's readers and parsers included) inside the training loop's calls,
records_per_cpu_s (what the loop needs per core, whatever else shares the machine), the load
average while it ran, the total wall of run_trainer and the split's record count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, peak_rss_mb  # noqa: E402  (sets TF's log level first)


def examples(work: str, records: int) -> tuple[str, int]:
    """The digits Examples for `records` simulated records (built once per work dir)."""
    from rlops.components.experience_gen import ExperienceGenConfig, SimulationSource, SpecConfig, run_experience_gen

    out = os.path.join(work, f"digits_{records}")
    marker = os.path.join(out, "train_records.json")
    if not os.path.exists(marker):
        shutil.rmtree(out, ignore_errors=True)
        config = ExperienceGenConfig(
            source=SimulationSource(env="digits", num_records=records), action_spec=SpecConfig.discrete(10)
        )
        result = run_experience_gen(
            config, os.path.join(out, "examples"), os.path.join(out, "quarantine"), ["--runner=DirectRunner"]
        )
        with open(marker, "w") as f:
            json.dump(result.written_per_split.get("train", 0), f)
    with open(marker) as f:
        return os.path.join(out, "examples"), int(json.load(f))


def _count_loop_cpu() -> list[float]:
    """[CPU seconds]: the process's CPU time spent inside Learner.run / run_available calls."""
    from rlops.train.learner import Learner

    total = [0.0]

    def timed(method):
        def wrapper(self, *a, **kw):
            begin = time.process_time()
            try:
                return method(self, *a, **kw)
            finally:
                total[0] += time.process_time() - begin

        return wrapper

    for name in ("run", "run_available"):
        if hasattr(Learner, name):
            setattr(Learner, name, timed(getattr(Learner, name)))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="simulated records (train + eval)")
    parser.add_argument("--agent", default="lin_ucb")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="a TrainerConfig override")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "rlops_trainer_throughput"))
    args = parser.parse_args()

    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import run_trainer

    examples_uri, split_records = examples(args.work, args.records)
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    config = TrainerConfig.from_dict({"agent": args.agent, "num_actions": 10, **overrides})
    model = tempfile.mkdtemp(prefix="model_", dir=args.work)
    cpu = _count_loop_cpu()
    start = time.perf_counter()
    try:
        result = run_trainer(config, os.path.join(model, "model"), os.path.join(model, "run"), examples_uri)
    finally:
        total = time.perf_counter() - start
        shutil.rmtree(model, ignore_errors=True)
    metrics = result.as_dict()
    batch = getattr(config, "train_batch_size", None) or config.batch_size
    records = int(metrics.get("train_records", result.train_steps * batch))
    emit(
        "trainer_throughput",
        agent=args.agent,
        records=records,
        wall_s=round(result.wall_s, 3),
        records_per_s=round(records / max(result.wall_s, 1e-9)),
        batch_size=batch,
        cpu_s=round(cpu[0], 2),
        records_per_cpu_s=round(records / max(cpu[0], 1e-9)),
        load_avg_1m=round(os.getloadavg()[0], 1),
        train_split_records=split_records,
        run_trainer_wall_s=round(total, 2),
        peak_rss_mb=round(peak_rss_mb()),
    )


if __name__ == "__main__":
    main()
