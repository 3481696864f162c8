# Python face of pybroker._fast.pop.ack_take (proc/ack_port.py uses it).
from collections.abc import Callable

from pybroker._fast.send.take import SendPath

class AckTaker:
    divert: bool
    acks_total: int
    other_frames_total: int

    def __init__(self, core: SendPath, store_ip: bytes, store_port: int, revive_topic: bytes,
                 revive_queue_num: int, timer_topic: bytes, enabled: bool,
                 congestion_possible: bool, congest_limit: int, max_delay_ms: int,
                 precision_ms: int, lookup: Callable[[str, str, int, int], int],
                 frame_max_bytes: int, ext_fields_max: int,
                 clock_ms: Callable[[], int] | None = None) -> None: ...
    def set_timer_wheel(self, wheel: memoryview | None) -> None: ...
    def take(self, buffer: bytearray, start: int, end: int
             ) -> tuple[int, int, int, list[tuple[int, int, str, str, int, int, int, int]],
                        bool]:
        """``(position, outcome, frame_length, taken, appender_asleep)``."""

class AckEnd:
    """The end of a worker's fast acks (see ack_take.pyx)."""
    def __init__(self, ctx: object, answers: object, pieces: tuple[bytes, bytes],
                 ack_put: Callable[..., None], stored: tuple, request_code: int,
                 response_code: int) -> None: ...

class FastAck:
    """One ack put until its outcome (proc/ring_putter.py FastPut)."""
    connection: object
    entry: tuple[int, int, str, str, int, int, int, int]

    def __init__(self, end: AckEnd, connection: object,
                 entry: tuple[int, int, str, str, int, int, int, int], token: int,
                 started_ns: int) -> None: ...
    def settled(self, status: object) -> None: ...
