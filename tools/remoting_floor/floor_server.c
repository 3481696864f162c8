/* The cheapest RocketMQ remoting "broker" for sends: a measuring instrument, never a broker.
 *
 * One thread, epoll, non-blocking sockets. Every SEND_MESSAGE / SEND_MESSAGE_V2 /
 * SEND_BATCH_MESSAGE is answered SEND_OK at once with a well-formed SendMessageResponseHeader
 * (msgId, queueId, queueOffset counting per topic and queue) in the header encoding the request
 * came in (JSON or ROCKETMQ binary); nothing is stored, nothing is checked beyond what the
 * answer needs. HEART_BEAT and UNREGISTER_CLIENT are answered SUCCESS; UPDATE_AND_CREATE_TOPIC
 * is answered SUCCESS and reported on stdout ("topic NAME READ WRITE PERM"), where
 * tools/remoting_floor.py registers it with the NameServer; any other code is answered
 * REQUEST_CODE_NOT_SUPPORTED with a remark; oneway requests are not answered. A frame that
 * cannot be read (length, header) closes its connection only.
 *
 * Usage: floor_server PORT FRAME_MAX_BYTES   (PORT 0: any; prints "listening PORT" when ready)
 *
 * Codes and layout: docs/protocol.md §1 and §2.2 (Java's RemotingCommand,
 * RocketMQSerializable, SendMessageResponseHeader); the defines below are checked against
 * pybroker's constants by tests/unit/tools/test_remoting_floor.py.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* Request codes (pybroker.protocol.codes.RequestCode) */
#define FLOOR_SEND_MESSAGE 10
#define FLOOR_UPDATE_AND_CREATE_TOPIC 17
#define FLOOR_HEART_BEAT 34
#define FLOOR_UNREGISTER_CLIENT 35
#define FLOOR_SEND_MESSAGE_V2 310
#define FLOOR_SEND_BATCH_MESSAGE 320
/* Response codes (pybroker.protocol.codes.ResponseCode) */
#define FLOOR_SUCCESS 0
#define FLOOR_SYSTEM_ERROR 1
#define FLOOR_REQUEST_CODE_NOT_SUPPORTED 3
#define FLOOR_MESSAGE_ILLEGAL 13
/* Header (pybroker.protocol.constants) */
#define FLOOR_RPC_TYPE_RESPONSE 1
#define FLOOR_RPC_ONEWAY 2
#define FLOOR_SERIALIZE_JSON 0
#define FLOOR_SERIALIZE_ROCKETMQ 1
#define FLOOR_LANGUAGE_JAVA 0
#define FLOOR_CURRENT_VERSION 409
#define FLOOR_BINARY_FIXED_BYTES 21
/* A batch's inner message: size, magic, body CRC, flag, body length, body, properties length
 * (docs/protocol.md §3.6). */
#define FLOOR_BATCH_INNER_MIN_BYTES 22
#define FLOOR_TOPIC_MAX_BYTES 255

#define READ_CHUNK (64 * 1024)

typedef struct {
    const char *p;
    int len;
    int is_string;   /* a JSON string (or a binary value); else a JSON scalar */
} span_t;

typedef struct {
    int code, opaque, flag, serialize_type;
    span_t topic, queue_id, batch, read_queues, write_queues, perm;
} request_t;

typedef struct {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
    int writing;     /* answers wait for the socket: EPOLLOUT armed, EPOLLIN off */
} conn_t;

typedef struct {
    char *topic;     /* NULL: empty slot */
    int topic_len;
    int queue_id;
    int64_t next_offset;
} queue_slot_t;

static int epfd;
static int listen_port;
static long frame_max;
static int64_t physical_offset;   /* advances by each message's size: ids stay unique */
static queue_slot_t *queues;
static size_t queue_cap, queue_used;

static uint32_t be32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static uint16_t be16(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint16_t)(u[0] << 8 | u[1]);
}

static void put32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
}

static void put16(char *p, uint16_t v) {
    p[0] = (char)(v >> 8); p[1] = (char)v;
}

static void *must_realloc(void *old, size_t size) {
    void *p = realloc(old, size);
    if (p == NULL) {
        perror("floor_server: realloc");
        exit(1);
    }
    return p;
}

/* ---- per-queue offsets ---------------------------------------------------------------- */

static uint64_t queue_hash(const char *topic, int len, int queue_id) {
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < len; i++)
        h = (h ^ (unsigned char)topic[i]) * 1099511628211ULL;
    return (h ^ (uint32_t)queue_id) * 1099511628211ULL;
}

static queue_slot_t *queue_find(queue_slot_t *table, size_t cap, const char *topic, int len,
                                int queue_id) {
    size_t i = queue_hash(topic, len, queue_id) & (cap - 1);
    while (table[i].topic != NULL && !(table[i].queue_id == queue_id &&
           table[i].topic_len == len && memcmp(table[i].topic, topic, (size_t)len) == 0))
        i = (i + 1) & (cap - 1);
    return &table[i];
}

/* The queue's next offset, then advanced by count. */
static int64_t queue_take(const char *topic, int len, int queue_id, int count) {
    if ((queue_used + 1) * 10 > queue_cap * 7) {
        size_t cap = queue_cap ? queue_cap * 2 : 256;
        queue_slot_t *table = calloc(cap, sizeof(queue_slot_t));
        if (table == NULL) {
            perror("floor_server: calloc");
            exit(1);
        }
        for (size_t i = 0; i < queue_cap; i++)
            if (queues[i].topic != NULL)
                *queue_find(table, cap, queues[i].topic, queues[i].topic_len,
                            queues[i].queue_id) = queues[i];
        free(queues);
        queues = table;
        queue_cap = cap;
    }
    queue_slot_t *slot = queue_find(queues, queue_cap, topic, len, queue_id);
    if (slot->topic == NULL) {
        slot->topic = must_realloc(NULL, (size_t)len + 1);
        memcpy(slot->topic, topic, (size_t)len);
        slot->topic_len = len;
        slot->queue_id = queue_id;
        slot->next_offset = 0;
        queue_used++;
    }
    int64_t first = slot->next_offset;
    slot->next_offset += count;
    return first;
}

/* ---- JSON header ---------------------------------------------------------------------- */

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A string starting at its opening quote: the span inside the quotes (escapes left as they
 * are); NULL when it does not end. */
static const char *json_string(const char *p, const char *end, span_t *out) {
    const char *start = ++p;
    while (p < end && *p != '"') {
        if (*p == '\\')
            p++;
        p++;
    }
    if (p >= end)
        return NULL;
    out->p = start;
    out->len = (int)(p - start);
    out->is_string = 1;
    return p + 1;
}

/* Any JSON value; its span (a string's without quotes). NULL when malformed. */
static const char *json_value(const char *p, const char *end, span_t *out, int depth) {
    p = skip_ws(p, end);
    if (p >= end || depth > 16)
        return NULL;
    if (*p == '"')
        return json_string(p, end, out);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        const char *start = p++;
        p = skip_ws(p, end);
        if (p < end && *p == close) {
            out->p = start; out->len = (int)(p + 1 - start); out->is_string = 0;
            return p + 1;
        }
        for (;;) {
            span_t ignored;
            if (close == '}') {
                p = skip_ws(p, end);
                if (p >= end || *p != '"' || (p = json_string(p, end, &ignored)) == NULL)
                    return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p++ != ':')
                    return NULL;
            }
            if ((p = json_value(p, end, &ignored, depth + 1)) == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == close)
                break;
            return NULL;
        }
        out->p = start; out->len = (int)(p + 1 - start); out->is_string = 0;
        return p + 1;
    }
    const char *start = p;
    while (p < end && (*p == '-' || *p == '+' || *p == '.' || (*p >= '0' && *p <= '9') ||
                       (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
        p++;
    if (p == start)
        return NULL;
    out->p = start; out->len = (int)(p - start); out->is_string = 0;
    return p;
}

static int span_is(const span_t *s, const char *text) {
    size_t n = strlen(text);
    return s->p != NULL && (size_t)s->len == n && memcmp(s->p, text, n) == 0;
}

/* A decimal integer (optionally signed) that fills the span; 0 when it is not one. */
static int span_int(const span_t *s, long *value) {
    if (s->p == NULL || s->len == 0 || s->len > 20)
        return 0;
    int i = 0, negative = 0;
    if (s->p[0] == '-' || s->p[0] == '+') {
        negative = s->p[0] == '-';
        i = 1;
    }
    if (i == s->len)
        return 0;
    long v = 0;
    for (; i < s->len; i++) {
        if (s->p[i] < '0' || s->p[i] > '9' || v > (1L << 40))
            return 0;
        v = v * 10 + (s->p[i] - '0');
    }
    *value = negative ? -v : v;
    return 1;
}

/* Keeps the ext fields an answer needs, by either naming (long: SEND_MESSAGE and
 * UPDATE_AND_CREATE_TOPIC; one letter: SendMessageRequestHeaderV2). */
static void keep_field(request_t *r, const span_t *key, const span_t *value) {
    if (span_is(key, "topic") || span_is(key, "b"))
        r->topic = *value;
    else if (span_is(key, "queueId") || span_is(key, "e"))
        r->queue_id = *value;
    else if (span_is(key, "batch") || span_is(key, "m"))
        r->batch = *value;
    else if (span_is(key, "readQueueNums"))
        r->read_queues = *value;
    else if (span_is(key, "writeQueueNums"))
        r->write_queues = *value;
    else if (span_is(key, "perm"))
        r->perm = *value;
}

static int parse_json_header(const char *p, const char *end, request_t *r) {
    int have_code = 0, have_opaque = 0;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{')
        return -1;
    p = skip_ws(p, end);
    if (p < end && *p == '}')
        return -1;
    for (;;) {
        span_t key, value;
        p = skip_ws(p, end);
        if (p >= end || *p != '"' || (p = json_string(p, end, &key)) == NULL)
            return -1;
        p = skip_ws(p, end);
        if (p >= end || *p++ != ':')
            return -1;
        const char *value_start = skip_ws(p, end);
        if ((p = json_value(p, end, &value, 0)) == NULL)
            return -1;
        long number;
        if (span_is(&key, "code") || span_is(&key, "opaque") || span_is(&key, "flag")) {
            if (value.is_string || !span_int(&value, &number))
                return -1;
            if (span_is(&key, "code")) {
                r->code = (int)number;
                have_code = 1;
            } else if (span_is(&key, "opaque")) {
                r->opaque = (int)number;
                have_opaque = 1;
            } else {
                r->flag = (int)number;
            }
        } else if (span_is(&key, "extFields") && *value_start == '{') {
            const char *q = value_start + 1, *stop = value.p + value.len - 1;
            q = skip_ws(q, stop);
            while (q < stop) {
                span_t ext_key, ext_value;
                if (*q != '"' || (q = json_string(q, stop, &ext_key)) == NULL)
                    return -1;
                q = skip_ws(q, stop);
                if (q >= stop || *q++ != ':')
                    return -1;
                if ((q = json_value(q, stop, &ext_value, 1)) == NULL)
                    return -1;
                keep_field(r, &ext_key, &ext_value);
                q = skip_ws(q, stop);
                if (q < stop && *q == ',')
                    q = skip_ws(q + 1, stop);
            }
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}')
            break;
        return -1;
    }
    p = skip_ws(p + 1, end);
    return (p == end && have_code && have_opaque) ? 0 : -1;
}

/* ---- ROCKETMQ binary header ------------------------------------------------------------ */

static int parse_binary_header(const char *p, const char *end, request_t *r) {
    if (end - p < FLOOR_BINARY_FIXED_BYTES)
        return -1;
    r->code = (int16_t)be16(p);
    r->opaque = (int32_t)be32(p + 5);
    r->flag = (int32_t)be32(p + 9);
    uint32_t remark_len = be32(p + 13);
    p += 17;
    if (remark_len > (uint32_t)(end - p) || end - p - (long)remark_len < 4)
        return -1;
    p += remark_len;
    uint32_t ext_len = be32(p);
    p += 4;
    if (ext_len != (uint32_t)(end - p))
        return -1;
    while (p < end) {
        if (end - p < 2)
            return -1;
        span_t key = {p + 2, be16(p), 1};
        p += 2;
        if (key.len > end - p || end - p - key.len < 4)
            return -1;
        p += key.len;
        uint32_t value_len = be32(p);
        p += 4;
        if (value_len > (uint32_t)(end - p))
            return -1;
        span_t value = {p, (int)value_len, 1};
        p += value_len;
        keep_field(r, &key, &value);
    }
    return 0;
}

/* ---- answers ------------------------------------------------------------------------------ */

static void out_reserve(conn_t *c, size_t more) {
    if (c->out_len + more <= c->out_cap)
        return;
    if (c->out_off > 0) {   /* what was written goes first */
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
        if (c->out_len + more <= c->out_cap)
            return;
    }
    size_t cap = c->out_cap ? c->out_cap : READ_CHUNK;
    while (cap < c->out_len + more)
        cap *= 2;
    c->out = must_realloc(c->out, cap);
    c->out_cap = cap;
}

typedef struct {
    const char *key;
    const char *value;
    int value_len;
} field_t;

/* One response frame in the request's encoding: code, the request's opaque, flag RPC_TYPE. */
static void answer(conn_t *c, const request_t *r, int code, const char *remark,
                   const field_t *fields, int nfields) {
    size_t room = 192 + (remark ? strlen(remark) * 6 : 0);
    for (int i = 0; i < nfields; i++)
        room += strlen(fields[i].key) + (size_t)fields[i].value_len + 16;
    out_reserve(c, room);
    char *frame = c->out + c->out_len, *h = frame + 8;
    if (r->serialize_type == FLOOR_SERIALIZE_ROCKETMQ) {
        put16(h, (uint16_t)code);
        h[2] = FLOOR_LANGUAGE_JAVA;
        put16(h + 3, FLOOR_CURRENT_VERSION);
        put32(h + 5, (uint32_t)r->opaque);
        put32(h + 9, FLOOR_RPC_TYPE_RESPONSE);
        size_t remark_len = remark ? strlen(remark) : 0;
        put32(h + 13, (uint32_t)remark_len);
        memcpy(h + 17, remark ? remark : "", remark_len);
        char *ext = h + 17 + remark_len, *q = ext + 4;
        for (int i = 0; i < nfields; i++) {
            size_t key_len = strlen(fields[i].key);
            put16(q, (uint16_t)key_len);
            memcpy(q + 2, fields[i].key, key_len);
            put32(q + 2 + key_len, (uint32_t)fields[i].value_len);
            memcpy(q + 6 + key_len, fields[i].value, (size_t)fields[i].value_len);
            q += 6 + key_len + (size_t)fields[i].value_len;
        }
        put32(ext, (uint32_t)(q - ext - 4));
        h = q;
    } else {
        /* pybroker's and Java's key order: code, extFields, flag, language, opaque, remark,
         * serializeTypeCurrentRPC, version. Remarks here are plain ASCII. */
        h += sprintf(h, "{\"code\":%d", code);
        if (nfields > 0) {
            h += sprintf(h, ",\"extFields\":{");
            for (int i = 0; i < nfields; i++) {
                h += sprintf(h, "%s\"%s\":\"", i ? "," : "", fields[i].key);
                memcpy(h, fields[i].value, (size_t)fields[i].value_len);
                h += fields[i].value_len;
                *h++ = '"';
            }
            *h++ = '}';
        }
        h += sprintf(h, ",\"flag\":%d,\"language\":\"JAVA\",\"opaque\":%d", FLOOR_RPC_TYPE_RESPONSE,
                     r->opaque);
        if (remark)
            h += sprintf(h, ",\"remark\":\"%s\"", remark);
        h += sprintf(h, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":%d}",
                     FLOOR_CURRENT_VERSION);
    }
    size_t header_len = (size_t)(h - frame - 8);
    put32(frame, (uint32_t)(4 + header_len));
    put32(frame + 4, (uint32_t)r->serialize_type << 24 | (uint32_t)header_len);
    c->out_len += 8 + header_len;
}

static char *msg_id(char *p, int64_t offset) {
    return p + sprintf(p, "7F000001%08X%016llX", (unsigned)listen_port,
                       (unsigned long long)offset);
}

static void answer_send(conn_t *c, const request_t *r, const char *body, long body_len) {
    long queue_id = 0;
    if (r->queue_id.p != NULL && (!span_int(&r->queue_id, &queue_id) || queue_id < 0))
        queue_id = 0;   /* a producer names its queue; "any queue" is queue 0 here */
    int batch = span_is(&r->batch, "true");
    int count = 1;
    if (batch) {
        count = 0;
        for (long pos = 0; pos < body_len; count++) {
            long left = body_len - pos;
            if (left < FLOOR_BATCH_INNER_MIN_BYTES) {
                count = -1;
                break;
            }
            uint32_t size = be32(body + pos), n = be32(body + pos + 16);
            if (size < FLOOR_BATCH_INNER_MIN_BYTES || size > (uint32_t)left ||
                n > size - FLOOR_BATCH_INNER_MIN_BYTES ||
                FLOOR_BATCH_INNER_MIN_BYTES + n + be16(body + pos + 20 + n) != size) {
                count = -1;
                break;
            }
            pos += size;
        }
        if (count <= 0) {
            answer(c, r, FLOOR_MESSAGE_ILLEGAL, "the batch body is not a list of messages",
                   NULL, 0);
            return;
        }
    }
    if (r->topic.p == NULL || r->topic.len > FLOOR_TOPIC_MAX_BYTES) {
        answer(c, r, FLOOR_SYSTEM_ERROR, "the send names no topic", NULL, 0);
        return;
    }
    int64_t first = queue_take(r->topic.p, r->topic.len, (int)queue_id, count);
    char *ids = must_realloc(NULL, (size_t)count * 33 + 1), *q = ids;
    if (batch) {
        for (long pos = 0, i = 0; i < count; i++) {
            uint32_t size = be32(body + pos);
            if (i)
                *q++ = ',';
            q = msg_id(q, physical_offset);
            physical_offset += size;
            pos += size;
        }
    } else {
        q = msg_id(q, physical_offset);
        physical_offset += body_len > 0 ? body_len : 1;
    }
    char queue_text[24], offset_text[24];
    int queue_len = sprintf(queue_text, "%ld", queue_id);
    int offset_len = sprintf(offset_text, "%lld", (long long)first);
    field_t fields[] = {
        {"msgId", ids, (int)(q - ids)}, {"queueId", queue_text, queue_len},
        {"queueOffset", offset_text, offset_len}, {"MSG_REGION", "DefaultRegion", 13},
        {"TRACE_ON", "true", 4},
    };
    answer(c, r, FLOOR_SUCCESS, NULL, fields, 5);
    free(ids);
}

static int topic_name_ok(const span_t *topic) {
    if (topic->p == NULL || topic->len == 0 || topic->len > FLOOR_TOPIC_MAX_BYTES)
        return 0;
    for (int i = 0; i < topic->len; i++) {
        char ch = topic->p[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
              || ch == '_' || ch == '-' || ch == '%' || ch == '|'))
            return 0;
    }
    return 1;
}

static void create_topic(conn_t *c, const request_t *r) {
    long read_queues = 0, write_queues = 0, perm = 0;
    if (!topic_name_ok(&r->topic) || !span_int(&r->read_queues, &read_queues) ||
        !span_int(&r->write_queues, &write_queues) || !span_int(&r->perm, &perm)) {
        answer(c, r, FLOOR_SYSTEM_ERROR, "topic, readQueueNums, writeQueueNums and perm are "
               "needed", NULL, 0);
        return;
    }
    printf("topic %.*s %ld %ld %ld\n", r->topic.len, r->topic.p, read_queues, write_queues,
           perm);
    fflush(stdout);
    answer(c, r, FLOOR_SUCCESS, NULL, NULL, 0);
}

/* One whole frame (after its length field); -1 closes the connection. */
static int serve_frame(conn_t *c, const char *frame, long length) {
    if (length < 4)
        return -1;
    uint32_t word = be32(frame);
    long header_len = (long)(word & 0xFFFFFF);
    request_t r;
    memset(&r, 0, sizeof(r));
    r.serialize_type = (int)(word >> 24);
    if (header_len > length - 4)
        return -1;
    const char *header = frame + 4, *body = header + header_len;
    int parsed = r.serialize_type == FLOOR_SERIALIZE_JSON ?
        parse_json_header(header, body, &r) :
        r.serialize_type == FLOOR_SERIALIZE_ROCKETMQ ?
        parse_binary_header(header, body, &r) : -1;
    if (parsed < 0)
        return -1;
    if (r.flag & (FLOOR_RPC_TYPE_RESPONSE | FLOOR_RPC_ONEWAY))
        return 0;   /* a response to nothing we asked, or a oneway request: no answer */
    switch (r.code) {
    case FLOOR_SEND_MESSAGE:
    case FLOOR_SEND_MESSAGE_V2:
    case FLOOR_SEND_BATCH_MESSAGE:
        answer_send(c, &r, body, length - 4 - header_len);
        break;
    case FLOOR_HEART_BEAT:
    case FLOOR_UNREGISTER_CLIENT:
        answer(c, &r, FLOOR_SUCCESS, NULL, NULL, 0);
        break;
    case FLOOR_UPDATE_AND_CREATE_TOPIC:
        create_topic(c, &r);
        break;
    default: {
        char remark[64];
        snprintf(remark, sizeof(remark), "request type %d not supported", r.code);
        answer(c, &r, FLOOR_REQUEST_CODE_NOT_SUPPORTED, remark, NULL, 0);
    }
    }
    return 0;
}

/* ---- connections ---------------------------------------------------------------------- */

static void close_conn(conn_t *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static void watch(conn_t *c, int writing) {
    struct epoll_event event = {.events = writing ? EPOLLOUT : EPOLLIN, .data.ptr = c};
    c->writing = writing;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &event);
}

/* Write what is pending; -1: the connection is gone. */
static int flush_out(conn_t *c) {
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->writing)
                watch(c, 1);
            return 0;
        }
        return -1;
    }
    c->out_off = c->out_len = 0;
    if (c->writing)
        watch(c, 0);
    return 0;
}

/* Read what is there, answer every whole frame with one write; -1: close. */
static int on_readable(conn_t *c) {
    for (;;) {
        if (c->in_cap - c->in_len < READ_CHUNK) {
            c->in_cap = c->in_cap ? c->in_cap * 2 : 4 * READ_CHUNK;
            c->in = must_realloc(c->in, c->in_cap);
        }
        size_t space = c->in_cap - c->in_len;
        ssize_t n = read(c->fd, c->in + c->in_len, space);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        c->in_len += (size_t)n;
        if ((size_t)n < space)
            break;   /* the socket is drained */
    }
    size_t pos = 0;
    while (c->in_len - pos >= 4) {
        long length = (long)be32(c->in + pos);
        if (length < 4 || length > frame_max)
            return -1;
        if (c->in_len - pos - 4 < (size_t)length)
            break;
        if (serve_frame(c, c->in + pos + 4, length) < 0)
            return -1;
        pos += 4 + (size_t)length;
    }
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    return flush_out(c);
}

static void on_accept(int listen_fd) {
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn_t *c = calloc(1, sizeof(conn_t));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) < 0) {
            close(fd);
            free(c);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: floor_server PORT FRAME_MAX_BYTES\n");
        return 2;
    }
    frame_max = strtol(argv[2], NULL, 10);
    signal(SIGPIPE, SIG_IGN);
    int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in address = {.sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)atoi(argv[1])),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t address_len = sizeof(address);
    if (frame_max < 64 || listen_fd < 0 ||
        bind(listen_fd, (struct sockaddr *)&address, sizeof(address)) < 0 ||
        listen(listen_fd, 1024) < 0 ||
        getsockname(listen_fd, (struct sockaddr *)&address, &address_len) < 0) {
        perror("floor_server: listen");
        return 1;
    }
    listen_port = ntohs(address.sin_port);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &event);
    printf("listening %d\n", listen_port);
    fflush(stdout);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(epfd, events, 256, -1);
        if (n < 0 && errno != EINTR) {
            perror("floor_server: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (c == NULL) {
                on_accept(listen_fd);
                continue;
            }
            int failed = (events[i].events & (EPOLLERR | EPOLLHUP)) &&
                         !(events[i].events & EPOLLIN);
            if (!failed && (events[i].events & EPOLLIN))
                failed = on_readable(c) < 0;
            if (!failed && (events[i].events & EPOLLOUT))
                failed = flush_out(c) < 0;   /* then EPOLLIN again: reading resumes */
            if (failed)
                close_conn(c);
        }
    }
}
