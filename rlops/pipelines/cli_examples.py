"""`rlops examples`: the records of an Examples directory as CSV, to look at what ExperienceGen wrote.

    rlops examples DIR [--split NAME] [--columns a,b,...] [--limit N]

DIR is an Examples directory in TFX's layout (DIR/Split-<name>/*.gz: gzipped TFRecord shards), a
local path or gs://bucket/path. Prints a header row, then one row per record (bandit decisions,
slates) or per step (trajectories: one SequenceExample per episode, each step a row with its
`episode_id` and `step`), every split unless --split (splits in sorted name order, the files of a
split in sorted order). Columns: `split`, the context features (in the order of the feature schema
ExperienceGen writes beside the records, else sorted), then the record's other fields in a fixed
order (action, reward, propensity, decision_id, ... split_unit, split_content). A list-valued cell
joins its values with "|"; bytes print as UTF-8; a field a record lacks prints as an empty cell.

--columns picks and orders the columns; --limit stops after N rows in all. Records are read a file
at a time: a first pass finds the columns (stopping as soon as every --columns name is found, or
after --limit rows), a second prints. Bad input (no directory, no Split-* folder, an unknown split
or column) prints one line `rlops: examples: ...` and exits 2.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from rlops.components.common.records import (
    ACTION,
    ACTION_MASK,
    DECISION_ID,
    DISCOUNT,
    EPISODE_ID,
    LENGTH,
    NEXT_STEP_TYPE,
    NUM_ACTIONS,
    OBSERVATION,
    PER_ARM_PREFIX,
    POLICY_INFO_PREFIX,
    PROPENSITY,
    REWARD,
    SPLIT_CONTENT,
    SPLIT_UNIT,
    STEP,
    STEP_TYPE,
    TFRECORD_SUFFIX,
    TIMESTAMP,
    WEIGHT,
)
from rlops.components.common.slates import PROPENSITY_CASCADE, SLATE, SLATE_ID, SLATE_LENGTH
from rlops.components.experience_gen.errors import closest

if TYPE_CHECKING:
    from tensorflow.core.example.example_pb2 import SequenceExample
    from tensorflow.core.example.feature_pb2 import Feature

SPLIT_COLUMN = "split"
SPLIT_PREFIX = "Split-"
LIST_SEPARATOR = "|"

# The fields of a record other than its context features, in the order they print; the prefixes
# stand for their groups: per_arm/<name> (the schema's order, else sorted), policy_info/<path> (sorted).
RECORD_ORDER = (
    EPISODE_ID,
    STEP,
    OBSERVATION,
    ACTION,
    REWARD,
    PROPENSITY,
    DECISION_ID,
    ACTION_MASK,
    WEIGHT,
    TIMESTAMP,
    NUM_ACTIONS,
    PER_ARM_PREFIX,
    SLATE_ID,
    SLATE,
    SLATE_LENGTH,
    PROPENSITY_CASCADE,
    DISCOUNT,
    STEP_TYPE,
    NEXT_STEP_TYPE,
    LENGTH,
    POLICY_INFO_PREFIX,
    SPLIT_UNIT,
    SPLIT_CONTENT,
)
_GROUPS = (PER_ARM_PREFIX, POLICY_INFO_PREFIX)
_RECORD_FIELDS = frozenset(n for n in RECORD_ORDER if n not in _GROUPS)


class ExamplesError(ValueError):
    """Bad input: no such directory, not an Examples directory, an unknown split or column."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("examples", help="print the records of an Examples directory as CSV")
    p.add_argument("examples_dir", metavar="DIR", help="Examples directory (Split-<name>/*.gz), local or gs://")
    p.add_argument("--split", metavar="NAME", help="print only this split (default: every split, in name order)")
    p.add_argument(
        "--columns",
        metavar="A,B,...",
        help="the columns to print, in this order (default: split, the features, then the record's fields)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="stop after N rows in all")
    p.set_defaults(handler=main)
    return p


def main(args: argparse.Namespace) -> int:
    columns = None if args.columns is None else [c.strip() for c in args.columns.split(",") if c.strip()]
    try:
        header, rows = open_examples(args.examples_dir, args.split, columns, args.limit)
    except ExamplesError as e:
        print(f"rlops: examples: {e}", file=sys.stderr)
        return 2
    writer = csv.writer(sys.stdout, lineterminator="\n")
    try:
        writer.writerow(header)
        for row in rows:
            writer.writerow(row)
        sys.stdout.flush()
    except BrokenPipeError:  # `rlops examples DIR | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit would fail on the closed pipe
        os.close(devnull)
    return 0


# --- reading ----------------------------------------------------------------------------------


def read_examples(
    examples_dir: str,
    split: str | None = None,
    columns: Sequence[str] | None = None,
    limit: int | None = None,
) -> tuple[list[str], list[list[str]]]:
    """The header and every row `rlops examples` prints (cells as strings). Raises ExamplesError
    for bad input. open_examples streams the rows instead."""
    header, rows = open_examples(examples_dir, split, columns, limit)
    return header, list(rows)


def open_examples(
    examples_dir: str,
    split: str | None = None,
    columns: Sequence[str] | None = None,
    limit: int | None = None,
) -> tuple[list[str], Iterator[list[str]]]:
    """The header and an iterator over the rows, one file read at a time. Every check (the
    directory, the split, the columns) runs before this returns: it raises ExamplesError."""
    if limit is not None and limit < 0:
        raise ExamplesError(f"--limit {limit}: give a number of rows, 0 or more")
    if columns is not None and not columns:
        raise ExamplesError("--columns names no column")
    splits = _splits(examples_dir, split)
    files = {name: _files(examples_dir, name) for name in splits}
    known = _discover(files, limit, None if columns is None else set(columns))
    if columns is None:
        header = _order(known, examples_dir)
    else:
        header = list(columns)
        for name in header:
            if name not in known:
                raise ExamplesError(
                    f"no column '{name}' in {examples_dir}; {closest(name, _order(known, examples_dir))}"
                )
    return header, _rows(files, header, limit)


def _splits(examples_dir: str, split: str | None) -> list[str]:
    """The split names of `examples_dir`, sorted (or [split], checked)."""
    if "://" not in examples_dir and not os.path.isdir(examples_dir):  # local: no TensorFlow to say so
        raise ExamplesError(f"no directory {examples_dir}")
    import tensorflow as tf

    if not tf.io.gfile.isdir(examples_dir):
        raise ExamplesError(f"no directory {examples_dir}")
    names = sorted(
        entry.rstrip("/")[len(SPLIT_PREFIX) :]
        for entry in tf.io.gfile.listdir(examples_dir)
        if entry.startswith(SPLIT_PREFIX) and tf.io.gfile.isdir(os.path.join(examples_dir, entry.rstrip("/")))
    )
    if not names:
        raise ExamplesError(f"no {SPLIT_PREFIX}* folder in {examples_dir}: not an Examples directory")
    if split is None:
        return names
    if split not in names:
        raise ExamplesError(f"no split '{split}' in {examples_dir}; its splits: {', '.join(names)}")
    return [split]


def _files(examples_dir: str, split: str) -> list[str]:
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(os.path.join(examples_dir, SPLIT_PREFIX + split, "*" + TFRECORD_SUFFIX)))


def _records(paths: Sequence[str]) -> Iterator[SequenceExample]:
    """Each record of the files in turn, as a SequenceExample: a tf.Example's wire format is a
    SequenceExample's with only its context, so one parse reads bandit, slate and trajectory records."""
    import tensorflow as tf

    for path in paths:
        for record in tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator():
            yield tf.train.SequenceExample.FromString(record)


def _steps(record: SequenceExample) -> int:
    """How many rows a record prints: 1 for a tf.Example, one per step for an episode."""
    lists = record.feature_lists.feature_list
    return max((len(lists[k].feature) for k in lists), default=0) if lists else 1


def _discover(files: dict[str, list[str]], limit: int | None, wanted: set[str] | None) -> set[str]:
    """The column names of the rows to print: the first `limit` rows' fields (every row's, when
    `wanted` names the columns to find: it stops once they are all found)."""
    known = {SPLIT_COLUMN}
    rows = 0
    for paths in files.values():
        for record in _records(paths):
            if wanted is None and limit is not None and rows >= limit:
                return known
            if wanted is not None and wanted <= known:
                return known
            known.update(record.context.feature.keys())
            if record.feature_lists.feature_list:
                known.update(record.feature_lists.feature_list.keys())
                known.add(STEP)
            rows += _steps(record)
    return known


def _order(known: set[str], examples_dir: str) -> list[str]:
    """`split`, the features (the schema's order, then any others sorted), the record's fields."""
    from rlops.features.schema import FeatureSchemaError, load

    try:
        schema = load(examples_dir)
    except (FeatureSchemaError, ValueError):  # an unreadable schema: the columns still print, sorted
        schema = None
    features = [n for n in (schema.names if schema else []) if n in known]
    groups = {prefix: sorted(n for n in known if n.startswith(prefix)) for prefix in _GROUPS}
    schema_per_arm = [PER_ARM_PREFIX + f.name for f in schema.per_arm] if schema else []
    in_schema = [n for n in schema_per_arm if n in known]
    groups[PER_ARM_PREFIX] = in_schema + [n for n in groups[PER_ARM_PREFIX] if n not in in_schema]
    grouped = {n for names in groups.values() for n in names}
    taken = {SPLIT_COLUMN, *features, *grouped}
    features += sorted(n for n in known if n not in taken and n not in _RECORD_FIELDS)
    fields: list[str] = []
    for name in RECORD_ORDER:
        if name in groups:
            fields += [n for n in groups[name] if n not in features]
        elif name in known and name not in features:
            fields.append(name)
    return [SPLIT_COLUMN, *features, *fields]


def _rows(files: dict[str, list[str]], header: list[str], limit: int | None) -> Iterator[list[str]]:
    printed = 0
    for split, paths in files.items():
        for record in _records(paths):
            context = record.context.feature
            lists = record.feature_lists.feature_list
            for t in range(_steps(record)):
                if limit is not None and printed >= limit:
                    return
                row = []
                for name in header:
                    if name == SPLIT_COLUMN:
                        row.append(split)
                    elif name == STEP and lists and STEP not in lists and STEP not in context:
                        row.append(str(t))
                    elif lists and name in lists:
                        steps = lists[name].feature
                        row.append(_cell(steps[t]) if t < len(steps) else "")
                    elif name in context:
                        row.append(_cell(context[name]))
                    else:
                        row.append("")
                yield row
                printed += 1


def _cell(feature: Feature) -> str:
    kind = feature.WhichOneof("kind")
    values: Any
    if kind == "bytes_list":
        values = [v.decode("utf-8", "backslashreplace") for v in feature.bytes_list.value]
    elif kind == "int64_list":
        values = [str(v) for v in feature.int64_list.value]
    elif kind == "float_list":
        import numpy as np

        # float32 values at their shortest: 0.3, not 0.30000001192092896
        values = [str(v) for v in np.asarray(feature.float_list.value, np.float32)]
    else:
        values = []
    return LIST_SEPARATOR.join(values)
