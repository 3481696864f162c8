# C-level contract of pybroker._fast.record: CommitLog record parse/encode over raw memory.
from libc.stdint cimport int16_t, int32_t, int64_t

cdef enum RecordStatus:
    RECORD_STATUS_OK = 0          # a whole valid record
    RECORD_STATUS_BLANK = 1       # end-of-file BLANK marker; total_size = bytes to file end
    RECORD_STATUS_END = 2         # TOTALSIZE == 0: end of written data
    RECORD_STATUS_CORRUPT = 3     # bad magic/sizes/lengths, or body CRC mismatch
    RECORD_STATUS_TRUNCATED = 4   # < 4 bytes left, or TOTALSIZE runs past the end

cdef enum RecordLayout:
    # Positions of the fixed fields (pybroker.store.layout has the same table; tests compare).
    TOTAL_SIZE_POSITION = 0
    MAGIC_POSITION = 4
    BODY_CRC_POSITION = 8
    QUEUE_ID_POSITION = 12
    FLAG_POSITION = 16
    QUEUE_OFFSET_POSITION = 20
    PHYSICAL_OFFSET_POSITION = 28
    SYS_FLAG_POSITION = 36
    BORN_TIMESTAMP_POSITION = 40
    BORN_HOST_POSITION = 48
    IPV4_ADDRESS_BYTES = 4
    IPV6_ADDRESS_BYTES = 16
    PORT_BYTES = 4
    BORN_HOST_V6_FLAG = 0x10
    STORE_HOST_V6_FLAG = 0x20
    # Record bytes besides hosts, body, topic length field, topic and properties.
    FIXED_BYTES_WITHOUT_HOSTS = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8 + 4 + 2
    TOPIC_V1_MAX_BYTES = 127
    SHORT_LENGTH_MAX = 32767
    BLANK_RECORD_BYTES = 8

# Field values and byte positions (relative to the buffer start) of one parsed record.
cdef struct RecordFields:
    Py_ssize_t record_position
    int32_t total_size
    int32_t magic
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t physical_offset
    int32_t sys_flag
    int64_t born_timestamp
    Py_ssize_t born_host_position      # IP bytes, then the port int
    Py_ssize_t born_address_bytes      # 4 or 16
    int32_t born_port
    Py_ssize_t store_timestamp_position
    int64_t store_timestamp
    Py_ssize_t store_host_position
    Py_ssize_t store_address_bytes
    int32_t store_port
    int32_t reconsume_times
    int64_t prepared_transaction_offset
    Py_ssize_t body_position
    Py_ssize_t body_length
    Py_ssize_t topic_position
    Py_ssize_t topic_length
    Py_ssize_t properties_position
    Py_ssize_t properties_length

# Status of the record at data[offset:end]; fills *fields only when the status is OK (and
# fields->total_size for BLANK). Reads nothing outside data[offset:end]. end <= buffer length.
cdef RecordStatus parse_record(const unsigned char *data, Py_ssize_t offset, Py_ssize_t end,
                               bint check_crc, RecordFields *fields) noexcept nogil

# Walk whole OK records from start; returns the stopping status, *position and *count.
# check_topic: a record whose topic Java's TopicValidator refuses is CORRUPT (the body CRC
# does not cover the topic; recovery and the scrubber ask for it).
cdef RecordStatus scan_records(const unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                               bint check_crc, bint check_topic, Py_ssize_t *position,
                               Py_ssize_t *count) noexcept nogil

# Java's TopicValidator charset, ^[%|a-zA-Z0-9_-]+$ (protocol/headers.py checks requests).
cdef bint topic_bytes_valid(const unsigned char *topic, Py_ssize_t length) noexcept nogil

# Whether data[position:position + size] is exactly one valid record naming its own physical
# offset (file_from_offset + position) with a topic Java's TopicValidator accepts, body CRC
# included when check_crc; with owner_topic (NULL: no owner check) also of that topic and
# queue_id at queue_offset (a consume-queue unit's own record). data_length bounds every read.
# The one rule every read of a record to serve applies (check_records, pull_scan).
cdef bint record_sound(const unsigned char *data, Py_ssize_t data_length, Py_ssize_t position,
                       Py_ssize_t size, int64_t file_from_offset, bint check_crc,
                       const unsigned char *owner_topic, Py_ssize_t owner_topic_length,
                       int32_t queue_id, int64_t queue_offset) noexcept nogil

# The variable-length inputs of one record, as raw memory.
cdef struct RecordParts:
    const unsigned char *topic
    Py_ssize_t topic_length
    const unsigned char *body
    Py_ssize_t body_length
    const unsigned char *properties
    Py_ssize_t properties_length
    const unsigned char *born_address
    const unsigned char *store_address

# Write one whole record at p: fields from *f (queue id, flag, sys_flag with the IPv6 bits that
# match the address sizes, timestamps, ports, reconsume times, prepared offset, queue and
# physical offsets), parts as given; fills f's total_size, magic and address sizes and computes
# the body CRC. The caller checked record_encoded_size(...) >= 0 and the room at p (the body may
# overlap p: it is moved, not copied). Returns the bytes written (= total_size).
cdef Py_ssize_t write_record(unsigned char *p, RecordFields *f,
                             const RecordParts *parts) noexcept nogil

# Bytes of a record with these variable parts (-1 if it would not fit an int32 TOTALSIZE).
cdef int64_t record_encoded_size(int64_t body_length, int64_t topic_length,
                                 int64_t properties_length, int32_t sys_flag) noexcept nogil

cdef class MessageRecord:
    cdef readonly int32_t total_size
    cdef readonly int32_t magic
    cdef readonly int32_t body_crc
    cdef readonly int32_t queue_id
    cdef readonly int32_t flag
    cdef readonly int64_t queue_offset
    cdef readonly int64_t physical_offset
    cdef readonly int32_t sys_flag
    cdef readonly int64_t born_timestamp
    cdef readonly bytes born_host
    cdef readonly int32_t born_port
    cdef readonly int64_t store_timestamp
    cdef readonly bytes store_host
    cdef readonly int32_t store_port
    cdef readonly int32_t reconsume_times
    cdef readonly int64_t prepared_transaction_offset
    cdef readonly object body
    cdef readonly str topic
    cdef readonly str properties
    cdef readonly Py_ssize_t record_offset
    cdef readonly Py_ssize_t body_position

# Append-time patch of one parsed record: QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP (ms).
cdef void patch_fields(unsigned char *data, const RecordFields *f, int64_t queue_offset,
                       int64_t physical_offset, int64_t store_timestamp) noexcept nogil

# Patch every record of data[start:end] (one queue's run): record i gets queue offset
# first_queue_offset + i and physical offset first_physical_offset + (its position - start).
# Returns the record count, or -1 (data untouched) unless the range is exactly whole records.
cdef Py_ssize_t patch_run_c(unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                            int64_t first_physical_offset, int64_t first_queue_offset,
                            int64_t store_timestamp) noexcept nogil
