# pybroker._fast.send.answer: the response frame of a fast send, from a template, no objects.
"""A send's response frame, written from a template (docs/architecture/send-fast-path.md).

The template is the Python path's own JSON header for a send response, cut where the values
go (broker/send_fast.py ``response_template``)::

    stored:     piece0 msgId piece1 queueId piece2 queueOffset piece3 opaque piece4
    recall:     piece0 msgId piece1 queueId piece2 queueOffset piece3 recallHandle piece5
                opaque piece4 (a parked timer message's, stored)
    not stored: piece0 opaque piece4

Frame: length (4 + header bytes, big-endian) | header word (type 0 JSON << 24 | header
length) | header. Responses carry no body.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from pybroker._fast.digits cimport DECIMAL_BYTES_MAX, write_decimal
from pybroker._fast.frame cimport (FRAME_LENGTH_FIELD_BYTES, FRAME_PREFIX_BYTES,
                                   FRAME_SERIALIZE_TYPE_SHIFT, SERIALIZE_TYPE_JSON)
from pybroker._fast.hton cimport pb_pack_int32

cdef const char *HEX_DIGITS = "0123456789ABCDEF"


cdef inline Py_ssize_t _piece(unsigned char *out, const Template *template,
                              Py_ssize_t index) noexcept nogil:
    memcpy(out, template.pieces[index], <size_t>template.lengths[index])
    return template.lengths[index]


cdef Py_ssize_t _message_ids(unsigned char *out, const AnswerValues *values) noexcept nogil:
    """Offset message ids of the records (message_id.py), comma-joined."""
    cdef Py_ssize_t at = 0, record, digit
    cdef int64_t position = values.physical_offset
    cdef uint64_t offset
    for record in range(values.count):
        if record:
            out[at] = 44        # ','
            at += 1
        memcpy(out + at, values.host_hex, <size_t>values.host_hex_length)
        at += values.host_hex_length
        offset = <uint64_t>position
        for digit in range(OFFSET_HEX_DIGITS - 1, -1, -1):
            out[at + digit] = <unsigned char>HEX_DIGITS[offset & 15]
            offset >>= 4
        at += OFFSET_HEX_DIGITS
        position += values.records_bytes if values.sizes == NULL else values.sizes[record]
    return at


cdef list set_templates(Template *templates, Py_ssize_t capacity, list given):
    """Fill ``templates[i]`` from ``given[i]`` = (stored, pieces, response code); returns the
    pieces as bytes, which the caller keeps: the templates point into them."""
    cdef list kept = []
    cdef bytes piece
    cdef Py_ssize_t index, part
    if len(given) > capacity:
        raise ValueError(f"{len(given)} templates, room for {capacity}")
    for index, (stored, pieces, code) in enumerate(given):
        pieces = tuple(bytes(piece) for piece in pieces)
        if len(pieces) not in (TEMPLATE_PIECES - 1, TEMPLATE_PIECES):
            raise ValueError(f"{len(pieces)} template pieces, not {TEMPLATE_PIECES - 1} or "
                             f"{TEMPLATE_PIECES}")
        templates[index].recall = len(pieces) == TEMPLATE_PIECES
        if templates[index].recall and not stored:
            raise ValueError("a recall template answers a stored send")
        if not templates[index].recall:
            pieces = (*pieces, b"")
        kept.append(pieces)
        templates[index].stored = stored
        templates[index].code = code
        for part in range(TEMPLATE_PIECES):
            piece = pieces[part]
            templates[index].pieces[part] = <const unsigned char *>piece
            templates[index].lengths[part] = len(piece)
    return kept


cdef Py_ssize_t answer_bytes_max(const Template *template,
                                 const AnswerValues *values) noexcept nogil:
    cdef Py_ssize_t need = FRAME_PREFIX_BYTES + 3 * DECIMAL_BYTES_MAX, index
    for index in range(TEMPLATE_PIECES):
        need += template.lengths[index]
    if template.stored and values.real_ids:
        need += values.count * (values.host_hex_length + OFFSET_HEX_DIGITS + 1)
    if template.recall:
        need += values.recall_length
    return need


cdef Py_ssize_t write_answer(unsigned char *out, const Template *template,
                             const AnswerValues *values) noexcept nogil:
    cdef Py_ssize_t at = FRAME_PREFIX_BYTES + _piece(out + FRAME_PREFIX_BYTES, template, 0)
    if template.stored:
        if values.real_ids:
            at += _message_ids(out + at, values)
        at += _piece(out + at, template, 1)
        at += write_decimal(out + at, values.queue_id)
        at += _piece(out + at, template, 2)
        at += write_decimal(out + at, values.queue_offset if values.real_ids else 0)
        at += _piece(out + at, template, 3)
        if template.recall:
            memcpy(out + at, values.recall, <size_t>values.recall_length)
            at += values.recall_length
            at += _piece(out + at, template, PIECE_AFTER_RECALL)
    at += write_decimal(out + at, values.opaque)
    at += _piece(out + at, template, 4)
    pb_pack_int32(out, <int32_t>(at - FRAME_LENGTH_FIELD_BYTES))
    pb_pack_int32(out + FRAME_LENGTH_FIELD_BYTES,
                  <int32_t>((SERIALIZE_TYPE_JSON << FRAME_SERIALIZE_TYPE_SHIFT)
                            | (at - FRAME_PREFIX_BYTES)))
    return at
