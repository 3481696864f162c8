# Remoting frame codec: split connection buffers into frames; ROCKETMQ binary header codec.
"""RocketMQ remoting frames and the ROCKETMQ binary header (protocol.md §1.1, §1.4).

Frame (every integer big-endian)::

    offset  size        field
    0       4           length: bytes after this field = 4 + header_length + body_length
    4       4           header word: serialize_type << 24 | header_length (low 24 bits)
    8       header_len  header: JSON text (type 0) or ROCKETMQ binary (type 1)
    8+hl    rest        body (may be empty)

ROCKETMQ binary header::

    offset  size  field
    0       2     code (short)
    2       1     language (LanguageCode byte)
    3       2     version (short)
    5       4     opaque (int)
    9       4     flag (int)
    13      4     remark byte length R (int)
    17      R     remark, UTF-8
    17+R    4     ext block byte length E (int)
    21+R    E     entries: key length (short), key UTF-8, value length (int), value UTF-8

The JSON header text is parsed and written by orjson in :mod:`pybroker.protocol.command`; the
checks and conversions of its fields (:func:`json_header_values`, :func:`json_header_object`)
are typed loops here.

Buffers in, positions out: every function accepts any object exporting a contiguous buffer
(bytes, bytearray, memoryview, mmap) and reports byte positions in it. Malformed input raises
:class:`pybroker.errors.ProtocolError`; bad arguments from our own code raise ``ValueError``.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.string cimport memcmp, memcpy

from pybroker._fast.hton cimport pb_pack_int16, pb_pack_int32, pb_unpack_int16, pb_unpack_int32

from pybroker.errors import ProtocolError
from pybroker.protocol import constants as _constants

cdef extern from "Python.h":
    # Returns the str's cached UTF-8 form (no new object; ASCII strings point at their data).
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1

cdef enum:
    # (The binary header's field offsets are in frame.pxd, shared with request_read.pyx.)
    # Ext entry: key length (short) + value length (int) around the two strings.
    BINARY_EXT_ENTRY_OVERHEAD_BYTES = 2 + 4
    # Frames reported per scan_frames call inside split_frames (stack array).
    SPLIT_BATCH_FRAMES = 256
    INT16_MIN = -32768
    INT16_MAX = 32767
    LANGUAGE_MAX = 255

# The Cython constants restate protocol/constants.py; they must agree.
assert FRAME_LENGTH_FIELD_BYTES == _constants.FRAME_LENGTH_FIELD_BYTES
assert FRAME_HEADER_WORD_BYTES == _constants.FRAME_HEADER_WORD_BYTES
assert FRAME_HEADER_LENGTH_MASK == _constants.FRAME_HEADER_LENGTH_MASK
assert FRAME_SERIALIZE_TYPE_SHIFT == _constants.FRAME_SERIALIZE_TYPE_SHIFT
assert SERIALIZE_TYPE_JSON == _constants.SerializeType.JSON
assert SERIALIZE_TYPE_ROCKETMQ == _constants.SerializeType.ROCKETMQ
assert BINARY_HEADER_FIXED_BYTES == _constants.BINARY_HEADER_FIXED_BYTES
assert BINARY_REMARK_AT + BINARY_EXT_LENGTH_BYTES == BINARY_HEADER_FIXED_BYTES

cdef int64_t INT32_MIN = -2147483648
cdef int64_t INT32_MAX = 2147483647


# --- frame splitting ----------------------------------------------------------------------------

cdef Py_ssize_t scan_frames(const unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                            Py_ssize_t frame_max_bytes, Py_ssize_t *positions,
                            Py_ssize_t pairs_capacity, Py_ssize_t *tail_out,
                            FrameFault *fault) noexcept nogil:
    cdef Py_ssize_t position = start
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t frame_bytes
    cdef int32_t length
    cdef uint32_t header_word
    fault.kind = FRAME_FAULT_NONE
    while count < pairs_capacity and end - position >= FRAME_LENGTH_FIELD_BYTES:
        length = pb_unpack_int32(data + position)
        fault.frame_position = position
        fault.value = length
        if length < FRAME_HEADER_WORD_BYTES:
            fault.kind = FRAME_FAULT_LENGTH_TOO_SMALL
            break
        frame_bytes = <Py_ssize_t>length + FRAME_LENGTH_FIELD_BYTES
        if frame_bytes > frame_max_bytes:
            fault.kind = FRAME_FAULT_LENGTH_TOO_LARGE
            break
        # Check the header word as soon as it has arrived, not when the whole frame has.
        if end - position < FRAME_PREFIX_BYTES:
            break
        header_word = <uint32_t>pb_unpack_int32(data + position + FRAME_LENGTH_FIELD_BYTES)
        if (header_word >> FRAME_SERIALIZE_TYPE_SHIFT) > SERIALIZE_TYPE_ROCKETMQ:
            fault.kind = FRAME_FAULT_SERIALIZE_TYPE
            fault.value = header_word >> FRAME_SERIALIZE_TYPE_SHIFT
            break
        if <int64_t>(header_word & FRAME_HEADER_LENGTH_MASK) > length - FRAME_HEADER_WORD_BYTES:
            fault.kind = FRAME_FAULT_HEADER_TOO_LONG
            fault.value = header_word & FRAME_HEADER_LENGTH_MASK
            break
        if end - position < frame_bytes:
            break
        positions[2 * count] = position
        positions[2 * count + 1] = frame_bytes
        count += 1
        position += frame_bytes
    tail_out[0] = position
    return count


cdef str _foreign_protocol_hint(const unsigned char *data, Py_ssize_t available):
    """Name the protocol a misdirected client speaks, from the first bytes it sent."""
    if available >= 2 and data[0] == 0x16 and data[1] == 0x03:
        return ("; this looks like a TLS ClientHello: this port serves plain TCP only "
                "(tls.server.mode=disabled, or no tls.server.certPath), turn TLS off in the "
                "client or enable it on the server")
    if available >= 4 and memcmp(data, b"PRI ", 4) == 0:
        return ("; this looks like an HTTP/2 preface: the remoting port is not gRPC/HTTP, "
                "use a remoting client or the proxy's gRPC port")
    if available >= 4 and (memcmp(data, b"GET ", 4) == 0 or memcmp(data, b"POST", 4) == 0
                           or memcmp(data, b"HTTP", 4) == 0):
        return "; this looks like HTTP: the remoting port is not an HTTP endpoint"
    return ""


cdef str _fault_message(FrameFault *fault, const unsigned char *data, Py_ssize_t start,
                        Py_ssize_t end, Py_ssize_t frame_max_bytes):
    cdef Py_ssize_t position = fault.frame_position
    cdef str where = f"frame at byte {position}: "
    cdef str reason
    if fault.kind == FRAME_FAULT_LENGTH_TOO_SMALL:
        reason = f"length field {fault.value} is below 4, no room for the header word"
    elif fault.kind == FRAME_FAULT_LENGTH_TOO_LARGE:
        reason = (f"length field {fault.value} makes a frame of {fault.value + 4} bytes, over "
                  f"frame_max_bytes {frame_max_bytes}")
    elif fault.kind == FRAME_FAULT_SERIALIZE_TYPE:
        reason = f"serialize type {fault.value} is neither 0 (JSON) nor 1 (ROCKETMQ)"
    else:
        reason = (f"header length {fault.value} exceeds frame length "
                  f"{pb_unpack_int32(data + position)} - 4")
    # Misdirected clients (TLS, HTTP) show up as the first bytes a connection sends.
    if position == start:
        reason += _foreign_protocol_hint(data + position, end - position)
    return where + reason


cdef int _check_range(Py_ssize_t buffer_length, Py_ssize_t start, Py_ssize_t length,
                      str what) except -1:
    if start < 0 or length < 0 or start > buffer_length or length > buffer_length - start:
        raise ValueError(f"{what} [{start}, {start} + {length}) is outside the buffer of "
                         f"{buffer_length} bytes")
    return 0


cdef int _check_frame_max(Py_ssize_t frame_max_bytes) except -1:
    if frame_max_bytes < FRAME_PREFIX_BYTES or frame_max_bytes > INT32_MAX + 4:
        raise ValueError(f"frame_max_bytes {frame_max_bytes} outside [8, 2**31 + 3]")
    return 0


def split_frames(object buffer, Py_ssize_t start, Py_ssize_t end,
                 Py_ssize_t frame_max_bytes=FRAME_MAX_BYTES_DEFAULT):
    """Find every complete frame in ``buffer[start:end]`` without copying.

    Returns ``(frames, tail_position)``: ``frames`` is a list of ``(frame_start, frame_length)``
    in bytes, where ``frame_start`` is the position of the 4-byte length field and
    ``frame_length`` counts the whole frame including that field; ``tail_position`` is where the
    unconsumed (incomplete) tail begins. ``frame_max_bytes`` bounds a whole frame (Java's
    ``frameMaxLength``, 16 MiB by default). A malformed frame raises ProtocolError (the stream
    cannot be resynchronised; close the connection); frames before it in the same call are
    not returned.
    """
    cdef Py_buffer view
    cdef Py_ssize_t positions[2 * SPLIT_BATCH_FRAMES]
    cdef Py_ssize_t tail = start
    cdef Py_ssize_t count, index
    cdef FrameFault fault
    cdef list frames = []
    _check_frame_max(frame_max_bytes)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        _check_range(view.len, start, end - start, "split range")
        while True:
            count = scan_frames(<const unsigned char *>view.buf, tail, end, frame_max_bytes,
                                positions, SPLIT_BATCH_FRAMES, &tail, &fault)
            if fault.kind != FRAME_FAULT_NONE:
                raise ProtocolError(_fault_message(&fault, <const unsigned char *>view.buf,
                                                   start, end, frame_max_bytes))
            for index in range(count):
                frames.append((positions[2 * index], positions[2 * index + 1]))
            if count < SPLIT_BATCH_FRAMES:
                return frames, tail
    finally:
        PyBuffer_Release(&view)


def split_frames_into(object buffer, Py_ssize_t start, Py_ssize_t end, int64_t[::1] positions,
                      Py_ssize_t frame_max_bytes=FRAME_MAX_BYTES_DEFAULT):
    """Like :func:`split_frames` but without a Python object per frame.

    Writes ``frame_start, frame_length`` pairs into ``positions`` (an int64 buffer such as
    ``array('q')``, two entries per frame) and returns ``(frames_count, tail_position)``. Stops
    early when ``positions`` is full; ``tail_position`` is then the first unreported frame.
    """
    cdef Py_buffer view
    cdef Py_ssize_t tail = start
    cdef Py_ssize_t count
    cdef FrameFault fault
    _check_frame_max(frame_max_bytes)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        _check_range(view.len, start, end - start, "split range")
        # int64_t and Py_ssize_t are the same width on every platform we build for.
        count = scan_frames(<const unsigned char *>view.buf, start, end, frame_max_bytes,
                            <Py_ssize_t *>&positions[0] if positions.shape[0] else NULL,
                            positions.shape[0] // 2, &tail, &fault)
        if fault.kind != FRAME_FAULT_NONE:
            raise ProtocolError(_fault_message(&fault, <const unsigned char *>view.buf,
                                               start, end, frame_max_bytes))
        return count, tail
    finally:
        PyBuffer_Release(&view)

assert sizeof(int64_t) == sizeof(Py_ssize_t)


def next_frame(object buffer, Py_ssize_t start, Py_ssize_t end,
               Py_ssize_t frame_max_bytes=FRAME_MAX_BYTES_DEFAULT):
    """The frame taker that takes nothing (a connection without a send fast path): ``(start,
    TAKE_OTHER, frame_length)`` when a whole frame starts at ``start``, ``(start, TAKE_END, 0)``
    when none does yet. A malformed frame raises ProtocolError, as :func:`split_frames` does."""
    cdef Py_buffer view
    cdef Py_ssize_t positions[2]
    cdef Py_ssize_t tail
    cdef FrameFault fault
    _check_frame_max(frame_max_bytes)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        _check_range(view.len, start, end - start, "frame range")
        if scan_frames(<const unsigned char *>view.buf, start, end, frame_max_bytes, positions,
                       1, &tail, &fault) == 1:
            return start, TAKE_OTHER, positions[1]
        if fault.kind != FRAME_FAULT_NONE:
            raise ProtocolError(_fault_message(&fault, <const unsigned char *>view.buf, start,
                                               end, frame_max_bytes))
        return start, TAKE_END, 0
    finally:
        PyBuffer_Release(&view)


def frame_parts(object buffer, Py_ssize_t frame_start, Py_ssize_t frame_length,
                Py_ssize_t frame_max_bytes=FRAME_MAX_BYTES_DEFAULT):
    """Check one whole frame and locate its parts.

    ``frame_start``/``frame_length`` as reported by :func:`split_frames`. Returns
    ``(serialize_type, header_start, header_length, body_start, body_length)``, positions and
    lengths in bytes within ``buffer``. Raises ProtocolError when the frame's own fields disagree
    with ``frame_length`` or break a framing rule, ValueError when the range is outside the buffer.
    """
    cdef Py_buffer view
    cdef const unsigned char *frame
    cdef Py_ssize_t tail
    cdef Py_ssize_t positions[2]
    cdef FrameFault fault
    cdef uint32_t header_word
    cdef Py_ssize_t header_length
    _check_frame_max(frame_max_bytes)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        _check_range(view.len, frame_start, frame_length, "frame")
        frame = <const unsigned char *>view.buf
        if scan_frames(frame, frame_start, frame_start + frame_length, frame_max_bytes,
                       positions, 1, &tail, &fault) != 1:
            if fault.kind != FRAME_FAULT_NONE:
                raise ProtocolError(_fault_message(&fault, frame, frame_start,
                                                   frame_start + frame_length, frame_max_bytes))
            raise ProtocolError(f"frame at byte {frame_start}: {frame_length} bytes do not hold "
                                f"the frame its length field announces")
        if positions[1] != frame_length:
            raise ProtocolError(f"frame at byte {frame_start}: length field announces "
                                f"{positions[1]} bytes, caller gave {frame_length}")
        header_word = <uint32_t>pb_unpack_int32(frame + frame_start + FRAME_LENGTH_FIELD_BYTES)
        header_length = header_word & FRAME_HEADER_LENGTH_MASK
        return (<int>(header_word >> FRAME_SERIALIZE_TYPE_SHIFT), frame_start + FRAME_PREFIX_BYTES,
                header_length, frame_start + FRAME_PREFIX_BYTES + header_length,
                frame_length - FRAME_PREFIX_BYTES - header_length)
    finally:
        PyBuffer_Release(&view)


# --- ROCKETMQ binary header decode --------------------------------------------------------------

# Where the string being decoded sits, so one UnicodeDecodeError handler per header can say.
cdef struct TextPlace:
    const char *what
    Py_ssize_t at


cdef inline str _decode_text(const unsigned char *text, Py_ssize_t length, TextPlace *place,
                             const char *what, Py_ssize_t at):
    # No try block per string (it costs more than the decode); decode_binary_header catches.
    place.what = what
    place.at = at
    return PyUnicode_DecodeUTF8(<const char *>text, length, NULL)


cdef dict _decode_ext_fields(const unsigned char *header, Py_ssize_t block_at,
                             Py_ssize_t header_length, Py_ssize_t ext_fields_max,
                             TextPlace *place):
    """Entries of the ext block [block_at, header_length); zero-length values are dropped."""
    cdef dict ext_fields = {}
    cdef set dropped_keys = None
    cdef Py_ssize_t position = block_at
    cdef Py_ssize_t entries_count = 0
    cdef Py_ssize_t key_length, value_length, fields_count
    cdef str key
    while position < header_length:
        entries_count += 1
        if entries_count > ext_fields_max:
            raise ProtocolError(f"ROCKETMQ header: more than ext_fields_max {ext_fields_max} "
                                f"ext fields")
        if header_length - position < 2:
            raise ProtocolError(f"ROCKETMQ header: ext entry at header byte {position} is cut "
                                f"before its key length")
        key_length = pb_unpack_int16(header + position)
        position += 2
        if key_length <= 0 or key_length > header_length - position - 4:
            raise ProtocolError(f"ROCKETMQ header: ext key length {key_length} at header byte "
                                f"{position - 2} is not within 1..{header_length - position - 4}")
        key = _decode_text(header + position, key_length, place, "ext key", position)
        position += key_length
        value_length = pb_unpack_int32(header + position)
        position += 4
        if value_length < 0 or value_length > header_length - position:
            raise ProtocolError(f"ROCKETMQ header: ext value length {value_length} of key "
                                f"{key!r} is not within 0..{header_length - position}")
        if dropped_keys is not None and key in dropped_keys:
            raise ProtocolError(f"ROCKETMQ header: duplicate ext key {key!r}")
        if value_length == 0:
            # Java reads a zero-length value as null, and a null value is no field at all.
            if key in ext_fields:
                raise ProtocolError(f"ROCKETMQ header: duplicate ext key {key!r}")
            if dropped_keys is None:
                dropped_keys = set()
            dropped_keys.add(key)
        else:
            # A duplicate key leaves the size unchanged: one hash lookup instead of two.
            fields_count = len(ext_fields)
            ext_fields[key] = _decode_text(header + position, value_length, place,
                                           "ext value", position)
            if len(ext_fields) == fields_count:
                raise ProtocolError(f"ROCKETMQ header: duplicate ext key {key!r}")
        position += value_length
    return ext_fields


cdef tuple _decode_binary_header(const unsigned char *header, Py_ssize_t header_length,
                                 Py_ssize_t ext_fields_max, TextPlace *place):
    cdef int32_t remark_length, ext_length
    cdef Py_ssize_t ext_at
    cdef object remark = None
    cdef int language
    if header_length < BINARY_HEADER_FIXED_BYTES:
        raise ProtocolError(f"ROCKETMQ header of {header_length} bytes is shorter than its "
                            f"{BINARY_HEADER_FIXED_BYTES}-byte fixed part")
    remark_length = pb_unpack_int32(header + BINARY_REMARK_LENGTH_AT)
    if remark_length < 0 or remark_length > header_length - BINARY_HEADER_FIXED_BYTES:
        raise ProtocolError(f"ROCKETMQ header: remark length {remark_length} is not within "
                            f"0..{header_length - BINARY_HEADER_FIXED_BYTES}")
    if remark_length > 0:
        remark = _decode_text(header + BINARY_REMARK_AT, remark_length, place, "remark",
                              BINARY_REMARK_AT)
    ext_at = BINARY_REMARK_AT + remark_length
    ext_length = pb_unpack_int32(header + ext_at)
    ext_at += BINARY_EXT_LENGTH_BYTES
    if ext_length < 0 or ext_length > header_length - ext_at:
        raise ProtocolError(f"ROCKETMQ header: ext block length {ext_length} is not within "
                            f"0..{header_length - ext_at}")
    if ext_length != header_length - ext_at:
        raise ProtocolError(f"ROCKETMQ header: {header_length - ext_at - ext_length} stray bytes "
                            f"after the ext block")
    language = header[BINARY_LANGUAGE_AT]
    return (pb_unpack_int16(header + BINARY_CODE_AT), language,
            pb_unpack_int16(header + BINARY_VERSION_AT),
            pb_unpack_int32(header + BINARY_OPAQUE_AT), pb_unpack_int32(header + BINARY_FLAG_AT),
            remark, _decode_ext_fields(header, ext_at, header_length, ext_fields_max, place))


def decode_binary_header(object buffer, Py_ssize_t header_start, Py_ssize_t header_length,
                         Py_ssize_t ext_fields_max=EXT_FIELDS_MAX_DEFAULT):
    """Decode the ROCKETMQ binary header at ``buffer[header_start:header_start + header_length]``.

    Returns ``(code, language, version, opaque, flag, remark, ext_fields)``: ``language`` is the
    raw byte, ``remark`` is None when its length is 0, and ext entries with a zero-length value
    are left out of ``ext_fields`` (Java reads them as null). Every length is checked against
    the header bounds; a violation, duplicate key, invalid UTF-8 or more than ``ext_fields_max``
    entries raises ProtocolError.
    """
    cdef Py_buffer view
    cdef TextPlace place
    if ext_fields_max < 0:
        raise ValueError(f"ext_fields_max {ext_fields_max} is negative")
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        _check_range(view.len, header_start, header_length, "header")
        return _decode_binary_header(<const unsigned char *>view.buf + header_start,
                                     header_length, ext_fields_max, &place)
    except UnicodeDecodeError as error:
        raise ProtocolError(f"ROCKETMQ header: {place.what.decode()} at header byte {place.at} "
                            f"is not valid UTF-8 ({error.reason} at its byte {error.start})"
                            ) from None
    finally:
        PyBuffer_Release(&view)


# --- ROCKETMQ binary header encode --------------------------------------------------------------

cdef struct FixedFields:
    int64_t code
    int64_t language
    int64_t version
    int64_t opaque
    int64_t flag


cdef int64_t _integer_field(object value, int64_t low, int64_t high, str name) except? -1:
    """value as a C integer; TypeError unless an int, ValueError outside [low, high]."""
    cdef int overflow = 0
    cdef long long number
    if not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or number < low or number > high:
        raise ValueError(f"{name} {value} cannot travel: the field allows {low}..{high}")
    return number


cdef int _binary_fixed_fields(FixedFields *fields, object code, object language, object version,
                              object opaque, object flag) except -1:
    fields.code = _integer_field(code, INT16_MIN, INT16_MAX, "code")
    fields.language = _integer_field(language, 0, LANGUAGE_MAX, "language")
    fields.version = _integer_field(version, INT16_MIN, INT16_MAX, "version")
    fields.opaque = _integer_field(opaque, INT32_MIN, INT32_MAX, "opaque")
    fields.flag = _integer_field(flag, INT32_MIN, INT32_MAX, "flag")
    return 0


cdef Py_ssize_t _text_length(object text, str what) except -1:
    cdef Py_ssize_t length
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    PyUnicode_AsUTF8AndSize(text, &length)
    return length


cdef Py_ssize_t _binary_header_size(object remark, dict ext_fields) except -1:
    """Bytes the header will take; validates every string on the way."""
    cdef Py_ssize_t size = BINARY_HEADER_FIXED_BYTES
    cdef Py_ssize_t key_length
    if remark is not None:
        size += _text_length(remark, "remark")
    if ext_fields is not None:
        for key, value in ext_fields.items():
            if key is None or value is None:
                continue
            key_length = _text_length(key, "ext key")
            if key_length > BINARY_EXT_KEY_LENGTH_MAX:
                raise ValueError(f"ext key of {key_length} bytes exceeds the 32767-byte limit")
            size += BINARY_EXT_ENTRY_OVERHEAD_BYTES + key_length
            size += _text_length(value, f"ext value of {key!r}")
    if size > FRAME_HEADER_LENGTH_MASK:
        raise ValueError(f"ROCKETMQ header of {size} bytes exceeds the 24-bit header length")
    return size


cdef Py_ssize_t _write_text(unsigned char *out, object text, int length_bytes) except -1:
    """Write length (2 or 4 bytes) + UTF-8; text was validated by _binary_header_size."""
    cdef Py_ssize_t length = 0
    cdef const char *utf8 = NULL
    if text is not None:
        utf8 = PyUnicode_AsUTF8AndSize(text, &length)
    if length_bytes == 2:
        pb_pack_int16(out, <int16_t>length)
    else:
        pb_pack_int32(out, <int32_t>length)
    if length:
        memcpy(out + length_bytes, utf8, length)
    return length_bytes + length


cdef Py_ssize_t _write_binary_header(unsigned char *out, Py_ssize_t header_size,
                                     const FixedFields *fields, object remark,
                                     dict ext_fields) except -1:
    """Write a header of header_size bytes (from _binary_header_size) at out."""
    cdef Py_ssize_t position
    pb_pack_int16(out + BINARY_CODE_AT, <int16_t>fields.code)
    out[BINARY_LANGUAGE_AT] = <unsigned char>fields.language
    pb_pack_int16(out + BINARY_VERSION_AT, <int16_t>fields.version)
    pb_pack_int32(out + BINARY_OPAQUE_AT, <int32_t>fields.opaque)
    pb_pack_int32(out + BINARY_FLAG_AT, <int32_t>fields.flag)
    position = BINARY_REMARK_LENGTH_AT + _write_text(out + BINARY_REMARK_LENGTH_AT, remark, 4)
    pb_pack_int32(out + position, <int32_t>(header_size - position - BINARY_EXT_LENGTH_BYTES))
    position += BINARY_EXT_LENGTH_BYTES
    if ext_fields is not None:
        for key, value in ext_fields.items():
            if key is None or value is None:
                continue
            position += _write_text(out + position, key, 2)
            position += _write_text(out + position, value, 4)
    return position


def encode_binary_header(object code, object language, object version, object opaque,
                         object flag, object remark, dict ext_fields):
    """The ROCKETMQ binary header alone, as bytes.

    ``remark`` None or str; ``ext_fields`` None or dict of str to str (None keys/values are
    skipped as Java skips nulls). Code/version outside int16, language outside a byte or
    opaque/flag outside int32 raise ValueError; non-str strings raise TypeError.
    """
    cdef Py_ssize_t header_size, written
    cdef bytes header
    cdef FixedFields fields
    _binary_fixed_fields(&fields, code, language, version, opaque, flag)
    header_size = _binary_header_size(remark, ext_fields)
    header = PyBytes_FromStringAndSize(NULL, header_size)
    written = _write_binary_header(<unsigned char *>PyBytes_AS_STRING(header), header_size,
                                   &fields, remark, ext_fields)
    assert written == header_size
    return header


# --- frame encode -------------------------------------------------------------------------------

cdef bytes _allocate_frame(Py_ssize_t header_length, Py_ssize_t body_length, int serialize_type,
                           Py_ssize_t frame_max_bytes):
    """One bytes object for the whole frame, prefix written; the caller fills header and body."""
    cdef Py_ssize_t frame_length = FRAME_PREFIX_BYTES + header_length + body_length
    cdef bytes frame
    cdef unsigned char *out
    _check_frame_max(frame_max_bytes)
    if header_length > FRAME_HEADER_LENGTH_MASK:
        raise ValueError(f"header of {header_length} bytes exceeds the 24-bit header length")
    if frame_length > frame_max_bytes:
        raise ValueError(f"frame of {frame_length} bytes exceeds frame_max_bytes "
                         f"{frame_max_bytes}")
    frame = PyBytes_FromStringAndSize(NULL, frame_length)
    out = <unsigned char *>PyBytes_AS_STRING(frame)
    pb_pack_int32(out, <int32_t>(frame_length - FRAME_LENGTH_FIELD_BYTES))
    pb_pack_int32(out + FRAME_LENGTH_FIELD_BYTES,
                  <int32_t>((<uint32_t>serialize_type << FRAME_SERIALIZE_TYPE_SHIFT)
                            | <uint32_t>header_length))
    return frame


cdef int _copy_body(unsigned char *out, object body, Py_ssize_t body_length) except -1:
    cdef Py_buffer view
    if body_length == 0:
        return 0
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        if view.len != body_length:
            raise ValueError("body changed size while the frame was built")
        memcpy(out, view.buf, body_length)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef Py_ssize_t _buffer_length(object data) except -1:
    cdef Py_buffer view
    if data is None:
        return 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    length = view.len
    PyBuffer_Release(&view)
    return length


def encode_frame(int serialize_type, object header, object body=None,
                 Py_ssize_t frame_max_bytes=FRAME_MAX_BYTES_DEFAULT):
    """A whole frame from an already serialized header (e.g. orjson output) and a body.

    ``header`` and ``body`` are any buffers (``body`` may be None). One allocation; the body is
    copied once. Raises ValueError for an unknown serialize type or a frame over
    ``frame_max_bytes`` (16 MiB by default: Java peers refuse bigger frames).
    """
    cdef Py_buffer header_view
    cdef bytes frame
    cdef Py_ssize_t body_length
    if serialize_type != SERIALIZE_TYPE_JSON and serialize_type != SERIALIZE_TYPE_ROCKETMQ:
        raise ValueError(f"serialize type {serialize_type} is neither 0 (JSON) nor 1 (ROCKETMQ)")
    body_length = _buffer_length(body)
    PyObject_GetBuffer(header, &header_view, PyBUF_SIMPLE)
    try:
        frame = _allocate_frame(header_view.len, body_length, serialize_type, frame_max_bytes)
        memcpy(<unsigned char *>PyBytes_AS_STRING(frame) + FRAME_PREFIX_BYTES, header_view.buf,
               header_view.len)
        _copy_body(<unsigned char *>PyBytes_AS_STRING(frame) + FRAME_PREFIX_BYTES
                   + header_view.len, body, body_length)
        return frame
    finally:
        PyBuffer_Release(&header_view)


def encode_binary_frame(object code, object language, object version, object opaque,
                        object flag, object remark, dict ext_fields, object body=None,
                        Py_ssize_t frame_max_bytes=FRAME_MAX_BYTES_DEFAULT):
    """A whole frame with a ROCKETMQ binary header written in place: one allocation.

    Arguments as :func:`encode_binary_header`, plus ``body`` (any buffer or None) and
    ``frame_max_bytes`` (ValueError above it).
    """
    cdef Py_ssize_t header_size, body_length, written
    cdef bytes frame
    cdef unsigned char *out
    cdef FixedFields fields
    _binary_fixed_fields(&fields, code, language, version, opaque, flag)
    header_size = _binary_header_size(remark, ext_fields)
    body_length = _buffer_length(body)
    frame = _allocate_frame(header_size, body_length, SERIALIZE_TYPE_ROCKETMQ, frame_max_bytes)
    out = <unsigned char *>PyBytes_AS_STRING(frame) + FRAME_PREFIX_BYTES
    written = _write_binary_header(out, header_size, &fields, remark, ext_fields)
    assert written == header_size
    _copy_body(out + header_size, body, body_length)
    return frame


# --- JSON header fields (command.py parses and writes the JSON text with orjson) ----------------

# LanguageCode names by value; the enum is contiguous from 0 (checked), so a tuple indexes it.
cdef tuple _LANGUAGE_NAMES = tuple(member.name for member in sorted(_constants.LanguageCode))
cdef dict _LANGUAGE_BY_NAME = {member.name: int(member) for member in _constants.LanguageCode}
assert [int(member) for member in sorted(_constants.LanguageCode)] == list(
    range(len(_LANGUAGE_NAMES)))
cdef int LANGUAGE_JAVA = _constants.LanguageCode.JAVA
cdef int LANGUAGE_OTHER = _constants.LanguageCode.OTHER


cdef str _show(object value):
    cdef str text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


cdef int64_t _json_int32(dict header, str key) except? -1:
    cdef object value = header.get(key)
    cdef int overflow = 0
    cdef long long number
    if value is None:
        return 0  # Java leaves an absent int field at 0
    if type(value) is int:
        number = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and INT32_MIN <= number <= INT32_MAX:
            return number
    raise ProtocolError(f"JSON header: {key} must be a 32-bit integer, got {_show(value)}")


cdef int _json_language(object value) except -1:
    if value is None:
        return LANGUAGE_JAVA  # Java's field default
    if type(value) is str:
        return _LANGUAGE_BY_NAME.get(value, LANGUAGE_OTHER)
    if type(value) is int:
        return value if 0 <= value < len(_LANGUAGE_NAMES) else LANGUAGE_OTHER
    raise ProtocolError(f"JSON header: language must be a name or an ordinal, got {_show(value)}")


cdef dict _json_ext_values_to_strings(dict raw):
    """C++ sends some ext values as numbers or booleans: turn them into Java's strings."""
    cdef dict ext_fields = {}
    for key, value in raw.items():
        if type(value) is str:
            ext_fields[key] = value
        elif value is None:
            continue  # a null value is no field, as in Java's map
        elif value is True or value is False:
            ext_fields[key] = "true" if value else "false"
        elif type(value) is int or type(value) is float:
            ext_fields[key] = str(value)
        else:
            raise ProtocolError(f"JSON header: ext field {_show(key)} must be a scalar, "
                                f"got {_show(value)}")
    return ext_fields


cdef dict _json_ext_fields(object raw, Py_ssize_t ext_fields_max):
    if raw is None:
        return {}
    if type(raw) is not dict:
        raise ProtocolError(f"JSON header: extFields must be an object, got {_show(raw)}")
    if len(<dict>raw) > ext_fields_max:
        raise ProtocolError(f"JSON header: {len(<dict>raw)} ext fields, more than "
                            f"ext_fields_max {ext_fields_max}")
    for value in (<dict>raw).values():
        if type(value) is not str:
            return _json_ext_values_to_strings(<dict>raw)
    return <dict>raw


def json_header_values(object header, Py_ssize_t ext_fields_max=EXT_FIELDS_MAX_DEFAULT):
    """Check and normalise a JSON header as orjson parsed it.

    Returns ``(code, language, version, opaque, flag, remark, ext_fields)`` like
    :func:`decode_binary_header`. Lenient as real clients need: absent fields default (code,
    version, opaque, flag 0; language JAVA), ``remark`` null or "" is None, ``extFields`` null is
    {}, ext values that are numbers or booleans become Java's strings, null ext values are
    dropped, ``language`` may be a name or an ordinal (unknown: OTHER), extra keys are ignored.
    Strict elsewhere: a non-object header, non-integer or non-int32 numeric fields, a non-string
    remark, a non-object extFields, a nested ext value or more than ``ext_fields_max`` ext fields
    raise ProtocolError.
    """
    if type(header) is not dict:
        raise ProtocolError(f"JSON header must be an object, not {type(header).__name__}")
    cdef dict fields = <dict>header
    cdef object remark = fields.get("remark")
    if remark is not None and type(remark) is not str:
        raise ProtocolError(f"JSON header: remark must be a string, got {_show(remark)}")
    return (_json_int32(fields, "code"), _json_language(fields.get("language")),
            _json_int32(fields, "version"), _json_int32(fields, "opaque"),
            _json_int32(fields, "flag"), remark or None,
            _json_ext_fields(fields.get("extFields"), ext_fields_max))


cdef bint _is_ext_fields_key(const unsigned char *data, Py_ssize_t start, Py_ssize_t end):
    return end - start == 9 and memcmp(data + start, b"extFields", 9) == 0


def json_member_counts(const unsigned char[:] header):
    """``(top, ext)``: members written in a JSON header's top-level object, and in its
    ``extFields`` object (-1 when there is none), counting a key written twice twice.

    A parser keeps one of two equal keys silently; comparing these counts with the parsed
    dicts finds duplicates (a smuggled second ``topic`` or ``Signature``). Counts colons
    outside strings at the object's depth; a key spelt with escapes is not recognised as
    ``extFields`` (the counts then differ and the header is refused, as no client writes it).
    """
    cdef Py_ssize_t length = header.shape[0]
    if length == 0:
        return 0, -1
    cdef const unsigned char *data = &header[0]
    cdef Py_ssize_t i, depth = 0, top = 0, ext = -1, ext_depth = 0
    cdef Py_ssize_t key_start = 0, key_end = 0
    cdef bint in_string = False, escaped = False, key_is_ext = False
    cdef unsigned char c
    for i in range(length):
        c = data[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:          # backslash
                escaped = True
            elif c == 0x22:          # closing quote
                in_string = False
                key_end = i
            continue
        if c == 0x22:
            in_string = True
            key_start = i + 1
        elif c == 0x3A:              # colon: one member of the object at this depth
            if depth == 1:
                top += 1
                key_is_ext = _is_ext_fields_key(data, key_start, key_end)
            elif ext_depth and depth == ext_depth:
                ext += 1
        elif c == 0x7B or c == 0x5B:     # { or [
            depth += 1
            if c == 0x7B and depth == 2 and key_is_ext and ext < 0:
                ext_depth, ext = 2, 0
        elif c == 0x7D or c == 0x5D:     # } or ]
            if depth == ext_depth:
                ext_depth = 0
            depth -= 1
    return top, ext


cdef object _json_ext_fields_out(dict ext_fields):
    """ext_fields itself when every key and value is a str, else a copy without None entries."""
    cdef dict cleaned
    for key, value in ext_fields.items():
        if type(key) is not str or type(value) is not str:
            break
    else:
        return ext_fields
    cleaned = {}
    for key, value in ext_fields.items():
        if key is None or value is None:
            continue
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"ext field {key!r}: keys and values must be str, "
                            f"got {type(value).__name__}")
        cleaned[key] = value
    return cleaned


def json_header_object(object code, object language, object version, object opaque,
                       object flag, object remark, dict ext_fields):
    """The dict to hand orjson for a JSON header, in fastjson's alphabetical key order.

    Java-compatible output (protocol.md §8 item 4): ``language`` as its enum name, every ext value a
    str, ``remark`` omitted when None, ``extFields`` omitted when empty, None ext entries left out,
    ``serializeTypeCurrentRPC`` "JSON". code/version/opaque/flag outside int32 or an unknown
    language raise ValueError; non-str remark, ext keys or values raise TypeError.
    """
    cdef dict header
    cdef object ext_out = None
    cdef int64_t language_code = _integer_field(language, 0, len(_LANGUAGE_NAMES) - 1,
                                                "language")
    cdef int64_t code_number = _integer_field(code, INT32_MIN, INT32_MAX, "code")
    cdef int64_t version_number = _integer_field(version, INT32_MIN, INT32_MAX, "version")
    cdef int64_t opaque_number = _integer_field(opaque, INT32_MIN, INT32_MAX, "opaque")
    cdef int64_t flag_number = _integer_field(flag, INT32_MIN, INT32_MAX, "flag")
    if remark is not None and not isinstance(remark, str):
        raise TypeError(f"remark must be str, not {type(remark).__name__}")
    if ext_fields:
        ext_out = _json_ext_fields_out(ext_fields)
    # Plain ints (not IntEnum members), so orjson writes numbers whatever the caller passed.
    header = {"code": code_number}
    if ext_out:
        header["extFields"] = ext_out
    header["flag"] = flag_number
    header["language"] = _LANGUAGE_NAMES[language_code]
    header["opaque"] = opaque_number
    if remark is not None:
        header["remark"] = remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = version_number
    return header
