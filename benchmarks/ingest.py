"""ExperienceGen ingestion throughput: bandit logs (N records x 64 float features) from CSV and
Parquet to validated, split, gzipped TFRecords with Beam's DirectRunner.

For each format it also times a ceiling: a plain single-process loop that only parses the same
file and writes the same gzipped TFRecords (Arrow parse, RecordBatchToExamples, TFRecord
framing, zlib at the same level), no validation, no splits, no Beam; for slates the loop also
sorts the rows into pages and lays them out (numpy). Each measurement runs in its own process so
peak RSS is its own; both clocks start after the imports (TensorFlow, Beam, tfx_bsl: process
start-up, not per-record work) and each also reports its CPU seconds (all threads), steadier
than wall time on a shared machine; --repeats N keeps the fastest of N runs of each.

    python benchmarks/ingest.py --records 1000000
    python benchmarks/ingest.py --records 1000000 --case categorical   # named features (no ceiling)
    python benchmarks/ingest.py --records 1000000 --case multivalent   # + two list columns
The slate case logs pages of SLATE_LENGTH items, one row per shown item (slate_id, 1-based
position, item, reward, propensity, propensity_cascade, the four hashed user columns), grouped
into slates by the pipeline; --records counts slot rows, as the throughput does.
The categorical case logs production-shaped records instead: four hashed 32-hex-char user columns
(5-50 values each), four floats and a position, ingested as named features (kinds inferred,
vocabularies and float statistics computed in the pipeline). The multivalent case adds two
multivalent categoricals of 1-8 values each: `interests` (40 hashed string ids) and `tags` (int64
ids 0-99), as Parquet list columns or "|"-separated CSV cells. It prints one JSON line: per format
records_per_s, ceiling_records_per_s, ratio, cpu_ratio (ceiling CPU seconds / pipeline CPU seconds),
peak_rss_mb (pipeline), ceiling_peak_rss_mb; top-level figures are the worst format's.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # an entry point that loads TFX: see rlops/quiet.py

NUM_ACTIONS = 10


USERS = {"user_a": 5, "user_b": 12, "user_c": 30, "user_d": 50}
CATEGORICAL_FEATURES = list(USERS) + ["f0", "f1", "f2", "f3", "position"]
MULTIVALENT_FEATURES = ["interests", "tags"]
MAX_VALUES = 8
SLATE_LENGTH = 3


def _lists(rng, m: int, values, fmt: str):
    """m lists of 1..MAX_VALUES values drawn from `values` (a "|"-joined string per row for CSV)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = rng.integers(1, MAX_VALUES + 1, m)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    flat = values[rng.integers(0, len(values), int(lengths.sum()))]
    arr = pa.ListArray.from_arrays(offsets, pa.array(flat.tolist() if flat.dtype == object else flat))
    if fmt == "csv":
        arr = pc.binary_join(pc.cast(arr, pa.list_(pa.string())), "|")
    return arr


def generate(path: str, fmt: str, n: int, features: int, seed: int = 0, case: str = "float") -> None:
    """Logged decisions from a uniform-random policy: contexts in [0, 1] with 4 decimals (float
    case), or hashed user columns + floats + position (categorical case)."""
    import hashlib

    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    vocab = {
        c: np.array([hashlib.md5(f"{c}{i}".encode()).hexdigest() for i in range(k)], object) for c, k in USERS.items()
    }
    interests = np.array([hashlib.md5(f"interest{i}".encode()).hexdigest()[:12] for i in range(40)], object)
    chunk = 99_999 if case == "slate" else 100_000  # slates: whole pages per chunk
    writer = None
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        if case == "slate":  # rows of pages: m is a multiple of SLATE_LENGTH (chunk and n are)
            pages = m // SLATE_LENGTH
            first = start // SLATE_LENGTH
            items = np.argsort(rng.random((pages, NUM_ACTIONS)), 1)[:, :SLATE_LENGTH]  # uniform, no repeats
            cascade = np.cumprod(1.0 / (NUM_ACTIONS - np.arange(SLATE_LENGTH)))
            cols = {
                c: pa.array(np.repeat(v[rng.integers(0, len(v), pages)], SLATE_LENGTH).tolist())
                for c, v in vocab.items()
            }
            cols["slate_id"] = pa.array(np.repeat(np.arange(first, first + pages), SLATE_LENGTH))
            cols["position"] = pa.array(np.tile(np.arange(1, SLATE_LENGTH + 1), pages))
            cols["item"] = pa.array(items.ravel())
            cols["reward"] = pa.array(rng.integers(0, 2, m).astype(np.float64))
            cols["propensity"] = pa.array(np.full(m, 1.0 / NUM_ACTIONS))
            cols["propensity_cascade"] = pa.array(np.tile(cascade, pages))
            table = pa.table(cols)
            writer = _write(writer, table, path, fmt, chunk)
            continue
        if case in ("categorical", "multivalent"):
            cols = {c: pa.array(v[rng.integers(0, len(v), m)].tolist()) for c, v in vocab.items()}
            cols.update({f"f{i}": pa.array(np.round(rng.normal(size=m), 4)) for i in range(4)})
            cols["position"] = pa.array(rng.integers(0, 3, m))
            if case == "multivalent":
                cols["interests"] = _lists(rng, m, interests, fmt)
                cols["tags"] = _lists(rng, m, np.arange(100, dtype=np.int64), fmt)
        else:
            cols = {f"x{i}": pa.array(np.round(rng.random(m, dtype=np.float32), 4)) for i in range(features)}
        cols["action"] = pa.array(rng.integers(0, NUM_ACTIONS, m))
        cols["reward"] = pa.array(rng.integers(0, 2, m).astype(np.float64))
        cols["propensity"] = pa.array(np.full(m, 1.0 / NUM_ACTIONS))
        cols["user_id"] = pa.array(rng.integers(0, 1 << 40, m))
        table = pa.table(cols)
        writer = _write(writer, table, path, fmt, chunk)
    writer.close()


def _write(writer, table, path: str, fmt: str, chunk: int):
    """Append a table to the CSV or Parquet file (the writer made on the first call)."""
    if fmt == "csv":
        import pyarrow.csv as pcsv

        writer = writer or pcsv.CSVWriter(path, table.schema)
        writer.write_table(table)
    else:
        import pyarrow.parquet as pq

        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=chunk)
    return writer


def run_pipeline(path: str, fmt: str, out: str, features: int, beam_args: list[str], case: str = "float") -> dict:
    import tensorflow  # noqa: F401 - the run imports it (clearing outputs, the schema): start-up, off the clock

    from rlops.components.experience_gen import (
        BanditColumns,
        ExperienceGenConfig,
        FileSource,
        SlateColumns,
        SpecConfig,
        SplitConfig,
        run_experience_gen,
    )
    from rlops.components.experience_gen.config import FeatureColumn

    if case == "slate":
        config = ExperienceGenConfig(
            record_kind="slate",
            source=FileSource(pattern=path, format=fmt),
            slate_columns=SlateColumns(
                item_id="item",
                propensity_cascade="propensity_cascade",
                features=tuple(FeatureColumn(c) for c in USERS),
            ),
            slate_length=SLATE_LENGTH,
            action_spec=SpecConfig.discrete(NUM_ACTIONS),
        )
        t, cpu = time.perf_counter(), _cpu_seconds()
        result = run_experience_gen(config, os.path.join(out, "examples"), os.path.join(out, "quarantine"), beam_args)
        seconds, cpu = time.perf_counter() - t, _cpu_seconds() - cpu
        slates = sum(result.outputs_per_split.values())
        return {
            "records": result.records_written,
            "quarantined": result.records_quarantined,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "slates": slates,
        }

    named = tuple(FeatureColumn(c) for c in CATEGORICAL_FEATURES)
    if case == "multivalent":  # dims inferred (the 99th percentile of the sample's list lengths: 8)
        sep = "|" if fmt == "csv" else None
        named += (
            FeatureColumn("interests", kind="categorical", separator=sep),
            FeatureColumn("tags", kind="categorical", dtype="int64", separator=sep, multivalent=True),
        )
    columns = (
        BanditColumns(features=named) if case != "float" else BanditColumns(context_prefix="x", context_dim=features)
    )
    config = ExperienceGenConfig(
        source=FileSource(pattern=path, format=fmt),
        bandit_columns=columns,
        action_spec=SpecConfig.discrete(NUM_ACTIONS),
        splits=SplitConfig(key="user_id"),
    )
    t, cpu = time.perf_counter(), _cpu_seconds()
    result = run_experience_gen(config, os.path.join(out, "examples"), os.path.join(out, "quarantine"), beam_args)
    seconds, cpu = time.perf_counter() - t, _cpu_seconds() - cpu
    return {
        "records": result.records_written,
        "quarantined": result.records_quarantined,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "truncated": sum(result.truncated.values()),
    }


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far, all its threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_ceiling(path: str, fmt: str, out: str, features: int, level: int = 1) -> dict:
    """Parse + encode + frame + gzip in one loop: the cost of the work itself."""
    import numpy as np
    import pyarrow as pa
    from tfx_bsl.coders import example_coder

    from rlops.components.experience_gen.sinks import frame_records, gzip_compressor

    names = [f"x{i}" for i in range(features)]
    t, cpu = time.perf_counter(), _cpu_seconds()
    if fmt == "csv":
        wanted = names + ["action", "reward", "propensity"]
        batches = _csv_batches(path, {c: pa.int64() if c == "action" else pa.float32() for c in wanted})
    else:
        import pyarrow.parquet as pq

        batches = pq.ParquetFile(path).iter_batches(
            batch_size=65536, columns=names + ["action", "reward", "propensity"]
        )
    n = 0
    zip_ = gzip_compressor(level)  # the pipeline's compressor (ISA-L if installed, else zlib)
    with open(os.path.join(out, "ceiling.tfrecord.gz"), "wb") as f:
        for rb in batches:
            m = rb.num_rows
            ctx = np.column_stack([rb.column(c).to_numpy() for c in names]).astype(np.float32, copy=False)

            def lists(v: np.ndarray, m: int = m) -> pa.ListArray:
                w = 1 if v.ndim == 1 else v.shape[1]
                return pa.ListArray.from_arrays(
                    pa.array(np.arange(0, m * w + 1, w, dtype=np.int32)), pa.array(v.reshape(-1))
                )

            enc = pa.RecordBatch.from_arrays(
                [
                    lists(ctx),
                    lists(rb.column("action").to_numpy()),
                    lists(rb.column("reward").to_numpy().astype(np.float32)),
                    lists(rb.column("propensity").to_numpy().astype(np.float32)),
                ],
                ["context", "action", "reward", "propensity"],
            )
            f.write(zip_.compress(frame_records(example_coder.RecordBatchToExamples(enc))))
            n += m
        f.write(zip_.flush())
    return {"records": n, "seconds": time.perf_counter() - t, "cpu_seconds": _cpu_seconds() - cpu}


SLATE_TYPES = {
    "slate_id": "int64",
    "position": "int64",
    "item": "int64",
    "reward": "float32",
    "propensity": "float32",
    "propensity_cascade": "float32",
    **{c: "string" for c in USERS},
}


def run_slate_ceiling(path: str, fmt: str, out: str, level: int = 1, chunk: int = 8192) -> dict:
    """Slate rows -> slate records in one loop: parse, sort the rows into pages, lay each page's
    slots out, encode, frame, gzip (no validation, no page checks, no splits, no Beam)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from tfx_bsl.coders import example_coder

    from rlops.components.experience_gen.sinks import frame_records, gzip_compressor

    types = {c: getattr(pa, t)() for c, t in SLATE_TYPES.items()}
    t, cpu = time.perf_counter(), _cpu_seconds()
    if fmt == "csv":
        table = pa.Table.from_batches(list(_csv_batches(path, types)))
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=list(types))
    cols = {c: table.column(c).to_numpy() for c in types if types[c] != pa.string()}
    order = np.lexsort((cols["position"], cols["slate_id"]))
    ids = cols["slate_id"][order]
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    counts = np.diff(np.append(starts, len(ids)))
    page = np.repeat(np.arange(len(starts)), counts)
    slot = cols["position"][order] - 1

    def laid(values: np.ndarray, fill: float, dtype: type) -> np.ndarray:
        out = np.full((len(starts), SLATE_LENGTH), fill, dtype)
        out[page, slot] = values[order]
        return out

    def lists(v: np.ndarray) -> pa.ListArray:
        w = 1 if v.ndim == 1 else v.shape[1]
        return pa.ListArray.from_arrays(pa.array(np.arange(0, len(v) * w + 1, w, dtype=np.int32)), pa.array(v.ravel()))

    first = order[starts]
    slots = {
        "slate": laid(cols["item"], -1, np.int64),
        "reward": laid(cols["reward"], 0.0, np.float32),
        "propensity": laid(cols["propensity"], 1.0, np.float32),
        "propensity_cascade": laid(cols["propensity_cascade"], 0.0, np.float32),
    }
    users = {c: pc.cast(table.column(c).take(pa.array(first)).combine_chunks(), pa.binary()) for c in USERS}
    page_ids = pc.cast(pc.cast(pa.array(ids[starts]), pa.string()), pa.binary())
    zip_ = gzip_compressor(level)
    with open(os.path.join(out, "ceiling.tfrecord.gz"), "wb") as f:
        for lo in range(0, len(starts), chunk):
            hi = min(lo + chunk, len(starts))
            arrays = [
                pa.ListArray.from_arrays(pa.array(np.arange(hi - lo + 1, dtype=np.int32)), users[c][lo:hi])
                for c in USERS
            ]
            arrays.append(pa.ListArray.from_arrays(pa.array(np.arange(hi - lo + 1, dtype=np.int32)), page_ids[lo:hi]))
            arrays += [lists(v[lo:hi]) for v in slots.values()]
            arrays += [lists(counts[lo:hi].astype(np.int64)), lists(np.full(hi - lo, NUM_ACTIONS, np.int64))]
            names = [*USERS, "slate_id", *slots, "slate_length", "num_actions"]
            enc = pa.RecordBatch.from_arrays(arrays, names)
            f.write(zip_.compress(frame_records(example_coder.RecordBatchToExamples(enc))))
        f.write(zip_.flush())
    return {"records": len(ids), "seconds": time.perf_counter() - t, "cpu_seconds": _cpu_seconds() - cpu}


def _csv_batches(path: str, types: dict, block: int = 16 << 20):
    """Line-aligned 16 MiB blocks, each parsed by Arrow's multi-threaded CSV reader."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from rlops.components.experience_gen.sources.text import no_heap_scan

    with open(path, "rb") as f:
        names = next(csv.reader([f.readline().decode()]))
        opts = dict(
            read_options=pcsv.ReadOptions(column_names=names),
            convert_options=pcsv.ConvertOptions(column_types=types, include_columns=list(types)),
        )
        rest = b""
        while True:
            more = f.read(block)
            buf = rest + more
            if not buf:
                return
            cut = buf.rfind(b"\n") + 1 if more else len(buf)
            data, rest = buf[:cut], buf[cut:]
            with no_heap_scan():
                table = pcsv.read_csv(pa.BufferReader(data), **opts)
            yield from table.to_batches()
            if not more:
                return


def _child(args: argparse.Namespace) -> None:
    if args.child == "pipeline":
        out = run_pipeline(args.data, args.format, args.out, args.features, args.beam_args.split(), args.case)
    elif args.case == "slate":
        out = run_slate_ceiling(args.data, args.format, args.out)
    else:
        out = run_ceiling(args.data, args.format, args.out, args.features)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out))


def _measure(kind: str, data: str, fmt: str, out: str, args: argparse.Namespace) -> dict:
    os.makedirs(out, exist_ok=True)
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--data",
        data,
        "--format",
        fmt,
        "--out",
        out,
        "--features",
        str(args.features),
        f"--beam-args={args.beam_args}",
        "--case",
        args.case,
    ]
    runs = []
    for _ in range(args.repeats):  # the best of a few runs: on a shared machine the others were slowed
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0:
            raise RuntimeError(f"{kind} on {fmt} failed:\n{proc.stderr[-4000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["seconds"])
    return {**best, "cpu_seconds": min(r["cpu_seconds"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--formats", default="csv,parquet")
    ap.add_argument("--case", choices=["float", "categorical", "multivalent", "slate"], default="float")
    ap.add_argument(
        "--beam-args",
        default="--runner=DirectRunner",
        help="Beam pipeline options, space separated; pass as --beam-args='--direct_num_workers=2 ...'",
    )
    ap.add_argument("--workdir", default=None, help="keep data and outputs here (default: a temp dir, removed)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each measurement; the fastest is reported")
    ap.add_argument("--child", choices=["pipeline", "ceiling"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--format", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args)

    if args.case == "slate":
        args.records -= args.records % SLATE_LENGTH  # whole pages
    work = args.workdir or tempfile.mkdtemp(prefix="rlops-ingest-")
    os.makedirs(work, exist_ok=True)
    from rlops.components.experience_gen import sinks

    report: dict = {
        "benchmark": "ingest",
        "case": args.case,
        "records": args.records,
        "features": args.features
        if args.case == "float"
        else list(USERS)
        if args.case == "slate"
        else CATEGORICAL_FEATURES + (MULTIVALENT_FEATURES if args.case == "multivalent" else []),
        "runner": "DirectRunner",
        "beam_args": args.beam_args,
        "cpus": os.cpu_count(),
        "gzip": sinks.GZIP_IMPL,
        "repeats": args.repeats,
    }
    try:
        for fmt in args.formats.split(","):
            data = os.path.join(work, f"logs.{fmt}")
            t = time.perf_counter()
            generate(data, fmt, args.records, args.features, case=args.case)
            gen_s = time.perf_counter() - t
            # The ceiling loops encode the dense float context or slates; the categorical cases have none.
            ceiling = (
                _measure("ceiling", data, fmt, os.path.join(work, f"ceiling-{fmt}"), args)
                if args.case in ("float", "slate")
                else {"records": 0, "seconds": float("nan"), "cpu_seconds": float("nan"), "peak_rss_mb": 0.0}
            )
            pipe = _measure("pipeline", data, fmt, os.path.join(work, f"pipeline-{fmt}"), args)
            if pipe["quarantined"]:
                raise RuntimeError(f"{fmt}: {pipe['quarantined']} records quarantined")
            rate = pipe["records"] / pipe["seconds"]
            ceil_rate = ceiling["records"] / ceiling["seconds"] if ceiling["records"] else float("nan")
            report[fmt] = {
                "records_per_s": round(rate),
                "ceiling_records_per_s": round(ceil_rate) if ceil_rate == ceil_rate else None,
                "ratio": round(rate / ceil_rate, 3) if ceil_rate == ceil_rate else None,
                "cpu_ratio": round(ceiling["cpu_seconds"] / pipe["cpu_seconds"], 3) if ceil_rate == ceil_rate else None,
                "cpu_seconds": round(pipe["cpu_seconds"], 2),
                "peak_rss_mb": round(pipe["peak_rss_mb"], 1),
                "ceiling_peak_rss_mb": round(ceiling["peak_rss_mb"], 1),
                "truncated": pipe.get("truncated", 0),
                "seconds": round(pipe["seconds"], 2),
                "input_mb": round(os.path.getsize(data) / 2**20, 1),
                "generate_seconds": round(gen_s, 1),
            }
            if "slates" in pipe:
                report[fmt]["slates"] = pipe["slates"]
        formats = [f for f in args.formats.split(",")]
        worst = min(formats, key=lambda f: report[f]["records_per_s"])
        report.update({k: report[worst][k] for k in ("records_per_s", "ceiling_records_per_s", "ratio")})
        report["ratio"] = min((report[f]["ratio"] for f in formats if report[f]["ratio"] is not None), default=None)
        report["peak_rss_mb"] = max(report[f]["peak_rss_mb"] for f in formats)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
