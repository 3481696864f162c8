"""RemotingCommand decodes real clients' frames and encodes what every client can read.

Method: hand-built golden frames (tests/golden/frames.py) are decoded and compared with their
stated fields, and re-encoded byte for byte; round trips in both header encodings; JSON
leniency cases from the C++ and Go clients; JSON strictness cases that must be ProtocolError;
output checked by parsing it back with orjson.
"""
import importlib.util
import pathlib
import struct

import orjson
import pytest

from pybroker.errors import ProtocolError
from pybroker.protocol import command
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import CURRENT_VERSION, LanguageCode, SerializeType

_GOLDEN_PATH = pathlib.Path(__file__).resolve().parents[2] / "golden" / "frames.py"
_spec = importlib.util.spec_from_file_location("golden_frames", _GOLDEN_PATH)
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def decode_all(data: bytes, **kwargs) -> RemotingCommand:
    return command.decode(data, 0, len(data), **kwargs)


def fields_of(decoded: RemotingCommand) -> dict:
    return dict(code=decoded.code, language=decoded.language, version=decoded.version,
                opaque=decoded.opaque, flag=decoded.flag, remark=decoded.remark,
                ext_fields=decoded.ext_fields,
                body=None if decoded.body is None else bytes(decoded.body),
                serialize_type=decoded.serialize_type)


# --- golden frames ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(golden.ALL))
def test_golden_frame_decodes_to_its_fields(name):
    data, expected = golden.ALL[name]
    assert fields_of(decode_all(data)) == expected


@pytest.mark.parametrize("name", ["binary_send_v2_request", "binary_response"])
def test_golden_binary_frames_re_encode_byte_for_byte(name):
    data, _ = golden.ALL[name]
    assert command.encode(decode_all(data), SerializeType.ROCKETMQ) == data


def test_golden_java_json_response_re_encodes_byte_for_byte():
    data = golden.JSON_JAVA_SEND_RESPONSE
    assert command.encode(decode_all(data)) == data


def test_golden_frames_split_out_of_one_stream():
    from pybroker._fast import frame
    stream = b"".join(data for data, _ in golden.ALL.values())
    frames, tail = frame.split_frames(stream, 0, len(stream))
    assert [stream[s:s + n] for s, n in frames] == [data for data, _ in golden.ALL.values()]
    assert tail == len(stream)


# --- round trips --------------------------------------------------------------------------------

@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest.mark.parametrize("body", [None, b"x", bytes(range(256)) * 20])
def test_round_trip(serialize_type, body):
    original = RemotingCommand(310, LanguageCode.GO, 317, 123456, 2, "remark é",
                               {"a": "PG", "b": "Topic", "uniq": "ü€"}, body)
    data = command.encode(original, serialize_type)
    decoded = decode_all(data)
    assert decoded == original
    assert decoded.serialize_type == serialize_type
    assert decoded.is_oneway and not decoded.is_response


def test_body_is_a_view_of_the_buffer_unless_copied():
    data = bytearray(command.encode(RemotingCommand(10, body=b"payload")))
    decoded = command.decode(data, 0, len(data))
    assert isinstance(decoded.body, memoryview) and decoded.body.obj is data
    copied = command.decode(data, 0, len(data), copy_body=True)
    assert type(copied.body) is bytes
    data[-1:] = b"!"
    assert bytes(decoded.body) == b"payloa!" and copied.body == b"payload"


def test_decode_a_frame_in_the_middle_of_a_buffer():
    one = command.encode(RemotingCommand(11, opaque=5, ext_fields={"k": "v"}, body=b"b"))
    buffer = b"junk" + one + b"more"
    assert decode_all(one) == command.decode(buffer, 4, len(one))


# --- requests and responses ---------------------------------------------------------------------

def test_create_request_uses_fresh_opaques_and_current_version():
    first = command.create_request(34, {"k": "v"}, b"body")
    second = command.create_request(34)
    assert second.opaque != first.opaque
    assert 0 <= first.opaque < 1 << 31
    assert first.version == CURRENT_VERSION and first.flag == 0 and not first.is_response
    assert command.create_request(15, oneway=True).is_oneway
    assert second.ext_fields == {} and second.body is None


def test_create_response_echoes_the_opaque():
    request = decode_all(golden.JSON_GO_HEARTBEAT)
    response = command.create_response(request, 0, "done", {"x": "1"})
    assert response.opaque == request.opaque == 5
    assert response.is_response and not response.is_oneway
    assert response.language == LanguageCode.JAVA and response.version == CURRENT_VERSION
    assert (response.remark, response.ext_fields) == ("done", {"x": "1"})


# --- JSON leniency (protocol.md §8 item 3) --------------------------------------------------------

def test_cpp_trailing_newline_and_numbers_and_booleans():
    header = b'{"code":11,"extFields":{"queueId":3,"sysFlag":0,"m":true,"n":false,"x":1.5},' \
             b'"language":"CPP","opaque":1}\n\r\t '
    decoded = decode_all(json_frame(header))
    assert decoded.ext_fields == {"queueId": "3", "sysFlag": "0", "m": "true", "n": "false",
                                  "x": "1.5"}
    assert decoded.language == LanguageCode.CPP


def test_go_empty_remark_and_ext_fields():
    decoded = decode_all(json_frame(b'{"code":10,"remark":"","extFields":{},"language":"GO"}'))
    assert decoded.remark is None and decoded.ext_fields == {}


@pytest.mark.parametrize("header", [
    b'{"code":1}', b'{"code":1,"remark":null,"extFields":null}',
    b'{"code":1,"serializeTypeCurrentRPC":"JSON","unknownKey":[1,{"a":2}]}',
])
def test_absent_or_null_optional_fields(header):
    decoded = decode_all(json_frame(header))
    assert (decoded.code, decoded.remark, decoded.ext_fields) == (1, None, {})
    assert (decoded.language, decoded.version, decoded.opaque, decoded.flag) == (0, 0, 0, 0)


@pytest.mark.parametrize("language,expected", [
    ('"JAVA"', 0), ('"GO"', 9), ('"RUST"', 12), ('"NODE_JS"', 13), ('"COBOL"', 7),
    ("9", 9), ("1", 1), ("99", 7), ("null", 0),
])
def test_language_by_name_or_ordinal(language, expected):
    header = b'{"code":1,"language":' + language.encode() + b"}"
    assert decode_all(json_frame(header)).language == expected


def test_null_ext_value_is_no_field():
    decoded = decode_all(json_frame(b'{"code":1,"extFields":{"a":null,"b":"x","c":7}}'))
    assert decoded.ext_fields == {"b": "x", "c": "7"}


def test_unknown_binary_language_byte_becomes_other():
    data = bytearray(golden.BINARY_RESPONSE)
    data[8 + 2] = 200  # language byte of the binary header
    assert decode_all(bytes(data)).language == LanguageCode.OTHER


# --- JSON strictness ----------------------------------------------------------------------------

@pytest.mark.parametrize("header,message", [
    (b"", "empty"),
    (b"{", "not valid JSON"),
    (b'{"code":1}x', "not valid JSON"),
    (b'{"code":"\xff"}', "not valid JSON"),
    (b"[1,2]", "must be an object"),
    (b'"text"', "must be an object"),
    (b'{"code":"10"}', "code must be a 32-bit integer"),
    (b'{"code":1.0}', "code must be a 32-bit integer"),
    (b'{"code":true}', "code must be a 32-bit integer"),
    (b'{"code":2147483648}', "code must be a 32-bit integer"),
    (b'{"code":1,"opaque":[1]}', "opaque must be"),
    (b'{"code":1,"flag":{}}', "flag must be"),
    (b'{"code":1,"version":"409"}', "version must be"),
    (b'{"code":1,"remark":5}', "remark must be a string"),
    (b'{"code":1,"language":{"x":1}}', "language must be"),
    (b'{"code":1,"extFields":[]}', "extFields must be an object"),
    (b'{"code":1,"extFields":"a=b"}', "extFields must be an object"),
    (b'{"code":1,"extFields":{"a":{"b":"c"}}}', "ext field 'a' must be a scalar"),
    (b'{"code":1,"extFields":{"a":["b"]}}', "ext field 'a' must be a scalar"),
])
def test_json_header_must_refuse(header, message):
    with pytest.raises(ProtocolError, match=message):
        decode_all(json_frame(header))


def test_json_ext_fields_max():
    fields = {f"k{i}": "v" for i in range(6)}
    header = orjson.dumps({"code": 1, "extFields": fields})
    assert len(decode_all(json_frame(header), ext_fields_max=6).ext_fields) == 6
    with pytest.raises(ProtocolError, match="more than ext_fields_max 5"):
        decode_all(json_frame(header), ext_fields_max=5)


def test_framing_errors_surface_from_decode():
    with pytest.raises(ProtocolError, match="serialize type 3"):
        decode_all(struct.pack(">iI", 6, (3 << 24) | 2) + b"{}")
    with pytest.raises(ProtocolError, match="shorter than its 21-byte"):
        decode_all(struct.pack(">iI", 6, (1 << 24) | 2) + b"{}")


# --- JSON output strictness (protocol.md §8 item 4) -----------------------------------------------

def test_json_output_is_compact_with_string_values_and_language_name():
    response = RemotingCommand(0, LanguageCode.JAVA, 479, 42, 1, None, {"queueId": "3"})
    data = command.encode(response)
    header_length = struct.unpack(">i", data[4:8])[0]
    header = data[8:8 + header_length]
    assert b" " not in header and b"\n" not in header
    parsed = orjson.loads(header)
    assert parsed == {"code": 0, "extFields": {"queueId": "3"}, "flag": 1, "language": "JAVA",
                      "opaque": 42, "serializeTypeCurrentRPC": "JSON", "version": 479}
    assert list(parsed) == sorted(parsed)  # fastjson's alphabetical order


def test_json_output_omits_none_remark_empty_ext_fields_and_none_values():
    parsed = orjson.loads(command.encode_json_header(RemotingCommand(1, ext_fields={"a": None})))
    assert "remark" not in parsed and "extFields" not in parsed
    parsed = orjson.loads(command.encode_json_header(
        RemotingCommand(1, remark="", ext_fields={"a": None, "b": "x"})))
    assert parsed["remark"] == "" and parsed["extFields"] == {"b": "x"}


@pytest.mark.parametrize("ext_fields,error", [
    ({"queueId": 3}, TypeError), ({"flag": True}, TypeError), ({1: "x"}, TypeError),
])
def test_json_output_refuses_non_string_ext_values(ext_fields, error):
    with pytest.raises(error):
        command.encode(RemotingCommand(1, ext_fields=ext_fields))


@pytest.mark.parametrize("changes", [
    {"language": 99}, {"opaque": 1 << 31}, {"code": "1"}, {"flag": 1.5}, {"remark": b"r"},
])
def test_json_output_refuses_fields_that_cannot_travel(changes):
    original = RemotingCommand(1)
    for key, value in changes.items():
        setattr(original, key, value)
    with pytest.raises((ValueError, TypeError)):
        command.encode(original)


def test_binary_output_refuses_codes_above_int16():
    with pytest.raises(ValueError, match="code 200050"):
        command.encode(RemotingCommand(200050), SerializeType.ROCKETMQ)
    assert decode_all(command.encode(RemotingCommand(200050))).code == 200050
    with pytest.raises(ValueError, match="serialize type 5"):
        command.encode(RemotingCommand(1), 5)
