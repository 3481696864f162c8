"""How much the Cython record codec, CRC and Java hash buy over plain struct/zlib Python.

Method: pytest-benchmark times pybroker._fast and the plain baseline (plain_record.py) on the
same inputs, one benchmark.group per case so the ratio is side by side: encode_into + CRC with
128 B and 4 KiB bodies, a CRC-checked scan over 1 MiB of 128 B records, and java_hash of an
index key. Each case first checks that both sides produce the same result.
"""
import importlib.util
import pathlib

import pytest

from pybroker._fast import jhash, record

_spec = importlib.util.spec_from_file_location(
    "plain_record", pathlib.Path(__file__).with_name("plain_record.py"))
plain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain)

IMPLEMENTATIONS = {"cython": record, "plain": plain}
BODY_SIZES = {"128B": 128, "4KiB": 4096}
PROPERTIES = (b"KEYS\x01OrderID188\x02UNIQ_KEY\x017F0000010B3C18B4AAC2713A67E90000\x02"
              b"TAGS\x01TagA\x02")


def message(body_bytes: int) -> dict:
    return dict(topic=b"TopicTest", queue_id=3, flag=0, body=b"\xab" * body_bytes,
                properties=PROPERTIES, sys_flag=0, born_timestamp=1_700_000_000_123,
                born_host=b"\x7f\x00\x00\x01", born_port=52011, store_host=b"\x0a\x00\x00\x02",
                store_port=10911)


@pytest.mark.parametrize("body_name", BODY_SIZES)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_encode_into(benchmark, body_name, implementation):
    benchmark.group = f"encode_into+crc {body_name}"
    m = message(BODY_SIZES[body_name])
    ours, theirs = bytearray(8192), bytearray(8192)
    assert record.encode_into(ours, 0, **m) == plain.encode_into(theirs, 0, **m)
    assert ours == theirs
    encode_into = IMPLEMENTATIONS[implementation].encode_into
    buf = bytearray(8192)
    benchmark(lambda: encode_into(buf, 0, **m))


def one_mib_of_records() -> tuple[bytearray, int]:
    m = message(128)
    size = record.encoded_size(128, len(m["topic"]), len(m["properties"]), 0)
    count = (1 << 20) // size
    buf = bytearray(count * size)
    for i in range(count):
        record.encode_into(buf, i * size, **m)
    return buf, count


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_scan_one_mib(benchmark, implementation):
    benchmark.group = "scan 1 MiB of 128 B records (CRC checked)"
    buf, count = one_mib_of_records()
    assert record.scan(buf, 0, len(buf), True) == (record.RECORD_END, len(buf), count)
    assert plain.scan(buf, 0, len(buf), True) == (len(buf), count)
    scan = IMPLEMENTATIONS[implementation].scan
    benchmark(scan, buf, 0, len(buf), True)


@pytest.mark.parametrize("implementation", ["cython", "plain"])
def test_java_hash(benchmark, implementation):
    benchmark.group = "java_hash of 'TopicTest#key-123456'"
    key = "TopicTest#key-123456"
    assert jhash.java_hash(key) == plain.java_hash(key)
    function = jhash.java_hash if implementation == "cython" else plain.java_hash
    benchmark(function, key)
