# Contract of pybroker._fast.send.answer: a send's response frame from a template, no objects.
from libc.stdint cimport int32_t, int64_t

cdef enum:
    # Header pieces around msgId, queueId, queueOffset and opaque (broker/send_fast.py), and in
    # a template with a recall handle the piece after it.
    TEMPLATE_PIECES = 6
    PIECE_AFTER_RECALL = 5
    # Hex digits of a physical offset.
    OFFSET_HEX_DIGITS = 16
    # Hex of the store host: IPv6 address + port.
    HOST_HEX_BYTES_MAX = 40


cdef struct Template:
    bint stored                     # msgId/queueId/queueOffset present
    bint recall                     # recallHandle after queueOffset (before piece 5)
    int32_t code                    # the response code (rpc_latency's response_code label)
    const unsigned char *pieces[TEMPLATE_PIECES]
    Py_ssize_t lengths[TEMPLATE_PIECES]


cdef struct AnswerValues:
    # What one answer fills in. Message ids: host_hex + 16 hex digits of each record's
    # physical offset (the first at physical_offset, then + each record size), comma-joined.
    bint real_ids                   # False: msgId "" and queueOffset 0 (a failed put)
    const unsigned char *host_hex
    Py_ssize_t host_hex_length
    int64_t physical_offset
    int32_t count
    int64_t records_bytes           # all the records (send/held.pxd FastSend)
    const int32_t *sizes            # each record's size; NULL: one record of records_bytes
    int32_t queue_id
    int64_t queue_offset
    int32_t opaque
    const unsigned char *recall     # the recall handle of a recall template
    Py_ssize_t recall_length


# Point ``template`` at ``pieces`` (5 bytes objects, or TEMPLATE_PIECES for a recall template,
# which the caller keeps alive).
cdef list set_templates(Template *templates, Py_ssize_t capacity, list given)

# Bytes write_answer may need for these values (an upper bound).
cdef Py_ssize_t answer_bytes_max(const Template *template,
                                 const AnswerValues *values) noexcept nogil

# Write the whole response frame (length, header word of a JSON header, header) at out;
# returns its size in bytes.
cdef Py_ssize_t write_answer(unsigned char *out, const Template *template,
                             const AnswerValues *values) noexcept nogil
