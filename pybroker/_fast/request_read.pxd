# Contract of pybroker._fast.request_read: a request's custom-header fields read in place.
from libc.stdint cimport int32_t, int64_t

cdef enum:
    # Flag bits of a frame (bit 0 response, bit 1 oneway).
    REQUEST_FLAG_RESPONSE = 1
    REQUEST_FLAG_ONEWAY = 2
    # Fields of one header a table may name.
    REQUEST_FIELDS_MAX = 16


cdef struct FieldSpan:
    # One ext value as ASCII bytes: points into the frame, or into the caller's scratch memory
    # when a JSON escape had to be undone. present = 0 when the field is absent.
    const unsigned char *data
    Py_ssize_t length
    bint present


cdef struct FieldNames:
    # The wire names of a header's fields, in the order the caller's span array uses; with
    # short_names, requests of another code than long_names_code name field i by the letter
    # "a" + i (SEND_MESSAGE_V2's "a".."n").
    const char **names
    const Py_ssize_t *lengths
    int count
    bint short_names
    int32_t long_names_code


cdef struct RequestHead:
    int32_t code
    int32_t opaque
    int32_t flag


# Read the frame data[0:frame_bytes] (length field included, already split and checked by
# frame.scan_frames): its code, opaque and flag into *head and the fields of names into
# fields[0:names.count]. Returns 1 when the header is one the Python path decodes to exactly
# these values (ROCKETMQ binary or the JSON subset of the module docstring, ASCII text, no
# duplicate key, at most ext_fields_max ext entries); 0 for anything else (the Python path
# then takes the frame and gives its own answer or error). scratch (scratch_bytes long)
# receives unescaped JSON values; *body and *body_length the frame's body. Never reads outside
# the frame.
cdef int read_request(const unsigned char *data, Py_ssize_t frame_bytes,
                      Py_ssize_t ext_fields_max, const FieldNames *names,
                      unsigned char *scratch, Py_ssize_t scratch_bytes, RequestHead *head,
                      FieldSpan *fields, const unsigned char **body,
                      Py_ssize_t *body_length) noexcept nogil

# read_request's reading of a response frame (flag bit 0 set; the remark is not read): 1 with
# *head and fields[0:names.count] set, else 0. The gRPC front reads the send fast path's
# answers with it (grpc_front/front.pyx).
cdef int read_response(const unsigned char *data, Py_ssize_t ext_fields_max,
                       const FieldNames *names, unsigned char *scratch,
                       Py_ssize_t scratch_bytes, RequestHead *head,
                       FieldSpan *fields) noexcept nogil

# headers.py's int/long conversion of a present, non-empty value: [+-]?[0-9]+, at most 24
# characters, within [low, high]. 0 with *value set, or -1.
cdef int read_decimal(const FieldSpan *span, int64_t low, int64_t high,
                      int64_t *value) noexcept nogil
