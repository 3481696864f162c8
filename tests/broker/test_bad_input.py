# Bad input against a running pybroker: refused with RocketMQ codes, nothing stored, others served.
"""Every must-refuse input (security-and-faults.md §5) is refused by a real broker, harming nobody
else.

Method: one `pybroker standalone` process per module (small idle timeout, small maxMessageSize).
Each case talks to it over a real socket - raw bytes for framing faults, pybroker's remoting
client for well-framed but bad requests - and checks the reply code and remark (or, for bytes
that cannot be framed, that the connection is closed and the broker log names the fault). Around
every case the test snapshots what is stored (CommitLog max offset, max offsets of the touched
queues, the topic list) and the broker's process ids: all must be unchanged afterwards (no
record, no auto-created topic, no crashed worker), and a second, well-behaved client must then
complete a send and a pull. A hypothesis fuzz sends a few hundred random, truncated and lying
frames and checks the same liveness afterwards.
"""
import contextlib
import socket
import struct
import time

import orjson
import psutil
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from pybroker._fast import record
from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import bodies
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, decode, encode
from pybroker.protocol.constants import TOPICS_NOT_ALLOWED_TO_SEND
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.slow]

TIMEOUT_MS = 10_000
IDLE_TIMEOUT_S = 2
MAX_MESSAGE_SIZE = 64 * 1024
FRAME_MAX_BYTES = 16 << 20           # the broker's default frameMaxBytes
BAD_TOPIC = "BadInputTopic"           # the queue refused sends aim at
GOOD_TOPIC = "WellBehavedTopic"       # the second client's send + pull
BULK_TOPIC = "BulkReplyTopic"         # big pull replies for the client that stops reading
LOG_WAIT_S = 5.0


# --- the broker -------------------------------------------------------------------------------

@contextlib.contextmanager
def _seeded_broker(work_dir):
    overrides = {"serverChannelMaxIdleTimeSeconds": str(IDLE_TIMEOUT_S),
                 "maxMessageSize": str(MAX_MESSAGE_SIZE)}
    with StandaloneBroker(work_dir, overrides) as running:
        with _client(running) as client:
            for queue_id in range(4):
                _expect_success(_send(client, BAD_TOPIC, b"seed", queue_id=queue_id))
            seeded_bytes = 0
            for queue_id in range(4):
                pulled = _expect_success(_pull(client, BAD_TOPIC, queue_id, 0, sys_flag=6))
                seeded_bytes += sum(message.total_size for message in _records(pulled.body))
            seeded_bytes += _well_behaved_round_trip(running)
            # Every seed record visible before the first case takes its snapshot.
            assert _commitlog_max_offset(client, seeded_bytes) == seeded_bytes
        yield running


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with _seeded_broker(tmp_path_factory.mktemp("bad_input")) as running:
        yield running


@pytest.fixture(scope="module")
def framing_brokers(tmp_path_factory):
    """Brokers for the cases whose log line is checked. A broker logs at most RATE_BURST (10)
    lines of one cause per worker per minute (pybroker/logs.py), every framing error is one
    cause, and the kernel (SO_REUSEPORT) picks the worker of each connection: so no broker
    gets more than 10 of these cases."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(_seeded_broker(tmp_path_factory.mktemp(f"framing{i}")))
               for i in range(FRAMING_BROKERS)]


@contextlib.contextmanager
def _client(broker, address=None):
    with SyncRemotingClient() as client:
        client.connect(address or broker.broker_addr)
        yield client


def _expect_success(response: RemotingCommand) -> RemotingCommand:
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
    return response


def _send_fields(topic, queue_id=0, properties=None, **changes) -> dict:
    properties = props.encode_properties({"TAGS": "TagA", "WAIT": "true"}) \
        if properties is None else properties
    ext = {"a": "bad_input_producer", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
           "f": "0", "g": str(int(time.time() * 1000)), "h": "0", "i": properties, "j": "0",
           "k": "false", "m": "false"}
    ext.update(changes)
    return {key: value for key, value in ext.items() if value is not None}


def _send(client, topic, body: bytes = b"payload", queue_id=0, **changes) -> RemotingCommand:
    request = create_request(RequestCode.SEND_MESSAGE_V2,
                             _send_fields(topic, queue_id, **changes), body)
    return client.invoke(request, TIMEOUT_MS)


def _pull_fields(topic, queue_id, queue_offset, group="bad_input_consumer", sys_flag=4,
                 max_nums=32) -> dict:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
            "queueOffset": str(queue_offset), "maxMsgNums": str(max_nums),
            "sysFlag": str(sys_flag), "commitOffset": "0", "suspendTimeoutMillis": "5000",
            "subscription": "*", "subVersion": "0", "expressionType": "TAG"}


def _pull(client, topic, queue_id, queue_offset, **changes) -> RemotingCommand:
    request = create_request(RequestCode.PULL_MESSAGE,
                             _pull_fields(topic, queue_id, queue_offset, **changes))
    return client.invoke(request, TIMEOUT_MS)


def _wait_dispatched(client, topic, queue_id, count, timeout_s: float = 10) -> None:
    """Wait (bounded: the test fails) until the queue's max offset reaches ``count``."""
    deadline = time.monotonic() + timeout_s
    while True:
        offset = int(client.invoke(create_request(RequestCode.GET_MAX_OFFSET, {
            "topic": topic, "queueId": str(queue_id)}), TIMEOUT_MS).ext_fields.get("offset", 0))
        if offset >= count:
            return
        assert time.monotonic() < deadline, f"{topic}:{queue_id} dispatched {offset} of {count}"
        time.sleep(0.02)


def _records(body) -> list:
    found, position, data = [], 0, bytes(body or b"")
    while position < len(data):
        message = record.decode(data, position)
        found.append(message)
        position += message.total_size
    return found


# --- what must not change ---------------------------------------------------------------------

def _commitlog_max_offset(client, at_least: int = 0) -> int:
    """CommitLog max offset (bytes) once the broker reports at least ``at_least``.

    The figure follows the dispatched position, which trails an acknowledged send by a few
    milliseconds; waiting for a known minimum keeps the comparison exact.
    """
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        info = _expect_success(client.invoke(
            create_request(RequestCode.GET_BROKER_RUNTIME_INFO), TIMEOUT_MS))
        value = int(bodies.decode_kv_table(info.body)["commitLogMaxOffset"])
        if value >= at_least or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def _stored_state(broker, queues, commitlog_at_least: int = 0) -> dict:
    with _client(broker) as client:
        state = {"commitLogMaxOffset": _commitlog_max_offset(client, commitlog_at_least)}
        for topic, queue_id in queues:
            answer = client.invoke(create_request(
                RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}),
                TIMEOUT_MS)
            state[(topic, queue_id)] = (answer.code, answer.ext_fields.get("offset"))
        topics = _expect_success(client.invoke(
            create_request(RequestCode.GET_ALL_TOPIC_CONFIG), TIMEOUT_MS))
        state["topics"] = sorted(orjson.loads(topics.body)["topicConfigTable"])
    return state


def _process_ids(broker) -> set[int]:
    return {child.pid for child in psutil.Process(broker.process.pid).children(recursive=True)}


def _well_behaved_round_trip(broker) -> int:
    """A second client sends one message and pulls it back; returns its record size (bytes)."""
    body = b"good-%d" % time.monotonic_ns()
    with _client(broker) as client:
        sent = _expect_success(_send(client, GOOD_TOPIC, body, queue_id=0))
        queue_offset = int(sent.ext_fields["queueOffset"])
        # SUSPEND | SUBSCRIPTION: held until the dispatcher has the message.
        pulled = _expect_success(_pull(client, GOOD_TOPIC, 0, queue_offset, group="good_group",
                                       sys_flag=6))
        message = _records(pulled.body)[0]
        assert bytes(message.body) == body
        return message.total_size


@contextlib.contextmanager
def _harmless(broker, queues=((BAD_TOPIC, 0),)):
    """Nothing stored, no process replaced, and a good client served after the block.

    The good client's record is appended after whatever the block did, so once it is
    dispatched the CommitLog must have grown by exactly its size. The block may run more
    good round trips itself: it appends their record sizes to the list it is given.
    """
    queues = tuple(queues) + ((GOOD_TOPIC, 0),)
    before = _stored_state(broker, queues)
    process_ids = _process_ids(broker)
    good_record_sizes: list[int] = []
    yield good_record_sizes
    good_record_sizes.append(_well_behaved_round_trip(broker))
    expected = dict(before,
                    commitLogMaxOffset=before["commitLogMaxOffset"] + sum(good_record_sizes))
    _, offset = before[(GOOD_TOPIC, 0)]
    expected[(GOOD_TOPIC, 0)] = (ResponseCode.SUCCESS,
                                 str(int(offset or 0) + len(good_record_sizes)))
    expected["topics"] = sorted(set(before["topics"]) | {GOOD_TOPIC})
    assert _stored_state(broker, queues, expected["commitLogMaxOffset"]) == expected
    assert _process_ids(broker) == process_ids, "a broker process died and was replaced"


# --- raw sockets ------------------------------------------------------------------------------

def _raw_socket(address: str, receive_buffer_bytes: int = 0) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.socket()
    if receive_buffer_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
    sock.connect((host, int(port)))
    return sock


def _frame(header: bytes, body: bytes = b"", serialize_type: int = 0,
           length: int | None = None, header_length: int | None = None) -> bytes:
    """A frame whose length fields may lie (``length``, ``header_length``)."""
    header_length = len(header) if header_length is None else header_length
    length = 4 + len(header) + len(body) if length is None else length
    return (struct.pack(">II", length & 0xFFFFFFFF,
                        ((serialize_type & 0xFF) << 24) | (header_length & 0xFFFFFF))
            + header + body)


def _read_frame(sock: socket.socket, timeout_s: float = 10.0) -> RemotingCommand | None:
    """The next whole frame, or None when the broker closed the connection."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except ConnectionResetError:
        return None
    length = 4 + struct.unpack(">I", data[:4])[0]
    return decode(data, 0, length, copy_body=True)


def _closed_by_broker(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    """True when the broker closes the connection within ``timeout_s`` and sends nothing."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def _log_after(broker, offset: int, needle: str) -> str:
    """The broker log line containing ``needle`` written after byte ``offset`` (waits)."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        for line in broker._log_text()[offset:].splitlines():
            if needle in line:
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no broker log line with {needle!r}; log tail:\n"
                                 f"{broker._log_text()[offset:][-2000:]}")
        time.sleep(0.05)


def _good_json_header(code=int(RequestCode.GET_MAX_OFFSET), ext=None) -> bytes:
    return orjson.dumps({"code": code, "language": "JAVA", "version": 395, "opaque": 7,
                         "flag": 0, "extFields": ext or {"topic": BAD_TOPIC, "queueId": "0"}})


UNFRAMEABLE = {
    "length_below_header_word": (struct.pack(">I", 2) + b"xy", "is below 4"),
    "negative_length": (struct.pack(">i", -5) + b"\0" * 8, "is below 4"),
    "length_over_frame_cap": (struct.pack(">II", FRAME_MAX_BYTES, 16), "over frame_max_bytes"),
    "header_length_beyond_frame": (_frame(b"{}", header_length=4000), "exceeds frame length"),
    "serialize_type_unknown": (_frame(_good_json_header(), serialize_type=7), "serialize type 7"),
    "bad_json": (_frame(b'{"code": 30, "opaque": 1, "extFields": {'), "not valid JSON"),
    "json_not_an_object": (_frame(b"[30, 1]"), "JSON header"),
    "json_nested_ext_value": (_frame(b'{"code":30,"opaque":1,"extFields":{"topic":{"a":1}}}'),
                              "JSON header"),
    "binary_remark_length_lies": (_frame(struct.pack(">hBhiii", 30, 0, 395, 1, 0, 999)
                                         + b"\0" * 4, serialize_type=1), "remark length 999"),
    "binary_ext_key_length_negative": (
        _frame(struct.pack(">hBhiiii", 30, 0, 395, 1, 0, 0, 8) + struct.pack(">hi", -3, 0)
               + b"\0\0", serialize_type=1), "ext key length -3"),
    "tls_client_hello": (bytes.fromhex("16030100c4010000c00303") + b"\0" * 32,
                         "TLS ClientHello"),
    "http_request": (b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n", "looks like HTTP"),
    "http2_preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2 preface"),
}
FRAMING_BROKERS = -(-len(UNFRAMEABLE) // 10)      # at most 10 logged closes each


@pytest.mark.parametrize("name", sorted(UNFRAMEABLE))
def test_unframeable_bytes_close_the_connection_with_a_log_line(framing_brokers, name):
    data, log_needle = UNFRAMEABLE[name]
    broker = framing_brokers[sorted(UNFRAMEABLE).index(name) % FRAMING_BROKERS]
    with _harmless(broker):
        log_offset = len(broker._log_text())
        with _raw_socket(broker.broker_addr) as sock:
            sock.sendall(data)
            assert _closed_by_broker(sock), f"{name}: the broker answered instead of closing"
        line = _log_after(broker, log_offset, log_needle)
        assert "closing remoting connection" in line


def test_a_good_frame_after_garbage_on_another_connection_is_served(broker):
    """A framing fault closes only its own connection: a raw client beside it is answered."""
    with _raw_socket(broker.broker_addr) as good, _raw_socket(broker.broker_addr) as bad:
        bad.sendall(UNFRAMEABLE["bad_json"][0])
        assert _closed_by_broker(bad)
        good.sendall(_frame(_good_json_header()))
        answer = _read_frame(good)
        assert answer is not None and answer.code == ResponseCode.SUCCESS


# --- well-framed requests the broker refuses --------------------------------------------------

REFUSED_SENDS = {
    # name: (send changes, expected code, remark fragment)
    "topic_missing": (dict(b=None), ResponseCode.SYSTEM_ERROR, "the custom field <b> is null"),
    "producer_group_missing": (dict(a=None), ResponseCode.SYSTEM_ERROR, "<a> is null"),
    "queue_id_not_a_number": (dict(e="zero"), ResponseCode.SYSTEM_ERROR,
                              "<e> has an invalid int value"),
    "queue_id_overflows_int": (dict(e="2147483648"), ResponseCode.SYSTEM_ERROR,
                               "<e> has an invalid int value"),
    "born_timestamp_not_a_number": (dict(g="12:00"), ResponseCode.SYSTEM_ERROR,
                                    "<g> has an invalid long value"),
    "sys_flag_with_spaces": (dict(f=" 0"), ResponseCode.SYSTEM_ERROR,
                             "<f> has an invalid int value"),
    "topic_illegal_characters": (dict(b="bad topic!"), ResponseCode.SYSTEM_ERROR,
                                 "contains illegal characters"),
    "topic_blank": (dict(b="   "), ResponseCode.SYSTEM_ERROR, "topic is blank"),
    "topic_128_characters": (dict(b="T" * 128), ResponseCode.SYSTEM_ERROR,
                             "longer than topic max length: 127"),
    "topic_too_long_in_utf8_bytes": (dict(b="\u00e9" * 100), ResponseCode.SYSTEM_ERROR,
                                     "contains illegal characters"),
    "queue_id_out_of_range": (dict(e="99"), ResponseCode.SYSTEM_ERROR,
                              "request queueId[99] is illegal"),
    "properties_over_32767_bytes": (dict(i=props.encode_properties({"KEYS": "k" * 40_000})),
                                    ResponseCode.MESSAGE_ILLEGAL, "longer than 32767 bytes"),
    "properties_malformed": (dict(i="KEYS\x01a\x01b\x02"), ResponseCode.MESSAGE_ILLEGAL,
                             "malformed pair"),
}


@pytest.mark.parametrize("name", sorted(REFUSED_SENDS))
def test_refused_send_stores_nothing(broker, name):
    changes, code, remark = REFUSED_SENDS[name]
    with _harmless(broker, queues=((BAD_TOPIC, 0), (BAD_TOPIC, 99))):
        with _client(broker) as client:
            answer = _send(client, BAD_TOPIC, b"must not be stored", **changes)
            # The connection stays usable after a refusal.
            assert _send(client, BAD_TOPIC, b"x", e="zero").code == ResponseCode.SYSTEM_ERROR
    assert (answer.code, name) == (code, name), answer.remark
    assert remark in (answer.remark or ""), answer.remark
    assert len(answer.remark or "") < 1000 and "Traceback" not in (answer.remark or "")


@pytest.mark.parametrize("topic", sorted(TOPICS_NOT_ALLOWED_TO_SEND))
def test_send_to_a_system_topic_is_forbidden(broker, topic):
    with _harmless(broker, queues=((topic, 0),)):
        with _client(broker) as client:
            answer = _send(client, topic, b"sneaky", queue_id=0)
    assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
    assert f"topic[{topic}] is forbidden" in answer.remark


@pytest.mark.parametrize("body_bytes", [MAX_MESSAGE_SIZE + 1, 4 * MAX_MESSAGE_SIZE])
def test_body_over_max_message_size_is_illegal(broker, body_bytes):
    with _harmless(broker):
        with _client(broker) as client:
            answer = _send(client, BAD_TOPIC, b"b" * body_bytes)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL, answer.remark
    assert "msg body length limit" in answer.remark or "body" in answer.remark


def test_empty_body_is_illegal(broker):
    with _harmless(broker):
        with _client(broker) as client:
            answer = _send(client, BAD_TOPIC, b"")
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL, answer.remark


def test_batch_with_a_malformed_body_stores_nothing(broker):
    with _harmless(broker):
        with _client(broker) as client:
            fields = _send_fields(BAD_TOPIC, 0, m="true")
            fields["m"] = "true"
            answer = client.invoke(create_request(RequestCode.SEND_BATCH_MESSAGE, fields,
                                                  struct.pack(">i", 9999) + b"short"),
                                   TIMEOUT_MS)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL, answer.remark


PULL_REFUSALS = {
    "topic_does_not_exist": (dict(topic="NoSuchTopicAnywhere"), ResponseCode.TOPIC_NOT_EXIST,
                             "topic[NoSuchTopicAnywhere] not exist"),
    "queue_id_out_of_range": (dict(queue_id=99), ResponseCode.SYSTEM_ERROR,
                              "queueId[99] is illegal"),
    "queue_id_negative": (dict(queue_id=-1), ResponseCode.SYSTEM_ERROR,
                          "queueId[-1] is illegal"),
}


@pytest.mark.parametrize("name", sorted(PULL_REFUSALS))
def test_pull_of_what_does_not_exist_is_refused(broker, name):
    changes, code, remark = PULL_REFUSALS[name]
    pull = dict(topic=BAD_TOPIC, queue_id=0, queue_offset=0)
    pull.update(changes)
    with _harmless(broker, queues=((BAD_TOPIC, 0), (pull["topic"], pull["queue_id"]))):
        with _client(broker) as client:
            answer = client.invoke(create_request(
                RequestCode.PULL_MESSAGE, _pull_fields(pull["topic"], pull["queue_id"],
                                                       pull["queue_offset"])), TIMEOUT_MS)
    assert answer.code == code, answer.remark
    assert remark in answer.remark


def test_pull_with_a_non_numeric_offset_is_refused(broker):
    with _harmless(broker):
        with _client(broker) as client:
            fields = _pull_fields(BAD_TOPIC, 0, 0)
            fields["queueOffset"] = "0x10"
            answer = client.invoke(create_request(RequestCode.PULL_MESSAGE, fields), TIMEOUT_MS)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "<queueOffset> has an invalid long value" in answer.remark


def test_unknown_request_code_keeps_the_connection(broker):
    with _harmless(broker), _raw_socket(broker.broker_addr) as sock:
        for code in (9999, 30001, -5):
            sock.sendall(_frame(_good_json_header(code=code, ext={})))
            answer = _read_frame(sock)
            assert answer is not None, f"closed after unknown code {code}"
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert answer.remark == f"request type {code} not supported"
        sock.sendall(_frame(_good_json_header()))
        answer = _read_frame(sock)
        assert answer is not None and answer.code == ResponseCode.SUCCESS


def test_idle_client_is_closed_after_the_idle_timeout(broker):
    with _harmless(broker):
        log_offset = len(broker._log_text())
        with _raw_socket(broker.broker_addr) as sock:
            started = time.monotonic()
            assert _closed_by_broker(sock, timeout_s=IDLE_TIMEOUT_S + 10)
            elapsed_s = time.monotonic() - started
        assert IDLE_TIMEOUT_S - 0.5 <= elapsed_s <= IDLE_TIMEOUT_S + 5, elapsed_s
        _log_after(broker, log_offset, f"idle for {IDLE_TIMEOUT_S * 1000} ms")


def test_namesrv_refuses_register_broker_with_a_bad_body_crc32(broker):
    body = bodies.encode_register_broker_body(bodies.RegisterBrokerBody(
        bodies.DataVersion(1, 1), {"EvilTopic": {"topicName": "EvilTopic"}}), False)
    fields = {"brokerName": "evil-broker", "brokerAddr": "127.0.0.1:1",
              "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:2", "brokerId": "0",
              "bodyCrc32": str((bodies.body_crc32(body) + 1) & 0x7FFFFFFF)}
    with _harmless(broker), _client(broker, broker.namesrv_addr) as namesrv:
        answer = namesrv.invoke(create_request(RequestCode.REGISTER_BROKER, fields, body),
                                TIMEOUT_MS)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "crc32 not match"
        cluster = _expect_success(namesrv.invoke(
            create_request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS))
        assert b"evil-broker" not in bytes(cluster.body)
        assert b"broker-a" in bytes(cluster.body)
        route = namesrv.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": "EvilTopic"}), TIMEOUT_MS)
        assert route.code == ResponseCode.TOPIC_NOT_EXIST


# --- a client that stops reading --------------------------------------------------------------

BULK_MESSAGES = 40
BULK_BODY_BYTES = 8 * 1024
STALLED_PULLS = 600
# What a stalled client may make the broker hold: the write pause threshold (1 MiB) plus the
# replies to one read's worth of requests is far below this; 600 replies of ~256 KiB are not.
STALLED_GROWTH_MAX_BYTES = 24 << 20


def _broker_rss_bytes(broker) -> int:
    total = 0
    for child in psutil.Process(broker.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += child.memory_info().rss
    return total


def _send_without_blocking(sock: socket.socket, data: bytes) -> int:
    """Write what the kernel takes now; returns the bytes written."""
    sock.setblocking(False)
    written = 0
    with contextlib.suppress(BlockingIOError):
        while written < len(data):
            written += sock.send(data[written:written + 65536])
    return written


def test_client_that_stops_reading_does_not_grow_broker_memory(broker):
    with _client(broker) as client:
        if client.invoke(create_request(RequestCode.GET_MAX_OFFSET, {
                "topic": BULK_TOPIC, "queueId": "0"}), TIMEOUT_MS).ext_fields.get("offset") \
                in (None, "0"):
            for index in range(BULK_MESSAGES):
                _expect_success(_send(client, BULK_TOPIC, bytes([index]) * BULK_BODY_BYTES))
        _wait_dispatched(client, BULK_TOPIC, 0, BULK_MESSAGES)   # SEND_OK precedes dispatch
        first = _expect_success(_pull(client, BULK_TOPIC, 0, 0, sys_flag=6))
        assert len(first.body) > 200 * 1024     # each stalled pull is answered with this much
    pull_frame = encode(create_request(RequestCode.PULL_MESSAGE,
                                       _pull_fields(BULK_TOPIC, 0, 0)))
    with _harmless(broker, queues=((BULK_TOPIC, 0),)) as good_record_sizes:
        rss_before = _broker_rss_bytes(broker)
        with _raw_socket(broker.broker_addr, receive_buffer_bytes=4096) as stalled:
            written = _send_without_blocking(stalled, pull_frame * STALLED_PULLS)
            assert written >= 64 * 1024, written
            time.sleep(1.5)
            growth = _broker_rss_bytes(broker) - rss_before
            # Everyone else is still served while the stalled client holds its connection.
            good_record_sizes.append(_well_behaved_round_trip(broker))
        assert growth < STALLED_GROWTH_MAX_BYTES, f"broker grew by {growth >> 20} MiB"


# --- fuzz -------------------------------------------------------------------------------------

# Codes whose handlers parse what a client sends; random ext fields reach their header parsing.
FUZZ_CODES = [int(code) for code in (
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET, RequestCode.HEART_BEAT,
    RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.END_TRANSACTION, RequestCode.LOCK_BATCH_MQ, RequestCode.GET_CONSUMER_LIST_BY_GROUP)]
FUZZ_KEYS = ["a", "b", "c", "d", "e", "f", "g", "i", "m", "topic", "queueId", "consumerGroup",
             "queueOffset", "maxMsgNums", "sysFlag", "subscription", "offset", "msgId", "key",
             "maxNum", "beginTimestamp", "endTimestamp", "timestamp", "commitOffset"]
# No lone surrogates: orjson cannot write them, and the broker would only see invalid UTF-8.
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_ext_fields = st.dictionaries(st.one_of(st.sampled_from(FUZZ_KEYS), _text),
                              st.one_of(_text, st.integers().map(str)), max_size=12)


@st.composite
def _json_frames(draw) -> bytes:
    header = {"code": draw(st.one_of(st.sampled_from(FUZZ_CODES),
                                     st.integers(-(1 << 15), 1 << 15))),
              "opaque": draw(st.integers(-(1 << 31), (1 << 31) - 1)),
              "flag": draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
              "extFields": draw(_ext_fields)}
    if draw(st.booleans()):
        header["language"] = draw(st.one_of(st.sampled_from(["JAVA", "GO", "CPP"]), _text,
                                             st.integers(-(1 << 63), (1 << 63) - 1)))
    text = orjson.dumps(header)
    if draw(st.integers(0, 3)) == 0:    # corrupt one byte of the JSON
        position = draw(st.integers(0, len(text) - 1))
        text = text[:position] + bytes([draw(st.integers(0, 255))]) + text[position + 1:]
    return _frame(text, draw(st.binary(max_size=300)))


@st.composite
def _binary_frames(draw) -> bytes:
    remark = draw(st.one_of(st.text(max_size=10).map(str.encode), st.binary(max_size=20)))
    entries = b""
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.one_of(st.sampled_from(FUZZ_KEYS), st.text(max_size=8))).encode()
        value = draw(st.one_of(st.text(max_size=20).map(str.encode), st.binary(max_size=20)))
        key_length = draw(st.sampled_from([len(key)] * 6 + [len(key) + 1, -1]))
        value_length = draw(st.sampled_from([len(value)] * 6 + [1 << 20, -2]))
        entries += (struct.pack(">h", key_length) + key + struct.pack(">i", value_length)
                    + value)
    header = (struct.pack(">hBhii", draw(st.sampled_from(FUZZ_CODES)), draw(st.integers(0, 255)),
                          395, 1, 0)
              + struct.pack(">i", draw(st.sampled_from([len(remark)] * 6 + [-1, 1 << 30])))
              + remark
              + struct.pack(">i", draw(st.sampled_from([len(entries)] * 6 + [len(entries) + 3])))
              + entries)
    return _frame(header, draw(st.binary(max_size=64)), serialize_type=1)


@st.composite
def _lying_frames(draw) -> bytes:
    frame = draw(st.one_of(_json_frames(), _binary_frames()))
    choice = draw(st.integers(0, 3))
    if choice == 0:                 # truncated anywhere
        return frame[:draw(st.integers(0, len(frame)))]
    if choice == 1:                 # the length field lies
        return struct.pack(">I", draw(st.integers(0, (1 << 32) - 1))) + frame[4:]
    if choice == 2:                 # the header word lies
        return frame[:4] + struct.pack(">I", draw(st.integers(0, (1 << 32) - 1))) + frame[8:]
    return frame + draw(st.binary(max_size=16))   # trailing junk after a frame


FUZZ_TOPIC = "FuzzTopic"
# Valid requests of the data and metadata paths; the fuzz replaces some of their values.
FUZZ_TEMPLATES = [
    (RequestCode.SEND_MESSAGE_V2, _send_fields(FUZZ_TOPIC, 0)),
    (RequestCode.SEND_BATCH_MESSAGE, _send_fields(FUZZ_TOPIC, 0, m="true")),
    (RequestCode.PULL_MESSAGE, _pull_fields(FUZZ_TOPIC, 0, 0)),
    (RequestCode.QUERY_MESSAGE, {"topic": FUZZ_TOPIC, "key": "k", "maxNum": "32",
                                 "beginTimestamp": "0", "endTimestamp": "9999999999999"}),
    (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "0"}),
    (RequestCode.GET_MAX_OFFSET, {"topic": FUZZ_TOPIC, "queueId": "0"}),
    (RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": FUZZ_TOPIC, "queueId": "0"}),
    (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": FUZZ_TOPIC, "queueId": "0",
                                              "timestamp": "0"}),
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": "fuzz_group",
                                          "delayLevel": "0", "originTopic": FUZZ_TOPIC}),
    (RequestCode.END_TRANSACTION, {"producerGroup": "fuzz_producer",
                                   "tranStateTableOffset": "0", "commitLogOffset": "0",
                                   "commitOrRollback": "8", "msgId": "00" * 16}),
    (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "fuzz_group", "topic": FUZZ_TOPIC,
                                         "queueId": "0"}),
    (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "fuzz_group", "topic": FUZZ_TOPIC,
                                          "queueId": "0", "commitOffset": "0"}),
    (RequestCode.HEART_BEAT, {}),
    (RequestCode.LOCK_BATCH_MQ, {}),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "fuzz_group"}),
]
_numbers = st.one_of(st.integers(-2, 64), st.integers(-(1 << 63), (1 << 63) - 1),
                     st.integers(1 << 63, 1 << 70)).map(str)


@st.composite
def _mutated_requests(draw) -> bytes:
    """A valid request with a few values (and the body) replaced by numbers or text."""
    code, fields = draw(st.sampled_from(FUZZ_TEMPLATES))
    fields = dict(fields)
    for key in draw(st.lists(st.sampled_from(sorted(fields) or ["topic"]), max_size=3)):
        fields[key] = draw(st.one_of(_numbers, _text))
    body = draw(st.one_of(st.binary(max_size=200),
                          st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | _text,
                                       lambda inner: st.lists(inner, max_size=3)
                                       | st.dictionaries(_text, inner, max_size=3),
                                       max_leaves=8).map(orjson.dumps)))
    return encode(create_request(code, fields, body))


FUZZ_INPUTS = st.one_of(_mutated_requests(), _mutated_requests(),
st.binary(max_size=300), _json_frames(), _binary_frames(),
                        _lying_frames(), st.lists(_json_frames(), min_size=2, max_size=5)
                        .map(b"".join))


def test_fuzzed_frames_never_take_the_broker_down(broker):
    log_offset = len(broker._log_text())
    process_ids = _process_ids(broker)
    unanswered, answered = [], []

    @seed(20240607)
    @settings(max_examples=300, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(data=FUZZ_INPUTS)
    def exchange(data: bytes) -> None:
        with _raw_socket(broker.broker_addr) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            # The broker answers what it can and closes at our end of stream (or earlier).
            sock.settimeout(10.0)
            try:
                while sock.recv(65536):
                    answered.append(len(data))
            except ConnectionResetError:
                pass
            except TimeoutError:
                unanswered.append(data)

    exchange()
    assert not unanswered, f"connections left open after EOF: {unanswered[:3]!r}"
    # The generators are useful only if many inputs get past framing into the handlers.
    assert len(answered) >= 50, len(answered)
    assert _process_ids(broker) == process_ids, "a broker process died and was replaced"
    _well_behaved_round_trip(broker)
    errors = [line for line in broker._log_text()[log_offset:].splitlines()
              if line.startswith(("ERROR", "CRITICAL", "Traceback"))]
    assert not errors, "\n".join(errors[:20])
