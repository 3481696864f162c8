# The timer checkpoint (Java 5.x config/timercheck): where the timer's enqueue and dequeue stand.
"""``<root>/config/timercheck``: one OS page, seven big-endian longs at its start (layout in
:mod:`pybroker.store.layout`), which are also the body of GET_TIMER_CHECK_POINT (60):

* ``last_read_time_ms``: the next slot time the dequeue delivers (everything before is done);
* ``last_timerlog_flush_pos``: timer-log bytes durable when it was written;
* ``last_timer_queue_offset``: next rmq_sys_wheel_timer offset to enqueue (min of the enqueue's
  commit and the master's);
* ``master_timer_queue_offset``: the master's commit offset (a master writes its own; a slave
  takes it from its master and enqueues no further);
* the data version: ``state_version``, ``version_timestamp`` (ms), ``version_counter``.

Single writer: the timer worker (:meth:`TimerCheckpoint.flush` writes the fields and msyncs the
page). Readers take :func:`read_checkpoint` (the 56 bytes of the file, as GET_TIMER_CHECK_POINT
answers them).
"""
import dataclasses
import mmap
import os
import struct

from pybroker import clock
from pybroker.errors import DurabilityError
from pybroker.store import layout

__all__ = ["TimerCheckpoint", "CheckpointValues", "read_checkpoint"]

_FIELDS = struct.Struct(">7q")
assert _FIELDS.size == layout.TIMER_CHECK_ENCODED_SIZE


@dataclasses.dataclass
class CheckpointValues:
    """The seven fields (see the module docstring); ``encode``/``decode`` the wire body."""
    last_read_time_ms: int = 0
    last_timerlog_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    version_timestamp: int = 0
    version_counter: int = 0

    def encode(self) -> bytes:
        """The 56-byte body of GET_TIMER_CHECK_POINT."""
        return _FIELDS.pack(*dataclasses.astuple(self))

    @classmethod
    def decode(cls, data) -> "CheckpointValues":
        """From a body of at least 32 bytes (Java before the data version sent four longs;
        the version then reads 0)."""
        data = bytes(data)
        if len(data) < 32:
            raise ValueError(f"a timer checkpoint is 32 or 56 bytes, got {len(data)}")
        padded = data[:_FIELDS.size].ljust(_FIELDS.size, b"\0")
        return cls(*_FIELDS.unpack(padded))

    def next_version(self, state_version: int = 0) -> None:
        """Java DataVersion.nextVersion(stateVersion): timestamp now, counter + 1."""
        self.version_timestamp = clock.now_ms()
        self.state_version = state_version
        self.version_counter += 1

    def same_version(self, other: "CheckpointValues") -> bool:
        return (self.state_version, self.version_timestamp, self.version_counter) == \
            (other.state_version, other.version_timestamp, other.version_counter)


class TimerCheckpoint:
    """``config/timercheck`` mapped read-write (the timer worker). A missing file is created
    (one page of zeros); ``values`` hold what the file held when opened."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        existed = os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < layout.TIMER_CHECK_FILE_SIZE:
                os.ftruncate(fd, layout.TIMER_CHECK_FILE_SIZE)   # Java maps one page
            self._map: mmap.mmap | None = mmap.mmap(fd, layout.TIMER_CHECK_FILE_SIZE)
        finally:
            os.close(fd)
        self.existed = existed
        self.values = CheckpointValues.decode(self._map[:_FIELDS.size]) if existed \
            else CheckpointValues()

    def flush(self) -> None:
        """Write ``values`` into the page and msync it (DurabilityError on failure)."""
        words = self._words()
        _FIELDS.pack_into(words, 0, *dataclasses.astuple(self.values))
        try:
            words.flush(0, mmap.PAGESIZE)
        except OSError as error:
            raise DurabilityError(f"msync of {self.path} failed: {error}") from error

    def _words(self) -> mmap.mmap:
        if self._map is None:
            raise ValueError(f"timer checkpoint {self.path} is closed")
        return self._map

    def close(self) -> None:
        """Unmap (idempotent); call :meth:`flush` first to keep the values."""
        if self._map is not None:
            self._map.close()
            self._map = None


def read_checkpoint(path: str) -> CheckpointValues | None:
    """The values in the file at ``path`` (a reader's look, no map kept), None when absent."""
    try:
        with open(path, "rb") as source:
            data = source.read(_FIELDS.size)
    except FileNotFoundError:
        return None
    if len(data) < _FIELDS.size:
        return None
    return CheckpointValues.decode(data)
