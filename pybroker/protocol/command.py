# RemotingCommand: one remoting frame as a Python value, and its encode/decode (JSON via orjson).
"""The RocketMQ ``RemotingCommand`` (protocol.md §1.2-§1.5) and its wire codec.

Framing and the ROCKETMQ binary header live in :mod:`pybroker._fast.frame`; this module adds the
JSON header (orjson, reading straight from a memoryview of the connection buffer) and the value
type handlers work with.

Decoded commands are lenient where real clients differ (protocol.md §8 item 3): a C++ trailing
newline, extra keys, ``remark`` absent/null/``""``, ``extFields`` absent/null/``{}``, ext values
sent as JSON numbers or booleans, ``language`` as a name or an ordinal. They are strict where a lie
would propagate: the header must be a JSON object, ext values flat scalars, the integer fields
integers. Encoded JSON follows protocol.md §8 item 4: compact, every ext value a string,
``language`` as its enum name.
"""
import itertools
import operator
from typing import Callable, Optional, Union

import orjson

from pybroker._fast import frame as _frame
from pybroker.errors import ProtocolError
from pybroker.protocol.constants import (
    CURRENT_VERSION,
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    LanguageCode,
    SerializeType,
)

_NBYTES = operator.attrgetter("nbytes")


class MappedBody:
    """A body made of views of mapped store files (a pull's records), sent without a copy.

    :meth:`pybroker.remoting.connection.RemotingConnection.send` writes the views themselves
    (``os.writev`` from the mapping) and calls :meth:`release` once they are written; every other
    reader sees the bytes through ``bytes(body)`` (one copy, e.g. :func:`encode`, tests). The
    release runs at most once, also when the body is dropped unsent (garbage collection), so the
    store files the views hold can be unmapped."""
    __slots__ = ("views", "nbytes", "_release")

    def __init__(self, views: list, release: Callable[[], None]):
        self.views = views
        self.nbytes = sum(map(_NBYTES, views))
        self._release: Optional[Callable[[], None]] = release

    def __len__(self) -> int:
        return self.nbytes

    def __bytes__(self) -> bytes:
        return b"".join(self.views)

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        self.release()


Body = Union[bytes, bytearray, memoryview, MappedBody, None]

FRAME_MAX_BYTES_DEFAULT = _frame.FRAME_MAX_BYTES_DEFAULT
EXT_FIELDS_MAX_DEFAULT = _frame.EXT_FIELDS_MAX_DEFAULT

_INT32_MAX = (1 << 31) - 1
_LANGUAGE_CODES = frozenset(int(member) for member in LanguageCode)
_LANGUAGE_OTHER = int(LanguageCode.OTHER)
_LANGUAGE_JAVA = int(LanguageCode.JAVA)
_SERIALIZE_JSON = int(SerializeType.JSON)
_SERIALIZE_ROCKETMQ = int(SerializeType.ROCKETMQ)

# Opaque ids of commands this process creates. Uniqueness matters per connection only, so a
# forked worker repeating its parent's sequence is harmless. Java's counter is an int: keep 31 bits.
_opaque_counter = itertools.count(1)


class RemotingCommand:
    """One request or response.

    ``code``: request or response code. ``language``: LanguageCode value (int). ``version``:
    sender's MQVersion ordinal. ``opaque``: request id, echoed by the response. ``flag``: bit 0
    response, bit 1 oneway. ``remark``: text or None. ``ext_fields``: the custom header, str to
    str (always a dict; empty when there is none). ``body``: bytes, or a memoryview into the
    buffer the command was decoded from (see :func:`decode`), or None. ``serialize_type``: the
    header encoding the command arrived in (informational; :func:`encode` takes its own).
    """

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields",
                 "body", "serialize_type")

    def __init__(self, code: int, language: int = _LANGUAGE_JAVA,
                 version: int = int(CURRENT_VERSION), opaque: int = 0, flag: int = 0,
                 remark: Optional[str] = None, ext_fields: Optional[dict] = None,
                 body: Body = None, serialize_type: int = _SERIALIZE_JSON):
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = {} if ext_fields is None else ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @property
    def is_response(self) -> bool:
        """True when flag bit 0 (RPC_TYPE) is set."""
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """True when flag bit 1 (RPC_ONEWAY) is set: the receiver must not answer."""
        return bool(self.flag & RPC_ONEWAY)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return (self.code == other.code and self.language == other.language
                and self.version == other.version and self.opaque == other.opaque
                and self.flag == other.flag and self.remark == other.remark
                and self.ext_fields == other.ext_fields
                and bytes(self.body or b"") == bytes(other.body or b""))

    __hash__ = None  # type: ignore[assignment]  # mutable value type

    def __repr__(self) -> str:
        body_length = 0 if self.body is None else len(self.body)
        return (f"RemotingCommand(code={self.code}, language={self.language}, "
                f"version={self.version}, opaque={self.opaque}, flag={self.flag}, "
                f"remark={self.remark!r}, ext_fields={self.ext_fields!r}, "
                f"body=<{body_length} bytes>, serialize_type={self.serialize_type})")


def create_request(code: int, ext_fields: Optional[dict] = None, body: Body = None, *,
                   oneway: bool = False, language: int = _LANGUAGE_JAVA) -> RemotingCommand:
    """A new request with the next process-wide opaque and version CURRENT_VERSION."""
    return RemotingCommand(code, language, int(CURRENT_VERSION),
                           next(_opaque_counter) & _INT32_MAX, RPC_ONEWAY if oneway else 0,
                           None, ext_fields, body)


def create_response(request: RemotingCommand, code: int, remark: Optional[str] = None,
                    ext_fields: Optional[dict] = None, body: Body = None) -> RemotingCommand:
    """The response to ``request``: same opaque, flag = RPC_TYPE, version CURRENT_VERSION.

    Language is JAVA. Clients ignore the language of responses, but a Java broker stamps JAVA,
    and every client's language table knows JAVA (Go maps names it does not know to 127), so
    our responses stay byte-comparable with a Java broker's and parse everywhere.
    """
    return RemotingCommand(code, _LANGUAGE_JAVA, int(CURRENT_VERSION), request.opaque,
                           RPC_TYPE_RESPONSE, remark, ext_fields, body)


# --- decode -------------------------------------------------------------------------------------

def decode(frame_buffer, frame_start: int, frame_length: int, *,
           ext_fields_max: int = EXT_FIELDS_MAX_DEFAULT,
           frame_max_bytes: int = FRAME_MAX_BYTES_DEFAULT,
           copy_body: bool = False) -> RemotingCommand:
    """Decode the whole frame at ``frame_buffer[frame_start:frame_start + frame_length]``.

    Positions in bytes as :func:`pybroker._fast.frame.split_frames` reports them (the frame
    starts at its 4-byte length field). The body is a memoryview slice of ``frame_buffer`` (no
    copy) unless ``copy_body`` is true; a caller that keeps the body beyond the buffer's life, or
    wants to resize a bytearray buffer, must copy it (or release the view) first. An empty body
    decodes as None. Raises ProtocolError for anything malformed.
    """
    (serialize_type, header_start, header_length, body_start,
     body_length) = _frame.frame_parts(frame_buffer, frame_start, frame_length, frame_max_bytes)
    view = memoryview(frame_buffer)
    if serialize_type == _SERIALIZE_ROCKETMQ:
        (code, language, version, opaque, flag, remark,
         ext_fields) = _frame.decode_binary_header(frame_buffer, header_start, header_length,
                                                   ext_fields_max)
        if language not in _LANGUAGE_CODES:
            language = _LANGUAGE_OTHER
    else:
        (code, language, version, opaque, flag, remark,
         ext_fields) = _decode_json_header(view[header_start:header_start + header_length],
                                           ext_fields_max)
    body: bytes | memoryview | None = None
    if body_length:
        body = view[body_start:body_start + body_length]
        if copy_body:
            body = bytes(body)
    return RemotingCommand(code, language, version, opaque, flag, remark, ext_fields, body,
                           serialize_type)


def _decode_json_header(header_view: memoryview, ext_fields_max: int) -> tuple:
    if not header_view:
        raise ProtocolError("JSON header is empty")
    try:
        header = orjson.loads(header_view)
    except orjson.JSONDecodeError as error:
        raise ProtocolError(f"JSON header is not valid JSON: {error}") from None
    values = _frame.json_header_values(header, ext_fields_max)
    # orjson keeps the last of two equal keys; a header that says a key twice is refused
    # (what a signature covered must be what the handler reads).
    top, ext = _frame.json_member_counts(header_view)
    raw_ext = header.get("extFields")
    if top != len(header) or (type(raw_ext) is dict and ext != len(raw_ext)):
        raise ProtocolError("JSON header: a key appears twice")
    return values


# --- encode -------------------------------------------------------------------------------------

def encode(command: RemotingCommand, serialize_type: int = _SERIALIZE_JSON, *,
           frame_max_bytes: int = FRAME_MAX_BYTES_DEFAULT) -> bytes:
    """The whole frame for ``command`` with a JSON (default) or ROCKETMQ header, as bytes.

    One allocation for the frame; the body is copied once. Raises ValueError when a field cannot
    travel (binary: code/version outside int16; both: opaque/flag outside int32, an unknown
    language, a frame over ``frame_max_bytes``), TypeError for non-str ext keys or values.
    ``None`` ext values are left out, as Java leaves out null header fields.
    """
    body = command.body
    if isinstance(body, MappedBody):
        body = bytes(body)
    if serialize_type == _SERIALIZE_ROCKETMQ:
        return _frame.encode_binary_frame(command.code, command.language, command.version,
                                          command.opaque, command.flag, command.remark,
                                          command.ext_fields, body, frame_max_bytes)
    if serialize_type != _SERIALIZE_JSON:
        raise ValueError(f"serialize type {serialize_type} is neither 0 (JSON) nor 1 (ROCKETMQ)")
    return _frame.encode_frame(_SERIALIZE_JSON, encode_json_header(command), body,
                               frame_max_bytes)


def encode_head(command: RemotingCommand, body_length: int, serialize_type: int = _SERIALIZE_JSON,
                *, frame_max_bytes: int = FRAME_MAX_BYTES_DEFAULT) -> bytes:
    """The frame of ``command`` up to its body (length word, header word, header), announcing a
    body of ``body_length`` bytes the caller writes after it; :func:`encode`'s checks apply."""
    head = bytearray(encode(RemotingCommand(command.code, command.language, command.version,
                                            command.opaque, command.flag, command.remark,
                                            command.ext_fields), serialize_type,
                            frame_max_bytes=frame_max_bytes))
    if len(head) + body_length > frame_max_bytes:
        raise ValueError(f"frame of {len(head) + body_length} bytes exceeds frame_max_bytes "
                         f"{frame_max_bytes}")
    length_field = int.from_bytes(head[:4], "big") + body_length
    head[:4] = length_field.to_bytes(4, "big")
    return bytes(head)


def encode_json_header(command: RemotingCommand) -> bytes:
    """The compact JSON header Java's fastjson would write (keys alphabetical, nulls omitted).

    Every ext value is written as a JSON string; ``language`` as its LanguageCode name.
    """
    return orjson.dumps(_frame.json_header_object(
        command.code, command.language, command.version, command.opaque, command.flag,
        command.remark, command.ext_fields))
