# pybroker._fast.pull_scan: the consume-queue units one pull takes, in one pass without objects.
"""Which units of a consume queue one pull takes (docs/architecture/reads.md).

Java's getMessage walks the units one by one: a unit first ends the batch when the batch is
full (isTheBatchFull: maxMsgNums, the request's maxMsgBytes, the in-memory or in-disk transfer
caps of the unit's record, counted over the units taken so far plus this unit's size), then is
matched by tag code, then its record is read. Without a record filter (SQL92) every matched
unit is taken, so the whole decision is one pass over the units, here in C (:func:`scan_units`);
fillers and units in damaged CommitLog ranges are stepped over like units the tags refuse.
The records themselves are read and checked afterwards (``record.record_sound``), by the
caller. :func:`collect` is the Python door (``store/read_api.py``); the pull fast path calls
:func:`scan_units` directly. The per-unit loop of ``StoreReads._collect`` is the twin that
SQL92 pulls keep; ``tests/unit/store/test_pull_at_once.py`` keeps the two equal.
"""
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport int32_t, int64_t, uint32_t, INT64_MIN

from pybroker._fast.hton cimport pb_unpack_int32, pb_unpack_int64

cdef enum:
    # Consume-queue unit layout (protocol.md §4.4; store/layout.py has the same table, a unit
    # test compares them through LAYOUT).
    CQ_UNIT_SIZE = 20
    CQ_UNIT_SIZE_POSITION = 8
    CQ_UNIT_TAGS_CODE_POSITION = 12
    CQ_FILLER_SIZE = 0x7FFFFFFF

LAYOUT = {"cq_unit_size": CQ_UNIT_SIZE, "cq_unit_size_position": CQ_UNIT_SIZE_POSITION,
          "cq_unit_tags_code_position": CQ_UNIT_TAGS_CODE_POSITION,
          "cq_filler_size": CQ_FILLER_SIZE}


cdef Py_ssize_t taken_bound(Py_ssize_t unit_count, const PullLimits *limits) noexcept nogil:
    # The first matched unit always goes; after it the batch is full at max_count and at the
    # larger of the two count caps.
    cdef int64_t bound = limits.memory_count
    if limits.disk_count > bound:
        bound = limits.disk_count
    if limits.max_count < bound:
        bound = limits.max_count
    if bound < 1:
        bound = 1
    return <Py_ssize_t>bound if bound < unit_count else unit_count


cdef inline bint _in_damaged(const PullFilter *pull_filter, int64_t physical_offset) noexcept nogil:
    # Spans sorted and disjoint: the last one starting at or below the offset decides.
    cdef Py_ssize_t low = 0, high = pull_filter.damaged_count, middle
    while low < high:
        middle = (low + high) // 2
        if pull_filter.damaged[2 * middle] <= physical_offset:
            low = middle + 1
        else:
            high = middle
    return low > 0 and physical_offset < pull_filter.damaged[2 * (low - 1) + 1]


cdef inline bint _matches(const PullFilter *pull_filter, int64_t tags_code) noexcept nogil:
    # Java compares (int) tagsCode with the subscription's codes.
    cdef int32_t code = <int32_t>(<uint32_t>tags_code)
    cdef Py_ssize_t index
    for index in range(pull_filter.code_count):
        if pull_filter.codes[index] == code:
            return True
    return False


cdef Py_ssize_t scan_units(const unsigned char *units, Py_ssize_t unit_count,
                           const PullFilter *pull_filter, const PullLimits *limits,
                           TakenUnit *taken, Py_ssize_t taken_max,
                           Py_ssize_t *taken_count) noexcept nogil:
    cdef Py_ssize_t index, count = 0
    cdef int64_t taken_bytes = 0, physical_offset, after, limit_bytes, limit_count
    cdef int32_t size
    cdef const unsigned char *unit
    for index in range(unit_count):
        unit = units + index * CQ_UNIT_SIZE
        physical_offset = pb_unpack_int64(unit)
        size = pb_unpack_int32(unit + CQ_UNIT_SIZE_POSITION)
        if count > 0:
            if physical_offset < limits.in_disk_below:
                limit_bytes, limit_count = limits.disk_bytes, limits.disk_count
            else:
                limit_bytes, limit_count = limits.memory_bytes, limits.memory_count
            after = taken_bytes + size
            if count >= limits.max_count or count >= limit_count or after > limit_bytes \
                    or (limits.has_max_bytes and after > limits.max_bytes) \
                    or count >= taken_max:
                taken_count[0] = count
                return index
        if not pull_filter.all_tags and not _matches(
                pull_filter, pb_unpack_int64(unit + CQ_UNIT_TAGS_CODE_POSITION)):
            continue
        if physical_offset == 0 and size == CQ_FILLER_SIZE:
            continue
        if pull_filter.damaged_count and _in_damaged(pull_filter, physical_offset):
            continue
        taken[count].physical_offset = physical_offset
        taken[count].size = size
        taken[count].unit_index = <int32_t>index
        count += 1
        taken_bytes += size
    taken_count[0] = count
    return unit_count


cdef object _groups(const TakenUnit *taken, Py_ssize_t count, int64_t file_size):
    # The taken units grouped by CommitLog file: [base, positions, sizes, unit indexes, end of
    # the furthest record]; None when they are not in ascending order.
    cdef Py_ssize_t index
    cdef int64_t base, previous = INT64_MIN, current_base = INT64_MIN, record_end
    cdef list groups = [], group = None, positions = None, sizes = None, indexes = None
    for index in range(count):
        if taken[index].physical_offset < previous:
            return None
        previous = taken[index].physical_offset
        base = previous - previous % file_size
        if base != current_base:
            current_base = base
            positions, sizes, indexes = [], [], []
            group = [base, positions, sizes, indexes, INT64_MIN]
            groups.append(group)
        record_end = previous - base + taken[index].size
        if record_end > group[4]:
            group[4] = record_end
        positions.append(previous - base)
        sizes.append(taken[index].size)
        indexes.append(taken[index].unit_index)
    return groups


cdef int _fill_filter(PullFilter *pull_filter, object codes, object damaged) except -1:
    # The filter's arrays (PyMem; the caller frees codes and damaged).
    cdef Py_ssize_t index
    pull_filter.all_tags = codes is None
    pull_filter.codes, pull_filter.code_count = NULL, 0
    pull_filter.damaged, pull_filter.damaged_count = NULL, 0
    if codes is not None:
        codes = [code for code in codes if -(1 << 31) <= code < (1 << 31)]
        pull_filter.codes = <int32_t *>PyMem_Malloc(max(len(codes), 1) * sizeof(int32_t))
        if pull_filter.codes == NULL:
            raise MemoryError()
        for index, code in enumerate(codes):
            (<int32_t *>pull_filter.codes)[index] = code
        pull_filter.code_count = len(codes)
    if damaged:
        pull_filter.damaged = <int64_t *>PyMem_Malloc(2 * len(damaged) * sizeof(int64_t))
        if pull_filter.damaged == NULL:
            raise MemoryError()
        for index, (start, end) in enumerate(damaged):
            (<int64_t *>pull_filter.damaged)[2 * index] = start
            (<int64_t *>pull_filter.damaged)[2 * index + 1] = end
        pull_filter.damaged_count = len(damaged)
    return 0


def collect(units, codes, damaged, int64_t max_count, max_bytes, int64_t in_disk_below,
            int64_t memory_bytes, int64_t memory_count, int64_t disk_bytes, int64_t disk_count,
            int64_t file_size):
    """The units a pull takes from ``units`` (a buffer of whole consume-queue units).

    ``codes``: the subscription's tag codes (None: every tag); ``damaged``: sorted, disjoint
    ``(start, end)`` CommitLog ranges never served (or None); ``max_bytes``: the request's
    maxMsgBytes or None; the caps as :class:`PullLimits`. Returns ``(scanned,
    last_physical_offset, groups)``: units scanned, the physical offset of the unit the scan
    stopped at (the last unit when it ran to the end), and the taken units grouped by
    CommitLog file of ``file_size`` bytes as ``[(file base, positions, sizes, unit
    indexes, end of the furthest record in the file)]`` in unit order, or None when the
    taken records do not lie in ascending order (the caller then reads them one by one).
    """
    cdef const unsigned char[::1] data = units
    cdef Py_ssize_t unit_count = data.shape[0] // CQ_UNIT_SIZE
    cdef PullFilter pull_filter
    cdef PullLimits limits
    cdef TakenUnit *taken = NULL
    cdef Py_ssize_t count = 0, scanned, bound
    cdef int64_t last_physical
    if unit_count == 0:
        return 0, 0, []
    limits.max_count = max_count
    limits.has_max_bytes = max_bytes is not None
    limits.max_bytes = max_bytes if max_bytes is not None else 0
    limits.in_disk_below = in_disk_below
    limits.memory_bytes, limits.memory_count = memory_bytes, memory_count
    limits.disk_bytes, limits.disk_count = disk_bytes, disk_count
    pull_filter.codes = pull_filter.damaged = NULL
    try:
        _fill_filter(&pull_filter, codes, damaged)
        bound = taken_bound(unit_count, &limits)
        taken = <TakenUnit *>PyMem_Malloc(bound * sizeof(TakenUnit))
        if taken == NULL:
            raise MemoryError()
        scanned = scan_units(&data[0], unit_count, &pull_filter, &limits, taken, bound, &count)
        last_physical = pb_unpack_int64(&data[0] + CQ_UNIT_SIZE * (
            scanned if scanned < unit_count else unit_count - 1))
        return scanned, last_physical, _groups(taken, count, file_size)
    finally:
        PyMem_Free(<void *>pull_filter.codes)
        PyMem_Free(<void *>pull_filter.damaged)
        PyMem_Free(taken)
