# Contract of pybroker._fast.pop.ack: an ACK_MESSAGE read in place, its receipt handle parsed and
# its ack record written, each as broker/pop/ack.py and broker/pop/revive_log.py would.
from libc.stdint cimport int32_t, int64_t

from pybroker._fast.request_read cimport FieldSpan, RequestHead
from pybroker._fast.send.timer cimport TimerSettings

cdef enum:  # AckField: AckMessageRequestHeader's fields, in protocol/headers.py's order (checked)
    ACK_FIELD_CONSUMER_GROUP = 0
    ACK_FIELD_TOPIC = 1
    ACK_FIELD_QUEUE_ID = 2
    ACK_FIELD_EXTRA_INFO = 3
    ACK_FIELD_OFFSET = 4
    ACK_FIELDS_COUNT = 5

cdef enum:
    CODE_ACK_MESSAGE = 200051        # protocol/codes.py (checked at import)
    ORDER_REVIVE_QUEUE = 999         # an order POP's handle: the handler's
    # What write_ack_record takes: longer names are the handler's (its record is the same, the
    # bounds only size the scratch). ACK_RECORD_BYTES_MAX covers every record they allow.
    ACK_TOPIC_MAX_BYTES = 127
    ACK_GROUP_MAX_BYTES = 255
    ACK_BROKER_NAME_MAX_BYTES = 255
    ACK_REVIVE_TOPIC_MAX_BYTES = 127 # AckRecordSettings' revive and timer topics (V1 records)
    ACK_TEXT_MAX_BYTES = 2048        # the body, the properties, the redirected properties
    ACK_RECORD_BYTES_MAX = 8192


cdef struct AckRequest:
    RequestHead head
    FieldSpan fields[ACK_FIELDS_COUNT]
    int32_t queue_id
    int64_t queue_offset


cdef struct ReceiptHandle:
    # protocol/pop.py ExtraInfo's fields an ack uses; broker_name is a span of the handle.
    int64_t ck_queue_offset
    int64_t pop_time
    int64_t invisible_time
    int32_t revive_qid
    const unsigned char *broker_name
    Py_ssize_t broker_name_length


cdef struct AckRecordSettings:
    # The topics within ACK_REVIVE_TOPIC_MAX_BYTES (the scratch sizes count on it).
    const unsigned char *revive_topic       # rmq_sys_REVIVE_LOG_<cluster>
    Py_ssize_t revive_topic_length
    int32_t revive_queue_num                # a handle naming another queue is the handler's
    const unsigned char *timer_topic        # rmq_sys_wheel_timer
    Py_ssize_t timer_topic_length
    TimerSettings timer
    const unsigned char *store_ip           # born and store host: the broker's
    Py_ssize_t store_ip_length
    int32_t store_port


cdef struct AckRecord:
    # Where write_ack_record put the record: the topic and queue it is stored under (the wheel
    # topic, queue 0, when parked) and its bytes.
    const unsigned char *topic
    Py_ssize_t topic_length
    int32_t queue_id
    Py_ssize_t record_bytes


# Read the frame data[0:frame_bytes] (as request_read.read_request) as an ACK_MESSAGE whose
# header protocol/headers.py parses to these values: 1 with *request filled, 0 for anything
# else (another code, a response, a missing or malformed field).
cdef int read_ack_request(const unsigned char *data, Py_ssize_t frame_bytes,
                          Py_ssize_t ext_fields_max, unsigned char *scratch,
                          Py_ssize_t scratch_bytes, AckRequest *request) noexcept nogil

# protocol/pop.py parse_extra_info(text, ACK_READS) of the ASCII text[0:length] for a non-order
# handle: 1 with *handle filled; 0 when the handler decides (a refusal, or revive queue 999).
cdef int parse_receipt_handle(const unsigned char *text, Py_ssize_t length,
                              ReceiptHandle *handle) noexcept nogil

# revive_log.ack_message's record of the ack of queue_offset of topic/queue_id for group, by
# *handle, built at now_ms and written at out (ACK_RECORD_BYTES_MAX bytes of room): 1 with
# *record filled; 0 when the handler decides (a name past its bound or with a byte JSON or the
# properties would escape, a revive queue outside the settings, a timer rule refusal or a rare
# shape send/timer.pyx leaves to the handler).
cdef int write_ack_record(unsigned char *out, const AckRecordSettings *settings,
                          const unsigned char *topic, Py_ssize_t topic_length,
                          const unsigned char *group, Py_ssize_t group_length,
                          int32_t queue_id, int64_t queue_offset,
                          const ReceiptHandle *handle, int64_t now_ms,
                          AckRecord *record) noexcept nogil
