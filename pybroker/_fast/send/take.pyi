# Python face of pybroker._fast.send.take (used by pybroker.proc.ring_putter).
from typing_extensions import Buffer

from pybroker._fast.ring import ByteRing, CompletionRing
from pybroker._fast.send.complete import SendCompletions
from pybroker._fast.timer_reput import Assembly

PUT_HEADER_FIXED_BYTES: int
PUT_FLAG_WAIT_STORE: int

class SendPath(SendCompletions):
    python_waiting: bool
    divert: bool
    fast_puts_total: int
    fast_frames_total: int
    other_frames_total: int
    timer_puts_total: int

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
    def take(self, buffer: Buffer, start: int, end: int,
             slot: int) -> tuple[int, int, int, int, bool]:
        """(position, outcome, frame_length, puts, appender_asleep)."""
    def put_python(self, records: Buffer, topic: bytes, queue_id: int, count: int,
                   sys_flag: int, wait_store: bool, started: float = -1.0) -> int:
        """Request id, or -1 when there is no room now."""
    def put_assembled(self, assembly: Assembly, run: int, topic: bytes, queue_id: int,
                      sys_flag: int, wait_store: bool, started: float = -1.0) -> int:
        """put_python of the timer's run ``run`` of ``assembly``, its records written
        straight into the reserved space; request id, or -1 when there is no room now."""
    def set_timer(self, recall_templates: list, timer_topic: bytes, message_type: int,
                  enabled: bool, congestion_possible: bool, congest_limit: int,
                  max_delay_ms: int, precision_ms: int, broker_name: bytes) -> None:
        """Park 5.x timer messages on the fast path (send/timer.pyx)."""
    def set_timer_wheel(self, wheel: Buffer | None) -> None:
        """The timerwheel mapped read-only, read by the congestion rule (None: forget it)."""
    def set_stats(self, stats: object) -> None:
        """Count fast sends in a StatsWriter section (None: not counted)."""
    def set_python_oldest(self, started_ms: int) -> None:
        """The handlers' oldest unanswered send (epoch ms, 0: none), for the oldest gauge."""
