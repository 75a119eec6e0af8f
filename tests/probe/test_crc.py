"""btfgen/probe/crc.py: zlib's CRC-32, the same values whichever library makes them."""

from __future__ import annotations

import mmap
import random
import zlib

import pytest

from btfgen.probe import crc


def _buffers(tmp_path):
    rng = random.Random(4)
    data = rng.randbytes(3 * crc.SMALL + 13)
    path = tmp_path / "d.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        pages = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)  # read-only, as the ring's are
    return data, pages


@pytest.mark.parametrize("start, end", [(0, None), (5, 100), (7, None), (0, crc.SMALL),
                                        (3, 2 * crc.SMALL + 1)])
def test_values_are_zlib_s(tmp_path, start, end):
    data, pages = _buffers(tmp_path)
    piece = data[start:end]
    try:
        with memoryview(pages) as view, view[start:end] as mapped:
            for buf in (piece, bytearray(piece), memoryview(piece), mapped):
                for running in (0, 1, 0xDEADBEEF):
                    assert crc.crc32(buf, running) == zlib.crc32(piece, running)
    finally:
        pages.close()


def test_says_whose():
    assert crc.WHOSE in ("libdeflate", "zlib")
    assert (crc.crc32 is zlib.crc32) == (crc.WHOSE == "zlib")
