# Python face of pybroker._fast.send_path (used by pybroker.proc.ring_putter).
from typing_extensions import Buffer

from pybroker._fast.ring import ByteRing, CompletionRing

PUT_HEADER_FIXED_BYTES: int
PUT_FLAG_WAIT_STORE: int

class SendPath:
    python_waiting: bool
    divert: bool
    fast_puts_total: int
    fast_frames_total: int
    other_frames_total: int
    slave_not_available_total: int
    completed_up_to: int

    def __init__(self, ring: ByteRing, completions: CompletionRing, store_ip: bytes,
                 store_port: int, cluster_pair: bytes, max_message_size: int,
                 frame_max_bytes: int, ext_fields_max: int, sync_flush: bool,
                 flush_timeout_s: float, templates: list[tuple[bool, tuple[bytes, ...]]],
                 put_ok: int, flush_timeout_status: int, sync_master: bool = False,
                 ha_max_gap_bytes: int = 0, slave_timeout_status: int = -1,
                 slave_not_available_status: int = -1,
                 slave_timeout_s: float = 3.0) -> None: ...
    def set_topics(self, entries: list[tuple[bytes, int, int]]) -> None:
        """Replace the fast topic table: (topic, queue bound, extra sysFlag)."""
    def open_slot(self, born_ip: bytes, born_port: int) -> int:
        """A slot for a new connection."""
    def close_slot(self, slot: int) -> None:
        """The slot's connection closed: answers still due to it are dropped."""
    def take(self, buffer: Buffer, start: int, end: int,
             slot: int) -> tuple[int, int, int, int, bool]:
        """(position, outcome, frame_length, puts, appender_asleep)."""
    def put_python(self, records: Buffer, topic: bytes, queue_id: int, count: int,
                   sys_flag: int, wait_store: bool, started: float = -1.0) -> int:
        """Request id, or -1 when there is no room now."""
    @property
    def has_room(self) -> bool: ...
    @property
    def inflight(self) -> int: ...
    def drain(self, now: float, replicated_position: int = 0,
              slaves_connected: int = 0) -> list[tuple[int, int, bool, int, int, int, int]]:
        """Answer (or hold) completions; the Python path's puts answered now: (request_id,
        status code, stored, count, physical_offset, queue_offset, records_bytes)."""
    def release(self, flushed_position: int,
                replicated_position: int) -> list[tuple[int, int, bool, int, int, int, int]]:
        """Answer held acknowledgements the positions cover (the Python path's returned)."""
    def expire(self, flushed_position: int, replicated_position: int,
               now: float) -> list[tuple[int, int, bool, int, int, int, int]]:
        """release(), then answer held acknowledgements past their deadline."""
    def aged(self, limit: float, after_id: int) -> int:
        """Highest id above after_id of a put (either path) waiting since limit; 0."""
    def oldest(self, after_id: int) -> float | None:
        """Monotonic s the longest-waiting put above after_id started waiting, or None."""
    @property
    def waiting(self) -> int: ...
    def withdraw(self, taken: int, up_to: int, busy_status: int
                 ) -> tuple[int, list[tuple[int, int, float]], list[tuple[int, float]]]:
        """Withdraw the puts in (taken, up_to]: (count, [(slot, opaque, started)] of the fast
        sends to answer, [(request_id, started)] of the Python path's)."""
    @property
    def flush_target(self) -> int | None: ...
    @property
    def replica_target(self) -> int | None: ...
    @property
    def held_deadline(self) -> float | None: ...
    @property
    def held_count(self) -> int: ...
    def set_stats(self, stats: object, python_oldest: object = None) -> None:
        """Count fast sends in a StatsWriter section (None: not counted)."""
    def fast_oldest_ms(self) -> int:
        """Epoch ms of the oldest unanswered fast send, 0 when none."""
    def take_outputs(self) -> list[tuple[int, bytes]]:
        """(slot, response frames) per connection written to since the last call."""
