"""pybroker._fast.crc computes Java's CRC-32 (zlib's) and RocketMQ's masked variant exactly.

Method: the check value of the CRC-32 catalogue, then stdlib zlib.crc32 as oracle over random
buffers of every buffer type, sizes on both sides of the GIL-release threshold, and sub-ranges;
bad ranges must raise ValueError. The fold (crc_fold.h, PCLMULQDQ): its four constants derived
here from the polynomial, and every length from 0 to 1,100 bytes at every offset within 16
bytes against zlib (the fold's loops by 64 and by 16 bytes and every tail length).
"""
import array
import mmap
import pathlib
import platform
import re
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from pybroker._fast.crc import crc32, crc32_masked, folds

MASK = 0x7FFFFFFF


def test_catalogue_check_value():
    # The CRC-32/ISO-HDLC check value (CRC of b"123456789"), the same in Java's CRC32.
    assert crc32(b"123456789") == 0xCBF43926
    assert crc32_masked(b"123456789") == 0xCBF43926 & MASK
    assert crc32(b"") == 0


@pytest.mark.parametrize("size", [0, 1, 127, 128, 4096, 65535, 65536, 65537, 1 << 20])
def test_against_zlib(rand, size):
    data = rand.randbytes(size)
    assert crc32(data) == zlib.crc32(data)
    assert crc32_masked(data) == zlib.crc32(data) & MASK


def test_every_buffer_type(rand, tmp_path):
    data = rand.randbytes(5000)
    path = tmp_path / "segment"
    path.write_bytes(data)
    expected = zlib.crc32(data)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert crc32(mm) == expected
    assert crc32(bytearray(data)) == expected
    assert crc32(memoryview(data)) == expected
    ints = array.array("i", data[:4000])   # a non-byte format counts its raw bytes
    assert crc32(ints) == zlib.crc32(ints.tobytes())


@given(st.binary(max_size=300), st.data())
@settings(max_examples=200, deadline=None)
def test_ranges_match_slices(data, draw):
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    assert crc32(data, start, end) == zlib.crc32(data[start:end])
    assert crc32_masked(data, start, end) == zlib.crc32(data[start:end]) & MASK
    assert crc32(data, start) == zlib.crc32(data[start:])


@pytest.mark.parametrize("start,end", [(-1, 3), (5, 4), (0, 11), (11, -1), (0, -2)])
def test_bad_range_raises(start, end):
    with pytest.raises(ValueError):
        crc32(b"0123456789", start, end)
    with pytest.raises(ValueError):
        crc32_masked(b"0123456789", start, end)


def test_non_buffer_raises_type_error():
    with pytest.raises(TypeError):
        crc32("text")


_POLYNOMIAL = 0x104C11DB7          # x^32 + x^26 + ... + 1, CRC-32's generator


def _fold_constant(n: int) -> int:
    """x^n mod P, bit-reflected over 32 bits, shifted one bit left."""
    value = 1
    for _ in range(n):
        value <<= 1
        if value >> 32:
            value ^= _POLYNOMIAL
    return int(f"{value:032b}"[::-1], 2) << 1


def test_fold_constants_are_derived_from_the_polynomial():
    text = (pathlib.Path(__file__).parents[3] / "pybroker" / "_fast" / "crc_fold.h").read_text()
    constants = {int(n): int(value, 16)
                 for n, value in re.findall(r"#define PB_CRC_K(\d+) (0x[0-9a-f]+)ULL", text)}
    assert constants == {n: _fold_constant(n) for n in (544, 480, 160, 96)}


def test_fold_matches_zlib_at_every_length_and_offset(rand):
    assert folds() or platform.machine() != "x86_64"
    data = rand.randbytes(1100 + 16)
    for offset in range(16):
        for length in range(1101):
            assert crc32(data, offset, offset + length) == \
                zlib.crc32(data[offset:offset + length]), (offset, length)
