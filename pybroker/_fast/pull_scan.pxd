# C-level contract of pybroker._fast.pull_scan: the units one pull takes, in one pass.
from libc.stdint cimport int32_t, int64_t

# What a pull takes: tag codes (int32, Java's (int) tagsCode; all_tags: every tag) and the
# CommitLog ranges never served (sorted, merged [start, end) pairs; recovery's skipped damage).
cdef struct PullFilter:
    bint all_tags
    const int32_t *codes
    Py_ssize_t code_count
    const int64_t *damaged
    Py_ssize_t damaged_count          # pairs

# Java's isTheBatchFull inputs: the request's maxMsgNums and maxMsgBytes (has_max_bytes), and
# the transfer caps in memory / in disk; a record starting below in_disk_below (CommitLog max
# offset - accessMessageInMemoryMaxRatio of RAM) is in disk.
cdef struct PullLimits:
    int64_t max_count
    bint has_max_bytes
    int64_t max_bytes
    int64_t in_disk_below
    int64_t memory_bytes
    int64_t memory_count
    int64_t disk_bytes
    int64_t disk_count

cdef struct TakenUnit:
    int64_t physical_offset
    int32_t size
    int32_t unit_index

# The most units a pull with these limits can take (the size of the taken array to pass).
cdef Py_ssize_t taken_bound(Py_ssize_t unit_count, const PullLimits *limits) noexcept nogil

# Scan units[0:unit_count] (consume-queue units, 20 bytes each, big-endian) as Java's getMessage
# loop does: a unit ends the batch (full) before it is matched; a matched unit that is not a
# filler and not in a damaged range is taken. Fills taken[0:*taken_count] (at most taken_max)
# and returns how many units were scanned (the next offset is the first one's + this).
cdef Py_ssize_t scan_units(const unsigned char *units, Py_ssize_t unit_count,
                           const PullFilter *pull_filter, const PullLimits *limits,
                           TakenUnit *taken, Py_ssize_t taken_max,
                           Py_ssize_t *taken_count) noexcept nogil
