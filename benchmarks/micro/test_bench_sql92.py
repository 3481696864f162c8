"""SQL92 filter cost: compiled selectors against the reference tree walk, and in the pull path.

Method: pytest-benchmark (pedantic, bounded rounds). (1) Evaluation of four selectors of
growing size over 2,000 property maps of 8 properties, through the tree walk
(pybroker.filter.nodes) and the compiled function the pull path uses; the figure that matters
is the per-message ratio. (2) The per-record filter of the pull path (properties read from the
record bytes, decoded, evaluated). (3) get_messages over 32,768 records of one queue with no
filter, a tag filter and an SQL92 selector, each matching half the messages; records/s scanned.
"""
import random

import pytest

from pybroker._fast import record as record_codec
from pybroker.broker.message_filter import record_filter_of
from pybroker.filter import compile_selector
from pybroker.filter.parser import parse
from pybroker.protocol.properties import encode_properties
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig

HOST = bytes([127, 0, 0, 1])
SELECTORS = {
    "small": "a > 5",
    "tags": "TAGS IN ('TagA', 'TagB') AND s = 'abc'",
    "medium": "(a BETWEEN 1 AND 10 OR TAGS = 'TagC') AND s IS NOT NULL",
    "float": "f > 1.5 AND NOT flag = TRUE OR n <> 'x'",
}
MAPS_COUNT = 2000
RECORDS = 32_768


def _maps() -> list[dict]:
    rand = random.Random(7)
    return [{"TAGS": rand.choice(("TagA", "TagB", "TagC")), "a": str(rand.randrange(20)),
             "s": rand.choice(("abc", "xyz")), "f": str(rand.random() * 3),
             "flag": rand.choice(("true", "false")), "n": rand.choice(("x", "y")),
             "UNIQ_KEY": "7F0000010B3C18B4AAC2713A67E90000", "KEYS": "OrderID188"}
            for _ in range(MAPS_COUNT)]


@pytest.mark.parametrize("how", ["tree", "compiled"])
@pytest.mark.parametrize("name", SELECTORS)
def test_selector_evaluation(benchmark, figure, name, how):
    benchmark.group = f"SQL92 evaluate {name}"
    maps = _maps()
    if how == "tree":
        tree = parse(SELECTORS[name])

        def evaluate_all():
            for properties in maps:
                try:
                    tree.evaluate(properties)
                except Exception:   # noqa: BLE001 (Java drops the message; so does the bench)
                    pass
    else:
        matches = compile_selector(SELECTORS[name]).matches

        def evaluate_all():
            for properties in maps:
                matches(properties)
    benchmark.pedantic(evaluate_all, rounds=15, iterations=1, warmup_rounds=2)
    figure("ns_per_message", lambda seconds: seconds / MAPS_COUNT * 1e9)


def _record(body: bytes, properties: dict) -> bytes:
    encoded = encode_properties(properties).encode()
    buffer = bytearray(record_codec.encoded_size(len(body), 9, len(encoded), 0))
    record_codec.encode_into(buffer, 0, b"TopicTest", 0, 0, body, encoded, 0, 1, HOST, 1,
                             HOST, 10911)
    return bytes(buffer)


def test_record_filter(benchmark, figure):
    benchmark.group = "SQL92 per-record filter (read + decode + evaluate)"
    records = [memoryview(_record(b"x" * 128, properties)) for properties in _maps()]
    record_filter = record_filter_of(compile_selector(SELECTORS["medium"]))

    def filter_all():
        for view in records:
            record_filter(view)
    benchmark.pedantic(filter_all, rounds=15, iterations=1, warmup_rounds=2)
    figure("ns_per_message", lambda seconds: seconds / MAPS_COUNT * 1e9)


@pytest.mark.parametrize("kind", ["none", "tag", "sql92"])
def test_pull_with_filter(benchmark, figure, tmp_path, kind):
    benchmark.group = "get_messages 32 per pull, half the records match"
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=32 << 20,
                         max_hash_slot_num=100_000, max_index_num=400_000)
    tag_codes = record_filter = None
    if kind == "tag":
        tag_codes = frozenset({record_codec_tags("TagA")})
    elif kind == "sql92":
        record_filter = record_filter_of(compile_selector("TAGS = 'TagA' AND a < 100"))
    with MessageStore(config) as store:
        for number in range(RECORDS):
            tag = "TagA" if number % 2 else "TagB"
            record = _record(b"x" * 128, {"TAGS": tag, "a": str(number % 200)})
            store.put_messages(bytearray(record), "TopicTest", 0, 1, 0)
        max_offset = store.get_max_offset_in_queue("TopicTest", 0)

        def read_all():
            offset = 0
            while offset < max_offset:
                result = store.get_messages("g", "TopicTest", 0, offset, 32, None, tag_codes,
                                            record_filter)
                offset = result.next_begin_offset
                result.release()
        benchmark.pedantic(read_all, rounds=5, iterations=1, warmup_rounds=1)
        figure("records_scanned_per_s", lambda seconds: max_offset / seconds)


def record_codec_tags(tag: str) -> int:
    from pybroker._fast.jhash import tags_code
    return tags_code(tag)
