"""The fault suite's figures: fault cases handled as designed, random malformed inputs with
honest counts, SIGKILL trials of the local pipeline, and peak RSS of a large ingestion.

    python benchmarks/faults.py                      # all of it (10M records; SIGKILL: 1 per component)
    python benchmarks/faults.py --records 1000000 --crash-trials 0
    python benchmarks/faults.py --records 100000 --fuzz 50 --crash-trials 0   # quick: cases, component trials, 1M eval

cases_tried / cases_handled:  the issue-11 findings and their neighbours, each run and checked
                              against its designed outcome (a clear error naming the key/file/
                              bytes, or per-record counts).
fuzz_inputs / fuzz_honest:    random malformed CSV/JSONL/Parquet (truncation, bad encodings,
                              BOMs, ragged rows, NaN/Inf, huge lines, gzip cut short, CR line
                              endings): honest = the run fails naming bytes or the file, or
                              read = valid + quarantined = the records the bytes hold.
records_lost:                 records in inputs that ingested "successfully" but were neither
                              written nor quarantined (must be 0).
sigkill_trials / survived:    benchmarks/_crash.py (the pipeline SIGKILLed inside each component).
component_sigkill_*:          the test suite's per-component trials (ExperienceGen, Trainer, Evaluator
                              core functions SIGKILLed at seeded random points, N=2 each, re-run into
                              the same URIs and compared with an uninterrupted run; _crash.component_trials).
ingest_peak_rss_mb:           `--records` bandit records (Parquet, `--features` floats) through
                              ExperienceGen with the DirectRunner, in a child process.
eval_1m_peak_rss_mb:          peak RSS of the Evaluator's computation on --eval-rows rows (ridge reward model,
                              every estimator, --eval-resamples streaming bootstrap resamples), in a child
                              process: benchmarks/ope_accuracy.py's memory measurement.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # benchmarks.ope_accuracy
from _common import emit  # noqa: E402

K = 4
HEADER = "x0,x1,action,reward,propensity"


# --- fault cases ---------------------------------------------------------------------------------


def _cfg(path: str, fmt: str = "csv", **kw):
    from rlops.components.experience_gen import BanditColumns, ExperienceGenConfig, FileSource, SpecConfig

    return ExperienceGenConfig(
        source=FileSource(pattern=path, format=fmt),
        bandit_columns=BanditColumns(context=("x0", "x1")),
        action_spec=SpecConfig.discrete(K),
        **kw,
    )


def _rows(n: int, p: str = "0.25") -> str:
    return "".join(f"{i * 0.1:.1f},{i * 0.2:.1f},{i % K},1.0,{p}\n" for i in range(n))


def _raises(fn: Callable[[], object], exc: type, pattern: str) -> bool:
    try:
        fn()
    except exc as e:
        return re.search(pattern, " ".join(str(e).split())) is not None
    return False


def _gen(tmp: str, name: str, cfg) -> object:
    from rlops.components.experience_gen import run_experience_gen

    return run_experience_gen(cfg, os.path.join(tmp, name, "ex"), os.path.join(tmp, name, "q"))


def fault_cases(tmp: str) -> dict[str, bool]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlops.components.experience_gen import ExperienceGenError, pipeline as eg_pipeline
    from rlops.components.experience_gen.sources import SourceError
    from rlops.pipelines.config import ConfigError, load_config

    def write(name: str, data: bytes) -> str:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    t = pa.table(
        {
            "x0": np.arange(2000.0),
            "x1": np.ones(2000),
            "action": np.arange(2000) % K,
            "reward": np.ones(2000),
            "propensity": np.full(2000, 0.25),
        }
    )
    sink = io.BytesIO()
    pq.write_table(t, sink, row_group_size=500)
    pblob = sink.getvalue()
    rg = pq.ParquetFile(io.BytesIO(pblob)).metadata.row_group(1)
    lo = rg.column(0).dictionary_page_offset
    hi = lo + sum(rg.column(i).total_compressed_size for i in range(rg.num_columns))
    torn_rg = bytearray(pblob)
    torn_rg[lo + 40 : hi - 40] = b"\0" * (hi - lo - 80)
    import tensorflow as tf

    tfr = os.path.join(tmp, "t.tfrecord")
    with tf.io.TFRecordWriter(tfr) as w:
        for i in range(400):
            ex = tf.train.Example()
            for c in ("x0", "x1", "reward", "propensity"):
                ex.features.feature[c].float_list.value.append(0.5)
            ex.features.feature["action"].int64_list.value.append(i % K)
            w.write(ex.SerializeToString())
    tblob = bytearray(open(tfr, "rb").read())
    tblob[len(tblob) // 2 : len(tblob) // 2 + 8] = b"\xff" * 8
    gz = gzip.compress((HEADER + "\n" + _rows(3000)).encode())
    cfg_err = lambda o, pat: _raises(lambda: load_config("bandit", overrides=[o]), ConfigError, pat)  # noqa: E731

    cases: dict[str, Callable[[], bool]] = {
        "header_only_csv": lambda: _raises(
            lambda: _gen(tmp, "h", _cfg(write("h.csv", (HEADER + "\n").encode()))),
            ExperienceGenError,
            "held no records",
        ),
        "split_smaller_than_batch": lambda: _raises(
            lambda: _gen(
                tmp, "s", _cfg(write("s.csv", (HEADER + "\n" + _rows(30)).encode()), min_split_records={"train": 32})
            ),
            ExperienceGenError,
            r"split 'train' got \d+ valid record",
        ),
        "parquet_unreadable_file": lambda: _raises(
            lambda: _gen(tmp, "p", _cfg(write("p.parquet", pblob[: len(pblob) // 2]), "parquet")),
            ExperienceGenError,
            r"p\.parquet bytes \[0, end of file\)",
        ),
        "parquet_corrupt_row_group": lambda: _raises(
            lambda: _gen(tmp, "rg", _cfg(write("rg.parquet", bytes(torn_rg)), "parquet")),
            ExperienceGenError,
            rf"rg\.parquet bytes \[{lo}, {hi}\): parquet: cannot read row group 1",
        ),
        "tfrecord_corrupt_tail": lambda: _raises(
            lambda: _gen(tmp, "tf", _cfg(write("c.tfrecord", bytes(tblob)), "tfrecord")),
            ExperienceGenError,
            r"c\.tfrecord bytes \[\d+, end",
        ),
        "gzip_cut_short": lambda: _raises(
            lambda: _gen(tmp, "gz", _cfg(write("c.csv.gz", gz[: len(gz) // 2]))), ExperienceGenError, "cut short"
        ),
        "csv_cr_only": lambda: _raises(
            lambda: _gen(tmp, "cr", _cfg(write("cr.csv", (HEADER + "\r" + _rows(50).replace("\n", "\r")).encode()))),
            SourceError,
            "CR-only",
        ),
        "csv_cr_after_header": lambda: _raises(
            lambda: _gen(tmp, "cr2", _cfg(write("cr2.csv", (HEADER + "\n" + _rows(50).replace("\n", "\r")).encode()))),
            ExperienceGenError,
            r"cr2\.csv bytes \[\d+, \d+\): line 2 holds bare carriage returns",
        ),
        "csv_non_utf8_header": lambda: _raises(
            lambda: eg_pipeline.make_plan(
                _cfg(write("l1.csv", "x0,x1,action,reward,propensit\xe9\n".encode("latin-1") + _rows(5).encode()))
            ),
            SourceError,
            "header line is not UTF-8",
        ),
        "tiny_propensity": lambda: _raises(
            lambda: _gen(tmp, "tiny", _cfg(write("tiny.csv", (HEADER + "\n" + _rows(20, "1e-46")).encode()))),
            ExperienceGenError,
            "propensity_below_floor: 20",
        ),
        "comma_pattern_part_matches_nothing": lambda: _raises(
            lambda: eg_pipeline.make_plan(
                _cfg(write("ok.csv", (HEADER + "\n" + _rows(5)).encode()) + f",{tmp}/nope*.csv")
            ),
            FileNotFoundError,
            "nope",
        ),
        "split_name_traversal": lambda: cfg_err("experience_gen.splits.splits=[{name: ../x}]", "split name"),
        "set_section_to_scalar": lambda: cfg_err("trainer=5", r"^trainer: expected a mapping"),
        "yaml_exponent_float": lambda: (
            load_config("bandit", overrides=["experience_gen.action_spec.maximum=1e1"]).trainer.num_actions == 11
        ),
        "enable_cache_typo": lambda: cfg_err("enable_cache=fasle", r"^enable_cache: expected true or false"),
        "train_steps_float": lambda: cfg_err("trainer.train_steps=2.5", r"^trainer.train_steps: expected an integer"),
        "bad_yaml_file": lambda: _raises(
            lambda: load_config("bandit", write("bad.yaml", b"a: [1,\n")),
            ConfigError,
            r"bad\.yaml: line \d+, column \d+: invalid YAML",
        ),
        "per_record_accounting": lambda: _accounting(tmp, write),
    }
    out = {}
    for name, fn in cases.items():
        try:
            out[name] = bool(fn())
        except Exception as e:  # noqa: BLE001 - an unexpected error is a case not handled as designed
            print(f"case {name}: {type(e).__name__}: {e}", file=sys.stderr)
            out[name] = False
    return out


def _accounting(tmp: str, write) -> bool:
    lines = (HEADER + "\n" + _rows(1000)).splitlines()
    lines[10], lines[20], lines[30] = "\udcff,1", "0.1,0.2,1", "0.1,0.2,9,1.0,0.5"
    path = write("acc.csv", ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    r = _gen(tmp, "acc", _cfg(path, max_bad_record_ratio=0.05))
    return (r.records_read, r.records_written, r.records_quarantined) == (1000, 997, 3)


# --- random malformed inputs -------------------------------------------------------------------------


def fuzz(tmp: str, n: int, seed: int) -> tuple[int, int, int]:
    """(inputs, honest outcomes, records lost) over n random malformed text files."""
    from rlops.components.experience_gen import pipeline as eg_pipeline
    from rlops.components.experience_gen.sources import Quarantined, SourceError, Unreadable

    rng = random.Random(seed)
    honest = lost_total = 0
    for i in range(n):
        fmt = rng.choice(["csv", "jsonl"])
        lines = []
        for _ in range(rng.randint(0, 40)):
            vals = [f"{rng.uniform(-3, 3):.3f}", f"{rng.uniform(-3, 3):.3f}", str(rng.randint(0, K - 1)), "1.0", "0.25"]
            kind = rng.choice(["ok", "ok", "nan", "ragged", "latin1", "huge", "blank"])
            if kind == "nan":
                vals[rng.randrange(5)] = rng.choice(["nan", "inf", "-inf", "1e-46", ""])
            elif kind == "ragged":
                vals = vals[: rng.randint(0, 4)]
            elif kind == "huge":
                vals[0] = "1" * rng.randint(70_000, 150_000)
            line = (",".join(vals) if fmt == "csv" else json.dumps(dict(zip(HEADER.split(","), vals)))).encode()
            if kind == "latin1":
                line = line.replace(b"1.0", "\xe91.0".encode("latin-1"))
            lines.append(b"  " if kind == "blank" else line)
        eol = rng.choice([b"\n", b"\n", b"\r\n", b"\r"])
        data = eol.join(lines) + eol
        if fmt == "csv":
            data = HEADER.encode() + b"\n" + data
        if rng.random() < 0.2:
            data = b"\xef\xbb\xbf" + data
        damage = rng.choice(["none", "truncate", "gzip", "gzip_cut"])
        if damage == "truncate":
            data = data[: rng.randint(0, len(data))]
        expected = sum(
            1
            for x in re.split(
                rb"\r\n|\n|\r",
                data.split(b"\n", 1)[1] if fmt == "csv" and b"\n" in data else b"" if fmt == "csv" else data,
            )
            if x.strip()
        )
        blob = gzip.compress(data) if damage.startswith("gzip") else data
        if damage == "gzip_cut":
            blob = blob[: rng.randint(0, len(blob) - 1)]
        path = os.path.join(tmp, f"fz{i}.{fmt}" + (".gz" if damage.startswith("gzip") else ""))
        with open(path, "wb") as f:
            f.write(blob)
        try:
            plan = eg_pipeline.make_plan(_cfg(path, fmt))
        except (SourceError, ValueError):
            honest += 1  # a clear error before reading
            continue
        read = valid = bad = 0
        unreadable = False
        try:
            for item in plan.items:
                for k, out in eg_pipeline.ingest(plan, item):
                    read += k
                    if isinstance(out, Quarantined):
                        bad += 1
                    elif isinstance(out, Unreadable):
                        unreadable = True
                    else:
                        valid += len(out)
        except Exception as e:  # noqa: BLE001 - a crash is not an honest outcome
            print(f"fuzz {path}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if unreadable:
            honest += 1  # the run fails, naming the unreadable bytes
        elif read == valid + bad and read == expected and damage != "gzip_cut":
            honest += 1
        else:  # a gzip cut short that "succeeds", or counts that do not add up
            print(
                f"fuzz {path}: dishonest: read {read}, valid {valid}, quarantined {bad}, held {expected}",
                file=sys.stderr,
            )
            lost_total += abs(expected - read)
    return n, honest, lost_total


# --- large ingestion: peak RSS -------------------------------------------------------------------------


def _ingest_child(path: str, out: str, features: int) -> None:
    from rlops.components.experience_gen import (
        BanditColumns,
        ExperienceGenConfig,
        FileSource,
        SpecConfig,
        run_experience_gen,
    )

    config = ExperienceGenConfig(
        source=FileSource(pattern=path, format="parquet"),
        bandit_columns=BanditColumns(context_prefix="x", context_dim=features),
        action_spec=SpecConfig.discrete(K),
    )
    t = time.perf_counter()
    r = run_experience_gen(
        config,
        os.path.join(out, "ex"),
        os.path.join(out, "q"),
        ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"],
    )
    print(
        json.dumps(
            {
                "records_read": r.records_read,
                "records_written": r.records_written,
                "seconds": round(time.perf_counter() - t, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
            }
        )
    )


def large_ingest(tmp: str, records: int, features: int) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(tmp, "big.parquet")
    rng = np.random.default_rng(0)
    chunk = 500_000
    with pq.ParquetWriter(
        path,
        pa.schema(
            [(f"x{i}", pa.float32()) for i in range(features)]
            + [("action", pa.int64()), ("reward", pa.float32()), ("propensity", pa.float32())]
        ),
    ) as w:
        for start in range(0, records, chunk):
            m = min(chunk, records - start)
            cols = {f"x{i}": rng.random(m, dtype=np.float32) for i in range(features)}
            cols.update(
                action=rng.integers(0, K, m),
                reward=rng.integers(0, 2, m).astype(np.float32),
                propensity=np.full(m, 1.0 / K, np.float32),
            )
            w.write_table(pa.table(cols), row_group_size=100_000)
    out = subprocess.run(
        [sys.executable, __file__, "--ingest-child", path, os.path.join(tmp, "big"), str(features)],
        capture_output=True,
        text=True,
    )
    os.remove(path)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000, help="records of the large ingestion (0: skip)")
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--fuzz", type=int, default=300, help="random malformed inputs")
    parser.add_argument("--crash-trials", type=int, default=1, help="SIGKILL trials per component (0: skip)")
    parser.add_argument("--component-trials", type=int, default=1, help="per-component SIGKILL trials (0: skip)")
    parser.add_argument("--eval-rows", type=int, default=1_000_000, help="rows of the evaluation memory run (0: skip)")
    parser.add_argument("--eval-resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ingest-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ingest_child:
        _ingest_child(args.ingest_child[0], args.ingest_child[1], int(args.ingest_child[2]))
        return
    from rlops.quiet import quiet_startup

    quiet_startup()
    with tempfile.TemporaryDirectory(prefix="rlops-faults-") as tmp:
        cases = fault_cases(tmp)
        n_fuzz, fuzz_honest, lost = fuzz(tmp, args.fuzz, args.seed)
        crash = {}
        if args.crash_trials:
            import _crash

            crash = _crash.crash_trials(
                os.path.join(tmp, "crash"),
                args.crash_trials,
                args.seed,
                log=lambda m: print(m, file=sys.stderr, flush=True),
            )
        comp = {}
        if args.component_trials:
            import _crash

            comp = _crash.component_trials(log=lambda m: print(m, file=sys.stderr, flush=True))
        big = large_ingest(tmp, args.records, args.features) if args.records else {}
    ev = {}
    if args.eval_rows:
        from benchmarks.ope_accuracy import memory

        ev = memory(args.eval_rows, args.eval_resamples)
    failed = sorted(k for k, ok in cases.items() if not ok)
    emit(
        "faults",
        cases_tried=len(cases) + n_fuzz,
        cases_handled=sum(cases.values()) + fuzz_honest,
        fault_cases=len(cases),
        fault_cases_handled=sum(cases.values()),
        fault_cases_failed=failed,
        fuzz_inputs=n_fuzz,
        fuzz_honest=fuzz_honest,
        records_lost=lost,
        sigkill_trials=crash.get("trials", 0),
        sigkill_survived=crash.get("survived", 0),
        sigkill_rerun_ok=crash.get("rerun_ok"),
        sigkill_failures=crash.get("failures", []),
        component_sigkill_trials=comp.get("trials", 0),
        component_sigkill_survived=comp.get("survived", 0),
        component_sigkill=comp.get("per_component", {}),
        component_sigkill_failures=comp.get("failures", []),
        ingest_records=big.get("records_read"),
        ingest_seconds=big.get("seconds"),
        ingest_peak_rss_mb=big.get("peak_rss_mb"),
        eval_rows=ev.get("rows"),
        eval_resamples=ev.get("resamples"),
        eval_seconds=round(ev["seconds"], 1) if ev else None,
        eval_1m_peak_rss_mb=round(ev["peak_rss_mb"], 1) if ev else None,
    )


if __name__ == "__main__":
    main()
