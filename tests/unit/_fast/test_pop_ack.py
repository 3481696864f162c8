"""The C pieces of ACK_MESSAGE (pybroker/_fast/pop/ack.pyx) take an ack only as the Python
handler (broker/pop/ack.py) reads it, and build its ack record byte for byte as the handler's
revive_log.ack_message does.

Method: seeded inputs through both sides. Headers: ACK_MESSAGE requests (JSON headers: the
binary header's 16-bit code cannot carry 200051) with their fields in random order and values
around the edges (Java int/long limits, signs, empty, missing, escaped, another code, oneway),
plus bytes of the header mutated; whenever C takes a frame, protocol/command.py decode and
protocol/headers.py parse take it with the same values. Receipt handles: handles built by
build_extra_info, then fields dropped, added, emptied or replaced by edge values; C answers a
handle exactly when parse_extra_info(text, ACK_READS) parses it to a non-order handle, with the
same values. Records: seeded acks (names, offsets, pop times
before and after now, invisible times, revive queues, broker names) under several timer
settings and IPv4/IPv6 store hosts; the record C writes is revive_log.ack_message's byte for
byte, under the same topic and queue, and what C leaves to the handler is a refusal or one of
the listed shapes.
"""
import random

import pytest

from pybroker._fast.pop import ack as fast_ack
from pybroker.broker.pop import revive_log
from pybroker.broker.timer_message import TIMER_TOPIC, TimerRules
from pybroker.errors import ProtocolError
from pybroker.protocol import command, headers, pop
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import SerializeType
from tests.unit._fast.header_mutation import mutated
from pybroker.store.pop_checkpoint import AckMsg

NOW_MS = 1_764_900_000_123
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG_DefaultCluster"
REVIVE_QUEUE_NUM = 8
ACK_FIELDS = headers.ACK_MESSAGE_REQUEST.fields
_INT_MAX, _LONG_MAX = (1 << 31) - 1, (1 << 63) - 1
_NUMBERS = ["0", "1", "-1", "+7", "007", str(_INT_MAX), str(_INT_MAX + 1), str(-_INT_MAX - 1),
            str(-_INT_MAX - 2), str(_LONG_MAX), str(_LONG_MAX + 1), str(-_LONG_MAX - 1),
            str(-_LONG_MAX - 2), "", "x", "1x", "+", "-", " 1", "1 ", "١", "1_0",
            "0" * 30 + "5", str(NOW_MS)]


def _fields(rand: random.Random) -> dict[str, str]:
    values = {"consumerGroup": rand.choice(["GID_a", "", "g\"q", "g\\b", "Gé", "G/1"]),
              "topic": rand.choice(["TopicTest", "%RETRY%G_T", "", "T\tx"]),
              "queueId": "3" if rand.random() < 0.6 else rand.choice(_NUMBERS),
              "extraInfo": rand.choice(["0 1 2 3 0 b 1 5", "a b", "", "é 1"]),
              "offset": "42" if rand.random() < 0.6 else rand.choice(_NUMBERS)}
    if rand.random() < 0.15:
        del values[rand.choice(list(values))]
    if rand.random() < 0.1:
        values["other"] = "x"
    items = list(values.items())
    rand.shuffle(items)
    return dict(items)


def _frame(rand: random.Random) -> bytes:
    code = RequestCode.ACK_MESSAGE if rand.random() < 0.9 else RequestCode.POP_MESSAGE
    request = RemotingCommand(code, opaque=rand.randrange(-5, 1 << 20),
                              ext_fields=_fields(rand))
    if rand.random() < 0.1:
        request.flag |= 2           # oneway
    if rand.random() < 0.1:
        request.body = b"ignored"
    return command.encode(request, int(SerializeType.JSON))


def _check_frame(frame: bytes) -> bool:
    """True when C takes the frame; then the decoder and the header schema agree on it."""
    read = fast_ack.read_ack(frame)
    if read is None:
        return False
    try:
        decoded = command.decode(frame, 0, len(frame))
    except ProtocolError:
        raise AssertionError(f"C took a frame the decoder refuses: {frame!r}") from None
    assert (read["code"], read["opaque"], read["flag"]) == (
        decoded.code, decoded.opaque, decoded.flag) == (
        RequestCode.ACK_MESSAGE, decoded.opaque, decoded.flag), frame
    header = headers.parse_request_header(decoded.code, decoded.ext_fields)
    assert read["fields"] == {field.wire_name: decoded.ext_fields[field.wire_name]
                              for field in ACK_FIELDS}, frame
    assert (read["fields"]["consumerGroup"], read["fields"]["topic"], read["queueId"],
            read["fields"]["extraInfo"], read["offset"]) == (
        header.consumer_group, header.topic, header.queue_id, header.extra_info,
        header.queue_offset), frame
    return True


def test_a_java_clients_ack_is_read():
    fields = {"consumerGroup": "GID_pop", "extraInfo": "0 1764900000123 60000 3 0 broker-a 1 7",
              "offset": "7", "queueId": "1", "topic": "TopicTest"}
    frame = command.encode(RemotingCommand(RequestCode.ACK_MESSAGE, opaque=9,
                                           ext_fields=fields), int(SerializeType.JSON))
    assert _check_frame(frame)
    # The ROCKETMQ binary header's code is 16 bits: 200051 cannot travel in it.
    with pytest.raises(ValueError):
        command.encode(RemotingCommand(RequestCode.ACK_MESSAGE, ext_fields=fields),
                       int(SerializeType.ROCKETMQ))


def test_seeded_ack_headers_read_as_decoded(rand):
    taken = sum(_check_frame(_frame(rand)) for _ in range(3000))
    assert taken > 300


def test_mutated_ack_headers_read_as_decoded(rand):
    taken = 0
    for _ in range(3000):
        taken += _check_frame(mutated(_frame(rand), rand, b'"{}:,\\ 0a-+\x00\x7f\x80'))
    assert taken > 50


# --- receipt handles ----------------------------------------------------------------------------

def _handle(rand: random.Random) -> str:
    parts = pop.build_extra_info(
        rand.randrange(0, 1 << 40), NOW_MS + rand.randrange(-10**6, 10**6),
        rand.randrange(0, 10**6), rand.choice([0, 1, 7, 999, 8, -1]),
        rand.choice(["TopicTest", "%RETRY%G_T"]), rand.choice(["broker-a", "", "b@c"]),
        rand.randrange(0, 16), rand.choice([None, rand.randrange(0, 1 << 40)])).split(" ")
    mutate_fields(rand, parts, _NUMBERS, rand.randrange(0, 3))
    return " ".join(parts)


def mutate_fields(rand: random.Random, parts: list[str], numbers: list[str], count: int) -> None:
    """``count`` seeded edits of a handle's fields: one dropped, a number inserted, one emptied
    or replaced by a number (tests/unit/_fast/test_grpc_ack.py's handles too)."""
    for _ in range(count):
        choice = rand.randrange(4)
        if choice == 0 and parts:
            del parts[rand.randrange(len(parts))]
        elif choice == 1:
            parts.insert(rand.randrange(len(parts) + 1), rand.choice(numbers))
        elif choice == 2 and parts:
            parts[rand.randrange(len(parts))] = ""
        elif parts:
            parts[rand.randrange(len(parts))] = rand.choice(numbers)


def _python_handle(text: str):
    try:
        info = pop.parse_extra_info(text, pop.ACK_READS)
    except ValueError:
        return None
    if info.is_order:
        return None
    return (info.ck_queue_offset, info.pop_time, info.invisible_time, info.revive_qid,
            info.broker_name)


def test_seeded_handles_parse_as_the_handler(rand):
    parsed = 0
    for _ in range(5000):
        text = _handle(rand)
        if not text.isascii():
            continue
        expected = _python_handle(text)
        assert fast_ack.parse_handle(text.encode()) == expected, text
        parsed += expected is not None
    assert parsed > 500


@pytest.mark.parametrize("text", ["", " ", "1 2 3 4 5", "1 2 3 4 5 ", "1 2 3  r b",
                                  "1 2 3 999 0 b 1 5", "1 2 3 0 0 b 1 5 x", "1 2 3 0 0 b 1 x",
                                  "1 2 3 0 0 b 1 ", "1 2 3 0 0 b  5", "+1 -2 3 2147483647 0 b",
                                  "1 2 3 2147483648 0 b", "1 2 3 -2147483648 0 b",
                                  "9223372036854775808 2 3 0 0 b", "1 2 3 0 0 b x 5",
                                  "1 2 3 0 0 b   ", "1 2 3 0 0    ", "1 2 3 0 0 b 1 5 x y",
                                  "1 2 3  0 b", "x 2 3 0 0 b", "1 2 3 99999999999 0 b"])
def test_edge_handles_parse_as_the_handler(text):
    assert fast_ack.parse_handle(text.encode()) == _python_handle(text)


# --- ack records ----------------------------------------------------------------------------------

_SETTINGS = [TimerRules(), TimerRules(precision_ms=100), TimerRules(precision_ms=500),
             TimerRules(max_delay_sec=60), TimerRules(wheel_enable=False)]
_HOSTS = [(bytes([127, 0, 0, 1]), 10911), (bytes(15) + b"\x01", 20911)]


def _records(rules: TimerRules, host: tuple[bytes, int]) -> fast_ack.AckRecords:
    return fast_ack.AckRecords(REVIVE_TOPIC.encode(), REVIVE_QUEUE_NUM, TIMER_TOPIC.encode(),
                               host[0], host[1], rules.wheel_enable, False, 0,
                               rules.max_delay_sec * 1000, rules.precision_ms)


def _pick(rand: random.Random, choices: list):
    """Mostly the first (the usual value), else any: most acks are built, every edge is seen."""
    return choices[0] if rand.random() < 0.75 else rand.choice(choices)


def _ack_inputs(rand: random.Random) -> tuple[str, str, int, int, str]:
    topic = _pick(rand, ["TopicTest", "%RETRY%GID_T", "T" * 127, "T" * 128, "a\"b"])
    group = _pick(rand, ["GID_pop", "", "G" * 255, "G" * 256, "g@x", "g\\y", "g\x01z", "g/q"])
    queue_id = _pick(rand, [3, 0, -1, _INT_MAX, -_INT_MAX - 1])
    offset = _pick(rand, [rand.randrange(1 << 40), 0, -1, _LONG_MAX, -_LONG_MAX - 1])
    pop_time = NOW_MS + _pick(rand, [rand.randrange(-10**7, 10**8), -120_000, -1000, -1, 0, 1,
                                     999, 1000, 50_000, _LONG_MAX - NOW_MS])
    invisible = _pick(rand, [rand.randrange(0, 10**8), 0, 1, 30_000, 60_000, 59_999,
                             86_400_000, 4 * 86_400_000, _LONG_MAX, -NOW_MS])
    revive_qid = _pick(rand, [rand.randrange(REVIVE_QUEUE_NUM), REVIVE_QUEUE_NUM - 1,
                              REVIVE_QUEUE_NUM, -1, 999])
    broker = _pick(rand, ["broker-a", "", "b" * 255, "b" * 256, "b\"c"])
    handle = " ".join([str(rand.randrange(1 << 40)), str(pop_time), str(invisible),
                       str(revive_qid), "0", broker, str(queue_id), str(offset)])
    return topic, group, queue_id, offset, handle


def _handler_record(topic, group, queue_id, offset, handle, rules, host):
    info = pop.parse_extra_info(handle, pop.ACK_READS)
    ack = AckMsg(topic=topic, consumer_group=group, queue_id=queue_id,
                 start_offset=info.ck_queue_offset, pop_time=info.pop_time, ack_offset=offset,
                 broker_name=info.broker_name)
    return revive_log.ack_message(ack, REVIVE_TOPIC, info.revive_qid,
                                  info.pop_time + info.invisible_time, host, rules, NOW_MS)


def _handlers_shape(topic, group, queue_id, offset, handle) -> bool:
    """A shape C leaves to the handler though the handler writes it (the timer rule in C parks
    a UNIQ_KEY of at most 128 bytes)."""
    info = pop.parse_extra_info(handle, pop.ACK_READS)
    unique_id = f"{topic}@{queue_id}@{offset}@{group}@{info.pop_time}@{info.broker_name}@ack"
    plain = all(32 <= ord(c) < 128 and c not in '"\\' for c in topic + group + info.broker_name)
    return (len(topic.encode()) > 127 or len(group.encode()) > 255
            or len(info.broker_name) > 255 or not plain
            or not 0 <= info.revive_qid < REVIVE_QUEUE_NUM or len(unique_id) > 128)


@pytest.mark.parametrize("host", _HOSTS, ids=["ipv4", "ipv6"])
def test_seeded_ack_records_are_the_handlers(rand, host):
    built = parked = 0
    for rules in _SETTINGS:
        records = _records(rules, host)
        for _ in range(600):
            topic, group, queue_id, offset, handle = _ack_inputs(rand)
            expected = _handler_record(topic, group, queue_id, offset, handle, rules, host)
            fast = records.build(topic.encode(), group.encode(), queue_id, offset,
                                 handle.encode(), NOW_MS)
            if fast is None:
                assert expected.refused is not None or _handlers_shape(
                    topic, group, queue_id, offset, handle), (topic, group, handle, rules)
                continue
            assert expected.refused is None, (topic, group, handle, rules)
            assert fast == (expected.topic.encode(), expected.queue_id,
                            bytes(expected.records)), (topic, group, handle, rules)
            built += 1
            parked += expected.topic == TIMER_TOPIC
    assert built > 500 and parked > 200


def test_an_order_handle_and_a_bad_one_are_the_handlers():
    records = _records(TimerRules(), _HOSTS[0])
    for handle in (f"0 {NOW_MS} 60000 999 0 broker-a 1 7", "0 x 60000 1 0 broker-a 1 7",
                   "0 1 2 3 4"):
        assert records.build(b"TopicTest", b"G", 1, 7, handle.encode(), NOW_MS) is None
