# Golden frames of the C++ client core (PyPI `rocketmq` 0.4.4) decoded by pybroker's codecs.
"""Goal: every request the C++ client core sent (tests/golden/cpp-0.4.4, captured by
tools/cpp_capture.py through capture proxies) decodes, its custom header parses under Java's
rules and its bodies decode: JSON headers with a trailing newline and numbers among the ext
values, booleans written "0"/"1" (read as Java's Boolean.parseBoolean reads them: false),
enum ordinals in heartbeats. Method: the recorded bytes through protocol.command.decode,
headers.parse_request_header and the body decoders; facts asserted per request code.
"""
import json
import pathlib

from pybroker.protocol import bodies, constants
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import decode
from pybroker.protocol.headers import parse_request_header

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "golden" / "cpp-0.4.4"


def _requests() -> list:
    commands = []
    for path in sorted(GOLDEN.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            recorded = json.loads(line)
            if recorded["dir"] != "c2s":
                continue
            frame = bytes.fromhex(recorded["hex"])
            commands.append((frame, decode(frame, 0, len(frame), copy_body=True)))
    return commands


def test_every_cpp_request_decodes_and_its_header_parses():
    requests = _requests()
    codes = {command.code for _, command in requests}
    assert {RequestCode.SEND_MESSAGE, RequestCode.HEART_BEAT, RequestCode.PULL_MESSAGE,
            RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.UNREGISTER_CLIENT} <= codes
    for frame, command in requests:
        assert command.language == constants.LanguageCode.CPP
        header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        assert frame[8 + header_length - 1:8 + header_length] == b"\n"   # JsonCpp's newline
        parse_request_header(command.code, command.ext_fields)


def test_cpp_send_booleans_are_zero_and_one_and_read_as_java_reads_them():
    sends = [command for _, command in _requests() if command.code == RequestCode.SEND_MESSAGE]
    assert {command.ext_fields["batch"] for command in sends} == {"0", "1"}
    assert {command.ext_fields["unitMode"] for command in sends} == {"0"}
    for command in sends:
        header = parse_request_header(command.code, command.ext_fields)
        # Boolean.parseBoolean("1") is false: Java stores the C++ batch as one message.
        assert header.batch is False and header.unit_mode is False
        assert isinstance(header.queue_id, int) and header.topic == "CppCapture"


def test_cpp_heartbeat_and_pull_bodies_decode():
    requests = [command for _, command in _requests()]
    heartbeats = [bodies.decode_heartbeat(command.body) for command in requests
                  if command.code == RequestCode.HEART_BEAT and command.body]
    consumers = [data for heartbeat in heartbeats for data in heartbeat.consumer_datas]
    assert consumers and consumers[0].group_name == "cpp_consumer"
    assert consumers[0].message_model == constants.MessageModel.CLUSTERING
    pulls = [parse_request_header(command.code, command.ext_fields) for command in requests
             if command.code == RequestCode.PULL_MESSAGE]
    assert pulls and all(pull.topic in ("CppCapture", "%RETRY%cpp_consumer") for pull in pulls)
