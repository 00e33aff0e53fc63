"""TFRecord(tf.Example) reader: framing checked record by record, decoding in batches."""

from __future__ import annotations

import struct
from typing import Any, Iterator

import numpy as np

from rlops.components.experience_gen.config import FileSource
from rlops.components.experience_gen.convert import RawColumn
from rlops.components.experience_gen.layout import Layout
from rlops.components.experience_gen.sources.base import (
    PARSE_ERROR,
    PAYLOAD_LIMIT,
    Block,
    FileRange,
    Quarantined,
    Unreadable,
    open_file,
    stream_cut_short,
)

CHECKSUM_MISMATCH = "data checksum mismatch"  # framing intact: one bad record, the rest still readable


def iter_tfrecords(f: Any) -> Iterator[tuple[int, int, bytes, str]]:
    """(record number, byte offset, data, problem) per TFRecord (on a problem, the bytes that were
    read); stops after a framing error."""
    from rlops.components.experience_gen.sinks import crc32c, mask_crc

    offset, number = 0, 0
    while True:
        header = f.read(12)
        if not header:
            return
        number += 1
        if len(header) < 12:
            yield number, offset, header, f"truncated record header at offset {offset}"
            return
        length, length_crc = struct.unpack("<QI", header)
        if int(mask_crc(np.array([crc32c(header[:8])], np.uint32))[0]) != length_crc:
            rest = f.read(PAYLOAD_LIMIT)
            yield number, offset, header + rest, f"corrupt record length at offset {offset}; rest of file skipped"
            return
        body = f.read(length + 4)
        if len(body) < length + 4:
            yield (
                number,
                offset,
                header + body,
                (f"truncated record at offset {offset} ({len(body)} of {length + 4} bytes)"),
            )
            return
        data = body[:length]
        if int(mask_crc(np.array([crc32c(data)], np.uint32))[0]) != struct.unpack("<I", body[length:])[0]:
            yield number, offset, data, f"{CHECKSUM_MISMATCH} at offset {offset}"
        else:
            yield number, offset, data, ""
        offset += 12 + length + 4


def read_tfrecord(
    rng: FileRange, source: FileSource, layout: Layout, batch_size: int = 4096
) -> Iterator[Block | Quarantined | Unreadable]:
    """A record whose framing is intact but whose data is bad is quarantined; torn framing (a cut or
    corrupt tail) hides how many records follow, so those bytes are Unreadable and the run fails."""
    path = rng.path
    try:
        f = open_file(path, source)
    except Exception as e:  # noqa: BLE001
        yield Unreadable(path, 0, -1, f"tfrecord: cannot open file: {e}")
        return
    batch: list[tuple[int, int, bytes]] = []
    number, next_offset = 0, 0
    try:
        for number, offset, data, problem in iter_tfrecords(f):
            if problem.startswith(CHECKSUM_MISMATCH):
                yield Quarantined(PARSE_ERROR, f"tfrecord: {problem}", path, number, offset, data or b"")
            elif problem:
                yield Unreadable(path, offset, -1, f"tfrecord: record {number}: {problem}")
                break
            else:
                batch.append((number, offset, data))
                if len(batch) >= batch_size:
                    yield from _example_block(batch, path, layout)
                    batch = []
            next_offset = offset + 16 + len(data or b"")
        else:
            if stream_cut_short(f):
                yield Unreadable(
                    path,
                    next_offset,
                    -1,
                    f"tfrecord: compressed stream cut short after record {number} (decompressed offset {next_offset})",
                )
    except Exception as e:  # noqa: BLE001 - e.g. corrupt compressed data
        yield Unreadable(path, next_offset, -1, f"tfrecord: cannot read past record {number}: {e}")
    finally:
        f.close()
    if batch:
        yield from _example_block(batch, path, layout)


def _example_block(batch: list[tuple[int, int, bytes]], path: str, layout: Layout) -> Iterator[Block | Quarantined]:
    from tfx_bsl.coders import example_coder

    wanted = layout.columns
    numbers = np.array([b[0] for b in batch])
    offsets = np.array([b[1] for b in batch])
    payloads = [b[2] for b in batch]
    try:
        rb = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(payloads)
        names = set(rb.schema.names)
        columns: dict[str, RawColumn] = {c: rb.column(rb.schema.get_field_index(c)) for c in wanted if c in names}
        keep = np.arange(len(batch))
    except RuntimeError:  # an unparseable example or a feature whose type varies: go one by one
        columns, keep, bad = _examples_py(payloads, wanted)
        for i, message in bad:
            yield Quarantined(
                PARSE_ERROR, f"tf.Example: {message}", path, int(numbers[i]), int(offsets[i]), payloads[i]
            )
        if not len(keep):
            return

    def locate(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return numbers[keep[rows]], offsets[keep[rows]]

    yield Block(columns, len(keep), path, False, locate, lambda row: payloads[int(keep[row])])


def _examples_py(payloads: list[bytes], wanted: list[str]) -> tuple[dict[str, RawColumn], np.ndarray, list]:
    import tensorflow as tf

    values: dict[str, list] = {c: [] for c in wanted}
    keep, bad = [], []
    for i, data in enumerate(payloads):
        try:
            ex = tf.train.Example.FromString(data)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            bad.append((i, f"cannot parse: {e}"))
            continue
        feats = ex.features.feature
        for c in wanted:
            feat = feats.get(c)
            kind = feat.WhichOneof("kind") if feat is not None else None
            values[c].append(list(getattr(feat, kind).value) if kind else None)
        keep.append(i)
    return dict(values), np.array(keep, np.int64), bad  # dict(): list columns as RawColumns
