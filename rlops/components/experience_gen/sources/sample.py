"""A sample of a file source's first records, for feature-kind inference (features.resolve_features).

CSV and JSON Lines: an Arrow parse of the first file's first megabyte; Parquet: its first rows;
TFRecord: the value kinds and widths of its first 100 tf.Examples.
"""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pyarrow as pa

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.sources.base import Sample, open_file
from rlops.components.experience_gen.sources.tfrecord import iter_tfrecords

SAMPLE_BYTES = 1 << 20


def sample_types(files: list[tuple[str, int]], src: FileSource) -> Sample:
    """Column -> (Arrow type, most common list length) from the first file with readable records,
    and the sampled columns themselves (multivalent dims are percentiles of their list lengths).
    Empty and header-only files are passed over; up to 10 unreadable ones are tried."""
    last: Exception | None = None
    tried: list[str] = []
    empty: list[str] = []
    for path, _ in files:
        if len(tried) >= 10:
            break
        try:
            if src.format == "tfrecord":
                return _tfrecord_types(path, src), {}
            table = _sample_table(path, src)
        except Exception as e:  # noqa: BLE001 - a broken file is quarantined later; try the next
            last = e
            tried.append(path)
            continue
        if table is None or table.num_rows == 0:  # nothing to infer from
            empty.append(path)
            continue
        return (
            {name: (table.schema.field(name).type, _width(table.column(name))) for name in table.column_names},
            {name: table.column(name) for name in table.column_names},
        )
    if last is None and empty:
        raise ValueError(f"experience_gen.source: no records to read: {emptiness(empty, src)}")
    raise ValueError(
        f"bandit_columns.features: could not read a sample of '{tried[0]}' to infer feature kinds "
        f"({' '.join(str(last).split())[:300]}); set kind and dtype explicitly"
    )


def _sample_table(path: str, src: FileSource) -> pa.Table | None:
    """The first rows of a Parquet file, or a parse of a text file's first MiB (None: no bytes)."""
    with open_file(path, src) as fh:
        if src.format == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(fh)
            batch = next(pf.iter_batches(batch_size=1000), None)
            return pa.Table.from_batches([batch]) if batch is not None else pf.schema_arrow.empty_table()
        data = fh.read(SAMPLE_BYTES)
    cut = data.rfind(b"\n")
    data = data[: cut + 1] if cut > 0 and len(data) == SAMPLE_BYTES else data
    return _parse_text(data, src) if data.strip() else None


def emptiness(paths: list[str], src: FileSource) -> str:
    """Which files hold no records, and how: empty (no bytes) or header-only (a CSV header)."""
    if len(paths) > 1:
        return f"all {len(paths)} files ('{paths[0]}', ...) are empty or header-only"
    with open_file(paths[0], src) as fh:
        header = src.format == "csv" and bool(fh.read(1 << 16).strip())
    return f"'{paths[0]}' is " + ("header-only (a CSV header, no records)" if header else "empty")


def _parse_text(data: bytes, src: FileSource) -> pa.Table:
    if src.format == "jsonl":
        import pyarrow.json as pjson

        try:
            return pjson.read_json(io.BytesIO(data))
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a few bad rows: infer from the most common shape
            return _tolerant_json(data)
    import pyarrow.csv as pcsv

    names = list(src.csv_column_names) or None
    # Ragged rows (a field too many or too few) are left out of the sample; the readers quarantine
    # them with file and line.
    return pcsv.read_csv(
        io.BytesIO(data),
        read_options=pcsv.ReadOptions(column_names=names),
        parse_options=pcsv.ParseOptions(delimiter=src.csv_delimiter, invalid_row_handler=lambda row: "skip"),
    )


def _tolerant_json(data: bytes) -> pa.Table:
    """The sample's rows parsed one by one; each column typed by its most common value shape
    (values of another shape, quarantined later, are left out of the sample)."""
    import json

    rows = []
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)

    def shape(v: object) -> object:
        if isinstance(v, list):  # the element types; an empty list fits any list shape
            return ("list",) + tuple(sorted({type(x).__name__ for x in v if x is not None}))
        return type(v).__name__

    def fits(v: object, keep: object) -> bool:
        return v is not None and (shape(v) == keep or (v == [] and isinstance(keep, tuple)))

    columns = {}
    for name in dict.fromkeys(k for r in rows for k in r):
        values = [r.get(name) for r in rows]
        common = Counter(shape(v) for v in values if v is not None and v != []).most_common(1)
        keep = common[0][0] if common else ("list",)
        try:
            columns[name] = pa.array([v if fits(v, keep) else None for v in values])
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            columns[name] = pa.nulls(len(values))
    return pa.table(columns)


def _width(column: pa.ChunkedArray) -> int | None:
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return None
    import pyarrow.compute as pc

    lengths = pc.list_value_length(column.combine_chunks()).drop_null().to_numpy(zero_copy_only=False)
    return int(np.bincount(lengths).argmax()) if len(lengths) else None


def _tfrecord_types(path: str, src: FileSource) -> dict[str, tuple[pa.DataType, int | None]]:
    import tensorflow as tf

    widths: dict[str, Counter] = {}
    kinds: dict[str, str] = {}
    with open_file(path, src) as fh:
        for n, (_, _, data, problem) in enumerate(iter_tfrecords(fh)):
            if problem or n >= 100:
                break
            for k, v in tf.train.Example.FromString(data).features.feature.items():
                kind = v.WhichOneof("kind")
                if kind:
                    kinds[k] = kind
                    widths.setdefault(k, Counter())[len(getattr(v, kind).value)] += 1
    arrow = {"bytes_list": pa.string(), "int64_list": pa.int64(), "float_list": pa.float32()}
    out = {}
    for k, kind in kinds.items():
        width = widths[k].most_common(1)[0][0]
        t = arrow[kind]
        out[k] = (pa.list_(t), width) if (width != 1 and kind == "float_list") else (t, None)
    return out
