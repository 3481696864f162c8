# The control block: a fixed-layout mapped file of the positions writers publish (design.md §2 rule
# 2).
"""Published positions, one writer per field; readers never block writers.

The file is a run-time exchange area, not a RocketMQ format: words are native-endian unsigned
64-bit, read with acquire loads and written with release stores (``pybroker._fast.ring``).
Every field has its own 64-byte cache line, so writers in different processes never share a
line; a line also holds the field's *waiters* mask, the sleep flags of workers blocked until the
field moves (bit i = worker slot i; see ``pybroker.proc.wake.PositionWatch``)::

    offset        size  content                                       writer
    0             8     magic "PBCTRLB1"                               creator
    8             8     layout version (LAYOUT_VERSION)                creator
    16            8     file size in bytes                             creator
    64 * (1 + i)  8     field i value (FIELDS order below)             FIELD_OWNERS[i]
    64 * (1 + i)+8 8    field i waiters mask                           waiters set, publisher takes
    WORKERS_OFFSET + 64 * w        8  appends  (records appended)     worker in slot w
    WORKERS_OFFSET + 64 * w + 8    8  batches  (drains / group commits)
    WORKERS_OFFSET + 64 * w + 16   8  wakeups  (times woken from sleep)
    WORKERS_OFFSET + 64 * w + 24   8  heartbeats (main-loop turns; the watchdog reads them)
    WORKERS_OFFSET + 64 * w + 32   8  busy_since_ms (appender: start of the running drain,
                                      epoch ms, 0 between drains: Java's page-cache lock time)
    WORKERS_OFFSET + 64 * w + 40   8  cancel_request_id (producer of ring w: requests up to
                                      this id not yet taken must be skipped, fast failure)
    HA_SLAVES_OFFSET + 64 * s      8  ack offset of HA connection s    ha (master)
    HA_SLAVES_OFFSET + 64 * s + 8  8  peer: IPv4 << 16 | port, 0 = free slot
    HA_SLAVES_OFFSET + 64 * s + 16 8  connected since (ms)
    HA_SLAVES_OFFSET + 64 * s + 24 8  controller mode: the slave's broker id (0 classic)
    HA_SLAVES_OFFSET + 64 * s + 32 8  controller mode: last time it caught up (ms)
    HA_SLAVES_OFFSET + 64 * s + 40 8  controller mode: flags (HA_SLAVE_ASYNC_LEARNER)
    HA_SLAVES_OFFSET + 64 * s + 48 8  controller mode: written end when it became required + 1
                                      (0: not required; broker/sync_state.py)
    TAKEN_OFFSET + 8 * w           8  taken_request_id of ring w     appender
    SYNC_STATE_OFFSET              8  sequence (odd while written)   supervisor
    SYNC_STATE_OFFSET + 8          8  n: SyncStateSet members besides the master
    SYNC_STATE_OFFSET + 16         8  Java's inSyncReplicasNums (minInSyncReplicas checks it)
    SYNC_STATE_OFFSET + 24 + 8 * i 8  broker id of member i (i < n <= HA_SLAVE_SLOTS_MAX)
    TIMER_OFFSET + 8 * i           8  TIMER_WORDS[i]                 timer worker
    TIMER_MASTER_OFFSET + 8 * i    8  TIMER_MASTER_WORDS[i]          supervisor (a slave's)
    TIMER_AHEAD_OFFSET             8  re-put bytes coming soon       timer worker

with ``WORKERS_OFFSET = 64 * (1 + len(FIELDS))`` = 1216, ``WORKER_SLOTS_MAX`` = 32 lines,
``HA_SLAVE_SLOTS_MAX`` = 8 lines, ``TAKEN_OFFSET`` = 3776 (4 lines, all written by the
appender), ``SYNC_STATE_OFFSET`` = 4032 (2 lines) and the three timer lines at 4160, 4224 and
4288, in a file of two 4096-byte pages. The SyncStateSet lines (controller mode,
docs/architecture/controller.md) are the members a master's acknowledgements wait for,
published by the supervisor (a sequence lock: readers retry while the sequence is odd or moved)
and read by the master's ha worker. The timer line (pybroker/proc/timer.py) publishes where the
5.x timer stands: its read time (ms: every slot before it is delivered), write time (ms),
enqueue offset in rmq_sys_wheel_timer, enqueue and dequeue TPS (x1000), the wall and store
times (ms) of its last enqueued message and the slots it delivered. A slave's supervisor writes
its master's timer checkpoint into the master line (the same sequence lock) for the slave's
timer worker to follow. The timer's ahead line holds about the bytes it will re-put when the
messages of the slots it plans ahead (beginning within 3 s, broker/timer_ahead.py) and of its
running slot fall due: CommitLog bytes the appender will write at once, which the flusher
faults in ahead of it (store/prefault.py). The fast-failure
handshake (pybroker/proc/fast_failure.py): the producer stores ``cancel_request_id``, fences,
loads ``taken_request_id``; the appender stores ``taken_request_id`` (the last id of the batch
it took), fences, loads ``cancel_request_id``. One of the two sees the other's store, so a
request is either skipped by the appender or appended, never answered busy and appended.
Positions are CommitLog physical offsets
(bytes); timestamps are epoch milliseconds; ``broker_state`` holds a :class:`BrokerState`.
``commitlog_min_offset`` (bytes) and ``disk_full`` (0/1: puts answer SERVICE_NOT_AVAILABLE) come
from the dispatcher's expired-file cleanup; the ``topic_deletion_*`` sequence numbers and
offset are the topic-deletion handshake (pybroker/proc/topic_deletion.py).
``replicated_position`` is the highest offset any slave acknowledged (monotonic, Java's
push2SlaveMaxOffset) and ``ha_slaves_connected`` the slaves connected now (count); both, and
the per-slave lines, are written by the master's ha worker (pybroker/proc/ha_master.py). In
controller mode the master's ha worker (pybroker/proc/autoswitch_master.py) gives the two the
meaning the acknowledgement rule needs: ``ha_slaves_connected`` is the number of slaves whose
acknowledgement a send waits for (0: SEND_OK without one), ``replicated_position`` the offset
all of them have. ``confirm_position`` is Java's confirm offset, the end of what the dispatcher
serves (docs/architecture/controller.md): :data:`CONFIRM_UNBOUNDED` (the written end) in a new
block and under ASYNC_FLUSH outside controller mode; in controller mode the supervisor starts it
at the recovered end and the ha worker owns it - a master publishes what every SyncStateSet
member a send waits for has (unbounded while it waits for none or without
``allAckInSyncStateSet``), a slave the master's confirm offset from its transfer headers,
bounded by its own end. Under SYNC_FLUSH outside controller mode the flusher owns it and
publishes the flushed position (Java's getConfirmOffset is then flushedWhere).
:meth:`ControlBlock.confirm_offset` is the figure, bounded by the written end.

Which process owns which worker slot (and which section of the statistics region) is the one
table of :class:`Worker` below.
"""
import enum
import functools
import ipaddress
import mmap
import os
from collections.abc import Callable
from typing import NamedTuple

from pybroker._fast import ring
from pybroker.store import disk_space

CACHE_LINE_BYTES = 64
MAGIC = int.from_bytes(b"PBCTRLB1", "little")
LAYOUT_VERSION = 6
MAGIC_OFFSET = 0
VERSION_OFFSET = 8
SIZE_OFFSET = 16
WAITERS_FIELD_OFFSET = 8

# (field name, writer): the order fixes the offsets, so append only.
FIELD_OWNERS = (
    ("written_position", "appender"),
    ("written_store_timestamp", "appender"),
    ("flushed_position", "flusher"),
    ("dispatched_position", "dispatcher"),
    ("replicated_position", "ha"),
    ("logics_flushed_timestamp", "dispatcher"),
    ("index_flushed_timestamp", "dispatcher"),
    ("physic_flushed_timestamp", "flusher"),
    ("generation", "supervisor"),
    ("broker_state", "supervisor"),
    ("commitlog_min_offset", "dispatcher"),
    ("disk_full", "dispatcher"),
    ("topic_deletion_requested", "supervisor"),
    ("topic_deletion_appended", "appender"),
    ("topic_deletion_offset", "appender"),
    ("topic_deletion_done", "dispatcher"),
    ("ha_slaves_connected", "ha"),
    ("confirm_position", "ha"),          # the flusher's under SYNC_FLUSH (see above)
)
# confirm_position's "no bound" (the dispatcher serves up to the written end): a new block's.
CONFIRM_UNBOUNDED = (1 << 63) - 1
FIELDS = tuple(name for name, _ in FIELD_OWNERS)
FIELD_OFFSETS = {name: CACHE_LINE_BYTES * (1 + index) for index, name in enumerate(FIELDS)}

WORKER_COUNTERS = ("appends", "batches", "wakeups", "heartbeats", "busy_since_ms",
                   "cancel_request_id")
WORKER_COUNTER_OFFSETS = {name: 8 * index for index, name in enumerate(WORKER_COUNTERS)}
WORKER_SLOTS_MAX = 32
WORKERS_OFFSET = CACHE_LINE_BYTES * (1 + len(FIELDS))
HA_SLAVE_WORDS = ("ack_offset", "peer", "connected_ms", "broker_id", "caught_up_ms", "flags",
                  "required_from")
HA_SLAVE_WORD_OFFSETS = {name: 8 * index for index, name in enumerate(HA_SLAVE_WORDS)}
HA_SLAVE_SLOTS_MAX = 8
HA_SLAVE_ASYNC_LEARNER = 1          # flags: the slave never joins the SyncStateSet
HA_SLAVES_OFFSET = WORKERS_OFFSET + CACHE_LINE_BYTES * WORKER_SLOTS_MAX
TAKEN_OFFSET = HA_SLAVES_OFFSET + CACHE_LINE_BYTES * HA_SLAVE_SLOTS_MAX
SYNC_STATE_OFFSET = TAKEN_OFFSET + 8 * WORKER_SLOTS_MAX
SYNC_STATE_MEMBERS_MAX = HA_SLAVE_SLOTS_MAX
SYNC_STATE_END_OFFSET = SYNC_STATE_OFFSET + 8 * (3 + SYNC_STATE_MEMBERS_MAX)
TIMER_WORDS = ("read_time_ms", "write_time_ms", "queue_offset", "enqueue_tps_milli",
               "dequeue_tps_milli", "last_enqueue_ms", "last_enqueue_store_ms", "slots_done")
TIMER_MASTER_WORDS = ("seq", "read_time_ms", "queue_offset", "state_version",
                      "version_timestamp", "version_counter")
# The first cache line after the SyncStateSet's.
TIMER_OFFSET = -(-SYNC_STATE_END_OFFSET // CACHE_LINE_BYTES) * CACHE_LINE_BYTES
TIMER_AHEAD_WORDS = ("coming_bytes",)
TIMER_MASTER_OFFSET = TIMER_OFFSET + CACHE_LINE_BYTES
TIMER_AHEAD_OFFSET = TIMER_MASTER_OFFSET + CACHE_LINE_BYTES
BLOCK_END_OFFSET = TIMER_AHEAD_OFFSET + CACHE_LINE_BYTES
FILE_SIZE_BYTES = 8192

assert FIELD_OFFSETS["written_position"] == 64
assert FIELD_OFFSETS["broker_state"] == 640
assert FIELD_OFFSETS["topic_deletion_done"] == 1024
assert FIELD_OFFSETS["confirm_position"] == 1152
assert WORKERS_OFFSET == 1216
assert HA_SLAVES_OFFSET == 3264
assert TAKEN_OFFSET == 3776
assert SYNC_STATE_OFFSET == 4032
assert SYNC_STATE_END_OFFSET == 4120 <= TIMER_OFFSET
assert len(HA_SLAVE_WORDS) * 8 <= CACHE_LINE_BYTES
assert (TIMER_OFFSET, TIMER_MASTER_OFFSET, TIMER_AHEAD_OFFSET) == (4160, 4224, 4288)
assert BLOCK_END_OFFSET == 4352 <= FILE_SIZE_BYTES
assert 8 * max(len(TIMER_WORDS), len(TIMER_MASTER_WORDS), len(TIMER_AHEAD_WORDS)) \
    <= CACHE_LINE_BYTES
assert len(WORKER_COUNTERS) * 8 <= CACHE_LINE_BYTES
assert WAITERS_FIELD_OFFSET + 8 <= CACHE_LINE_BYTES
# A waiters mask is one 64-bit word: one bit per worker slot.
assert WORKER_SLOTS_MAX <= 64


class Worker(NamedTuple):
    """A process of a running broker: the worker slot it owns in this block (its counters
    line, its bit in every waiters mask, its send ring's cancel and taken words) and its section
    of the statistics region (pybroker/stats/region.py, layout ``_fast/stats.pxd``)."""

    name: str
    slot: int
    stats_section: int


# The one table of worker slots. Remoting workers and the supervisor (whose send ring follows
# the workers' rings) take the low slots, the data-plane workers the top ones, so neither moves
# with the number of remoting workers; the statistics region is compact, data plane first:
#
#   process        slot                         statistics section
#   appender       WORKER_SLOTS_MAX - 1 = 31    0
#   dispatcher     WORKER_SLOTS_MAX - 2 = 30    1
#   flusher        WORKER_SLOTS_MAX - 3 = 29    2
#   ha             WORKER_SLOTS_MAX - 4 = 28    3
#   supervisor     client workers (N)           4
#   timer          N + 1                        5   (with timerWheelEnable; its own send ring)
#   remoting-<i>   i  (0 <= i < N)              6 + i
#
# (N client workers: the remoting workers, then the gRPC workers, see grpc_worker.)
APPENDER = Worker("appender", WORKER_SLOTS_MAX - 1, 0)
DISPATCHER = Worker("dispatcher", WORKER_SLOTS_MAX - 2, 1)
FLUSHER = Worker("flusher", WORKER_SLOTS_MAX - 3, 2)
HA = Worker("ha", WORKER_SLOTS_MAX - 4, 3)
DATA_PLANE_WORKERS = (APPENDER, DISPATCHER, FLUSHER, HA)
_SUPERVISOR_STATS_SECTION = 4
_TIMER_STATS_SECTION = 5
_REMOTING_STATS_SECTION_BASE = 6
# Remoting workers, the supervisor and the timer fit below the data-plane workers' slots.
REMOTING_WORKERS_MAX = HA.slot - 2
assert [worker.stats_section for worker in DATA_PLANE_WORKERS] == list(range(4))
assert min(worker.slot for worker in DATA_PLANE_WORKERS) == REMOTING_WORKERS_MAX + 2


def remoting_worker(index: int) -> Worker:
    """Remoting worker ``index`` (0-based)."""
    if not 0 <= index < REMOTING_WORKERS_MAX:
        raise ValueError(f"remoting worker index must be in [0, {REMOTING_WORKERS_MAX}), "
                         f"got {index}")
    return Worker(f"remoting-{index}", index, _REMOTING_STATS_SECTION_BASE + index)


def grpc_worker(index: int, remoting_workers: int) -> Worker:
    """gRPC worker ``index`` (0-based) of a broker with ``remoting_workers`` remoting workers:
    the gRPC workers own the slots (and sections) right after the remoting workers', so a
    client-facing worker's slot and section are one sequence and the supervisor follows them
    all (call :func:`supervisor_worker` with remoting + gRPC workers). The profiler names its
    section by slot (``remoting-<slot>``)."""
    slot = remoting_workers + index
    if not 0 <= index or not slot < REMOTING_WORKERS_MAX:
        raise ValueError(f"gRPC worker {index} after {remoting_workers} remoting workers does "
                         f"not fit below slot {REMOTING_WORKERS_MAX}")
    return Worker(f"grpc-{index}", slot, _REMOTING_STATS_SECTION_BASE + slot)


def supervisor_worker(remoting_workers: int) -> Worker:
    """The supervisor of a broker with ``remoting_workers`` remoting workers."""
    return Worker("supervisor", remoting_workers, _SUPERVISOR_STATS_SECTION)


def timer_worker(client_workers: int) -> Worker:
    """The 5.x timer worker of a broker with ``client_workers`` remoting + gRPC workers (its
    send ring follows the supervisor's)."""
    return Worker("timer", client_workers + 1, _TIMER_STATS_SECTION)


def stats_section_count(remoting_workers: int) -> int:
    """Sections of the statistics region of a broker with ``remoting_workers`` workers."""
    return _REMOTING_STATS_SECTION_BASE + remoting_workers


def stats_section_name(section: int) -> str:
    """The process that writes statistics section ``section``: ``appender``, ...,
    ``supervisor``, ``timer``, ``remoting-<i>``."""
    if section == _TIMER_STATS_SECTION:
        return "timer"
    worker = worker_of_stats_section(section)
    return "supervisor" if worker is None else worker.name


def worker_of_stats_section(section: int) -> Worker | None:
    """The data-plane or remoting worker that writes statistics section ``section``; None for
    the supervisor's and the timer's, whose slots the section alone does not tell."""
    for worker in DATA_PLANE_WORKERS:
        if worker.stats_section == section:
            return worker
    if section in (_SUPERVISOR_STATS_SECTION, _TIMER_STATS_SECTION):
        return None
    return remoting_worker(section - _REMOTING_STATS_SECTION_BASE)


class BrokerState(enum.IntEnum):
    """Values of ``broker_state`` (a zeroed block reads as STARTING)."""

    STARTING = 0
    RUNNING = 1
    STOPPING = 2
    FAILED = 3


class _Word:
    """Descriptor: an unsigned 64-bit word at ``owner._base + offset`` of the owner's map.

    Get is an acquire load, set a release store (only the field's writer sets it)."""

    def __init__(self, offset: int, doc: str):
        self.offset = offset
        self.__doc__ = doc

    def __get__(self, block, owner=None):
        if block is None:
            return self
        return ring.load_u64(block._words(), block._base + self.offset)

    def __set__(self, block, value: int) -> None:
        ring.store_u64(block._words(), block._base + self.offset, value)


class WorkerCounters:
    """The counters of one worker slot (single writer: that worker; the profiler reads)."""

    def __init__(self, block: "ControlBlock", slot: int):
        self._block = block
        self._base = WORKERS_OFFSET + CACHE_LINE_BYTES * slot
        # The block's own accessor (raises once it is closed), bound here: the appender
        # touches these words several times per drain, one Python call each, not two.
        self._words = block._words

    appends = _Word(WORKER_COUNTER_OFFSETS["appends"], "records appended by this worker (count)")
    batches = _Word(WORKER_COUNTER_OFFSETS["batches"], "drains / group commits done (count)")
    wakeups = _Word(WORKER_COUNTER_OFFSETS["wakeups"], "times this worker woke from a sleep")
    heartbeats = _Word(WORKER_COUNTER_OFFSETS["heartbeats"],
                       "main-loop turns of this worker (count; the supervisor's watchdog)")
    busy_since_ms = _Word(WORKER_COUNTER_OFFSETS["busy_since_ms"],
                          "appender: epoch ms the running drain began, 0 between drains")
    cancel_request_id = _Word(WORKER_COUNTER_OFFSETS["cancel_request_id"],
                              "producer of this slot's ring: skip untaken requests up to it")

    def beat(self) -> None:
        """One main-loop turn (single writer: plain load + release store)."""
        words = self._words()
        offset = self._base + WORKER_COUNTER_OFFSETS["heartbeats"]
        ring.store_u64(words, offset, ring.load_u64(words, offset) + 1)

    def loader(self, name: str) -> Callable[[], int]:
        """The acquire load of counter ``name`` as a call without Python frames (a reader
        that consults it on every receive); it raises ValueError once the block is closed."""
        return functools.partial(ring.load_u64, self._words(),
                                 self._base + WORKER_COUNTER_OFFSETS[name])

    def storer(self, name: str) -> Callable[[int], None]:
        """The release store of counter ``name`` (its one writer) as a call without Python
        frames (the appender sets busy_since_ms twice per drain)."""
        return functools.partial(ring.store_u64, self._words(),
                                 self._base + WORKER_COUNTER_OFFSETS[name])

    def adder(self, name: str) -> Callable[[int], int]:
        """``adder(delta)`` adds to counter ``name`` (an atomic add) as a call without Python
        frames (the appender counts its loop turns, drains and wake-ups with these)."""
        return functools.partial(ring.fetch_add_u64, self._words(),
                                 self._base + WORKER_COUNTER_OFFSETS[name])

    def add(self, appends: int = 0, batches: int = 0, wakeups: int = 0) -> None:
        """Increase the counters (plain load + release store: there is one writer)."""
        words = self._words()
        for name, delta in (("appends", appends), ("batches", batches), ("wakeups", wakeups)):
            if delta:
                offset = self._base + WORKER_COUNTER_OFFSETS[name]
                ring.store_u64(words, offset, ring.load_u64(words, offset) + delta)


class _Line:
    """A fixed line of named words (one writer each line): get = acquire load, set = release
    store."""

    _WORDS: tuple[str, ...] = ()
    _OFFSET = 0

    def __init__(self, block: "ControlBlock"):
        self._block = block

    def _words(self):
        return self._block._words()

    def __getattr__(self, name: str) -> int:
        if name.startswith("_") or name not in self._WORDS:
            raise AttributeError(name)
        return ring.load_u64(self._words(), self._OFFSET + 8 * self._WORDS.index(name))

    def set(self, **values: int) -> None:
        """Release-store each named word (the line's single writer)."""
        words = self._words()
        for name, value in values.items():
            ring.store_u64(words, self._OFFSET + 8 * self._WORDS.index(name),
                           max(int(value), 0))


class TimerLine(_Line):
    """The timer worker's published figures (TIMER_WORDS; see the module docstring)."""
    _WORDS = TIMER_WORDS
    _OFFSET = TIMER_OFFSET


class TimerAheadLine(_Line):
    """What the timer worker will re-put soon (TIMER_AHEAD_WORDS): ``coming_bytes``, about
    the bytes of the slots it plans ahead (beginning within 3 s) and of the running slot not
    put yet, read by the flusher's
    pre-fault window."""
    _WORDS = TIMER_AHEAD_WORDS
    _OFFSET = TIMER_AHEAD_OFFSET


class TimerMasterLine(_Line):
    """A slave's copy of its master's timer checkpoint (TIMER_MASTER_WORDS), written by the
    supervisor under a seqlock: :meth:`write` and :meth:`read`."""
    _WORDS = TIMER_MASTER_WORDS
    _OFFSET = TIMER_MASTER_OFFSET

    def write(self, read_time_ms: int, queue_offset: int, state_version: int,
              version_timestamp: int, version_counter: int) -> None:
        seq = self.seq
        self.set(seq=seq + 1)
        ring.fence()
        self.set(read_time_ms=read_time_ms, queue_offset=queue_offset,
                 state_version=state_version, version_timestamp=version_timestamp,
                 version_counter=version_counter)
        ring.fence()
        self.set(seq=seq + 2)

    def read(self) -> tuple[int, ...] | None:
        """(seq, read time, queue offset, state version, version timestamp, counter) of a
        whole write, None before the first or while one is under way."""
        for _ in range(8):
            before = self.seq
            if before == 0 or before & 1:
                return None
            values = tuple(getattr(self, name) for name in TIMER_MASTER_WORDS[1:])
            ring.fence()
            if self.seq == before:
                return (before, *values)
        return None


class ControlBlock:
    """The mapped control block at ``path``; ``create=True`` (supervisor) writes a fresh,
    zeroed block (replacing any stale file), ``create=False`` attaches and checks the header.

    Every field of FIELDS is a property: get = acquire load, set = release store (only the
    owner sets). ``publish`` also takes the field's waiters for the caller to wake.
    """

    _base = 0
    _map: mmap.mmap | None = None
    # The FIELDS (descriptors set below, from FIELD_OWNERS); declared for the type checker.
    written_position: int
    written_store_timestamp: int
    flushed_position: int
    dispatched_position: int
    replicated_position: int
    logics_flushed_timestamp: int
    index_flushed_timestamp: int
    physic_flushed_timestamp: int
    generation: int
    broker_state: int
    commitlog_min_offset: int
    disk_full: int
    topic_deletion_requested: int
    topic_deletion_appended: int
    topic_deletion_offset: int
    topic_deletion_done: int
    ha_slaves_connected: int
    confirm_position: int

    def __init__(self, path: str, create: bool):
        self.path = path
        if create and os.path.lexists(path):
            # Unlink, never truncate, a stale block: a process still mapping it must not fault.
            os.unlink(path)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            if create:
                disk_space.allocate(fd, FILE_SIZE_BYTES, path)   # never SIGBUS on a full disk
            elif os.fstat(fd).st_size != FILE_SIZE_BYTES:
                raise ValueError(f"control block {path} is {os.fstat(fd).st_size} bytes, "
                                 f"expected {FILE_SIZE_BYTES}")
            self._map = mmap.mmap(fd, FILE_SIZE_BYTES, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if create:
            ring.store_u64(self._map, VERSION_OFFSET, LAYOUT_VERSION)
            ring.store_u64(self._map, SIZE_OFFSET, FILE_SIZE_BYTES)
            ring.store_u64(self._map, FIELD_OFFSETS["confirm_position"], CONFIRM_UNBOUNDED)
            ring.store_u64(self._map, MAGIC_OFFSET, MAGIC)
        elif ring.load_u64(self._map, MAGIC_OFFSET) != MAGIC or \
                ring.load_u64(self._map, VERSION_OFFSET) != LAYOUT_VERSION:
            self._map.close()
            raise ValueError(f"{path} is not a version {LAYOUT_VERSION} control block")

    def _words(self) -> mmap.mmap:
        if self._map is None:
            raise ValueError(f"control block {self.path} is closed")
        return self._map

    def close(self) -> None:
        """Unmap (idempotent). The file stays; its creator removes it."""
        if self._map is not None:
            self._map.close()
            self._map = None

    def __enter__(self) -> "ControlBlock":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def confirm_offset(self) -> int:
        """Java's getConfirmOffset: ``confirm_position`` bounded by the written end."""
        written = self.written_position
        return min(written, self.confirm_position)

    def load(self, field: str) -> int:
        """Acquire-load a field by name."""
        return ring.load_u64(self._words(), FIELD_OFFSETS[field])

    def load_two(self, first: str, second: str) -> tuple[int, int]:
        """Acquire-load two fields by name, in that order."""
        return ring.load_two_u64(self._words(), FIELD_OFFSETS[first], FIELD_OFFSETS[second])

    def two_loader(self, first: str, second: str) -> Callable[[], tuple[int, int]]:
        """``load_two(first, second)`` as a call without Python frames (a reader consults
        two fields on every store read); it raises ValueError once the block is closed."""
        return functools.partial(ring.load_two_u64, self._words(), FIELD_OFFSETS[first],
                                 FIELD_OFFSETS[second])

    def loader(self, field: str) -> Callable[[], int]:
        """``load(field)`` as a call without Python frames (a loop that consults the field on
        every wake-up); it raises ValueError once the block is closed."""
        return functools.partial(ring.load_u64, self._words(), FIELD_OFFSETS[field])

    def storer(self, field: str) -> Callable[[int], None]:
        """The release store of ``field`` (its owner's) as a call without Python frames."""
        return functools.partial(ring.store_u64, self._words(), FIELD_OFFSETS[field])

    def publish(self, field: str, value: int, monotonic: bool = False) -> int:
        """Store value into field (release; with monotonic=True never lower it), fence, and
        take the waiters mask: the returned bits are worker slots the caller must signal."""
        offset = FIELD_OFFSETS[field]
        return ring.publish_u64(self._words(), offset, value, offset + WAITERS_FIELD_OFFSET,
                                monotonic)

    def publisher(self, field: str) -> Callable[[int], int]:
        """``publish(field, value)`` as a call without Python frames (the appender publishes
        written_position once per drain); it raises ValueError once the block is closed."""
        offset = FIELD_OFFSETS[field]
        return functools.partial(ring.publish_u64, self._words(), offset,
                                 waiters_offset=offset + WAITERS_FIELD_OFFSET)

    def add_waiter(self, field: str, slot: int) -> None:
        """Set worker slot's bit in field's waiters mask (sequentially consistent)."""
        _check_slot(slot)
        ring.fetch_or_u64(self._words(), FIELD_OFFSETS[field] + WAITERS_FIELD_OFFSET, 1 << slot)

    def remove_waiter(self, field: str, slot: int) -> None:
        """Clear worker slot's bit in field's waiters mask."""
        _check_slot(slot)
        ring.fetch_and_u64(self._words(), FIELD_OFFSETS[field] + WAITERS_FIELD_OFFSET,
                           ~(1 << slot) & 0xFFFFFFFFFFFFFFFF)

    def waiters(self, field: str) -> int:
        """The current waiters mask of field (diagnostics)."""
        return ring.load_u64(self._words(), FIELD_OFFSETS[field] + WAITERS_FIELD_OFFSET)

    def worker(self, slot: int) -> WorkerCounters:
        """Counters of worker slot (0 <= slot < WORKER_SLOTS_MAX)."""
        _check_slot(slot)
        return WorkerCounters(self, slot)

    def publish_ha_slave(self, slot: int, ack_offset: int, peer: int, connected_ms: int,
                         broker_id: int = 0, caught_up_ms: int = 0, flags: int = 0,
                         required_from: int = 0) -> None:
        """Write HA connection ``slot``'s line (single writer: the master's ha worker);
        ``peer`` 0 frees the slot. The peer word is stored last: a reader that sees it sees
        the rest of the line. ``broker_id``, ``caught_up_ms``, ``flags`` and
        ``required_from`` are controller mode's (the classic master leaves them 0)."""
        if not 0 <= slot < HA_SLAVE_SLOTS_MAX:
            raise ValueError(f"HA slave slot must be in [0, {HA_SLAVE_SLOTS_MAX}), got {slot}")
        words, base = self._words(), HA_SLAVES_OFFSET + CACHE_LINE_BYTES * slot
        for name, value in (("ack_offset", ack_offset), ("connected_ms", connected_ms),
                            ("broker_id", broker_id), ("caught_up_ms", caught_up_ms),
                            ("flags", flags), ("required_from", required_from)):
            ring.store_u64(words, base + HA_SLAVE_WORD_OFFSETS[name], value)
        ring.store_u64(words, base + HA_SLAVE_WORD_OFFSETS["peer"], peer)

    def ha_slave_lines(self) -> list[dict[str, int]]:
        """Every used HA slave line as {word: value} (HA_SLAVE_WORDS) plus its ``slot``."""
        words, lines = self._words(), []
        for slot in range(HA_SLAVE_SLOTS_MAX):
            base = HA_SLAVES_OFFSET + CACHE_LINE_BYTES * slot
            if ring.load_u64(words, base + HA_SLAVE_WORD_OFFSETS["peer"]):
                line = {name: ring.load_u64(words, base + offset)
                        for name, offset in HA_SLAVE_WORD_OFFSETS.items()}
                line["slot"] = slot
                lines.append(line)
        return lines

    def publish_sync_state(self, members, in_sync_count: int) -> None:
        """Publish the SyncStateSet members (broker ids, the master's own excluded) a master's
        acknowledgements wait for, and Java's inSyncReplicasNums (single writer: the
        supervisor; a sequence lock)."""
        members = sorted(members)
        if len(members) > SYNC_STATE_MEMBERS_MAX:
            raise ValueError(f"{len(members)} SyncStateSet members, at most "
                             f"{SYNC_STATE_MEMBERS_MAX}")
        words = self._words()
        sequence = ring.load_u64(words, SYNC_STATE_OFFSET)
        ring.store_u64(words, SYNC_STATE_OFFSET, sequence | 1)
        ring.fence()
        ring.store_u64(words, SYNC_STATE_OFFSET + 8, len(members))
        ring.store_u64(words, SYNC_STATE_OFFSET + 16, in_sync_count)
        for index, member in enumerate(members):
            ring.store_u64(words, SYNC_STATE_OFFSET + 24 + 8 * index, member)
        ring.fence()
        ring.store_u64(words, SYNC_STATE_OFFSET, (sequence | 1) + 1)

    def sync_state(self) -> tuple[int, tuple[int, ...], int]:
        """(sequence, members, in-sync count) as last published (members sorted)."""
        words = self._words()
        while True:
            sequence = ring.load_u64(words, SYNC_STATE_OFFSET)
            if sequence & 1:
                continue
            count = min(ring.load_u64(words, SYNC_STATE_OFFSET + 8), SYNC_STATE_MEMBERS_MAX)
            in_sync = ring.load_u64(words, SYNC_STATE_OFFSET + 16)
            members = tuple(ring.load_u64(words, SYNC_STATE_OFFSET + 24 + 8 * index)
                            for index in range(count))
            ring.fence()
            if ring.load_u64(words, SYNC_STATE_OFFSET) == sequence:
                return sequence, members, in_sync

    def ha_slaves(self) -> list[tuple[int, int, int]]:
        """(ack offset, peer word, connected since ms) of every used HA slave line."""
        words, lines = self._words(), []
        for slot in range(HA_SLAVE_SLOTS_MAX):
            base = HA_SLAVES_OFFSET + CACHE_LINE_BYTES * slot
            peer = ring.load_u64(words, base + HA_SLAVE_WORD_OFFSETS["peer"])
            if peer:
                lines.append((ring.load_u64(words, base + HA_SLAVE_WORD_OFFSETS["ack_offset"]),
                              peer, ring.load_u64(words, base
                                                  + HA_SLAVE_WORD_OFFSETS["connected_ms"])))
        return lines

    def timer(self) -> TimerLine:
        """The timer worker's line."""
        return TimerLine(self)

    def timer_ahead(self) -> TimerAheadLine:
        """The timer worker's line of re-put bytes coming soon."""
        return TimerAheadLine(self)

    def timer_master(self) -> TimerMasterLine:
        """A slave's copy of its master's timer checkpoint."""
        return TimerMasterLine(self)

    def worker_word_offset(self, slot: int, name: str) -> int:
        """Byte offset of worker ``slot``'s counter ``name`` (WORKER_COUNTERS), for C loops
        that read it through :meth:`words`."""
        _check_slot(slot)
        return WORKERS_OFFSET + CACHE_LINE_BYTES * slot + WORKER_COUNTER_OFFSETS[name]

    def taken_offset(self, slot: int) -> int:
        """Byte offset of ring ``slot``'s taken_request_id (the appender writes it)."""
        _check_slot(slot)
        return TAKEN_OFFSET + 8 * slot

    def words(self) -> mmap.mmap:
        """The mapped words (for pybroker._fast.ring's atomic helpers)."""
        return self._words()

    @property
    def state(self) -> BrokerState:
        """broker_state as a BrokerState."""
        return BrokerState(self.broker_state)


def peer_word(address) -> int:
    """The HA slave line's peer word of a socket address: IPv4 << 16 | port (1 for other
    families, so a used line never reads 0)."""
    try:
        return int(ipaddress.IPv4Address(address[0])) << 16 | int(address[1])
    except (ValueError, IndexError, TypeError):
        return 1


def _check_slot(slot: int) -> None:
    if not 0 <= slot < WORKER_SLOTS_MAX:
        raise ValueError(f"worker slot must be in [0, {WORKER_SLOTS_MAX}), got {slot}")


assert tuple(name for name in ControlBlock.__annotations__ if not name.startswith("_")) \
    == FIELDS, "declare every control-block field on ControlBlock, in FIELD_OWNERS order"
for _field, _owner in FIELD_OWNERS:
    setattr(ControlBlock, _field, _Word(FIELD_OFFSETS[_field], f"written by the {_owner}"))
