# C-level layout of a put request in a send ring (pybroker/proc/ring_format.py documents it and
# asserts at import that its struct matches these positions; change both or neither).
#
#   off  size  field (native byte order: the ring never leaves the host)
#   0    8     request_id   int64
#   8    4     queue_id     int32
#   12   4     count        int32, records in the run
#   16   4     sys_flag     int32
#   20   4     flags        int32, PUT_FLAG_WAIT_STORE_BIT
#   24   2     topic_length int16, 1..PUT_TOPIC_MAX_BYTES (store/layout.py TOPIC_MAX_BYTES)
#   26   n     topic        UTF-8
#   26+n pad   to a multiple of PUT_REQUEST_ALIGN_BYTES, then the encoded CommitLog records
cdef enum PutRequestLayout:
    PUT_REQUEST_ID_POSITION = 0
    PUT_QUEUE_ID_POSITION = 8
    PUT_COUNT_POSITION = 12
    PUT_SYS_FLAG_POSITION = 16
    PUT_FLAGS_POSITION = 20
    PUT_TOPIC_LENGTH_POSITION = 24
    PUT_TOPIC_POSITION = 26
    PUT_REQUEST_ALIGN_BYTES = 8
    PUT_FLAG_WAIT_STORE_BIT = 1
    PUT_TOPIC_MAX_BYTES = 255
