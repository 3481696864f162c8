# pybroker._fast.record: CommitLog record encode, append-time patch, verify/scan and decode.
"""One CommitLog record (protocol.md §4.2, §4.3), big-endian, hosts IPv4 unless sys_flag says v6::

    off   size   field
      0      4   TOTALSIZE                 whole record, bytes
      4      4   MAGICCODE                 v1 0xDAA320A7 (1-byte topic length) / v2 0xDAA320AB
      8      4   BODYCRC                   crc32(body) & 0x7FFFFFFF
     12      4   QUEUEID
     16      4   FLAG
     20      8   QUEUEOFFSET               patched at append
     28      8   PHYSICALOFFSET            patched at append
     36      4   SYSFLAG                   0x10 born host v6, 0x20 store host v6
     40      8   BORNTIMESTAMP             ms
     48   8/20   BORNHOST                  4/16 IP bytes + port int
      .      8   STORETIMESTAMP            ms, patched at append
      .   8/20   STOREHOSTADDRESS          4/16 IP bytes + port int
      .      4   RECONSUMETIMES
      .      8   PREPARED TRANSACTION OFFSET
      .    4+n   BODY                      int length + bytes
      .  1/2+t   TOPIC                     v1 signed byte / v2 short length + UTF-8
      .    2+p   PROPERTIES                short length + properties string

BLANK end-of-file marker: TOTALSIZE (= bytes to file end) + magic 0xCBD43194.
Only BODYCRC covers bytes; the other fields are checked only by their lengths adding up.
"""
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE,
                             PyBUF_WRITABLE)
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy, memmove
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t

from pybroker._fast.hton cimport (pb_pack_int16, pb_pack_int32, pb_pack_int64,
                                  pb_unpack_int16, pb_unpack_int32, pb_unpack_int64)
from pybroker._fast.crc cimport crc32_masked_of, CRC_NOGIL_MIN_BYTES
from pybroker._fast.debug cimport PYBROKER_DEBUG, debug_check

cdef extern from *:
    """
    #define PB_MAGIC_V1 ((int32_t)0xDAA320A7)
    #define PB_MAGIC_V2 ((int32_t)0xDAA320AB)
    #define PB_MAGIC_BLANK ((int32_t)0xCBD43194)
    #define PB_INT32_MAX ((int64_t)2147483647)
    """
    const int32_t MAGIC_V1 "PB_MAGIC_V1"
    const int32_t MAGIC_V2 "PB_MAGIC_V2"
    const int32_t MAGIC_BLANK "PB_MAGIC_BLANK"
    const int64_t INT32_MAX_VALUE "PB_INT32_MAX"

RECORD_OK = RECORD_STATUS_OK
RECORD_BLANK = RECORD_STATUS_BLANK
RECORD_END = RECORD_STATUS_END
RECORD_CORRUPT = RECORD_STATUS_CORRUPT
RECORD_TRUNCATED = RECORD_STATUS_TRUNCATED

# Exported for the layout cross-check in tests (the C enum is the source these come from).
FIELD_POSITIONS = {
    "total_size": TOTAL_SIZE_POSITION, "magic": MAGIC_POSITION, "body_crc": BODY_CRC_POSITION,
    "queue_id": QUEUE_ID_POSITION, "flag": FLAG_POSITION,
    "queue_offset": QUEUE_OFFSET_POSITION, "physical_offset": PHYSICAL_OFFSET_POSITION,
    "sys_flag": SYS_FLAG_POSITION, "born_timestamp": BORN_TIMESTAMP_POSITION,
    "born_host": BORN_HOST_POSITION,
}

cdef enum:
    # Batch inner message (protocol.md §3.6): size, magic, crc, flag, body length, body, props
    # length, props.
    BATCH_FLAG_POSITION = 12
    BATCH_BODY_LENGTH_POSITION = 16
    BATCH_FIXED_BYTES = 4 + 4 + 4 + 4 + 4 + 2


cdef inline Py_ssize_t _address_bytes(int32_t sys_flag, int32_t v6_bit) noexcept nogil:
    return IPV6_ADDRESS_BYTES if sys_flag & v6_bit else IPV4_ADDRESS_BYTES


cdef inline Py_ssize_t _topic_length_bytes(int32_t magic) noexcept nogil:
    return 2 if magic == MAGIC_V2 else 1


cdef int64_t record_encoded_size(int64_t body_length, int64_t topic_length,
                                 int64_t properties_length, int32_t sys_flag) noexcept nogil:
    cdef int64_t size
    if body_length < 0 or topic_length < 0 or properties_length < 0:
        return -1
    if body_length > INT32_MAX_VALUE or topic_length > SHORT_LENGTH_MAX \
            or properties_length > SHORT_LENGTH_MAX:
        return -1
    size = (FIXED_BYTES_WITHOUT_HOSTS + 2 * PORT_BYTES
            + _address_bytes(sys_flag, BORN_HOST_V6_FLAG)
            + _address_bytes(sys_flag, STORE_HOST_V6_FLAG)
            + (2 if topic_length > TOPIC_V1_MAX_BYTES else 1)
            + body_length + topic_length + properties_length)
    return size if size <= INT32_MAX_VALUE else -1


cdef inline void _fill_fixed_fields(const unsigned char *p, Py_ssize_t store_timestamp_at,
                                    Py_ssize_t body_length_at, RecordFields *f) noexcept nogil:
    # Every field before BODY; positions relative to the record start p, checked by the caller.
    f.body_crc = pb_unpack_int32(p + BODY_CRC_POSITION)
    f.queue_id = pb_unpack_int32(p + QUEUE_ID_POSITION)
    f.flag = pb_unpack_int32(p + FLAG_POSITION)
    f.queue_offset = pb_unpack_int64(p + QUEUE_OFFSET_POSITION)
    f.physical_offset = pb_unpack_int64(p + PHYSICAL_OFFSET_POSITION)
    f.born_timestamp = pb_unpack_int64(p + BORN_TIMESTAMP_POSITION)
    f.born_port = pb_unpack_int32(p + store_timestamp_at - PORT_BYTES)
    f.store_timestamp = pb_unpack_int64(p + store_timestamp_at)
    f.store_port = pb_unpack_int32(p + body_length_at - 8 - 4 - PORT_BYTES)
    f.reconsume_times = pb_unpack_int32(p + body_length_at - 12)
    f.prepared_transaction_offset = pb_unpack_int64(p + body_length_at - 8)


cdef RecordStatus parse_record(const unsigned char *data, Py_ssize_t offset, Py_ssize_t end,
                               bint check_crc, RecordFields *f) noexcept nogil:
    cdef const unsigned char *p = data + offset
    cdef Py_ssize_t remaining = end - offset
    cdef int32_t total_size, magic, sys_flag
    cdef Py_ssize_t topic_length_bytes, born_address, store_address, minimum_size, spare
    cdef Py_ssize_t store_timestamp_at, body_length_at, topic_at, properties_at
    cdef Py_ssize_t body_length, topic_length, properties_length
    f.total_size = 0
    if remaining < 4:
        return RECORD_STATUS_TRUNCATED
    total_size = pb_unpack_int32(p + TOTAL_SIZE_POSITION)
    f.total_size = total_size
    if total_size == 0:
        return RECORD_STATUS_END
    if remaining < 8:
        return RECORD_STATUS_TRUNCATED
    magic = pb_unpack_int32(p + MAGIC_POSITION)
    f.magic = magic
    if magic == MAGIC_BLANK:
        return RECORD_STATUS_BLANK if total_size >= BLANK_RECORD_BYTES else RECORD_STATUS_CORRUPT
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return RECORD_STATUS_CORRUPT
    topic_length_bytes = _topic_length_bytes(magic)
    # The smallest record of this magic (IPv4 hosts, empty parts) bounds every read below.
    if total_size < FIXED_BYTES_WITHOUT_HOSTS + 2 * (IPV4_ADDRESS_BYTES + PORT_BYTES) \
            + topic_length_bytes:
        return RECORD_STATUS_CORRUPT
    if total_size > remaining:
        return RECORD_STATUS_TRUNCATED
    sys_flag = pb_unpack_int32(p + SYS_FLAG_POSITION)
    born_address = _address_bytes(sys_flag, BORN_HOST_V6_FLAG)
    store_address = _address_bytes(sys_flag, STORE_HOST_V6_FLAG)
    minimum_size = FIXED_BYTES_WITHOUT_HOSTS + born_address + store_address + 2 * PORT_BYTES \
        + topic_length_bytes
    if total_size < minimum_size:
        return RECORD_STATUS_CORRUPT
    spare = total_size - minimum_size   # bytes left for body, topic and properties
    store_timestamp_at = BORN_HOST_POSITION + born_address + PORT_BYTES
    body_length_at = store_timestamp_at + 8 + store_address + PORT_BYTES + 4 + 8
    body_length = pb_unpack_int32(p + body_length_at)
    if body_length < 0 or body_length > spare:
        return RECORD_STATUS_CORRUPT
    topic_at = body_length_at + 4 + body_length
    if topic_length_bytes == 1:
        topic_length = <signed char>p[topic_at]
    else:
        topic_length = pb_unpack_int16(p + topic_at)
    if topic_length < 0 or topic_length > spare - body_length:
        return RECORD_STATUS_CORRUPT
    properties_at = topic_at + topic_length_bytes + topic_length
    properties_length = pb_unpack_int16(p + properties_at)
    if properties_length < 0 or body_length + topic_length + properties_length != spare:
        return RECORD_STATUS_CORRUPT
    f.sys_flag = sys_flag
    _fill_fixed_fields(p, store_timestamp_at, body_length_at, f)
    if check_crc and crc32_masked_of(p + body_length_at + 4, <size_t>body_length) != f.body_crc:
        return RECORD_STATUS_CORRUPT
    f.record_position = offset
    f.born_host_position = offset + BORN_HOST_POSITION
    f.born_address_bytes, f.store_address_bytes = born_address, store_address
    f.store_timestamp_position = offset + store_timestamp_at
    f.store_host_position = offset + store_timestamp_at + 8
    f.body_position, f.body_length = offset + body_length_at + 4, body_length
    f.topic_position, f.topic_length = offset + topic_at + topic_length_bytes, topic_length
    f.properties_position = offset + properties_at + 2
    f.properties_length = properties_length
    return RECORD_STATUS_OK


cdef bint topic_bytes_valid(const unsigned char *topic, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    cdef unsigned char c
    if length <= 0:
        return False
    for i in range(length):
        c = topic[i]
        if not ((c >= 97 and c <= 122) or (c >= 65 and c <= 90) or (c >= 48 and c <= 57)
                or c == 37 or c == 124 or c == 95 or c == 45):   # % | _ -
            return False
    return True


cdef RecordStatus scan_records(const unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                               bint check_crc, bint check_topic, Py_ssize_t *position,
                               Py_ssize_t *count) noexcept nogil:
    cdef RecordFields fields
    cdef RecordStatus status = RECORD_STATUS_END
    cdef Py_ssize_t at = start
    cdef Py_ssize_t records = 0
    while at != end:
        status = parse_record(data, at, end, check_crc, &fields)
        if status == RECORD_STATUS_OK and check_topic and not topic_bytes_valid(
                data + fields.topic_position, fields.topic_length):
            status = RECORD_STATUS_CORRUPT
        if status != RECORD_STATUS_OK:
            break
        at += fields.total_size
        records += 1
    else:
        status = RECORD_STATUS_END
    position[0] = at
    count[0] = records
    return status


# --- encode ---------------------------------------------------------------------------------

cdef Py_ssize_t _write_record(unsigned char *p, const RecordFields *f,
                              const RecordParts *parts) noexcept nogil:
    # Writes the whole record at p (room checked by the caller); returns the bytes written.
    cdef Py_ssize_t at = BORN_HOST_POSITION
    pb_pack_int32(p + TOTAL_SIZE_POSITION, f.total_size)
    pb_pack_int32(p + MAGIC_POSITION, f.magic)
    pb_pack_int32(p + BODY_CRC_POSITION, crc32_masked_of(parts.body, <size_t>parts.body_length))
    pb_pack_int32(p + QUEUE_ID_POSITION, f.queue_id)
    pb_pack_int32(p + FLAG_POSITION, f.flag)
    pb_pack_int64(p + QUEUE_OFFSET_POSITION, f.queue_offset)
    pb_pack_int64(p + PHYSICAL_OFFSET_POSITION, f.physical_offset)
    pb_pack_int32(p + SYS_FLAG_POSITION, f.sys_flag)
    pb_pack_int64(p + BORN_TIMESTAMP_POSITION, f.born_timestamp)
    memcpy(p + at, parts.born_address, <size_t>f.born_address_bytes)
    at += f.born_address_bytes
    pb_pack_int32(p + at, f.born_port)
    at += PORT_BYTES
    pb_pack_int64(p + at, f.store_timestamp)
    at += 8
    memcpy(p + at, parts.store_address, <size_t>f.store_address_bytes)
    at += f.store_address_bytes
    pb_pack_int32(p + at, f.store_port)
    pb_pack_int32(p + at + 4, f.reconsume_times)
    pb_pack_int64(p + at + 8, f.prepared_transaction_offset)
    pb_pack_int32(p + at + 16, <int32_t>parts.body_length)
    at += 20
    # memmove: the body may be a view of the very buffer being written.
    memmove(p + at, parts.body, <size_t>parts.body_length)
    at += parts.body_length
    if f.magic == MAGIC_V2:
        pb_pack_int16(p + at, <int16_t>parts.topic_length)
        at += 2
    else:
        p[at] = <unsigned char>parts.topic_length
        at += 1
    memcpy(p + at, parts.topic, <size_t>parts.topic_length)
    at += parts.topic_length
    pb_pack_int16(p + at, <int16_t>parts.properties_length)
    at += 2
    memcpy(p + at, parts.properties, <size_t>parts.properties_length)
    return at + parts.properties_length


cdef Py_ssize_t _encode_checked(Py_buffer *out, Py_ssize_t offset, RecordFields *f,
                                RecordParts *parts) except -1:
    cdef int64_t size
    cdef Py_ssize_t written
    if parts.topic_length > SHORT_LENGTH_MAX:
        raise ValueError(f"topic of {parts.topic_length} bytes > {SHORT_LENGTH_MAX}")
    if parts.properties_length > SHORT_LENGTH_MAX:
        raise ValueError(f"properties of {parts.properties_length} bytes > {SHORT_LENGTH_MAX}")
    f.born_address_bytes = _address_bytes(f.sys_flag, BORN_HOST_V6_FLAG)
    f.store_address_bytes = _address_bytes(f.sys_flag, STORE_HOST_V6_FLAG)
    size = record_encoded_size(parts.body_length, parts.topic_length, parts.properties_length,
                               f.sys_flag)
    if size < 0:
        raise ValueError(f"a body of {parts.body_length} bytes does not fit one record")
    if offset < 0 or size > out.len - offset:
        raise ValueError(f"record of {size} bytes does not fit at offset {offset} of a "
                         f"{out.len}-byte buffer")
    if parts.body_length >= CRC_NOGIL_MIN_BYTES:
        with nogil:
            written = write_record(<unsigned char *>out.buf + offset, f, parts)
    else:
        written = write_record(<unsigned char *>out.buf + offset, f, parts)
    return written


cdef Py_ssize_t write_record(unsigned char *p, RecordFields *f,
                             const RecordParts *parts) noexcept nogil:
    f.born_address_bytes = _address_bytes(f.sys_flag, BORN_HOST_V6_FLAG)
    f.store_address_bytes = _address_bytes(f.sys_flag, STORE_HOST_V6_FLAG)
    f.total_size = <int32_t>record_encoded_size(parts.body_length, parts.topic_length,
                                                parts.properties_length, f.sys_flag)
    f.magic = MAGIC_V2 if parts.topic_length > TOPIC_V1_MAX_BYTES else MAGIC_V1
    cdef Py_ssize_t written = _write_record(p, f, parts)
    if PYBROKER_DEBUG:
        # The size computation and the writer are two descriptions of one layout.
        debug_check(written == f.total_size, "record: bytes written differ from the size",
                    written, f.total_size)
    return written


cdef inline int _check_host(const Py_buffer *view, Py_ssize_t expected, str name) except -1:
    if view.len != expected:
        raise ValueError(f"{name} has {view.len} bytes; sys_flag says {expected}")
    return 0


def encode_into(buf, Py_ssize_t offset, topic, int32_t queue_id, int32_t flag, body, properties,
                int32_t sys_flag, int64_t born_timestamp, born_host, int32_t born_port,
                store_host, int32_t store_port, int32_t reconsume_times=0,
                int64_t prepared_transaction_offset=0, int64_t queue_offset=0,
                int64_t physical_offset=0, int64_t store_timestamp=0):
    """Write one whole record at ``buf[offset:]`` and return its size in bytes.

    ``topic`` and ``properties`` are UTF-8 bytes, ``body`` any buffer; hosts are raw IP bytes (4,
    or 16 when sys_flag has 0x10 born / 0x20 store). The body CRC is computed here; topics over
    127 bytes use magic v2. Timestamps in ms. ValueError when the record does not fit ``buf``,
    the topic or properties exceed 32767 bytes, or a host has the wrong size.
    """
    cdef Py_buffer views[6]
    cdef int acquired = 0
    cdef RecordFields f
    cdef RecordParts parts
    try:
        PyObject_GetBuffer(buf, &views[0], PyBUF_WRITABLE)
        acquired += 1
        for item in (topic, body, properties, born_host, store_host):
            PyObject_GetBuffer(item, &views[acquired], PyBUF_SIMPLE)
            acquired += 1
        f.sys_flag = sys_flag
        _check_host(&views[4], _address_bytes(sys_flag, BORN_HOST_V6_FLAG), "born_host")
        _check_host(&views[5], _address_bytes(sys_flag, STORE_HOST_V6_FLAG), "store_host")
        parts.topic = <const unsigned char *>views[1].buf
        parts.topic_length = views[1].len
        parts.body = <const unsigned char *>views[2].buf
        parts.body_length = views[2].len
        parts.properties = <const unsigned char *>views[3].buf
        parts.properties_length = views[3].len
        parts.born_address = <const unsigned char *>views[4].buf
        parts.store_address = <const unsigned char *>views[5].buf
        f.queue_id, f.flag, f.born_timestamp = queue_id, flag, born_timestamp
        f.born_port, f.store_port, f.reconsume_times = born_port, store_port, reconsume_times
        f.prepared_transaction_offset = prepared_transaction_offset
        f.queue_offset, f.physical_offset = queue_offset, physical_offset
        f.store_timestamp = store_timestamp
        return _encode_checked(&views[0], offset, &f, &parts)
    finally:
        while acquired > 0:
            acquired -= 1
            PyBuffer_Release(&views[acquired])


def encoded_size(Py_ssize_t body_length, Py_ssize_t topic_length, Py_ssize_t properties_length,
                 int32_t sys_flag):
    """Bytes of a record with these part sizes (topic in UTF-8 bytes; hosts from sys_flag).

    ValueError for negative lengths, a topic or properties over 32767 bytes, or a total that
    does not fit TOTALSIZE (an int).
    """
    cdef int64_t size = record_encoded_size(body_length, topic_length, properties_length,
                                            sys_flag)
    if size < 0:
        raise ValueError(f"no record has body/topic/properties lengths {body_length}/"
                         f"{topic_length}/{properties_length}")
    return size


# --- append-time patch ----------------------------------------------------------------------

cdef Py_ssize_t _resolve_range(Py_ssize_t buffer_length, Py_ssize_t start,
                               Py_ssize_t end) except -2:
    # end == -1 means the buffer end; returns the resolved end.
    if end == -1:
        end = buffer_length
    if start < 0 or end < start or end > buffer_length:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buffer_length} bytes")
    return end


cdef int _parse_whole(const Py_buffer *view, Py_ssize_t offset, RecordFields *f) except -1:
    """Parse the record at ``offset`` of ``view`` into ``f``; ValueError unless a whole valid
    record (status RECORD_OK, body CRC not checked) starts there."""
    cdef RecordStatus status
    _resolve_range(view.len, offset, view.len)
    status = parse_record(<const unsigned char *>view.buf, offset, view.len, 0, f)
    if status != RECORD_STATUS_OK:
        raise ValueError(f"no whole record at offset {offset} (status {status})")
    return 0


cdef inline void _patch_fields(unsigned char *data, const RecordFields *f, int64_t queue_offset,
                               int64_t physical_offset, int64_t store_timestamp) noexcept nogil:
    pb_pack_int64(data + f.record_position + QUEUE_OFFSET_POSITION, queue_offset)
    pb_pack_int64(data + f.record_position + PHYSICAL_OFFSET_POSITION, physical_offset)
    pb_pack_int64(data + f.store_timestamp_position, store_timestamp)


def patch(buf, Py_ssize_t offset, int64_t queue_offset, int64_t physical_offset,
          int64_t store_timestamp):
    """Set QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP (ms) of the record at ``offset``.

    The record must parse as whole and valid (CRC not checked), else ValueError.
    """
    cdef Py_buffer view
    cdef RecordFields f
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        _parse_whole(&view, offset, &f)
        _patch_fields(<unsigned char *>view.buf, &f, queue_offset, physical_offset,
                      store_timestamp)
    finally:
        PyBuffer_Release(&view)


cdef Py_ssize_t _patch_run(unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                           int64_t first_physical_offset, int64_t first_queue_offset,
                           int64_t store_timestamp) noexcept nogil:
    # Validate the whole run first so that a bad run leaves the buffer untouched (-1).
    cdef Py_ssize_t at, count
    cdef RecordFields f
    # A zero TOTALSIZE also stops a scan with END, so the scan must also have reached end.
    if scan_records(data, start, end, 0, 0, &at, &count) != RECORD_STATUS_END or at != end:
        return -1
    at = start
    count = 0
    while at != end:
        parse_record(data, at, end, 0, &f)
        _patch_fields(data, &f, first_queue_offset + count,
                      first_physical_offset + (at - start), store_timestamp)
        at += f.total_size
        count += 1
    return count


def patch_run(buf, Py_ssize_t start, Py_ssize_t end, int64_t first_physical_offset,
              int64_t first_queue_offset, int64_t store_timestamp):
    """Patch every record of ``buf[start:end]`` (one queue's batch) in one C loop.

    Record i at position ``pos`` gets physical offset ``first_physical_offset + (pos - start)``,
    queue offset ``first_queue_offset + i`` and ``store_timestamp`` (ms). Returns the record
    count. ValueError (buffer untouched) unless the range is exactly whole valid records.
    """
    cdef Py_buffer view
    cdef Py_ssize_t count
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        end = _resolve_range(view.len, start, end)
        with nogil:
            count = _patch_run(<unsigned char *>view.buf, start, end, first_physical_offset,
                               first_queue_offset, store_timestamp)
        if count < 0:
            raise ValueError(f"[{start}, {end}) is not a run of whole records")
        return count
    finally:
        PyBuffer_Release(&view)


cdef void patch_fields(unsigned char *data, const RecordFields *f, int64_t queue_offset,
                       int64_t physical_offset, int64_t store_timestamp) noexcept nogil:
    _patch_fields(data, f, queue_offset, physical_offset, store_timestamp)


cdef Py_ssize_t patch_run_c(unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                            int64_t first_physical_offset, int64_t first_queue_offset,
                            int64_t store_timestamp) noexcept nogil:
    return _patch_run(data, start, end, first_physical_offset, first_queue_offset,
                      store_timestamp)


def write_blank(buf, Py_ssize_t offset, int32_t total_size):
    """Write the 8-byte BLANK end-of-file marker at ``offset``; ``total_size`` = bytes to EOF."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if total_size < BLANK_RECORD_BYTES:
            raise ValueError(f"BLANK total_size {total_size} < {BLANK_RECORD_BYTES}")
        _resolve_range(view.len, offset, view.len)
        if view.len - offset < BLANK_RECORD_BYTES:
            raise ValueError(f"no room for a BLANK marker at offset {offset} of {view.len}")
        pb_pack_int32(<unsigned char *>view.buf + offset + TOTAL_SIZE_POSITION, total_size)
        pb_pack_int32(<unsigned char *>view.buf + offset + MAGIC_POSITION, MAGIC_BLANK)
    finally:
        PyBuffer_Release(&view)


def read_store_timestamp(buf, Py_ssize_t offset):
    """STORETIMESTAMP (ms) of the whole valid record at ``offset``; ValueError otherwise."""
    cdef Py_buffer view
    cdef RecordFields f
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _parse_whole(&view, offset, &f)
        return f.store_timestamp
    finally:
        PyBuffer_Release(&view)


def read_timestamps(buf, Py_ssize_t offset):
    """``(BORNTIMESTAMP, STORETIMESTAMP)`` (ms) of the whole valid record at ``offset``;
    ValueError otherwise."""
    cdef Py_buffer view
    cdef RecordFields f
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _parse_whole(&view, offset, &f)
        return f.born_timestamp, f.store_timestamp
    finally:
        PyBuffer_Release(&view)


# --- verify and scan ------------------------------------------------------------------------

def check(buf, Py_ssize_t offset, Py_ssize_t end, bint check_crc):
    """``(status, total_size)`` of the record at ``buf[offset:end]`` (``end=-1`` = len).

    total_size is the TOTALSIZE field when at least 4 bytes are there (0 otherwise); for BLANK
    it is the distance to the file end and is not compared with ``end``.
    """
    cdef Py_buffer view
    cdef RecordFields f
    cdef RecordStatus status
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        end = _resolve_range(view.len, offset, end)
        if end - offset >= CRC_NOGIL_MIN_BYTES:
            with nogil:
                status = parse_record(<const unsigned char *>view.buf, offset, end, check_crc, &f)
        else:
            status = parse_record(<const unsigned char *>view.buf, offset, end, check_crc, &f)
        return status, f.total_size
    finally:
        PyBuffer_Release(&view)


cdef bint record_sound(const unsigned char *data, Py_ssize_t data_length, Py_ssize_t position,
                       Py_ssize_t size, int64_t file_from_offset, bint check_crc,
                       const unsigned char *owner_topic, Py_ssize_t owner_topic_length,
                       int32_t queue_id, int64_t queue_offset) noexcept nogil:
    cdef RecordFields f
    if position < 0 or size <= 0 or position + size > data_length:
        return False
    if parse_record(data, position, position + size, check_crc, &f) != RECORD_STATUS_OK \
            or f.total_size != size or f.physical_offset != file_from_offset + position \
            or not topic_bytes_valid(data + f.topic_position, f.topic_length):
        return False
    if owner_topic != NULL and (
            f.queue_id != queue_id or f.queue_offset != queue_offset
            or f.topic_length != owner_topic_length
            or memcmp(data + f.topic_position, owner_topic, <size_t>owner_topic_length) != 0):
        return False
    return True


def check_records(buf, list positions, list sizes, int64_t file_from_offset, bint check_crc,
                  bytes topic=None, int32_t queue_id=0, int64_t first_queue_offset=0,
                  list unit_indexes=None):
    """Index of the first ``buf[positions[i]:positions[i] + sizes[i]]`` that is not exactly
    one valid record naming its own physical offset (``file_from_offset + positions[i]``) with
    a topic Java's TopicValidator accepts, body CRC included when ``check_crc``; -1 when
    every one is. With ``topic``, record i must
    also be of that topic and ``queue_id`` at queue offset ``first_queue_offset +
    unit_indexes[i]`` (a consume-queue unit's own record). One call per pull and file: a read
    never serves a damaged record, nor another queue's (pybroker/store/reads.py)."""
    cdef Py_buffer view
    cdef Py_ssize_t index, count = len(positions)
    cdef const unsigned char *topic_bytes = NULL
    cdef Py_ssize_t topic_length = 0
    cdef int64_t queue_offset = 0
    if len(sizes) != count or (topic is not None and (unit_indexes is None
                                                      or len(unit_indexes) != count)):
        raise ValueError("positions, sizes and unit_indexes differ in length")
    if topic is not None:
        topic_bytes, topic_length = <const unsigned char *>(<char *>topic), len(topic)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        for index in range(count):
            if topic_bytes != NULL:
                queue_offset = first_queue_offset + <int64_t>unit_indexes[index]
            if not record_sound(<const unsigned char *>view.buf, view.len, positions[index],
                                sizes[index], file_from_offset, check_crc, topic_bytes,
                                topic_length, queue_id, queue_offset):
                return index
        return -1
    finally:
        PyBuffer_Release(&view)


def scan(buf, Py_ssize_t start, Py_ssize_t end, bint check_crc, bint check_topic=False):
    """Walk whole OK records of ``buf[start:end]``: ``(status, position, count)``.

    Stops at the first record that is not OK (its status and offset) or exactly at ``end``
    (``RECORD_END``, ``end``). ``count`` = OK records passed. ``check_topic``: a topic Java's
    TopicValidator refuses makes the record CORRUPT (store integrity: recovery, the
    scrubber). The GIL is released.
    """
    cdef Py_buffer view
    cdef Py_ssize_t position, count
    cdef RecordStatus status
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        end = _resolve_range(view.len, start, end)
        with nogil:
            status = scan_records(<const unsigned char *>view.buf, start, end, check_crc,
                                  check_topic,
                                  &position, &count)
        return status, position, count
    finally:
        PyBuffer_Release(&view)


# --- decode ---------------------------------------------------------------------------------

cdef class MessageRecord:
    """One decoded CommitLog record. Read-only; ``body`` is a memoryview of the source buffer
    (no copy), so the buffer stays exported while this object or the view lives.

    Timestamps are ms; ``record_offset`` and ``body_position`` are byte positions in the buffer;
    ``topic``/``properties`` are decoded UTF-8 (malformed bytes become U+FFFD, as in Java).
    """

    def __repr__(self):
        return (f"MessageRecord(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, physical_offset={self.physical_offset}, "
                f"total_size={self.total_size})")


cdef object _byte_view(object buf):
    # A 1-D unsigned-byte memoryview of buf, so slices are in bytes whatever buf's format.
    cdef object view = memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


cdef inline str _utf8(const unsigned char *data, Py_ssize_t position, Py_ssize_t length):
    return PyUnicode_DecodeUTF8(<const char *>data + position, length, "replace")


cdef MessageRecord _record_from_fields(object buf, const unsigned char *data,
                                       const RecordFields *f):
    cdef MessageRecord record = MessageRecord.__new__(MessageRecord)
    record.total_size, record.magic, record.body_crc = f.total_size, f.magic, f.body_crc
    record.queue_id, record.flag, record.sys_flag = f.queue_id, f.flag, f.sys_flag
    record.queue_offset, record.physical_offset = f.queue_offset, f.physical_offset
    record.born_timestamp, record.store_timestamp = f.born_timestamp, f.store_timestamp
    record.born_host = (<const char *>data)[f.born_host_position:
                                            f.born_host_position + f.born_address_bytes]
    record.born_port = f.born_port
    record.store_host = (<const char *>data)[f.store_host_position:
                                             f.store_host_position + f.store_address_bytes]
    record.store_port = f.store_port
    record.reconsume_times = f.reconsume_times
    record.prepared_transaction_offset = f.prepared_transaction_offset
    record.body = _byte_view(buf)[f.body_position:f.body_position + f.body_length]
    record.topic = _utf8(data, f.topic_position, f.topic_length)
    record.properties = _utf8(data, f.properties_position, f.properties_length)
    record.record_offset = f.record_position
    record.body_position = f.body_position
    return record


def decode(buf, Py_ssize_t offset):
    """Decode the record at ``offset`` into a :class:`MessageRecord` (body CRC not checked).

    ValueError unless a whole valid record (status RECORD_OK) starts there.
    """
    cdef Py_buffer view
    cdef RecordFields f
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _parse_whole(&view, offset, &f)
        return _record_from_fields(buf, <const unsigned char *>view.buf, &f)
    finally:
        PyBuffer_Release(&view)


def read_properties(buf, Py_ssize_t offset):
    """The decoded properties string of the record at ``offset``, nothing else (the SQL92
    filter's per-message read). ValueError unless a whole valid record starts there."""
    cdef Py_buffer view
    cdef RecordFields f
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _parse_whole(&view, offset, &f)
        return _utf8(<const unsigned char *>view.buf, f.properties_position,
                     f.properties_length)
    finally:
        PyBuffer_Release(&view)


# --- SEND_BATCH_MESSAGE body (protocol.md §3.6) ---------------------------------------------------

cdef tuple _batch_entry(const unsigned char *data, Py_ssize_t at, Py_ssize_t remaining):
    # One inner message at data[at:]: (flag, body_start, body_length, properties), size checked.
    cdef int32_t total_size, body_length
    cdef int16_t properties_length
    if remaining < BATCH_FIXED_BYTES:
        raise ValueError(f"batch: {remaining} trailing bytes at {at} are not a message")
    total_size = pb_unpack_int32(data + at)
    if total_size < BATCH_FIXED_BYTES or total_size > remaining:
        raise ValueError(f"batch: message at {at} has size {total_size}, {remaining} bytes left")
    body_length = pb_unpack_int32(data + at + BATCH_BODY_LENGTH_POSITION)
    if body_length < 0 or body_length > total_size - BATCH_FIXED_BYTES:
        raise ValueError(f"batch: message at {at} has body length {body_length}")
    properties_length = pb_unpack_int16(data + at + BATCH_BODY_LENGTH_POSITION + 4 + body_length)
    if properties_length < 0 or \
            BATCH_FIXED_BYTES + body_length + properties_length != total_size:
        raise ValueError(f"batch: message at {at}: lengths {body_length}+{properties_length} "
                         f"disagree with size {total_size}")
    return (pb_unpack_int32(data + at + BATCH_FLAG_POSITION),
            at + BATCH_BODY_LENGTH_POSITION + 4, body_length,
            _utf8(data, at + total_size - properties_length, properties_length))


def split_batch(buf):
    """Split a SEND_BATCH_MESSAGE body into ``[(flag, body_start, body_length, properties)]``.

    Positions are byte offsets in ``buf``; ``properties`` is the inner message's own properties
    string. ValueError on any inconsistent length (nothing is read outside ``buf``).
    """
    cdef Py_buffer view
    cdef Py_ssize_t at = 0
    cdef tuple entry
    cdef list entries = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        while at < view.len:
            entry = _batch_entry(<const unsigned char *>view.buf, at, view.len - at)
            entries.append(entry)
            at += pb_unpack_int32(<const unsigned char *>view.buf + at)
        return entries
    finally:
        PyBuffer_Release(&view)
