# pybroker._fast.pop.grpc_ack: a gRPC receipt handle parsed, its ACK_MESSAGE frame written, in C.
"""The Python of one AckMessage entry in the gRPC worker's FrontAcks (grpc_service/front_acks.py,
docs/architecture/grpc.md "AckMessage calls in one take"), in C:

* :func:`parse_handle` reads a gRPC receipt handle's fields as ``consumer.decode_handle`` does
  (Java's split on " " dropping trailing empty fields, at least 8 fields, Long.valueOf /
  Integer.valueOf of the number fields, the CommitLog offset when a ninth is there), or None
  where decode_handle refuses it; tests/unit/_fast/test_grpc_ack.py keeps the two equal;
* :class:`AckFrames` writes the ACK_MESSAGE request frame ``consumer.ack_request`` makes of a
  handle, encoded as ``command.encode`` encodes it (JSON header, no body), from the pieces of a
  header cut from that encoder (``front_acks.ack_frame_template``), so nothing of the header's
  shape is written here; the test compares the frames byte for byte.

No rule of the ack is judged here: the frames go to the ACK fast path's taker (the remoting
one, ``pop/ack_take.pyx``), and a handle this module does not write (one decode_handle refuses,
a retry flag with no real topic, text JSON would escape, a frame over the bound) is left to the
servicer by the caller.
"""
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from pybroker._fast.digits cimport DECIMAL_BYTES_MAX, read_java_long, write_decimal


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)       # its data then one byte a character, ASCII


#: The values of a frame by their VALUE_* index (grpc_ack.pxd): front_acks.ack_frame_template
#: names its markers so.
FRAME_VALUES = ("group", "topic", "extra_info", "queue_id", "offset", "opaque")
assert len(FRAME_VALUES) == VALUES


cdef enum:
    _FRAME_HEAD_BYTES = 8           # the frame's length word, then the header's (JSON: type 0)
    _SEPARATOR = 32                 # ' ' (protocol/constants.py KEY_SEPARATOR)


cdef int parse_grpc_handle(const unsigned char *text, Py_ssize_t length,
                           GrpcHandle *handle) noexcept nogil:
    cdef Py_ssize_t starts[HANDLE_FIELDS_MAX]
    cdef Py_ssize_t lengths[HANDLE_FIELDS_MAX]
    cdef Py_ssize_t at = 0, end, count = 0
    cdef int64_t value
    while length > 0 and text[length - 1] == _SEPARATOR:
        length -= 1                 # Java's split drops trailing empty fields
    if length == 0:
        return 0
    while count < HANDLE_FIELDS_MAX:
        end = at
        while end < length and text[end] != _SEPARATOR:
            end += 1
        starts[count], lengths[count] = at, end - at
        count += 1
        if end == length:
            break
        at = end + 1
    if count < HANDLE_FIELDS_MIN:
        return 0
    if read_java_long(text + starts[0], lengths[0], False, &handle.start_offset) < 0 \
            or read_java_long(text + starts[1], lengths[1], False, &handle.retrieve_time) < 0 \
            or read_java_long(text + starts[2], lengths[2], False, &handle.invisible_time) < 0 \
            or read_java_long(text + starts[3], lengths[3], True, &value) < 0:
        return 0
    handle.revive_queue_id = <int32_t>value
    handle.retry_at, handle.retry_length = starts[4], lengths[4]
    handle.broker_at, handle.broker_length = starts[5], lengths[5]
    if read_java_long(text + starts[6], lengths[6], True, &value) < 0 \
            or read_java_long(text + starts[7], lengths[7], False, &handle.offset) < 0:
        return 0
    handle.queue_id = <int32_t>value
    handle.commit_log_offset = -1
    if count > HANDLE_FIELDS_MIN \
            and read_java_long(text + starts[8], lengths[8], False,
                               &handle.commit_log_offset) < 0:
        return 0
    return 1


def parse_handle(str text not None):
    """``(start_offset, retrieve_time, invisible_time, revive_queue_id, retry, broker_name,
    queue_id, offset, commit_log_offset)`` of a gRPC receipt handle (``consumer.ReceiptHandle``'s
    fields but its text), or None where ``consumer.decode_handle`` refuses it."""
    cdef GrpcHandle handle
    cdef bytes encoded = text.encode("utf-8", "surrogatepass")
    cdef const unsigned char *data = <const unsigned char *>PyBytes_AS_STRING(encoded)
    if not parse_grpc_handle(data, PyBytes_GET_SIZE(encoded), &handle):
        return None
    retry = data[handle.retry_at:handle.retry_at + handle.retry_length].decode(
        "utf-8", "surrogatepass")
    broker_name = data[handle.broker_at:handle.broker_at + handle.broker_length].decode(
        "utf-8", "surrogatepass")
    return (handle.start_offset, handle.retrieve_time, handle.invisible_time,
            handle.revive_queue_id, retry, broker_name, handle.queue_id, handle.offset,
            handle.commit_log_offset)


cdef bint _json_plain(const unsigned char *text, Py_ssize_t length) noexcept nogil:
    """Printable ASCII but the quote and the backslash: what a JSON string holds as it is."""
    cdef Py_ssize_t i
    for i in range(length):
        if text[i] < 32 or text[i] > 126 or text[i] == 34 or text[i] == 92:
            return False
    return True


cdef class AckFrames:
    """ACK_MESSAGE request frames of gRPC receipt handles (see the module docstring).

    ``pieces``: the header's bytes around its values, ``order``: which value follows each
    piece but the last (``VALUE_*``), as ``front_acks.ack_frame_template`` cuts them from the
    encoder; ``frame_max_bytes``: no frame over it is written."""

    def __init__(self, tuple pieces not None, tuple order not None,
                 Py_ssize_t frame_max_bytes):
        cdef Py_ssize_t index
        if len(pieces) != VALUES + 1 or sorted(order) != list(range(VALUES)):
            raise ValueError(f"{VALUES + 1} pieces around the {VALUES} values, each once")
        self._pieces = tuple(bytes(piece) for piece in pieces)
        self._pieces_bytes = 0
        for index in range(VALUES + 1):
            self._piece[index] = <const unsigned char *>PyBytes_AS_STRING(self._pieces[index])
            self._piece_length[index] = PyBytes_GET_SIZE(self._pieces[index])
            self._pieces_bytes += self._piece_length[index]
        for index in range(VALUES):
            self._order[index] = order[index]
        self._frame_max_bytes = frame_max_bytes

    def add(self, bytearray out not None, str text not None, tuple topics not None,
            bytes group not None, int32_t opaque):
        """Append to ``out`` the frame of the ack of handle ``text`` for ``group`` (its bytes),
        the topic ``topics[d]`` for retry flag ``d`` (a real topic's bytes, or None where the
        flag has none; the names need no JSON escape) and ``opaque``: ``(retrieve_time,
        invisible_time)`` of the handle, or None (nothing appended) where it writes none."""
        cdef GrpcHandle handle
        cdef const unsigned char *data
        cdef const unsigned char *value[VALUES]
        cdef Py_ssize_t value_length[VALUES]
        cdef unsigned char numbers[3 * DECIMAL_BYTES_MAX]
        cdef Py_ssize_t length, header, at, index, kind, old
        cdef int flag
        cdef bytes topic
        cdef unsigned char *frame
        cdef uint64_t word
        if not PyUnicode_IS_ASCII(text):
            return None
        data = <const unsigned char *>PyUnicode_DATA(text)
        length = PyUnicode_GET_LENGTH(text)
        if not parse_grpc_handle(data, length, &handle) or not _json_plain(data, length):
            return None
        if handle.retry_length != 1 or not 48 <= data[handle.retry_at] <= 57:
            return None
        flag = data[handle.retry_at] - 48
        if flag >= len(topics):
            return None
        topic = topics[flag]
        if topic is None:
            return None
        value[VALUE_GROUP], value_length[VALUE_GROUP] = \
            <const unsigned char *>PyBytes_AS_STRING(group), PyBytes_GET_SIZE(group)
        value[VALUE_TOPIC], value_length[VALUE_TOPIC] = \
            <const unsigned char *>PyBytes_AS_STRING(topic), PyBytes_GET_SIZE(topic)
        value[VALUE_EXTRA_INFO], value_length[VALUE_EXTRA_INFO] = data, length
        value[VALUE_QUEUE_ID] = numbers
        value_length[VALUE_QUEUE_ID] = write_decimal(numbers, handle.queue_id)
        value[VALUE_OFFSET] = numbers + DECIMAL_BYTES_MAX
        value_length[VALUE_OFFSET] = write_decimal(numbers + DECIMAL_BYTES_MAX, handle.offset)
        value[VALUE_OPAQUE] = numbers + 2 * DECIMAL_BYTES_MAX
        value_length[VALUE_OPAQUE] = write_decimal(numbers + 2 * DECIMAL_BYTES_MAX, opaque)
        header = self._pieces_bytes
        for index in range(VALUES):
            header += value_length[index]
        if _FRAME_HEAD_BYTES + header > self._frame_max_bytes:
            return None
        old = PyByteArray_GET_SIZE(out)
        PyByteArray_Resize(out, old + _FRAME_HEAD_BYTES + header)
        frame = <unsigned char *>PyByteArray_AS_STRING(out) + old
        word = <uint64_t>(header + 4)           # the frame's length: the header word and header
        for index in range(4):
            frame[index] = <unsigned char>((word >> (24 - 8 * index)) & 0xFF)
            frame[4 + index] = <unsigned char>((<uint64_t>header >> (24 - 8 * index)) & 0xFF)
        at = _FRAME_HEAD_BYTES
        for index in range(VALUES + 1):
            memcpy(frame + at, self._piece[index], <size_t>self._piece_length[index])
            at += self._piece_length[index]
            if index < VALUES:
                kind = self._order[index]
                memcpy(frame + at, value[kind], <size_t>value_length[kind])
                at += value_length[kind]
        return handle.retrieve_time, handle.invisible_time
