"""The default per-arm `rlops run bandit` at production volume (issue 49): time, the Trainer's rate,
peak memory and the greedy policy's fraction of the gap at each size, VW on the same logs.

On a generator world that no other benchmark uses (rlops.envs.logged_feedback.LogGenerator, world
`--world`, Thompson-like logging, 34 items with an item table, `--ctr 0.05`), for each `--rows`:

1. `rlops run bandit` with the config a user writes for these logs (defaults_vs_vw.user_config: the
   columns only, so the Trainer is the per-arm default), in a child process whose process tree is
   sampled every 0.2 s: each process's peak RSS (the run itself, the Pusher's verifying processes),
   the run's own peak while each component ran, and each component's wall time (from its
   `[i/5] Name done in` line). The Trainer's records per second are its training loop's
   (metrics.json `records_per_sec`: the passes, not the one decode before them); `trainer_s` is the
   whole component. The greedy policy's exact fraction of the gap is defaults_vs_vw's.
2. `--compare-passes N` (at the sizes in `--compare-rows`): the same run's train split through the
   Trainer alone, N passes each, in this invocation: held in memory (`in_memory_bytes` above the
   split) and cached on disk (the default past `in_memory_bytes`; forced with a 1 MiB
   `in_memory_bytes`) in turn, twice each (the best of each counts), then streamed from the
   Examples every pass (`disk_cache: false`, the path before issue 49): the training loop's
   records per second and per CPU-second of each, and the ratios to the held split's.
3. VW (`--vw-python`, at sizes up to `--vw-max-rows`): defaults_vs_vw's best setting on the same rows.

    python benchmarks/per_arm_volume.py --rows 1000000,3000000 --compare-passes 2 \
        --vw-python /tmp/vw-venv/bin/python --vw-max-rows 1000000

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPONENT = re.compile(r"\[\d+/\d+\] (\w+) (\.\.\.|done in ([0-9.]+)s)")


# ---- a process tree's memory ---------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    return kids


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            args = f.read().split("\0")
    except OSError:
        return "?"
    if "-m" in args:  # python -m rlops.components.pusher.verify ...
        return args[args.index("-m") + 1]
    return " ".join(os.path.basename(a) for a in args[1:3])


def traced_run(command: list[str], cwd: str) -> dict:
    """Runs `command`; each process's peak RSS (MB) in its tree, and per component (from the
    `[i/5] Name ...` lines) its wall time and the run process's own peak while it ran."""
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    peaks: dict[int, tuple[float, str]] = {}
    current = ["start"]
    by_component: dict[str, float] = {}

    def sample() -> None:
        while proc.poll() is None:
            kids, stack = _children(), [proc.pid]
            while stack:
                pid = stack.pop()
                stack.extend(kids.get(pid, []))
                rss = _rss_mb(pid)
                if rss > peaks.get(pid, (0.0, ""))[0]:
                    peaks[pid] = (rss, peaks.get(pid, (0.0, ""))[1] or _name(pid))
                if pid == proc.pid:
                    by_component[current[0]] = max(by_component.get(current[0], 0.0), rss)
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    walls: dict[str, float] = {}
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        tail = (tail + [line])[-60:]
        m = COMPONENT.search(line)
        if m and m.group(2) == "...":
            current[0] = m.group(1)
        elif m:
            walls[m.group(1)] = float(m.group(3))
    proc.wait()
    thread.join(1)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command[:3])} exited {proc.returncode}:\n{''.join(tail)}")
    largest = max(peaks.values(), default=(0.0, ""))
    return {
        "peak_rss_mb": round(largest[0]),
        "peak_rss_process": largest[1],
        "peak_rss_mb_per_process": sorted({(round(v[0]), v[1]) for v in peaks.values() if v[0] > 100}, reverse=True),
        "run_rss_mb_per_component": {k: round(v) for k, v in by_component.items() if k != "start"},
        "wall_s_per_component": walls,
    }


# ---- one size ------------------------------------------------------------------------------------


def run_size(gen, rows: int, directory: str, sample_seed: int, overrides: list[str]) -> tuple[dict, object]:
    import yaml
    from closed_loop import candidate_model_dir, request, serve
    from defaults_vs_vw import _trainer_metrics, fraction_of_gap, user_config

    t0 = time.perf_counter()
    logs = gen.sample(rows, seed=sample_seed)
    logs.to_files(directory, format="parquet")
    generate_s = time.perf_counter() - t0
    root = os.path.join(directory, "pipeline")
    config_path = os.path.join(directory, "logs.yaml")
    with open(config_path, "w") as f:
        yaml.safe_dump(user_config(gen, directory, root), f, sort_keys=False)
    rlops = os.path.join(os.path.dirname(sys.executable), "rlops")
    command = [rlops, "run", "bandit", "--config", config_path]
    for assignment in overrides:
        command += ["--set", assignment]
    t0 = time.perf_counter()
    traced = traced_run(command, directory)
    wall = time.perf_counter() - t0
    metrics = _trainer_metrics(root)
    staging = os.path.join(directory, "candidate")
    shutil.copytree(candidate_model_dir(root), os.path.join(staging, "1"))
    with open(os.path.join(staging, "1", "rlops_version.json"), "w") as f:
        json.dump({"candidate": True}, f)
    population, _ = gen.population_contexts()
    (response,), _ = serve(staging, [request(gen, population)], os.path.join(directory, "serve"))
    out = {
        "rows": rows,
        "generate_s": round(generate_s, 1),
        "run_wall_s": round(wall, 1),
        "trainer_s": traced["wall_s_per_component"].get("Trainer"),
        "trainer_records_per_s": round(float(metrics.get("records_per_sec", 0))),
        "train_records": metrics.get("train_records"),
        "fraction": fraction_of_gap(gen, response["greedy_action"].astype(int)),
        **traced,
        "load_avg_1m": round(os.getloadavg()[0], 1),  # other work on the machine slows wall_s
    }
    return out, logs


PATHS = {
    "held": {"in_memory_bytes": 1 << 40},
    "cached": {"in_memory_bytes": 1 << 20},
    "streamed": {"disk_cache": False, "in_memory_bytes": 1 << 20},
}


def compare_passes(root: str, passes: int) -> dict:
    """The run's train split through the Trainer alone: held and cached in turn, twice each (the
    best of each counts: other work on the machine only slows a run), then streamed once."""
    from closed_loop import _latest

    examples = _latest(os.path.join(root, "artifacts", "ExperienceGen", "examples"))
    runs: dict[str, list[dict]] = {name: [] for name in PATHS}
    for name in ("held", "cached", "held", "cached", "streamed"):
        proc = subprocess.run(
            [sys.executable, __file__, "--trainer-child", examples, str(passes), json.dumps(PATHS[name])],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise RuntimeError(f"trainer child ({name}) exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    out: dict = {"passes": passes, "keys": PATHS}
    for name, tries in runs.items():
        out[name] = max(tries, key=lambda r: r["records_per_s"])
        out[name]["records_per_s_tries"] = [r["records_per_s"] for r in tries]
    for name in ("cached", "streamed"):
        out[f"{name}_over_held"] = round(out[name]["records_per_s"] / out["held"]["records_per_s"], 3)
        out[f"{name}_over_held_per_cpu_s"] = round(out[name]["records_per_cpu_s"] / out["held"]["records_per_cpu_s"], 3)
    return out


def trainer_child(examples: str, passes: int, keys: dict) -> None:
    """The per-arm default Trainer on `examples` for `passes` passes with `keys` set; one JSON line:
    the training loop's records per second and per CPU-second (the passes, not the decode before
    them), and this process's peak RSS (VmHWM: ru_maxrss would carry the parent's over exec)."""
    from rlops.components.trainer import loop
    from rlops.components.trainer.config import PER_ARM_DEFAULTS, TrainerConfig
    from rlops.components.trainer.core import run_trainer

    config = TrainerConfig(
        agent="neural_epsilon_greedy", num_actions=34, **{**PER_ARM_DEFAULTS, "num_epochs": passes}, **keys
    )
    cpu: list[float] = []
    real_loop = loop.train_loop

    def timed_loop(*args, **kw):
        start = time.process_time()
        try:
            return real_loop(*args, **kw)
        finally:
            cpu.append(time.process_time() - start)

    loop.train_loop = timed_loop
    work = tempfile.mkdtemp(prefix="per_arm_volume_trainer_")
    try:
        t0 = time.perf_counter()
        result = run_trainer(config, os.path.join(work, "model"), os.path.join(work, "run"), examples_uri=examples)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    records = result.extra["train_records"]
    print(
        json.dumps(
            {
                "records_per_s": round(result.extra["records_per_sec"]),
                "records_per_cpu_s": round(records / max(cpu[0], 1e-9)),
                "loop_s": round(result.wall_s, 1),
                "trainer_s": round(wall, 1),
                "records": records,
                "peak_rss_mb": round(hwm / 1024),
                "load_avg_1m": round(os.getloadavg()[0], 1),
            }
        )
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--trainer-child":
        trainer_child(sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1000000,3000000", help="logged impressions, comma-separated sizes")
    ap.add_argument("--world", type=int, default=11, help="the generator's seed (held out: no other benchmark's)")
    ap.add_argument("--ctr", type=float, default=0.05)
    ap.add_argument("--sample-seed", type=int, default=1000)
    ap.add_argument("--set", action="append", default=[], dest="overrides", help="an rlops --set, repeatable")
    ap.add_argument("--compare-passes", type=int, default=0, help="held / cached / streamed Trainer runs (0: none)")
    ap.add_argument("--compare-rows", default="", help="the sizes compared (default: every size)")
    ap.add_argument("--vw-python", default=None, help="an interpreter with vowpalwabbit (absent: VW is skipped)")
    ap.add_argument("--vw-max-rows", type=int, default=3_000_000, help="VW runs at sizes up to this")
    ap.add_argument("--workdir", default="", help="keep logs and pipeline roots here")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import emit
    from defaults_vs_vw import VW_ARGS, VW_PASSES, run_vw, vw_available, world

    gen = world(args.world, args.ctr)
    skipped = vw_available(args.vw_python)
    compare = {int(r) for r in args.compare_rows.split(",") if r.strip()} if args.compare_rows else None
    work = args.workdir or tempfile.mkdtemp(prefix="per_arm_volume_")
    sizes = []
    try:
        for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
            directory = os.path.join(work, f"rows_{rows}")
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(directory)
            row, logs = run_size(gen, rows, directory, args.sample_seed, args.overrides)
            if args.compare_passes and (compare is None or rows in compare):
                row["trainer_paths"] = compare_passes(os.path.join(directory, "pipeline"), args.compare_passes)
            if skipped is None and rows <= args.vw_max_rows:
                row["vw"] = run_vw(gen, logs, directory, args.vw_python, VW_ARGS, VW_PASSES)
            del logs
            print(json.dumps(row), file=sys.stderr, flush=True)
            sizes.append(row)
            if not args.workdir:
                shutil.rmtree(directory, ignore_errors=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    first = sizes[0] if sizes else None
    emit(
        "per_arm_volume",
        world=args.world,
        ctr=args.ctr,
        overrides=args.overrides,
        vw_args=f"--cb_adf {VW_ARGS} --passes {VW_PASSES}",
        **({"vw_skipped": skipped} if skipped else {}),
        sizes=sizes,
        time_over_first=[round(s["run_wall_s"] / first["run_wall_s"], 2) for s in sizes] if first else [],
        peak_rss_over_first=[round(s["peak_rss_mb"] / first["peak_rss_mb"], 2) for s in sizes] if first else [],
    )


if __name__ == "__main__":
    main()
