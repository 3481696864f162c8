# A frame taker's steps: the take loops of the send fast path (send/take.pyx SendPath.take) and
# the pull fast path (pull_path.pyx PullPath.take) walk their receive buffer with these, so the
# walk (whole frames, malformed ones left to the connection, the header's scratch grown to fit)
# is written once. Inline C: no Python object per frame.
#
#     data = taker_open(buffer, &view, start, end)
#     try:
#         while taker_next(data, at, end, frame_max_bytes, &scratch, &frame_bytes, &outcome):
#             ...take data[at:at + frame_bytes], decoding its header into scratch.data, or break
#             at += frame_bytes
#     finally:
#         PyBuffer_Release(&view)
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Realloc

from pybroker._fast.frame cimport (FRAME_FAULT_NONE, FRAME_HEADER_LENGTH_MASK,
                                   FRAME_LENGTH_FIELD_BYTES, TAKE_END, TAKE_FAULT, FrameFault,
                                   scan_frames)
from pybroker._fast.hton cimport pb_unpack_int32

# A frame taker's answer (frame_taker.py's (position, outcome, frame_length)) from a taker
# called in C (socket_reader.pxd CTaker).
cdef struct TakeAnswer:
    Py_ssize_t position
    int outcome
    Py_ssize_t frame_bytes


cdef enum:
    # A scratch's first size; it doubles from there to the longest header seen.
    SCRATCH_MIN_BYTES = 4096


# A byte buffer that grows: where a taker decodes a frame's header (read_send_request,
# read_request; the pull path's answer heads too). Its owner starts it empty ({NULL, 0}), sizes
# it with scratch_fit and frees it (PyMem_Free(scratch.data)).
cdef struct Scratch:
    unsigned char *data
    Py_ssize_t bytes


# The scratch grown (doubling, from SCRATCH_MIN_BYTES) to hold need bytes; MemoryError.
cdef inline int scratch_fit(Scratch *scratch, Py_ssize_t need) except -1:
    cdef Py_ssize_t size = max(scratch.bytes, SCRATCH_MIN_BYTES)
    cdef unsigned char *grown
    while size < need:
        size *= 2
    grown = <unsigned char *>PyMem_Realloc(scratch.data, size)
    if grown == NULL:
        raise MemoryError()
    scratch.data, scratch.bytes = grown, size
    return 0


# The receive buffer's bytes, held in *view (the caller releases it) with [start, end) checked
# to lie inside; ValueError (nothing held) when it does not.
cdef inline const unsigned char *taker_open(object buffer, Py_buffer *view, Py_ssize_t start,
                                            Py_ssize_t end) except? NULL:
    PyObject_GetBuffer(buffer, view, PyBUF_SIMPLE)
    if start < 0 or end < start or end > view.len:
        PyBuffer_Release(view)
        raise ValueError(f"range [{start}, {end}) outside {view.len} bytes")
    return <const unsigned char *>view.buf


# True when a whole frame stands at data[at:end]: its length in *frame_bytes, the scratch grown
# to hold its header. False ends the walk, with *outcome TAKE_END (no whole frame left) or
# TAKE_FAULT (a malformed one, left to the connection, which says how).
cdef inline int taker_next(const unsigned char *data, Py_ssize_t at, Py_ssize_t end,
                           Py_ssize_t frame_max_bytes, Scratch *scratch,
                           Py_ssize_t *frame_bytes, int *outcome) except -1:
    cdef Py_ssize_t positions[2]
    cdef Py_ssize_t tail, header_length
    cdef FrameFault fault
    if scan_frames(data, at, end, frame_max_bytes, positions, 1, &tail, &fault) != 1:
        outcome[0] = TAKE_FAULT if fault.kind != FRAME_FAULT_NONE else TAKE_END
        return False
    frame_bytes[0] = positions[1]
    header_length = pb_unpack_int32(data + at + FRAME_LENGTH_FIELD_BYTES) \
        & FRAME_HEADER_LENGTH_MASK
    if header_length > scratch.bytes:
        scratch_fit(scratch, header_length)
    return True
