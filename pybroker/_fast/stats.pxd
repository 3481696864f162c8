# Contract of pybroker._fast.stats: the shared-memory instrument region (pybroker/stats/).
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "stats.h" nogil:
    void pb_stats_add(uint64_t *word, uint64_t delta)
    void pb_stats_set(uint64_t *word, uint64_t value)
    void pb_stats_raise(uint64_t *word, uint64_t value)
    uint64_t pb_stats_load(const uint64_t *word)
    unsigned pb_stats_bucket(uint64_t value)
    void pb_stats_record(uint64_t *histogram, uint64_t value)
    void pb_stats_record_n(uint64_t *histogram, uint64_t value, uint64_t times)

# Region layout (all words native-endian u64; one writer per word):
#   @0       header page (immutable after creation): magic "PBSTATS1", layout version, size,
#            writer count, boot timestamp (ms), sections offset, instruments-off flag (1 when
#            statsInstrumentsEnable=false: every writer's recording is a no-op)
#   @4096    window area, written by the sampler (the supervisor) only: cursor line, then
#            WINDOW_ROWS rows of (timestamp ms, WINDOW_COLUMNS-1 values), one row per sample
#   @SECTIONS_OFFSET + w * SECTION_BYTES   writer w's section:
#            counters   COUNTERS_PER_WRITER words           (StatsCounter indices)
#            histograms HISTOGRAMS_PER_WRITER x HIST_WORDS   (StatsHistogram indices;
#                       64 log2 buckets, then count, sum, max)
#            keys line  published key count (release store after the entry is complete)
#            key entries KEYS_PER_WRITER x KEY_ENTRY_BYTES:
#                 +0 key length in bytes + 1 (0 = unused)  +8 kind u32 | label u32
#                 +16 words[KEY_WORDS] (KeyWord indices)   +48 key bytes (UTF-8)
cpdef enum:
    STATS_MAGIC_OFFSET = 0
    STATS_VERSION_OFFSET = 8
    STATS_SIZE_OFFSET = 16
    STATS_WRITERS_OFFSET = 24
    STATS_BOOT_MS_OFFSET = 32
    STATS_SECTIONS_OFFSET_OFFSET = 40
    STATS_INSTRUMENTS_OFF_OFFSET = 48
    STATS_LAYOUT_VERSION = 3
    STATS_PAGE_BYTES = 4096
    WINDOW_AREA_OFFSET = 4096
    WINDOW_CURSOR_OFFSET = 4096           # rows ever written (monotonic)
    WINDOW_ROWS_OFFSET = 4096 + 64
    WINDOW_COLUMNS = 16                   # column 0: timestamp ms
    WINDOW_ROWS = 1024                    # > 601 one-second samples (Java's 600 s window)
    WINDOW_AREA_BYTES = 64 + WINDOW_COLUMNS * 8 * WINDOW_ROWS
    COUNTERS_PER_WRITER = 96
    HIST_WORDS = 72
    HIST_BUCKETS = 64
    HIST_COUNT_WORD = 64
    HIST_SUM_WORD = 65
    HIST_MAX_WORD = 66
    HISTOGRAMS_PER_WRITER = 18
    KEY_WORDS = 4
    KEY_HEADER_BYTES = 48
    KEY_BYTES_MAX = 400                   # topic (127) + "@" + group (255) fits
    KEY_ENTRY_BYTES = 448
    KEYS_PER_WRITER = 1024
    SECTION_COUNTERS_OFFSET = 0
    SECTION_HISTOGRAMS_OFFSET = COUNTERS_PER_WRITER * 8
    SECTION_KEY_COUNT_OFFSET = SECTION_HISTOGRAMS_OFFSET + HISTOGRAMS_PER_WRITER * HIST_WORDS * 8
    SECTION_KEYS_OFFSET = SECTION_KEY_COUNT_OFFSET + 64
    SECTION_BYTES = SECTION_KEYS_OFFSET + KEYS_PER_WRITER * KEY_ENTRY_BYTES


# Scalar counters of a writer section (the same index space in every section, so a reader sums
# a counter over all writers). "gauge" words are set, not added.
cpdef enum StatsCounter:
    PUT_MESSAGES = 0              # appender: records appended (Java putMessageTimesTotal)
    PUT_BYTES = 1                 # appender: bytes appended (putMessageSizeTotal)
    PUT_FAILED = 2                # appender: put requests that failed (putMessageFailedTimes)
    PUT_REQUESTS = 3              # appender: put requests taken from the rings
    GROUP_COMMITS = 4             # appender: drains that appended something
    PAGE_CACHE_LOCK_BEGIN_MS = 5  # appender gauge: start of the running drain, 0 between drains
    SCRUB_VERIFIED_BYTES = 6      # supervisor (scrubber thread): CommitLog bytes verified
    SCRUB_POSITION = 7            # supervisor gauge: CommitLog offset the running pass reached
    GET_FOUND = 8                 # remoting: store reads that found messages
    GET_MISS = 9                  # remoting: store reads that found none
    GET_TRANSFERRED_MESSAGES = 10 # remoting: messages handed to consumers
    GET_TRANSFERRED_BYTES = 11    # remoting: bytes of those messages
    BROKER_PUT_NUMS = 12          # remoting: messages stored by SEND requests
    BROKER_GET_NUMS = 13          # remoting: messages pulled (Java BROKER_GET_NUMS)
    SCRUB_PASSES = 14             # supervisor: scrubber passes completed over the whole store
    SCRUB_FINDINGS = 15           # supervisor gauge: damage the scrubber knows of now
    SEND_STARTED = 16             # remoting: requests per family started / answered
    SEND_FINISHED = 17
    PULL_STARTED = 18
    PULL_FINISHED = 19
    QUERY_STARTED = 20
    QUERY_FINISHED = 21
    TRANSACTION_STARTED = 22
    TRANSACTION_FINISHED = 23
    PULL_HELD = 24                # remoting gauge: pulls held by long polling
    PUT_ENTIRE_TIME_MAX_MS = 25   # remoting: longest put (ms), raised only
    REQUESTS_TOTAL = 26           # remoting: every request received
    GET_ENTIRE_TIME_MAX_MS = 27   # remoting: longest store read (ms), raised only
    DISPATCHED_MESSAGES = 28      # dispatcher
    DISPATCH_BATCHES = 29
    FLUSHES = 30                  # flusher: flushes that advanced the flushed position
    FLUSHED_BYTES = 31
    PUT_DISTRIBUTE_0 = 32         # remoting: Java's 13 put-latency buckets (ms), 32..44
    KEYS_DROPPED = 45             # any writer: keyed updates lost because its table is full
    SEND_BACK_MESSAGES = 46       # remoting: CONSUMER_SEND_MSG_BACK re-puts
    DAMAGED_RECORDS_READ = 47     # remoting: reads that met a damaged record (not served)
    SEND_OLDEST_MS = 48           # remoting gauges: start (epoch ms) of the oldest request
    PULL_OLDEST_MS = 49           # of the family not answered yet, 0 when none (Java's
    QUERY_OLDEST_MS = 50          # thread-pool queue head wait)
    TRANSACTION_OLDEST_MS = 51
    PROCESS_ID = 52               # any writer gauge: the pid of the process writing the section
    PULL_PAGES = 53               # remoting: CommitLog pages under the records pulls returned
    PULL_PAGES_COLD = 54          # remoting: of those, pages not in the page cache when read
    PULLS_COLD = 55               # remoting: pulls that read at least one non-resident page
    PULLS_IN_DISK = 56            # remoting: pulls Java's accessMessageInMemoryMaxRatio rule
                                  # calls cold (suggest pulling from a slave)
    MAPPED_FILES_CREATED = 57     # appender (on the append path) / flusher (its allocator,
                                  # ahead): CommitLog files created
    PREFAULTED_BYTES = 58         # flusher: bytes populated ahead of the writer
    PREFAULT_POSITION = 59        # flusher gauge: CommitLog offset populated up to
    LOCKED_BYTES = 60             # flusher gauge: CommitLog bytes mlocked now
    COMMITS = 61                  # appender: transient-pool commits (writes to the file)
    COMMITTED_BYTES = 62          # appender: bytes committed from the pool to the file
    ALLOCATE_FAULTS = 63          # flusher: page faults its allocator took preparing files
    BROKER_CK_NUMS = 64           # remoting: POP check-points stored (Java BROKER_CK_NUMS)
    BROKER_ACK_NUMS = 65          # remoting: POP acks (Java BROKER_ACK_NUMS)
    ACK_STARTED = 66              # remoting: ACK / BATCH_ACK / CHANGE_INVISIBLETIME requests
    ACK_FINISHED = 67             # started / answered (Java's ack thread pool)
    ACK_OLDEST_MS = 68            # remoting gauge: the ack family's oldest unanswered request
    TIMER_ENQUEUED = 69           # timer: units appended to the timer log (marks, rolls too)
    TIMER_DEQUEUED = 70           # timer: re-puts stored (delivered, rolled, due at enqueue)
    TIMER_ROLLED = 71             # timer: re-puts back onto the wheel topic (rolls)
    TIMER_CANCELLED = 72          # timer: messages a cancel mark dropped
    TIMER_DUPLICATES_DROPPED = 73  # timer: second units of one message in one slot
    TIMER_UNREADABLE = 74         # timer: units or records that could not be read (skipped)
    TIMER_PUT_DROPPED = 75        # timer: due messages given up (Java's PUT_NO_RETRY, tries)
    TIMER_DUE_AT_ENQUEUE = 76     # timer: delivered at enqueue, their slot already passed


cpdef enum StatsHistogram:
    PUT_LATENCY_US = 0            # remoting: put request to its completion (client's wait)
    GROUP_COMMIT_MESSAGES = 1     # appender: records per drain
    GROUP_COMMIT_BYTES = 2        # appender: bytes per drain
    FLUSH_LATENCY_US = 3          # flusher: one CommitLog flush (msync) call
    FLUSH_BYTES = 4               # flusher: bytes made durable per flush
    DISPATCH_LAG_BYTES = 5        # dispatcher: written - dispatched when a batch starts
    RPC_LATENCY_US = 6            # remoting: request received to response queued
    MESSAGE_SIZE_BYTES = 7        # remoting: stored message size (body + properties + topic)
    SYNC_FLUSH_WAIT_US = 8        # remoting: SYNC_FLUSH acknowledgement held for the flush
    DISPATCH_BATCH_MESSAGES = 9   # dispatcher: records per batch
    FILE_CREATE_US = 10           # appender: create or map (+ warm) a CommitLog file on the
                                  # append path
    FILE_CREATE_FAULTS = 11       # the same: page faults the appender took meanwhile
    APPEND_DRAIN_US = 12          # appender: one drain's appends (Java's time in the put lock)
    PULL_READ_US = 13             # remoting: one pull's store read and copy of the records
    COMMIT_US = 14                # appender: one transient-pool commit (write to the file)
    ALLOCATE_US = 15              # flusher: one file prepared ahead of the writer (create,
                                  # warm, mlock), off the append path
    TIMER_LATENESS_MS = 16        # timer: per delivered message, stored after its slot's end
    TIMER_SLOT_MESSAGES = 17      # timer: messages per delivered slot


cpdef enum StatsKeyKind:
    KEY_TOPIC_PUT = 1             # key topic; words: messages, bytes, requests
    KEY_GROUP_GET = 2             # key topic@group; words: messages, bytes, requests,
                                  # cold requests
    KEY_SEND_BACK = 3             # key topic@group; words: messages, requests
    KEY_GROUP_GET_LATENCY = 4     # key topic@group; words: ms sum, requests
    KEY_PULL_OFFSET = 5           # key topic@group, label queue id; words: next offset of the
                                  # writer's last pull of that queue (Java's pullOffsetTable),
                                  # CLOCK_MONOTONIC ns of that pull (the newest writer wins)
    KEY_GROUP_CK = 6              # key topic@group (the topic the POP named); words:
                                  # check-point records stored, -, requests
    KEY_GROUP_ACK = 7             # key topic@group; words: acks (Java's count, before the
                                  # put), ack records stored, requests
    KEY_TIMER_ENQUEUE = 8         # timer: key real topic; words: messages enqueued
    KEY_TIMER_DEQUEUE = 9         # timer: key real topic; words: messages delivered
    # Keyed histograms of the metrics endpoint (stats/metric_names.py: buckets, key formats):
    # label = bucket index over Java's explicit bounds; words: count, sum.
    KEY_RPC = 10                  # key request|response|long polling|result (Java's lowercase
                                  # code names); sum in µs
    KEY_MESSAGE_SIZE = 11         # key topic, label message type * 16 + bucket; sum in bytes
    KEY_SEND_TO_DLQ = 12          # key topic@group (the original topic); words: messages
    KEY_TRANSACTION = 13          # key real topic, label TransactionEvent; words: messages
    KEY_FINISH_LATENCY = 14       # key real topic (committed), label bucket; sum in seconds
    KEY_DELAY_LATENCY = 15        # timer: key real topic, label bucket; sum in seconds (a
                                  # message's delivery time - its birth, as it is enqueued)


cpdef enum KeyWord:
    KEY_MESSAGES = 0
    KEY_BYTES = 1
    KEY_REQUESTS = 2
    KEY_COLD_REQUESTS = 3         # GROUP_GET: pulls that read a page not in the page cache


cdef class StatsWriter:
    """One writer's section. Hot loops keep the pointers and call the pb_stats_* inlines."""
    cdef Py_buffer _view
    cdef bint _held
    cdef readonly int writer
    cdef readonly bint enabled         # False: the region is off; every method is a no-op
    cdef uint64_t *counters
    cdef uint64_t *histograms
    cdef uint64_t *key_count
    cdef unsigned char *keys
    cdef dict _key_index

    cdef int _check(self, int index, int limit) except -1
    cdef int _dropped(self, int entry) except -1

    cdef inline uint64_t *histogram(self, int index) noexcept nogil:
        return self.histograms + index * HIST_WORDS

    cdef inline uint64_t *key_words(self, int entry) noexcept nogil:
        return <uint64_t *>(self.keys + entry * KEY_ENTRY_BYTES + 16)
