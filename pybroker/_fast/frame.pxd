# Contract of the remoting frame codec: frame splitting, ROCKETMQ binary header
# (protocol.md §1.1, §1.4).
cdef enum:
    # protocol.md §1.1 frame: length(4) | header word(4) = type << 24 | header length | header |
    # body
    FRAME_LENGTH_FIELD_BYTES = 4
    FRAME_HEADER_WORD_BYTES = 4
    FRAME_PREFIX_BYTES = FRAME_LENGTH_FIELD_BYTES + FRAME_HEADER_WORD_BYTES
    FRAME_HEADER_LENGTH_MASK = 0xFFFFFF
    FRAME_SERIALIZE_TYPE_SHIFT = 24
    SERIALIZE_TYPE_JSON = 0
    SERIALIZE_TYPE_ROCKETMQ = 1
    BINARY_EXT_KEY_LENGTH_MAX = 32767
    # protocol.md §1.4 ROCKETMQ binary header (frame.pyx has the table): each field's offset
    # derived from the one before.
    BINARY_CODE_AT = 0
    BINARY_LANGUAGE_AT = BINARY_CODE_AT + 2
    BINARY_VERSION_AT = BINARY_LANGUAGE_AT + 1
    BINARY_OPAQUE_AT = BINARY_VERSION_AT + 2
    BINARY_FLAG_AT = BINARY_OPAQUE_AT + 4
    BINARY_REMARK_LENGTH_AT = BINARY_FLAG_AT + 4
    BINARY_REMARK_AT = BINARY_REMARK_LENGTH_AT + 4
    # The ext length field sits after the remark: fixed part = remark offset + 4.
    BINARY_EXT_LENGTH_BYTES = 4

# Limits and sizes Python also needs (cpdef: visible as module ints).
cpdef enum:
    # Netty's frameMaxLength counts the whole frame, length field included.
    FRAME_MAX_BYTES_DEFAULT = 16777216
    EXT_FIELDS_MAX_DEFAULT = 1024
    # protocol.md §1.4 fixed part: code(2) language(1) version(2) opaque(4) flag(4) remark len(4)
    # ext len(4)
    BINARY_HEADER_FIXED_BYTES = 21

# What a frame taker says after taking from a receive buffer (remoting/frame_taker.py; the send
# fast path's SendPath.take and frame.next_frame answer with these): no whole frame left at the
# position; the frame at the position is the connection's to decode; the taker has no room now
# (take again once it has); the frame at the position is malformed (split_frames says how).
cpdef enum:  # a taker's outcome
    TAKE_END = 0
    TAKE_OTHER = 1
    TAKE_FULL = 2
    TAKE_FAULT = 3

# Why a frame failed to split; the position and offending value travel in FrameFault.
cdef enum FrameFaultKind:
    FRAME_FAULT_NONE = 0
    FRAME_FAULT_LENGTH_TOO_SMALL = 1
    FRAME_FAULT_LENGTH_TOO_LARGE = 2
    FRAME_FAULT_HEADER_TOO_LONG = 3
    FRAME_FAULT_SERIALIZE_TYPE = 4

cdef struct FrameFault:
    FrameFaultKind kind
    Py_ssize_t frame_position
    long long value

# Scan [start, end) of data for complete frames. Writes up to pairs_capacity (frame_start,
# frame_length) pairs into positions (2 entries per frame), sets tail_out to the first byte not
# covered by a reported frame, returns the number of frames. Stops at the first malformed frame
# and describes it in fault (kind != FRAME_FAULT_NONE); the frames before it are still reported.
cdef Py_ssize_t scan_frames(const unsigned char *data, Py_ssize_t start, Py_ssize_t end,
                            Py_ssize_t frame_max_bytes, Py_ssize_t *positions,
                            Py_ssize_t pairs_capacity, Py_ssize_t *tail_out,
                            FrameFault *fault) noexcept nogil
