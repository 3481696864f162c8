# Python face of pybroker._fast.stats (the shared-memory instrument region).
import enum

from typing_extensions import Buffer

MAGIC: int
STATS_LAYOUT_VERSION: int
WINDOW_AREA_OFFSET: int
WINDOW_CURSOR_OFFSET: int
WINDOW_ROWS_OFFSET: int
WINDOW_COLUMNS: int
WINDOW_ROWS: int
COUNTERS_PER_WRITER: int
HIST_WORDS: int
HIST_BUCKETS: int
HIST_COUNT_WORD: int
HIST_SUM_WORD: int
HIST_MAX_WORD: int
HISTOGRAMS_PER_WRITER: int
KEY_WORDS: int
KEY_HEADER_BYTES: int
KEY_BYTES_MAX: int
KEY_ENTRY_BYTES: int
KEYS_PER_WRITER: int
SECTION_COUNTERS_OFFSET: int
SECTION_HISTOGRAMS_OFFSET: int
SECTION_KEY_COUNT_OFFSET: int
SECTION_KEYS_OFFSET: int
SECTION_BYTES: int
STATS_BOOT_MS_OFFSET: int
STATS_MAGIC_OFFSET: int
STATS_VERSION_OFFSET: int
STATS_SIZE_OFFSET: int
STATS_WRITERS_OFFSET: int
STATS_SECTIONS_OFFSET_OFFSET: int
STATS_INSTRUMENTS_OFF_OFFSET: int
STATS_PAGE_BYTES: int
WINDOW_AREA_BYTES: int

def sections_offset() -> int: ...
def region_size(writers: int) -> int: ...
def initialise(buffer: Buffer, writers: int, boot_ms: int, enabled: bool = True) -> None: ...
def instruments_enabled(buffer: Buffer) -> bool: ...
def check_header(buffer: Buffer) -> int: ...
def snapshot(buffer: Buffer, out: Buffer) -> None: ...
def window_append(buffer: Buffer, values: list[int]) -> None: ...

class StatsCounter(enum.IntEnum):
    PUT_MESSAGES = 0
    PUT_BYTES = 1
    PUT_FAILED = 2
    PUT_REQUESTS = 3
    GROUP_COMMITS = 4
    PAGE_CACHE_LOCK_BEGIN_MS = 5
    SCRUB_VERIFIED_BYTES = 6
    SCRUB_POSITION = 7
    GET_FOUND = 8
    GET_MISS = 9
    GET_TRANSFERRED_MESSAGES = 10
    GET_TRANSFERRED_BYTES = 11
    BROKER_PUT_NUMS = 12
    BROKER_GET_NUMS = 13
    SCRUB_PASSES = 14
    SCRUB_FINDINGS = 15
    SEND_STARTED = 16
    SEND_FINISHED = 17
    PULL_STARTED = 18
    PULL_FINISHED = 19
    QUERY_STARTED = 20
    QUERY_FINISHED = 21
    TRANSACTION_STARTED = 22
    TRANSACTION_FINISHED = 23
    PULL_HELD = 24
    PUT_ENTIRE_TIME_MAX_MS = 25
    REQUESTS_TOTAL = 26
    GET_ENTIRE_TIME_MAX_MS = 27
    DISPATCHED_MESSAGES = 28
    DISPATCH_BATCHES = 29
    FLUSHES = 30
    FLUSHED_BYTES = 31
    PUT_DISTRIBUTE_0 = 32
    KEYS_DROPPED = 45
    SEND_BACK_MESSAGES = 46
    DAMAGED_RECORDS_READ = 47
    SEND_OLDEST_MS = 48
    PULL_OLDEST_MS = 49
    QUERY_OLDEST_MS = 50
    TRANSACTION_OLDEST_MS = 51
    PROCESS_ID = 52
    PULL_PAGES = 53
    PULL_PAGES_COLD = 54
    PULLS_COLD = 55
    PULLS_IN_DISK = 56
    MAPPED_FILES_CREATED = 57
    PREFAULTED_BYTES = 58
    PREFAULT_POSITION = 59
    LOCKED_BYTES = 60
    COMMITS = 61
    COMMITTED_BYTES = 62
    ALLOCATE_FAULTS = 63
    BROKER_CK_NUMS = 64
    BROKER_ACK_NUMS = 65
    ACK_STARTED = 66
    ACK_FINISHED = 67
    ACK_OLDEST_MS = 68
    TIMER_ENQUEUED = 69
    TIMER_DEQUEUED = 70
    TIMER_ROLLED = 71
    TIMER_CANCELLED = 72
    TIMER_DUPLICATES_DROPPED = 73
    TIMER_UNREADABLE = 74
    TIMER_PUT_DROPPED = 75
    TIMER_DUE_AT_ENQUEUE = 76


class StatsHistogram(enum.IntEnum):
    PUT_LATENCY_US = 0
    GROUP_COMMIT_MESSAGES = 1
    GROUP_COMMIT_BYTES = 2
    FLUSH_LATENCY_US = 3
    FLUSH_BYTES = 4
    DISPATCH_LAG_BYTES = 5
    RPC_LATENCY_US = 6
    MESSAGE_SIZE_BYTES = 7
    SYNC_FLUSH_WAIT_US = 8
    DISPATCH_BATCH_MESSAGES = 9
    FILE_CREATE_US = 10
    FILE_CREATE_FAULTS = 11
    APPEND_DRAIN_US = 12
    PULL_READ_US = 13
    COMMIT_US = 14
    ALLOCATE_US = 15
    TIMER_LATENESS_MS = 16
    TIMER_SLOT_MESSAGES = 17


class StatsKeyKind(enum.IntEnum):
    KEY_TOPIC_PUT = 1
    KEY_GROUP_GET = 2
    KEY_SEND_BACK = 3
    KEY_GROUP_GET_LATENCY = 4
    KEY_PULL_OFFSET = 5
    KEY_GROUP_CK = 6
    KEY_GROUP_ACK = 7
    KEY_TIMER_ENQUEUE = 8
    KEY_TIMER_DEQUEUE = 9
    KEY_RPC = 10
    KEY_MESSAGE_SIZE = 11
    KEY_SEND_TO_DLQ = 12
    KEY_TRANSACTION = 13
    KEY_FINISH_LATENCY = 14
    KEY_DELAY_LATENCY = 15


class KeyWord(enum.IntEnum):
    KEY_MESSAGES = 0
    KEY_BYTES = 1
    KEY_REQUESTS = 2
    KEY_COLD_REQUESTS = 3


class StatsWriter:
    writer: int
    enabled: bool
    def __init__(self, buffer: Buffer, writer: int) -> None: ...
    def close(self) -> None: ...
    def add(self, counter: int, delta: int = 1) -> None: ...
    def set(self, counter: int, value: int) -> None: ...
    def raise_to(self, counter: int, value: int) -> None: ...
    def get(self, counter: int) -> int: ...
    def record(self, histogram: int, value: int, times: int = 1) -> None: ...
    def key(self, kind: int, label: int, key: str) -> int: ...
    def key_add(self, entry: int, messages: int, size_bytes: int = 0,
                requests: int = 1) -> None: ...
    def key_add_word(self, entry: int, word: int, delta: int) -> None: ...
    def key_set_words(self, entry: int, first: int, second: int) -> None: ...
