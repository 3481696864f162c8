"""The dispatcher writes exactly the ConsumeQueue units and index keys RocketMQ's reput writes.

Method: append encoded records to a real CommitLog in tmp_path, run Dispatcher.dispatch_until,
then read the consume-queue units and index back and compare with values computed here: a plain
Python Java String.hashCode oracle for tags codes, the delay table for the schedule topic, and
the transaction rules (PREPARED/ROLLBACK not queued, ROLLBACK not indexed).
"""
import pytest

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.protocol.constants import MessageSysFlag
from pybroker.protocol.properties import encode_properties
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.schema import parse_delay_levels
from pybroker.store.dispatch import Dispatcher, property_value
from pybroker.store.index_file import IndexService

HOST = bytes([127, 0, 0, 1])
DELAYS = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")


def java_hash(text: str) -> int:
    """Oracle: Java String.hashCode over UTF-16 code units, signed 32-bit."""
    value = 0
    data = text.encode("utf-16-be")
    for position in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[position:position + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def encode(body: bytes, topic: str, queue_id: int = 0, sys_flag: int = 0,
           **properties) -> bytearray:
    encoded = encode_properties(properties).encode()
    buffer = bytearray(record_codec.encoded_size(len(body), len(topic.encode()), len(encoded),
                                                 sys_flag))
    record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, encoded, sys_flag,
                             1, HOST, 1, HOST, 10911)
    return buffer


@pytest.fixture
def parts(tmp_path):
    commitlog = CommitLog(str(tmp_path / "commitlog"), 64 * 1024)
    queues = ConsumeQueueStore(str(tmp_path), 64 * 20)
    index = IndexService(str(tmp_path / "index"), 64, 512)
    published = []
    dispatcher = Dispatcher(commitlog, queues, index, DELAYS, 0, published.append)
    yield commitlog, queues, index, dispatcher, published
    commitlog.shutdown(0)
    queues.close()
    index.close()


def append(commitlog, body, topic, queue_id=0, sys_flag=0, store_timestamp=5_000, **props):
    result = commitlog.append_encoded(encode(body, topic, queue_id, sys_flag, **props), topic,
                                      queue_id, 1, sys_flag, store_timestamp)
    assert result.status.stored
    return result


def test_tags_codes_and_schedule_delivery_time(parts):
    commitlog, queues, _, dispatcher, published = parts
    append(commitlog, b"a", "T", TAGS="TagA")
    append(commitlog, b"b", "T", TAGS="\u00e9t\u00e9 \U0001F600")
    append(commitlog, b"c", "T")
    for level in (3, 99, 0):
        append(commitlog, b"d", "SCHEDULE_TOPIC_XXXX", 2, store_timestamp=1_000_000,
               DELAY=str(level), TAGS="X")
    assert dispatcher.dispatch_until(commitlog.max_offset()) == 6
    assert published == [commitlog.max_offset()]
    tags = [queues.find("T", 0).get(offset)[2] for offset in range(3)]
    assert tags == [java_hash("TagA"), java_hash("\u00e9t\u00e9 \U0001F600"), 0]
    schedule = queues.find("SCHEDULE_TOPIC_XXXX", 2)
    assert [schedule.get(offset)[2] for offset in range(3)] == \
        [1_000_000 + 10_000, 1_000_000 + 2 * 3_600_000, java_hash("X")]


def test_transaction_types_queue_and_index_rules(parts):
    commitlog, queues, index, dispatcher, _ = parts
    prepared = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    commit = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
    rollback = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
    offsets = {}
    for name, sys_flag in (("prepared", prepared), ("commit", commit),
                           ("rollback", rollback), ("plain", 0)):
        offsets[name] = append(commitlog, name.encode(), "T", sys_flag=sys_flag,
                               KEYS=name).physical_offset
    dispatcher.dispatch_until(commitlog.max_offset())
    queue = queues.find("T", 0)
    assert queue.max_offset_in_queue() == 2
    assert [queue.get(offset)[0] for offset in range(2)] == [offsets["commit"], offsets["plain"]]
    for name in ("prepared", "commit", "plain"):
        assert index.query("T", name, 32, 0, 1 << 62)[0] == [offsets[name]]
    assert index.query("T", "rollback", 32, 0, 1 << 62)[0] == []


def test_keys_and_uniq_key_indexed(parts):
    commitlog, _, index, dispatcher, _ = parts
    first = append(commitlog, b"x", "T", KEYS="k1  k2", UNIQ_KEY="ABCDEF").physical_offset
    dispatcher.dispatch_until(commitlog.max_offset())
    for key in ("k1", "k2", "ABCDEF"):
        assert index.query("T", key, 32, 0, 1 << 62)[0] == [first]
    assert index.query("T", "", 32, 0, 1 << 62)[0] == []


def test_redispatch_is_idempotent_and_behind_bytes(parts):
    commitlog, queues, index, dispatcher, _ = parts
    for number in range(50):
        append(commitlog, b"%d" % number, "T", number % 3, KEYS=f"key{number}")
    half = commitlog.max_offset() // 2
    dispatcher.dispatch_until(half)
    assert 0 < dispatcher.dispatch_behind_bytes() <= commitlog.max_offset() - half + 200
    dispatcher.dispatch_until(commitlog.max_offset())
    assert dispatcher.dispatch_behind_bytes() == 0
    dispatcher.reput_from_offset = 0
    assert dispatcher.dispatch_until(commitlog.max_offset()) == 50
    assert sum(queue.max_offset_in_queue() for queue in queues.queues()) == 50
    assert len(index.query("T", "key7", 32, 0, 1 << 62)[0]) == 1


def test_partial_tail_waits_and_damage_raises(parts):
    commitlog, queues, _, dispatcher, _ = parts
    whole = encode(b"w" * 100, "T")
    first = commitlog.append_encoded(whole, "T", 0, 1, 0, 7)
    data = bytearray(whole)
    record_codec.patch(data, 0, 1, first.wrote_bytes, 8)
    # A slave receives half of the second record first.
    assert commitlog.append_raw(commitlog.max_offset(), data[:60])
    assert dispatcher.dispatch_until(commitlog.max_offset()) == 1
    assert dispatcher.reput_from_offset == first.wrote_bytes
    assert commitlog.append_raw(commitlog.max_offset(), data[60:])
    assert dispatcher.dispatch_until(commitlog.max_offset()) == 1
    assert queues.find("T", 0).max_offset_in_queue() == 2
    garbage = bytearray(whole)
    garbage[4:8] = b"\x01\x02\x03\x04"       # not a magic code
    assert commitlog.append_raw(commitlog.max_offset(), garbage)
    with pytest.raises(StoreCorruptError):
        dispatcher.dispatch_until(commitlog.max_offset())


def test_dispatch_crosses_files_through_blank_markers(parts):
    commitlog, queues, _, dispatcher, _ = parts
    for number in range(400):
        append(commitlog, b"z" * 500, "T", KEYS=f"k{number}")
    assert len(commitlog.mapped_file_queue.mapped_files) >= 3
    assert dispatcher.dispatch_until(commitlog.max_offset()) == 400
    queue = queues.find("T", 0)
    assert [queue.get(offset)[0] for offset in (0, 399)] == \
        [0, commitlog.max_offset() - queue.get(399)[1]]


@pytest.mark.parametrize("text, key, expected", [
    ("TAGS\x01a\x02", "TAGS", "a"),
    ("XTAGS\x01a\x02", "TAGS", None),
    ("K\x01TAGS\x01x\x02TAGS\x01b\x02", "TAGS", "b"),
    ("TAGS\x01a\x02TAGS\x01b", "TAGS", "b"),
    ("TAGS\x01\x02", "TAGS", None),
    ("KEYS\x01a b\x02UNIQ_KEY\x01u\x02", "KEYS", "a b"),
])
def test_property_value(text, key, expected):
    assert property_value(text, key + "\x01") == expected


def test_parse_delay_levels():
    assert DELAYS[:4] == (1000, 5000, 10000, 30000) and DELAYS[-1] == 7_200_000
    assert parse_delay_levels("2d") == (172_800_000,)
    for bad in ("", "5x", "0s", "s"):
        with pytest.raises(ValueError):
            parse_delay_levels(bad)
