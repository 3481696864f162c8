# pybroker._fast.pull_path: a remoting worker's pull fast path, frames -> records -> writev.
"""The pull fast path of a remoting worker (docs/architecture/reads.md).

:meth:`PullPath.take` walks the whole frames of a connection's receive buffer. Each frame that
:mod:`pybroker._fast.request_read` reads as a PULL_MESSAGE or a LITE_PULL_MESSAGE (with its
own answer template, the topic's and group's sysFlag in it) of a (group, topic) of the fast
table (:meth:`PullPath.set_subscriptions`, made by broker/pull_fast.py from the worker's
metadata replica), filtering by the heartbeat's tags or by its own tag expression (the
SUBSCRIPTION flag), is answered here when the Python handler would answer it FOUND: the queue's
units are scanned (``pull_scan.scan_units``), the records located in the mapped CommitLog,
their pages' residency measured (``pagecache.count_cold_pages``) and each record checked
(``record.record_sound``) exactly as ``StoreReads._read_at_once`` does; the response header
is written from a template cut from the handler's own encoding, the statistics are counted as
the handler's Recorder counts them, and a piggy-backed commit offset is queued for the worker
(:meth:`PullPath.commits`). Anything else - another request, a pull the handler would refuse,
hold (long polling), filter per record (SQL92) or answer otherwise (no message, offset moved,
a damaged record) - stops the walk with the frame handed back to the Python path, so requests
keep their order and every answer but FOUND stays the handler's. Nothing is counted or queued
for a frame handed back.

The answers of one call go out with ``writev`` from the mappings (heads and record bytes,
never copied) when the caller passes the socket; what the kernel does not take, or all of it
without a socket (TLS, or the transport still holds bytes), is returned as one bytes object
for the transport.

Files: consume-queue and CommitLog files are bound (held, their maps pinned) when first read
and kept (``pull_maps.FileMaps``); ``positions()`` (called once per take) says where the
reader is (dispatched and written positions, a generation that moves when files were
forgotten); a queue is brought up to the dispatched position through ``queue_source`` once per
move, the CommitLog through ``commitlog_source`` when a record lies past its known files.
"""
from cpython.buffer cimport PyBuffer_Release
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from pybroker._fast.frame cimport (FRAME_LENGTH_FIELD_BYTES, FRAME_PREFIX_BYTES,
                                   FRAME_SERIALIZE_TYPE_SHIFT, SERIALIZE_TYPE_JSON, TAKE_END,
                                   TAKE_FAULT, TAKE_FULL, TAKE_OTHER)
from pybroker._fast.digits cimport DECIMAL_BYTES_MAX, write_decimal
from pybroker._fast.hton cimport pb_pack_int32, pb_unpack_int64
from pybroker._fast.pagecache cimport count_cold_pages
from pybroker._fast.pull_maps cimport FileMaps, MapSlot
from pybroker._fast.pull_scan cimport (PullFilter, PullLimits, TakenUnit, scan_units,
                                       taken_bound)
from pybroker._fast.record cimport record_sound
from pybroker._fast.request_read cimport (REQUEST_FLAG_ONEWAY, FieldNames, FieldSpan,
                                          RequestHead, read_decimal, read_request)
from pybroker._fast.send.stats cimport count_rpc, monotonic_ns
from pybroker._fast.stats cimport (BROKER_GET_NUMS, GET_ENTIRE_TIME_MAX_MS, GET_FOUND,
                                   GET_TRANSFERRED_BYTES, GET_TRANSFERRED_MESSAGES,
                                   KEY_BYTES, KEY_COLD_REQUESTS, KEY_GROUP_GET, KEY_MESSAGES,
                                   KEY_REQUESTS, KEYS_DROPPED, PULL_FINISHED, PULL_PAGES,
                                   PULL_PAGES_COLD, PULL_READ_US, PULL_STARTED, PULLS_COLD,
                                   PULLS_IN_DISK, REQUESTS_TOTAL, RPC_LATENCY_US, StatsWriter,
                                   pb_stats_add, pb_stats_raise, pb_stats_record, pb_stats_set)
from pybroker._fast.taker cimport SCRATCH_MIN_BYTES, scratch_fit, taker_next, taker_open

from pybroker.protocol import headers as _headers
from pybroker.protocol.codes import RequestCode as _RequestCode
from pybroker.protocol.codes import ResponseCode as _ResponseCode
from pybroker.protocol.constants import PullSysFlag as _PullSysFlag

cdef int64_t INT32_LOW = -2147483648
cdef int64_t INT32_HIGH = 2147483647
cdef int64_t INT64_LOW = INT64_MIN
cdef int64_t INT64_HIGH = INT64_MAX

_NAMES = [field.wire_name for field in _headers.PULL_MESSAGE_REQUEST.fields]
assert len(_NAMES) == PULL_FIELDS and _NAMES[F_MAX_MSG_BYTES] == "maxMsgBytes" \
    and _NAMES[F_SUB_VERSION] == "subVersion" and _NAMES[F_GROUP] == "consumerGroup"
assert CODE_PULL_MESSAGE == _RequestCode.PULL_MESSAGE
assert CODE_LITE_PULL_MESSAGE == _RequestCode.LITE_PULL_MESSAGE
assert RESPONSE_SUCCESS == _ResponseCode.SUCCESS
assert FLAG_COMMIT_OFFSET == _PullSysFlag.COMMIT_OFFSET
assert FLAG_SUBSCRIPTION == _PullSysFlag.SUBSCRIPTION
cdef list _NAME_BYTES = [name.encode("ascii") for name in _NAMES]
cdef const char *_NAME_POINTERS[PULL_FIELDS]
cdef Py_ssize_t _NAME_LENGTHS[PULL_FIELDS]
for _index in range(PULL_FIELDS):
    _NAME_POINTERS[_index] = <const char *>(<bytes>_NAME_BYTES[_index])
    _NAME_LENGTHS[_index] = len(_NAME_BYTES[_index])
cdef FieldNames _PULL_NAMES
_PULL_NAMES.names = _NAME_POINTERS
_PULL_NAMES.lengths = _NAME_LENGTHS
_PULL_NAMES.count = PULL_FIELDS
_PULL_NAMES.short_names = False
_PULL_NAMES.long_names_code = -1


cdef class _PullQueue:
    """One consume queue as the fast path last saw it (``exists`` False: none on disk)."""

    def __init__(self, int64_t file_size):
        self.position = -1
        self.generation = -1
        self.exists = False
        self.maps = FileMaps(file_size)


cdef class _Template:
    """A FOUND answer's header pieces (see PullPath.__init__'s ``template``)."""

    def __init__(self, tuple pieces):
        cdef Py_ssize_t index
        if len(pieces) != TEMPLATE_PIECES:
            raise ValueError(f"{len(pieces)} template pieces, not {TEMPLATE_PIECES}")
        self.pieces = tuple(bytes(piece) for piece in pieces)
        self.frame_bytes_max = FRAME_PREFIX_BYTES + 5 * DECIMAL_BYTES_MAX
        for index in range(TEMPLATE_PIECES):
            self.pointers[index] = <const unsigned char *>PyBytes_AS_STRING(
                self.pieces[index])
            self.lengths[index] = len(self.pieces[index])
            self.frame_bytes_max += self.lengths[index]


cdef class _TagFilter:
    """The tag codes a pull takes, from a sorted list (None: all)."""

    def __cinit__(self):
        self.codes = NULL

    def __init__(self, codes):
        cdef Py_ssize_t index
        self.all_tags = codes is None
        if codes is not None:
            codes = [code for code in codes if INT32_LOW <= code <= INT32_HIGH]
            self.codes = <int32_t *>PyMem_Malloc(max(len(codes), 1) * sizeof(int32_t))
            if self.codes == NULL:
                raise MemoryError()
            for index in range(len(codes)):
                self.codes[index] = codes[index]
            self.code_count = len(codes)

    def __dealloc__(self):
        PyMem_Free(self.codes)


cdef class _PullSubscription:
    """What the fast path knows of one (group, topic): see PullPath.set_subscriptions."""


cdef _PullSubscription _subscription_of(tuple fields):
    """One entry of PullPath.set_subscriptions's list."""
    cdef _PullSubscription entry = _PullSubscription()
    (group, topic, read_queue_nums, sub_version, codes, broker_id, slowly,
     lite_template) = fields
    entry.topic = topic.encode()
    entry.topic_text = topic
    entry.group_text = group
    entry.stats_key = f"{topic}@{group}"
    entry.read_queue_nums = read_queue_nums
    entry.sub_version = sub_version
    entry.tags = _TagFilter(codes)
    entry.lite_template = None if lite_template is None else _Template(lite_template)
    entry.broker_id, entry.slowly_broker_id = broker_id, slowly
    entry.group_get_entry = KEY_UNKNOWN
    entry.pull_offset_entries = [KEY_UNKNOWN] * max(read_queue_nums, 0)
    return entry


cdef inline Py_ssize_t _piece(unsigned char *out, _Template template,
                              Py_ssize_t index) noexcept:
    memcpy(out, template.pointers[index], <size_t>template.lengths[index])
    return template.lengths[index]


cdef class PullPath:
    """The pull fast path of one remoting worker; see the module docstring."""

    def __cinit__(self):
        self._scratch.data = self._arena.data = NULL
        self._taken = NULL
        self._record_files = NULL
        self._starts = self._ends = NULL
        self._iov = NULL
        self._head_parts = NULL
        self._scratch.bytes = self._taken_capacity = self._iov_capacity = 0
        self._head_capacity = self._arena.bytes = 0

    def __init__(self, positions, queue_source, commitlog_source, pull_offset_entry,
                 StatsWriter stats, Py_ssize_t ext_fields_max, Py_ssize_t frame_max_bytes,
                 bint check_crc, int64_t memory_bytes, tuple transfer_limits,
                 bint slave_read_enable, tuple template, request_tag_codes,
                 own_expression_entry):
        """``positions() -> (dispatched, written, generation, usable)``;
        ``queue_source(topic, queue_id) -> (min_offset, max_offset, file_size,
        [(base, mapped_file, readable_bytes)])`` or None; ``commitlog_source() ->
        (file_size, [(base, mapped_file, readable_bytes)])``; ``pull_offset_entry(topic,
        group, queue_id) -> int`` (the Recorder's KEY_PULL_OFFSET entry); ``stats``: the
        worker's StatsWriter (None or off: nothing counted); ``transfer_limits``: the four
        caps of StoreConfig.transfer_limits; ``template``: the 6 header pieces of a FOUND
        PULL_MESSAGE answer; ``request_tag_codes(expression, expression_type) -> (fast,
        codes or None)``: the filter of a pull's own expression (SUBSCRIPTION flag; str or
        None each), asked once per distinct expression while the table stands;
        ``own_expression_entry(group, topic)``: an entry as set_subscriptions takes them, or
        None, for a SUBSCRIPTION-flag pull of a pair the table lacks (asked once per pair
        while the table stands)."""
        self._positions = positions
        self._queue_source = queue_source
        self._commitlog_source = commitlog_source
        self._pull_offset_entry = pull_offset_entry
        self._stats = stats if stats is not None and stats.enabled else None
        self._ext_fields_max = ext_fields_max
        self._frame_max_bytes = frame_max_bytes
        self._check_crc = check_crc
        self._memory_bytes = memory_bytes
        (self._caps.memory_bytes, self._caps.memory_count, self._caps.disk_bytes,
         self._caps.disk_count) = transfer_limits
        self._slave_read_enable = slave_read_enable
        self._template = _Template(template)
        self._request_tag_codes = request_tag_codes
        self._expressions = {}
        self._own_expression_entry = own_expression_entry
        self._own_entries = {}
        self._rpc_keys = {}
        self._subscriptions = {}
        self._topics = {}
        self._commitlog = FileMaps(1)
        self._commitlog_file_size = 0
        self._generation = -1
        self._usable = False
        self._commits = []
        scratch_fit(&self._scratch, SCRATCH_MIN_BYTES)

    def __dealloc__(self):
        PyMem_Free(self._scratch.data)
        PyMem_Free(self._taken)
        PyMem_Free(self._record_files)
        PyMem_Free(self._starts)
        PyMem_Free(self._iov)
        PyMem_Free(self._head_parts)
        PyMem_Free(self._arena.data)

    # --- tables ---------------------------------------------------------------------------
    def set_subscriptions(self, list entries):
        """The (group, topic) pairs the fast path answers: ``[(group, topic, read_queue_nums,
        sub_version, tag_codes or None, broker_id, slowly_broker_id, lite_template or
        None)]``, each one whose checks (broker, group, topic permissions, a heartbeat
        subscription by tag) pass without doubt (broker/pull_fast.py); ``lite_template``:
        the header pieces of a FOUND LITE_PULL_MESSAGE answer, None: the handler answers 361.
        Replaces the table and forgets the SUBSCRIPTION-flag expressions' filters and
        entries."""
        cdef dict table = {}
        cdef _PullSubscription entry
        for fields in entries:
            entry = _subscription_of(fields)
            table[entry.group_text.encode() + b"\x00" + entry.topic] = entry
        self._subscriptions = table
        self._expressions = {}
        self._own_entries = {}

    def reset(self):
        """Give back every file the fast path holds (the reader forgot files, or it closes)."""
        cdef _PullQueue queue
        self._commitlog.reset()
        for queues in self._topics.values():
            for queue in queues.values():
                queue.maps.reset()
        self._topics = {}
        self._generation = -1

    def commits(self) -> list:
        """``[(group, topic, queue_id, offset)]`` the fast pulls since the last call carried
        (the COMMIT_OFFSET flag), in order."""
        commits, self._commits = self._commits, []
        return commits

    @property
    def held_files(self) -> int:
        """Files held now (tests)."""
        cdef _PullQueue queue
        held = self._commitlog.bound_files
        for queues in self._topics.values():
            for queue in queues.values():
                held += queue.maps.bound_files
        return held

    # --- receive ---------------------------------------------------------------------------
    def take(self, object buffer, Py_ssize_t start, Py_ssize_t end, int fd,
             Py_ssize_t pending_max):
        """Answer every leading fast-path pull of ``buffer[start:end]``.

        Returns ``(position, outcome, frame_length, unsent)``: ``position`` is the first frame
        not taken; ``outcome`` a frame taker's (frame.pxd): TAKE_END, TAKE_OTHER
        (``frame_length`` is that frame's), TAKE_FULL (the answers reached ``pending_max``
        bytes: take again after the connection's back-pressure check) or TAKE_FAULT. The answers
        are written to ``fd`` (a plain socket with nothing queued before them; -1: none);
        ``unsent`` is what was not written, as one bytes object, or None.
        """
        cdef Py_buffer view
        cdef Py_ssize_t at = start, frame_bytes = 0
        cdef const unsigned char *data
        cdef int outcome = TAKE_END
        self._begin()
        data = taker_open(buffer, &view, start, end)
        try:
            while taker_next(data, at, end, self._frame_max_bytes, &self._scratch, &frame_bytes,
                             &outcome):
                if self._pending_bytes >= pending_max:
                    outcome = TAKE_FULL
                    break
                if not self._usable or not self._pull(data + at, frame_bytes):
                    outcome = TAKE_OTHER
                    self.other_frames_total += 1
                    break
                at += frame_bytes
        finally:
            PyBuffer_Release(&view)
        return at, outcome, frame_bytes, self._write(fd)

    cdef int _begin(self) except -1:
        """Where the reader is now; files forgotten by it are given back first."""
        dispatched, written, generation, usable = self._positions()
        if generation != self._generation:
            self.reset()
            self._generation = generation
        self._dispatched, self._written, self._usable = dispatched, written, usable
        return 0

    cdef int _grow_taken(self, Py_ssize_t need) except -1:
        cdef TakenUnit *taken
        cdef MapSlot **files
        cdef uintptr_t *starts
        if need <= self._taken_capacity:
            return 0
        taken = <TakenUnit *>PyMem_Realloc(self._taken, need * sizeof(TakenUnit))
        if taken == NULL:
            raise MemoryError()
        self._taken = taken
        files = <MapSlot **>PyMem_Realloc(self._record_files, need * sizeof(MapSlot *))
        if files == NULL:
            raise MemoryError()
        self._record_files = files
        starts = <uintptr_t *>PyMem_Realloc(self._starts, 2 * need * sizeof(uintptr_t))
        if starts == NULL:
            raise MemoryError()
        self._starts, self._ends = starts, starts + need
        self._taken_capacity = need
        return 0

    cdef _PullQueue _queue(self, _PullSubscription subscription, int32_t queue_id):
        """The queue brought up to the dispatched position (queue_source once per move)."""
        cdef dict queues = self._topics.get(subscription.topic)
        cdef _PullQueue queue
        if queues is None:
            queues = self._topics[subscription.topic] = {}
        queue = queues.get(queue_id)
        if queue is not None and queue.position == self._dispatched:
            return queue
        state = self._queue_source(subscription.topic_text, queue_id)
        if queue is None:
            queue = _PullQueue(state[2] if state is not None else CQ_UNIT_SIZE)
            queues[queue_id] = queue
        queue.position = self._dispatched
        queue.exists = state is not None
        if state is None:
            queue.maps.reset()
            return queue
        queue.min_offset, queue.max_offset = state[0], state[1]
        queue.maps.update(state[3])
        return queue

    cdef MapSlot *_commitlog_file(self, int64_t physical_offset) except? NULL:
        """The bound CommitLog file holding ``physical_offset``; the reader maps files
        written since the last look when it lies past the known ones."""
        cdef MapSlot *slot = self._commitlog.find(physical_offset)
        if slot != NULL:
            return slot
        file_size, entries = self._commitlog_source()
        if file_size != self._commitlog.file_size:
            self._commitlog.reset()
            self._commitlog = FileMaps(file_size)
        self._commitlog.update(entries)
        return self._commitlog.find(physical_offset)

    # --- one pull ---------------------------------------------------------------------------
    cdef int _pull(self, const unsigned char *frame, Py_ssize_t frame_bytes) except -1:
        """Answer one frame if it is a pull the handler answers FOUND: 1; else 0 and nothing
        changed."""
        cdef FieldSpan fields[PULL_FIELDS]
        cdef RequestHead head
        cdef const unsigned char *body
        cdef Py_ssize_t body_length
        cdef int64_t queue_id, queue_offset, max_count, sys_flag, commit_offset, number
        cdef int64_t sub_version, max_bytes = 0
        cdef bint has_max_bytes = False
        cdef _PullSubscription subscription
        cdef _PullQueue queue
        cdef _TagFilter tags
        cdef _Template template
        cdef int64_t started = monotonic_ns()
        if not read_request(frame, frame_bytes, self._ext_fields_max, &_PULL_NAMES,
                            self._scratch.data, self._scratch.bytes, &head, fields, &body,
                            &body_length):
            return 0
        if (head.code != CODE_PULL_MESSAGE and head.code != CODE_LITE_PULL_MESSAGE) \
                or head.flag & REQUEST_FLAG_ONEWAY:
            return 0
        # headers.py's parse: required fields present, numbers well-formed (else HeaderError)
        if not (fields[F_GROUP].present and fields[F_TOPIC].present) \
                or read_decimal(&fields[F_QUEUE_ID], INT32_LOW, INT32_HIGH, &queue_id) < 0 \
                or read_decimal(&fields[F_QUEUE_OFFSET], INT64_LOW, INT64_HIGH,
                                &queue_offset) < 0 \
                or read_decimal(&fields[F_MAX_MSG_NUMS], INT32_LOW, INT32_HIGH, &max_count) < 0 \
                or read_decimal(&fields[F_SYS_FLAG], INT32_LOW, INT32_HIGH, &sys_flag) < 0 \
                or read_decimal(&fields[F_COMMIT_OFFSET], INT64_LOW, INT64_HIGH,
                                &commit_offset) < 0 \
                or read_decimal(&fields[F_SUSPEND_TIMEOUT], INT64_LOW, INT64_HIGH, &number) < 0 \
                or read_decimal(&fields[F_SUB_VERSION], INT64_LOW, INT64_HIGH,
                                &sub_version) < 0:
            return 0
        if fields[F_MAX_MSG_BYTES].present and fields[F_MAX_MSG_BYTES].length:
            if read_decimal(&fields[F_MAX_MSG_BYTES], INT32_LOW, INT32_HIGH, &max_bytes) < 0:
                return 0
            has_max_bytes = True
        if fields[F_REQUEST_SOURCE].present and fields[F_REQUEST_SOURCE].length and \
                read_decimal(&fields[F_REQUEST_SOURCE], INT32_LOW, INT32_HIGH, &number) < 0:
            return 0
        subscription = self._find(fields, sys_flag)
        if subscription is None or not 0 <= queue_id < subscription.read_queue_nums:
            return 0
        # A None template: litePullMessageEnable off, the handler refuses a lite pull.
        template = subscription.lite_template if head.code == CODE_LITE_PULL_MESSAGE \
            else self._template
        tags = None if template is None else self._tags(subscription, fields, sys_flag,
                                                        sub_version)
        if tags is None:
            return 0
        queue = self._queue(subscription, <int32_t>queue_id)
        if not queue.exists or queue.max_offset == 0 or queue_offset < queue.min_offset \
                or queue_offset >= queue.max_offset:
            return 0                  # no message, offset moved: the handler answers
        if not self._read(subscription, tags, template, head.code, queue,
                          <int32_t>queue_id, queue_offset, max_count, has_max_bytes,
                          max_bytes, head.opaque, started):
            return 0
        if sys_flag & FLAG_COMMIT_OFFSET:
            self._commits.append((subscription.group_text, subscription.topic_text,
                                  queue_id, commit_offset))
        self.fast_pulls_total += 1
        return 1

    cdef _PullSubscription _find(self, const FieldSpan *fields, int64_t sys_flag):
        """The table's entry of the pull's (group, topic); for a pull with its own expression
        (the SUBSCRIPTION flag) also of a pair without a heartbeat subscription, from
        own_expression_entry once per pair while the table stands. None: the handler's."""
        group = PyBytes_FromStringAndSize(<const char *>fields[F_GROUP].data,
                                          fields[F_GROUP].length)
        topic = PyBytes_FromStringAndSize(<const char *>fields[F_TOPIC].data,
                                          fields[F_TOPIC].length)
        key = group + b"\x00" + topic
        subscription = self._subscriptions.get(key)
        if subscription is not None or not sys_flag & FLAG_SUBSCRIPTION:
            return subscription
        try:
            return self._own_entries[key]
        except KeyError:
            pass
        entry = self._own_expression_entry(group.decode("ascii"), topic.decode("ascii"))
        if len(self._own_entries) >= OWN_ENTRIES_MAX:
            self._own_entries.clear()
        subscription = None if entry is None else _subscription_of(entry)
        self._own_entries[key] = subscription
        return subscription

    cdef _TagFilter _tags(self, _PullSubscription subscription, const FieldSpan *fields,
                          int64_t sys_flag, int64_t sub_version):
        """The pull's filter: its own expression (the SUBSCRIPTION flag; the handler then
        compares no subVersion) or the heartbeat's; None when the handler must answer."""
        if sys_flag & FLAG_SUBSCRIPTION:
            return self._request_tags(&fields[F_SUBSCRIPTION], &fields[F_EXPRESSION_TYPE])
        if subscription.sub_version < sub_version:
            return None
        return subscription.tags

    cdef _TagFilter _request_tags(self, const FieldSpan *expression,
                                  const FieldSpan *expression_type):
        """The filter of a SUBSCRIPTION-flag pull's own expression, or None when the handler
        must answer it (request_tag_codes, once per distinct expression)."""
        cdef object text = None, kind = None
        if expression.present:
            text = PyBytes_FromStringAndSize(<const char *>expression.data, expression.length)
        if expression_type.present:
            kind = PyBytes_FromStringAndSize(<const char *>expression_type.data,
                                             expression_type.length)
        key = (text, kind)
        try:
            return self._expressions[key]
        except KeyError:
            pass
        fast, codes = self._request_tag_codes(None if text is None else text.decode("ascii"),
                                              None if kind is None else kind.decode("ascii"))
        if len(self._expressions) >= EXPRESSIONS_MAX:
            self._expressions.clear()
        tags = _TagFilter(codes) if fast else None
        self._expressions[key] = tags
        return tags

    cdef int _read(self, _PullSubscription subscription, _TagFilter tags, _Template template,
                   int32_t request_code, _PullQueue queue, int32_t queue_id, int64_t queue_offset,
                   int64_t max_count, bint has_max_bytes, int64_t max_bytes, int32_t opaque,
                   int64_t started) except -1:
        """StoreReads._read_at_once in C, then the answer and its figures: 1, or 0 (nothing
        changed) when the handler's answer would not be FOUND from these very records."""
        cdef int64_t unit_position = queue_offset * CQ_UNIT_SIZE, file_position, scanned
        cdef int64_t last_visited
        cdef MapSlot *units_file = queue.maps.find(unit_position)
        cdef Py_ssize_t count, taken_count = 0, bound
        cdef PullFilter pull_filter
        cdef PullLimits limits = self._caps
        cdef Answer answer
        cdef int failed
        if units_file == NULL:
            return 0
        file_position = unit_position - units_file.base
        count = min(max(SCAN_UNITS_MIN, max_count), queue.max_offset - queue_offset,
                    (units_file.readable - file_position) // CQ_UNIT_SIZE)
        if count <= 0 or file_position + count * CQ_UNIT_SIZE > units_file.length:
            return 0
        pull_filter.all_tags = tags.all_tags
        pull_filter.codes, pull_filter.code_count = tags.codes, tags.code_count
        pull_filter.damaged, pull_filter.damaged_count = NULL, 0
        limits.max_count = max_count
        limits.has_max_bytes, limits.max_bytes = has_max_bytes, max_bytes
        limits.in_disk_below = self._written - self._memory_bytes
        bound = taken_bound(count, &limits)
        self._grow_taken(bound)
        scanned = scan_units(units_file.data + file_position, count, &pull_filter, &limits,
                             self._taken, bound, &taken_count)
        if taken_count == 0:
            return 0                  # nothing matched: the handler answers
        if not self._locate(taken_count):
            return 0
        answer.pages = answer.cold_pages = 0
        # The residency as the pull found the pages, before the checks read them.
        failed = count_cold_pages(self._starts, self._ends, taken_count, &answer.pages,
                                  &answer.cold_pages)
        if failed:
            return 0
        answer.body_bytes = self._checked_bytes(subscription, queue_id, queue_offset,
                                                taken_count)
        if answer.body_bytes < 0:
            return 0                  # damaged, or not its unit's: the handler answers
        last_visited = pb_unpack_int64(units_file.data + file_position + CQ_UNIT_SIZE * (
            scanned if scanned < count else count - 1))
        answer.in_disk = self._written - last_visited > self._memory_bytes
        if not self._slave_read_enable:
            answer.suggest = 0
        elif answer.in_disk:
            answer.suggest = subscription.slowly_broker_id
        else:
            answer.suggest = subscription.broker_id
        answer.next_offset = queue_offset + scanned
        answer.min_offset, answer.max_offset = queue.min_offset, queue.max_offset
        answer.opaque = opaque
        answer.count = <int32_t>taken_count
        if not self._answer(template, &answer, taken_count):
            return 0
        self._count(subscription, request_code, queue_id, &answer, started)
        return 1

    cdef int _locate(self, Py_ssize_t taken_count) except -1:
        """The taken units' records in the bound CommitLog files (_record_files, _starts,
        _ends): 1, or 0 when one is out of CommitLog order (the per-unit loop's), in no
        known file or past the written end (the handler answers)."""
        cdef int64_t previous = self._taken[0].physical_offset, position, base, readable
        cdef MapSlot *record_file
        cdef Py_ssize_t index
        for index in range(taken_count):
            position = self._taken[index].physical_offset
            if position < previous:
                return 0
            previous = position
            record_file = self._commitlog_file(position)
            if record_file == NULL:
                return 0
            base = record_file.base
            readable = min(max(self._written - base, 0), self._commitlog.file_size)
            if position - base + self._taken[index].size > readable \
                    or self._taken[index].size <= 0:
                return 0
            self._record_files[index] = record_file
            self._starts[index] = <uintptr_t>(record_file.data + (position - base))
            self._ends[index] = self._starts[index] + <uintptr_t>self._taken[index].size
        return 1

    cdef int64_t _checked_bytes(self, _PullSubscription subscription, int32_t queue_id,
                                int64_t queue_offset, Py_ssize_t taken_count) except? -2:
        """The located records' bytes once each passed record.record_sound (the check of
        every read), or -1 at the first that did not."""
        cdef int64_t total = 0
        cdef MapSlot *record_file
        cdef Py_ssize_t index
        for index in range(taken_count):
            record_file = self._record_files[index]
            if not record_sound(record_file.data, record_file.length,
                                self._taken[index].physical_offset - record_file.base,
                                self._taken[index].size, record_file.base, self._check_crc,
                                <const unsigned char *>PyBytes_AS_STRING(subscription.topic),
                                len(subscription.topic), queue_id,
                                queue_offset + self._taken[index].unit_index):
                return -1
            total += self._taken[index].size
        return total

    # --- the answer -------------------------------------------------------------------------
    cdef int _answer(self, _Template template, Answer *answer,
                     Py_ssize_t taken_count) except -1:
        """Queue the response frame: its head (from the template) and the records' bytes as
        they lie in the mappings (adjacent records as one part). 0 when the frame would
        exceed frameMaxBytes (the handler answers that)."""
        cdef unsigned char *head
        cdef Py_ssize_t at, index, head_offset
        cdef uintptr_t start
        cdef iovec *last
        if self._arena_used + template.frame_bytes_max > self._arena.bytes:
            scratch_fit(&self._arena, self._arena_used + template.frame_bytes_max)
        head_offset = self._arena_used
        head = self._arena.data + head_offset
        at = FRAME_PREFIX_BYTES + _piece(head + FRAME_PREFIX_BYTES, template, 0)
        at += write_decimal(head + at, answer.suggest)
        at += _piece(head + at, template, 1)
        at += write_decimal(head + at, answer.next_offset)
        at += _piece(head + at, template, 2)
        at += write_decimal(head + at, answer.min_offset)
        at += _piece(head + at, template, 3)
        at += write_decimal(head + at, answer.max_offset)
        at += _piece(head + at, template, 4)
        at += write_decimal(head + at, answer.opaque)
        at += _piece(head + at, template, 5)
        if at + answer.body_bytes > self._frame_max_bytes:
            return 0
        pb_pack_int32(head, <int32_t>(at - FRAME_LENGTH_FIELD_BYTES + answer.body_bytes))
        pb_pack_int32(head + FRAME_LENGTH_FIELD_BYTES,
                      <int32_t>((SERIALIZE_TYPE_JSON << FRAME_SERIALIZE_TYPE_SHIFT)
                                | (at - FRAME_PREFIX_BYTES)))
        self._arena_used += at
        self._grow_iov(self._iov_count + 1 + taken_count)
        if self._head_count >= self._head_capacity:
            self._grow_heads()
        self._head_parts[2 * self._head_count] = self._iov_count
        self._head_parts[2 * self._head_count + 1] = head_offset
        self._head_count += 1
        self._iov[self._iov_count].iov_base = NULL        # set from the arena when written
        self._iov[self._iov_count].iov_len = <size_t>at
        self._iov_count += 1
        for index in range(taken_count):
            start = self._starts[index]
            last = &self._iov[self._iov_count - 1]
            if index and <uintptr_t>last.iov_base + last.iov_len == start:
                last.iov_len += <size_t>(self._ends[index] - start)
                continue
            self._iov[self._iov_count].iov_base = <void *>start
            self._iov[self._iov_count].iov_len = <size_t>(self._ends[index] - start)
            self._iov_count += 1
        self._pending_bytes += at + answer.body_bytes
        return 1

    cdef int _grow_iov(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t size = max(self._iov_capacity, 256)
        cdef iovec *grown
        if need <= self._iov_capacity:
            return 0
        while size < need:
            size *= 2
        grown = <iovec *>PyMem_Realloc(self._iov, size * sizeof(iovec))
        if grown == NULL:
            raise MemoryError()
        self._iov, self._iov_capacity = grown, size
        return 0

    cdef int _grow_heads(self) except -1:
        cdef Py_ssize_t size = max(2 * self._head_capacity, 64)
        cdef Py_ssize_t *grown = <Py_ssize_t *>PyMem_Realloc(
            self._head_parts, 2 * size * sizeof(Py_ssize_t))
        if grown == NULL:
            raise MemoryError()
        self._head_parts, self._head_capacity = grown, size
        return 0

    cdef object _write(self, int fd):
        """Write the queued answers to fd (-1: none); the rest as one bytes object, or None.
        The queue is empty afterwards."""
        cdef Py_ssize_t index, first = 0, parts
        cdef ssize_t written
        cdef size_t left
        cdef object rest
        cdef char *out
        if self._iov_count == 0:
            return None
        for index in range(self._head_count):
            self._iov[self._head_parts[2 * index]].iov_base = \
                self._arena.data + self._head_parts[2 * index + 1]
        while fd >= 0 and first < self._iov_count:
            parts = min(self._iov_count - first, IOV_MAX_PARTS)
            written = writev(fd, self._iov + first, <int>parts)
            if written < 0:
                if errno == EINTR:
                    continue
                break             # EAGAIN: the rest waits in the transport; an error too
            while first < self._iov_count and <size_t>written >= self._iov[first].iov_len:
                written -= self._iov[first].iov_len
                first += 1
            if first < self._iov_count and written > 0:
                self._iov[first].iov_base = <char *>self._iov[first].iov_base + written
                self._iov[first].iov_len -= <size_t>written
                break             # the socket is full
        rest = None
        if first < self._iov_count:
            left = 0
            for index in range(first, self._iov_count):
                left += self._iov[index].iov_len
            rest = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>left)
            out = PyBytes_AS_STRING(rest)
            for index in range(first, self._iov_count):
                memcpy(out, self._iov[index].iov_base, self._iov[index].iov_len)
                out += self._iov[index].iov_len
        self._iov_count = self._head_count = self._arena_used = self._pending_bytes = 0
        return rest

    # --- figures (the handler's Recorder calls, stats/recorder.py) --------------------------
    cdef int _count(self, _PullSubscription subscription, int32_t request_code, int32_t queue_id,
                    const Answer *answer, int64_t started) except -1:
        cdef StatsWriter stats = self._stats
        cdef uint64_t *counters
        cdef uint64_t *words
        cdef int64_t now
        cdef int entry
        if stats is None:
            return 0
        counters = stats.counters
        now = monotonic_ns()
        # request_started / store_get / group_get / pull_offset / pull_residency /
        # request_finished (with its rpc latency) of one found pull, in that order.
        pb_stats_add(counters + REQUESTS_TOTAL, 1)
        pb_stats_add(counters + PULL_STARTED, 1)       # both codes: proc/remoting.py's "pull"
        pb_stats_add(counters + GET_FOUND, 1)
        pb_stats_add(counters + GET_TRANSFERRED_MESSAGES, <uint64_t>answer.count)
        pb_stats_add(counters + GET_TRANSFERRED_BYTES, <uint64_t>answer.body_bytes)
        pb_stats_raise(counters + GET_ENTIRE_TIME_MAX_MS, <uint64_t>((now - started) // 1000000))
        if subscription.group_get_entry == KEY_UNKNOWN:
            subscription.group_get_entry = stats.key(KEY_GROUP_GET, 0, subscription.stats_key)
        entry = subscription.group_get_entry
        if entry < 0:
            pb_stats_add(counters + KEYS_DROPPED, 2 if answer.cold_pages else 1)
        else:
            words = stats.key_words(entry)
            pb_stats_add(words + KEY_MESSAGES, <uint64_t>answer.count)
            pb_stats_add(words + KEY_BYTES, <uint64_t>answer.body_bytes)
            pb_stats_add(words + KEY_REQUESTS, 1)
            if answer.cold_pages:
                pb_stats_add(words + KEY_COLD_REQUESTS, 1)
        pb_stats_add(counters + BROKER_GET_NUMS, <uint64_t>answer.count)
        entry = subscription.pull_offset_entries[queue_id]
        if entry == KEY_UNKNOWN:
            entry = self._pull_offset_entry(subscription.topic_text, subscription.group_text,
                                            queue_id)
            subscription.pull_offset_entries[queue_id] = entry
        if entry < 0:
            pb_stats_add(counters + KEYS_DROPPED, 1)
        else:
            words = stats.key_words(entry)
            pb_stats_set(words, <uint64_t>max(answer.next_offset, 0))
            pb_stats_set(words + 1, <uint64_t>started)
        pb_stats_add(counters + PULL_PAGES, answer.pages)
        if answer.cold_pages:
            pb_stats_add(counters + PULL_PAGES_COLD, answer.cold_pages)
            pb_stats_add(counters + PULLS_COLD, 1)
        if answer.in_disk:
            pb_stats_add(counters + PULLS_IN_DISK, 1)
        now = monotonic_ns()
        pb_stats_record(stats.histogram(PULL_READ_US), <uint64_t>((now - started) // 1000))
        pb_stats_add(counters + PULL_FINISHED, 1)
        pb_stats_record(stats.histogram(RPC_LATENCY_US), <uint64_t>((now - started) // 1000))
        count_rpc(stats, self._rpc_keys, request_code, RESPONSE_SUCCESS, False,
                  (now - started) // 1000)
        return 0
