# Plain-Python struct codec for remoting frames: the benchmark baseline, never used by pybroker.
"""A straightforward ``struct`` + orjson implementation of what pybroker._fast.frame does.

Used only by test_bench_frame.py to show what the Cython codec buys. It does the same checks in
the obvious way and builds the same RemotingCommand objects, so the comparison is like for like.
"""
import struct

import orjson

from pybroker.errors import ProtocolError
from pybroker.protocol.command import RemotingCommand

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remark length
_SHORT = struct.Struct(">h")
_LANGUAGE_NAMES = {0: "JAVA", 1: "CPP", 9: "GO"}
_LANGUAGE_BY_NAME = {name: code for code, name in _LANGUAGE_NAMES.items()}


def split_frames(buffer, start, end, frame_max_bytes=16777216):
    frames = []
    position = start
    while end - position >= 4:
        (length,) = _INT.unpack_from(buffer, position)
        if length < 4 or length + 4 > frame_max_bytes:
            raise ProtocolError(f"bad length {length}")
        if end - position < 8:
            break
        _, word = _PREFIX.unpack_from(buffer, position)
        if word >> 24 > 1 or word & 0xFFFFFF > length - 4:
            raise ProtocolError("bad header word")
        if end - position < length + 4:
            break
        frames.append((position, length + 4))
        position += length + 4
    return frames, position


def _decode_binary_header(header):
    code, language, version, opaque, flag, remark_length = _FIXED.unpack_from(header, 0)
    position = 17
    remark = header[position:position + remark_length].decode() if remark_length else None
    position += remark_length
    (ext_length,) = _INT.unpack_from(header, position)
    position += 4
    end = position + ext_length
    if ext_length < 0 or end != len(header):
        raise ProtocolError("bad ext length")
    ext_fields = {}
    while position < end:
        (key_length,) = _SHORT.unpack_from(header, position)
        position += 2
        key = header[position:position + key_length].decode()
        position += key_length
        (value_length,) = _INT.unpack_from(header, position)
        position += 4
        if key_length <= 0 or value_length < 0 or position + value_length > end:
            raise ProtocolError("bad ext entry")
        if value_length:
            ext_fields[key] = header[position:position + value_length].decode()
        position += value_length
    return code, language, version, opaque, flag, remark, ext_fields


def decode(buffer, frame_start, frame_length):
    length, word = _PREFIX.unpack_from(buffer, frame_start)
    header_length = word & 0xFFFFFF
    view = memoryview(buffer)[frame_start:frame_start + frame_length]
    header = view[8:8 + header_length]
    body = view[8 + header_length:] or None
    if word >> 24 == 1:
        fields = _decode_binary_header(bytes(header))
        return RemotingCommand(*fields, body=body, serialize_type=1)
    parsed = orjson.loads(header)
    ext_fields = {k: v if type(v) is str else str(v)
                  for k, v in (parsed.get("extFields") or {}).items()}
    return RemotingCommand(parsed.get("code", 0), _LANGUAGE_BY_NAME.get(parsed.get("language"), 7),
                           parsed.get("version", 0), parsed.get("opaque", 0),
                           parsed.get("flag", 0), parsed.get("remark") or None, ext_fields, body)


def encode_json(command):
    header = {"code": command.code}
    if command.ext_fields:
        header["extFields"] = command.ext_fields
    header.update(flag=command.flag, language=_LANGUAGE_NAMES[command.language],
                  opaque=command.opaque)
    if command.remark is not None:
        header["remark"] = command.remark
    header.update(serializeTypeCurrentRPC="JSON", version=command.version)
    header_bytes = orjson.dumps(header)
    body = command.body or b""
    return b"".join((_PREFIX.pack(4 + len(header_bytes) + len(body), len(header_bytes)),
                     header_bytes, body))


def encode_binary(command):
    remark = command.remark.encode() if command.remark else b""
    parts = []
    for key, value in command.ext_fields.items():
        key_bytes, value_bytes = key.encode(), value.encode()
        parts += (_SHORT.pack(len(key_bytes)), key_bytes, _INT.pack(len(value_bytes)), value_bytes)
    block = b"".join(parts)
    header = b"".join((_FIXED.pack(command.code, command.language, command.version,
                                   command.opaque, command.flag, len(remark)),
                       remark, _INT.pack(len(block)), block))
    body = command.body or b""
    return b"".join((_PREFIX.pack(4 + len(header) + len(body), (1 << 24) | len(header)),
                     header, body))
