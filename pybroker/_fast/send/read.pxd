# Contract of pybroker._fast.send.read: a send request read in place from its frame (no objects).
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pybroker._fast.request_read cimport FieldSpan, RequestHead

# The custom-header fields of SEND_MESSAGE (long names) / SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE
# (one-letter names "a".."n"), in protocol/headers.py's SEND_MESSAGE_REQUEST order (checked).
cdef enum:  # SendField
    FIELD_PRODUCER_GROUP = 0
    FIELD_TOPIC = 1
    FIELD_DEFAULT_TOPIC = 2
    FIELD_DEFAULT_TOPIC_QUEUE_NUMS = 3
    FIELD_QUEUE_ID = 4
    FIELD_SYS_FLAG = 5
    FIELD_BORN_TIMESTAMP = 6
    FIELD_FLAG = 7
    FIELD_PROPERTIES = 8
    FIELD_RECONSUME_TIMES = 9
    FIELD_UNIT_MODE = 10
    FIELD_MAX_RECONSUME_TIMES = 11
    FIELD_BATCH = 12
    FIELD_BROKER_NAME = 13
    SEND_FIELDS_COUNT = 14

cdef enum:
    # Request codes the reader accepts (protocol/codes.py; checked at import).
    CODE_SEND_MESSAGE = 10
    CODE_SEND_MESSAGE_V2 = 310
    CODE_SEND_BATCH_MESSAGE = 320
    # Properties the fast path leaves to the Python path (rare features), as scan flags.
    PROPERTY_HAS_DELAY = 1
    PROPERTY_HAS_TRANSACTION = 2
    PROPERTY_HAS_CLUSTER = 4
    PROPERTY_HAS_TIMER = 8      # TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS (5.x)
    # A single send with any of these goes to the handler (send/take.pyx).
    PROPERTY_HANDLER_ONLY = (PROPERTY_HAS_DELAY | PROPERTY_HAS_TRANSACTION
                             | PROPERTY_HAS_CLUSTER | PROPERTY_HAS_TIMER)
    # Byte limit of a stored properties string (signed 16-bit length in the record).
    PROPERTIES_MAX_BYTES = 32767
    # Pairs in one properties string, as send.py's PROPERTIES_COUNT_MAX (checked at import).
    PROPERTIES_COUNT_MAX = 128
    # A SEND_BATCH_MESSAGE inner message (protocol.md §3.6): size, magic, crc, flag, body
    # length, body, properties length, properties.
    BATCH_FLAG_AT = 12
    BATCH_BODY_LENGTH_AT = 16
    BATCH_FIXED_BYTES = 22


cdef struct SendRequest:
    # Frame level: code, opaque, flag (request_read.pxd)
    RequestHead head
    # Custom header (absent optional numbers are 0, absent booleans false)
    FieldSpan fields[SEND_FIELDS_COUNT]
    int32_t queue_id
    int32_t sys_flag
    int64_t born_timestamp
    int32_t message_flag
    int32_t reconsume_times
    bint batch
    # Body: a span of the frame
    const unsigned char *body
    Py_ssize_t body_length


cdef struct PropertyScan:
    bint wait_store          # WAIT absent, or "true" in any case
    int flags                # PROPERTY_HAS_*
    Py_ssize_t stored_length # bytes written to out (pairs with a value, WAIT left out)


# Read the whole frame data[0:frame_bytes] (length field included, already split and checked
# by frame.scan_frames) as a send request into *request: the header through
# request_read.read_request with the send field table, then the send header's own checks.
# Returns 1 when every field is there, well-formed and ASCII, so that the Python path would
# parse the same values; 0 for anything else (another code, a response, a missing or malformed
# field, JSON the reader does not handle): the Python path then takes the frame and gives its
# own answer or error. scratch (scratch_bytes long) receives unescaped JSON values. Never reads
# outside the frame.
cdef int read_send_request(const unsigned char *data, Py_ssize_t frame_bytes,
                           Py_ssize_t ext_fields_max, unsigned char *scratch,
                           Py_ssize_t scratch_bytes, SendRequest *request) noexcept nogil

# Check a properties string as broker/send.py's parse_properties does and, when out is not NULL,
# write the stored form (pairs with a non-empty value, WAIT left out, in order) to out (room for
# length bytes is enough). Returns 0 when the Python path would accept it and store exactly that,
# -1 when the Python path must decide (an error, a duplicate name, a non-ASCII byte, a TAGS value
# that is blank or has '|'). DELAY, TRAN_MSG and CLUSTER are reported in scan.flags.
cdef int scan_properties(const unsigned char *text, Py_ssize_t length, unsigned char *out,
                         PropertyScan *scan) noexcept nogil

# record.split_batch's checks of the inner message at body[at:]: 0 with its sizes, or -1.
cdef int batch_entry(const unsigned char *body, Py_ssize_t at, Py_ssize_t body_bytes,
                     Py_ssize_t *entry_bytes, Py_ssize_t *body_length,
                     Py_ssize_t *properties_length) noexcept nogil

# Every inner message checked as send.py's _batch_entries does; the bytes of their records
# (each with the batch's stored properties of batch_length bytes appended) and *count, or -1
# when the Python path must decide.
cdef int64_t batch_records_bytes(const unsigned char *body, Py_ssize_t body_bytes,
                                 Py_ssize_t batch_length, Py_ssize_t topic_length,
                                 int32_t sys_flag, Py_ssize_t max_message_size,
                                 Py_ssize_t *count) noexcept nogil

# properties.append_batch_properties: inner, a \x02 unless inner is empty or ends with one,
# then the batch's properties. Length, and the copy written to out (returned).
cdef Py_ssize_t combined_properties_length(const unsigned char *inner, Py_ssize_t inner_length,
                                           Py_ssize_t batch_length) noexcept nogil
cdef const unsigned char *combine_properties(const unsigned char *inner,
                                             Py_ssize_t inner_length,
                                             const unsigned char *batch,
                                             Py_ssize_t batch_length,
                                             unsigned char *out) noexcept nogil


cdef inline bint name_is(const unsigned char *name, Py_ssize_t length,
                         const char *word) noexcept nogil:
    """Whether the ``length`` bytes at ``name`` are the NUL-terminated ``word`` (a property
    name of a send's properties string; read.pyx and timer.pyx)."""
    cdef Py_ssize_t n = 0
    while word[n] != 0:
        n += 1
    return n == length and memcmp(name, word, <size_t>n) == 0
