# Contract of pybroker._fast.pop.grpc_ack: a gRPC receipt handle's fields and the ACK_MESSAGE
# frames of FrontAcks (grpc_service/front_acks.py); what Python sees is grpc_ack.pyi.
from libc.stdint cimport int32_t, int64_t

cdef enum:
    HANDLE_FIELDS_MIN = 8           # consumer.decode_handle's minimum (the POP's extraInfo)
    HANDLE_FIELDS_MAX = 9           # + the CommitLog offset; fields after it are not read
    # The values of an ACK_MESSAGE frame in AckFrames' order (front_acks.ack_frame_template).
    VALUE_GROUP = 0
    VALUE_TOPIC = 1
    VALUE_EXTRA_INFO = 2
    VALUE_QUEUE_ID = 3
    VALUE_OFFSET = 4
    VALUE_OPAQUE = 5
    VALUES = 6


cdef struct GrpcHandle:
    # consumer.ReceiptHandle's fields; retry and broker name as spans of the handle's text.
    int64_t start_offset
    int64_t retrieve_time
    int64_t invisible_time
    int32_t revive_queue_id
    Py_ssize_t retry_at
    Py_ssize_t retry_length
    Py_ssize_t broker_at
    Py_ssize_t broker_length
    int32_t queue_id
    int64_t offset
    int64_t commit_log_offset       # -1 without the ninth field


# consumer.decode_handle of text[0:length] (UTF-8): 1 with *handle filled, 0 where it refuses.
cdef int parse_grpc_handle(const unsigned char *text, Py_ssize_t length,
                           GrpcHandle *handle) noexcept nogil


cdef class AckFrames:
    cdef tuple _pieces
    cdef const unsigned char *_piece[VALUES + 1]
    cdef Py_ssize_t _piece_length[VALUES + 1]
    cdef Py_ssize_t _pieces_bytes
    cdef int _order[VALUES]
    cdef Py_ssize_t _frame_max_bytes
