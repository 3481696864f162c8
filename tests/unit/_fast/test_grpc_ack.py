"""FrontAcks' C (pybroker/_fast/pop/grpc_ack.pyx) reads a gRPC receipt handle as the servicer's
``consumer.decode_handle`` does and writes the ACK_MESSAGE frame ``consumer.ack_request`` and
``command.encode`` make of it, byte for byte.

Method: seeded handles through both sides. Handles: 8 or 9 fields built by build_extra_info and
grpc_handle (normal and retry topics, broker names with spaces' neighbours, quotes, backslashes,
controls, non-ASCII letters and a lone surrogate), then fields dropped, added, emptied or
replaced by number edge cases (Java int/long limits and one past, signs, leading zeros,
non-ASCII digits, underscores, spaces), trailing and doubled separators, plus the empty and
all-blank texts: ``parse_handle`` gives decode_handle's fields exactly when decode_handle
parses the text, else None. Frames: for every handle decode_handle parses, with seeded names
and opaques, ``AckFrames.add`` appends ack_request's encoded frame, or appends nothing where it
leaves the handle to the servicer - only a retry flag ``pop.real_topic`` refuses, or a text
that is not printable ASCII without quote and backslash.
"""
import random

from pybroker._fast.pop import grpc_ack
from pybroker.grpc_service import consumer
from pybroker.grpc_service.front_acks import _real_topics, ack_frame_template
from pybroker.protocol import command, pop
from tests.unit._fast.test_pop_ack import mutate_fields

NOW_MS = 1_764_900_000_123
_INT_MAX, _LONG_MAX = (1 << 31) - 1, (1 << 63) - 1
_NUMBERS = ["0", "1", "-1", "+7", "-0", "007", str(_INT_MAX), str(_INT_MAX + 1),
            str(-_INT_MAX - 1), str(-_INT_MAX - 2), str(_LONG_MAX), str(_LONG_MAX + 1),
            str(-_LONG_MAX - 1), str(-_LONG_MAX - 2), str(1 << 64), "", "x", "1x", "+", "-",
            "+-1", "1.0", "١٢", "１", "1_0", "0" * 30 + "5", "9" * 30, str(NOW_MS), "\t1"]
_BROKERS = ["broker-a", "", "b@c", 'b"q', "b\\s", "b\tc", "brøker", "b\ud800", "b\x7f"]
_NAMES = [("TopicTest", "GID_a"), ("T%1|x", "G-b_c"), ("t", "%g")]


def _fields_of(handle: consumer.ReceiptHandle) -> tuple:
    return (handle.start_offset, handle.retrieve_time, handle.invisible_time,
            handle.revive_queue_id, handle.retry, handle.broker_name, handle.queue_id,
            handle.offset, handle.commit_log_offset)


def _decoded(text: str):
    try:
        return consumer.decode_handle(text)
    except consumer.BadHandle:
        return None


def _handle(rand: random.Random) -> str:
    topic, group = rand.choice(_NAMES)
    topic = rand.choice([topic, pop.retry_topic_v1(topic, group),
                         pop.retry_topic_v2(topic, group)])
    extra_info = pop.build_extra_info(
        rand.randrange(0, 1 << 40), NOW_MS + rand.randrange(-10**6, 10**6),
        rand.choice([0, 60_000, rand.randrange(1 << 40)]), rand.choice([0, 1, 7, 999, -1]),
        topic, rand.choice(_BROKERS), rand.randrange(0, 16), rand.randrange(0, 1 << 40))
    parts = rand.choice([consumer.grpc_handle(extra_info, rand.randrange(-1, 1 << 40)),
                         extra_info]).split(" ")
    mutate_fields(rand, parts, _NUMBERS, rand.choice([0, 0, 1, 1, 2, 3]))
    if len(parts) > 4 and rand.random() < 0.2:
        parts[4] = rand.choice(["", "3", "9", "00", "x", "+1", "1"])          # the retry flag
    text = " ".join(parts)
    return text + rand.choice(["", "", "", " ", "  ", " x", " 5 6"])


def test_seeded_handles_parse_as_decode_handle(rand):
    parsed = refused = 0
    for text in ["", " ", "        ", "1 2 3 4 0 b 5", "1 2 3 4 0 b 5 6", "1 2 3 4 0 b 5 6 ",
                 "1 2 3 4 0 b 5 6 7", "1 2 3 4 0 b 5 6 x", "1 2 3 4 0 b 5 6 7 x y",
                 "1 2 3 4  b 5 6", "1 2 3 4 0  5 6", " 1 2 3 4 0 b 5 6"] \
            + [_handle(rand) for _ in range(4000)]:
        handle = _decoded(text)
        expected = None if handle is None else _fields_of(handle)
        assert grpc_ack.parse_handle(text) == expected, text
        parsed += expected is not None
        refused += expected is None
    assert parsed > 1000 and refused > 1000, (parsed, refused)


def _plain(text: str) -> bool:
    return all(32 <= ord(c) < 127 and c not in '"\\' for c in text)


def test_seeded_frames_are_ack_request_encoded(rand):
    frames_class = grpc_ack.AckFrames(*ack_frame_template(), 1 << 24)
    written = left = 0
    for _ in range(4000):
        text = _handle(rand)
        handle = _decoded(text)
        if handle is None:
            continue
        topic, group = rand.choice(_NAMES)
        opaque = rand.choice([0, 1, (1 << 31) - 1, -(1 << 31), rand.randrange(1 << 31)])
        out = bytearray(rand.choice([b"", b"\x00\x00\x00\x04abcd"]))
        before = bytes(out)
        times = frames_class.add(out, text, _real_topics(topic, group), group.encode(),
                                 opaque)
        try:
            request = consumer.ack_request(handle, group, topic)
        except ValueError:              # a retry flag real_topic refuses: the servicer's
            assert times is None and out == before, text
            left += 1
            continue
        if not _plain(text):
            assert times is None and out == before, text
            left += 1
            continue
        request.opaque = opaque
        assert times == (handle.retrieve_time, handle.invisible_time)
        assert bytes(out) == before + command.encode(request), text
        written += 1
    assert written > 400 and left > 100, (written, left)       # about 600 and 1,400


def test_frames_follow_each_other_and_keep_the_bound(rand):
    template = ack_frame_template()
    frames = grpc_ack.AckFrames(*template, 1 << 24)
    topics = _real_topics("TopicTest", "GID_a")
    out, expected = bytearray(), b""
    for opaque in range(1, 20):
        text = consumer.grpc_handle(pop.build_extra_info(
            opaque, NOW_MS, 60_000, 1, "TopicTest", "broker-a", opaque % 8, 100 + opaque), 7)
        assert frames.add(out, text, topics, b"GID_a", opaque) == (NOW_MS, 60_000)
        request = consumer.ack_request(consumer.decode_handle(text), "GID_a", "TopicTest")
        request.opaque = opaque
        expected += command.encode(request)
    assert bytes(out) == expected
    size = len(command.encode(request))
    assert grpc_ack.AckFrames(*template, size).add(bytearray(), text, topics, b"GID_a",
                                                   19) is not None
    assert grpc_ack.AckFrames(*template, size - 1).add(bytearray(), text, topics, b"GID_a",
                                                       19) is None
