"""Goal: the floor broker kind of the side-by-side matrix (tools/remoting_floor.py) answers what
Apache's and the project's producers send as a broker would, and takes part in send scenarios
only. Method: build floor_server.c with gcc, start it on a free port and talk to it over real
sockets with frames pybroker encodes (JSON and ROCKETMQ headers, single and batch sends, a
heartbeat, topic creation, an unknown code, a oneway request, garbage and oversized frames),
decoding its answers with pybroker's decoder; check its C defines against pybroker's constants;
drive the matrix with ``--brokers floor`` and a stand-in measurement; and (dataplane) start the
whole floor with pybroker's NameServer and see a created topic's route."""
import pathlib
import re
import shutil
import socket
import struct
import sys

import psutil
import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[3] / "tools"
sys.path.insert(0, str(TOOLS))

import bench_brokers  # noqa: E402
import bench_report  # noqa: E402
import bench_side_by_side as driver  # noqa: E402
import remoting_floor  # noqa: E402

from pybroker.client import message as client_message  # noqa: E402
from pybroker.protocol import command, constants  # noqa: E402
from pybroker.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from pybroker.store import layout  # noqa: E402

JSON = int(constants.SerializeType.JSON)
ROCKETMQ = int(constants.SerializeType.ROCKETMQ)
TOPIC = "FloorTopic"


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("the floor server is C: gcc is needed to build it")
    return remoting_floor.build(tmp_path_factory.mktemp("floor-bin"))


@pytest.fixture
def server(binary):
    process, port = remoting_floor.start_server(binary, frame_max_bytes=1 << 20)
    yield process, port
    process.kill()
    process.wait()
    process.stdout.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _receive(sock: socket.socket) -> command.RemotingCommand:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data
    head = exactly(4)
    frame = head + exactly(struct.unpack(">i", head)[0])
    return command.decode(frame, 0, len(frame), copy_body=True)


def _ask(sock, request: command.RemotingCommand, serialize_type: int = JSON):
    sock.sendall(command.encode(request, serialize_type))
    answer = _receive(sock)
    assert (answer.opaque, answer.flag, answer.serialize_type) == \
        (request.opaque, constants.RPC_TYPE_RESPONSE, serialize_type)
    return answer


def _send_v2(queue_id: int, body: bytes = b"x" * 128, batch: bool = False,
             code: int = RequestCode.SEND_MESSAGE_V2, oneway: bool = False):
    fields = {"a": "floor_group", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id),
              "f": "0", "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01AB\x02WAIT\x01true",
              "j": "0", "k": "false", "m": "true" if batch else "false"}
    return command.create_request(code, fields, body, oneway=oneway)


def _stored(answer, port: int, queue_id: int, offset: int, count: int = 1) -> None:
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None
    fields = answer.ext_fields
    assert (fields["queueId"], fields["queueOffset"]) == (str(queue_id), str(offset))
    assert (fields["MSG_REGION"], fields["TRACE_ON"]) == ("DefaultRegion", "true")
    ids = fields["msgId"].split(",")
    assert len(ids) == count == len(set(ids))
    for msg_id in ids:       # store host 127.0.0.1:port, then the offset: upper-case hex
        assert re.fullmatch(r"[0-9A-F]{32}", msg_id)
        assert msg_id[:16] == f"7F000001{port:08X}"


def test_sends_are_answered_in_their_encoding_with_offsets_counting_per_queue(server):
    process, port = server
    with _connect(port) as sock:
        _stored(_ask(sock, _send_v2(2)), port, 2, 0)
        _stored(_ask(sock, _send_v2(2), ROCKETMQ), port, 2, 1)
        long_names = command.create_request(RequestCode.SEND_MESSAGE, {
            "producerGroup": "g", "topic": TOPIC, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4", "queueId": "3", "sysFlag": "0",
            "bornTimestamp": "1", "flag": "0", "batch": "false"}, b"body")
        _stored(_ask(sock, long_names), port, 3, 0)
        batch = client_message.encode_batch(
            [client_message.Message(TOPIC, bytes([n]) * (10 + n)) for n in range(3)])
        for serialize_type in (JSON, ROCKETMQ):
            answer = _ask(sock, _send_v2(2, batch, batch=True,
                                         code=RequestCode.SEND_BATCH_MESSAGE), serialize_type)
            _stored(answer, port, 2, 2 if serialize_type == JSON else 5, count=3)
        _stored(_ask(sock, _send_v2(2)), port, 2, 8)
        bad = _ask(sock, _send_v2(2, batch[:-3], batch=True,
                                  code=RequestCode.SEND_BATCH_MESSAGE))
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL and bad.remark
        _stored(_ask(sock, _send_v2(2)), port, 2, 9)


def test_bookkeeping_topics_unknown_codes_oneway_and_broken_frames(server):
    process, port = server
    first, second, third = _connect(port), _connect(port), _connect(port)
    with first, second, third:
        beat = _ask(first, command.create_request(RequestCode.HEART_BEAT, None, b"{}"), ROCKETMQ)
        assert (beat.code, beat.ext_fields, beat.version) == \
            (ResponseCode.SUCCESS, {}, int(constants.CURRENT_VERSION))
        created = _ask(first, command.create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "8",
            "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG"}))
        assert created.code == ResponseCode.SUCCESS
        topic = remoting_floor.parse_topic_line(process.stdout.readline())
        assert (topic.topic_name, topic.read_queue_nums, topic.write_queue_nums, topic.perm) \
            == (TOPIC, 8, 4, 6)
        unknown = _ask(first, command.create_request(999, {"x": "y"}))
        assert (unknown.code, unknown.remark) == \
            (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request type 999 not supported")
        # A oneway request gets no answer: the next frame read is the heartbeat's.
        first.sendall(command.encode(_send_v2(5, oneway=True)))
        after = _ask(first, command.create_request(RequestCode.HEART_BEAT, None, b"{}"))
        assert after.code == ResponseCode.SUCCESS
        # Garbage closes that connection only; so does a frame over the maximum.
        second.sendall(struct.pack(">ii", 12, 8) + b"not json")
        third.sendall(struct.pack(">i", (1 << 20) + 1) + b"\0" * 64)
        for closed in (second, third):
            assert closed.recv(1) == b""
        _stored(_ask(first, _send_v2(5)), port, 5, 0)
        assert process.poll() is None


def test_c_defines_are_pybrokers_constants():
    defines = dict(re.findall(r"^#define FLOOR_(\w+) (\d+)$",
                              remoting_floor.SOURCE.read_text(), re.MULTILINE))
    expected = {name: int(RequestCode[name]) for name in (
        "SEND_MESSAGE", "UPDATE_AND_CREATE_TOPIC", "HEART_BEAT", "UNREGISTER_CLIENT",
        "SEND_MESSAGE_V2", "SEND_BATCH_MESSAGE")}
    expected.update({name: int(ResponseCode[name]) for name in (
        "SUCCESS", "SYSTEM_ERROR", "REQUEST_CODE_NOT_SUPPORTED", "MESSAGE_ILLEGAL")})
    expected.update(
        RPC_TYPE_RESPONSE=constants.RPC_TYPE_RESPONSE, RPC_ONEWAY=constants.RPC_ONEWAY,
        SERIALIZE_JSON=JSON, SERIALIZE_ROCKETMQ=ROCKETMQ,
        LANGUAGE_JAVA=int(constants.LanguageCode.JAVA),
        CURRENT_VERSION=int(constants.CURRENT_VERSION),
        BINARY_FIXED_BYTES=constants.BINARY_HEADER_FIXED_BYTES,
        BATCH_INNER_MIN_BYTES=client_message._BATCH_FIXED_BYTES,
        TOPIC_MAX_BYTES=layout.TOPIC_MAX_BYTES)
    assert {name: int(value) for name, value in defines.items()} == expected


def test_the_floor_runs_send_scenarios_only_and_its_ratios_carry_no_goal(monkeypatch, capsys,
                                                                         tmp_path):
    args = driver._parser().parse_args(
        "--full --brokers pybroker,floor --runs 1 --duration 20 --warmup 6".split())
    driver._settle_args(args)
    assert args.brokers == ["pybroker", "floor"]
    scenarios = [s for s in driver.matrix("full") if s.kind in ("produce", "consume")][-2:]
    assert [s.kind for s in scenarios] == ["produce", "consume"]
    measured = []

    def fake_measure(args, tools, installs, scenario, run_index, name, work_dir, timing):
        measured.append((name, scenario.kind))
        return {"scenario": scenario.name, "broker": name, "run": run_index, "tps": 100.0}
    monkeypatch.setattr(driver, "_measure_one", fake_measure)
    records = []
    driver.run_matrix(args, None, {}, scenarios, tmp_path, records)
    assert measured == [("pybroker", "produce"), ("floor", "produce"), ("pybroker", "consume")]
    err = capsys.readouterr().err
    assert err.count("floor: skipped for") == 1 and scenarios[1].name in err
    assert driver.estimate_s(scenarios, ["floor"], 1, 20, apache=False) == \
        20 + driver.LOAD_OVERHEAD_S["floor"]
    assert not driver.runs_on("floor", driver.matrix("ha")[0])
    records = [{"scenario": "s", "broker": broker, "run": 0, "tps": tps}
               for broker, tps in (("pybroker", 50.0), ("java-4.9.8", 40.0), ("floor", 100.0))]
    (row,) = bench_report.aggregate(records)
    assert row["ratios"]["floor"]["tps"] == {"ratio": 0.5, "goal_met": None}
    assert row["ratios"]["java-4.9.8"]["tps"]["goal_met"] is False


@pytest.mark.dataplane
def test_the_floor_registers_a_created_topic_with_pybrokers_namesrv(binary, tmp_path):
    floor = remoting_floor.FloorBroker(tmp_path, bench_brokers.shared_broker_conf("ASYNC_FLUSH"),
                                       binary, pybroker_argv=[sys.executable, "-m", "pybroker"])
    floor.start()
    try:
        assert floor.exited() is None
        roles = {floor.role_of(psutil.Process(pid)) for pid in floor.root_pids()}
        assert roles == {remoting_floor.SERVER_ROLE, "namesrv"}
        bench_brokers.create_topic(floor, "FloorRouteTopic", timeout_s=20)
    finally:
        floor.stop()
    assert floor.root_pids() == []
