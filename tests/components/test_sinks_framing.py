"""TFRecord framing of batches: records of one size and of varying sizes (the vectorized paths)
frame exactly as TFRecord's own per-record layout does, byte for byte."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rlops.components.experience_gen.sinks import crc32c, frame_records


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def reference(records: list[bytes]) -> bytes:
    out = b""
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", masked(length)) + r + struct.pack("<I", masked(r))
    return out


@pytest.mark.parametrize("sizes", [[7] * 50, [0, 1, 300, 301, 9, 10, 10, 0, 255, 256]])
def test_frames_match_tfrecords_own_layout(sizes):
    rng = np.random.default_rng(0)
    # zero bytes at the ends of headers, footers and records must all survive
    records = [bytes(rng.integers(0, 3, n, dtype=np.uint8)) for n in sizes]
    assert frame_records(records) == reference(records)
    assert frame_records([]) == b""
