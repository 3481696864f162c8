# Python face of pybroker._fast.pop.ack (tests; the fast path cimports it).

def read_ack(frame: bytes | bytearray | memoryview, ext_fields_max: int = 1024) -> dict | None:
    """The ACK_MESSAGE header the C reader takes, or None (the handler's)."""

def parse_handle(text: bytes) -> tuple[int, int, int, int, str] | None:
    """``(ck_queue_offset, pop_time, invisible_time, revive_qid, broker_name)`` of a non-order
    receipt handle, or None (the handler decides)."""

class AckRecords:
    def __init__(self, revive_topic: bytes, revive_queue_num: int, timer_topic: bytes,
                 store_ip: bytes, store_port: int, enabled: bool, congestion_possible: bool,
                 congest_limit: int, max_delay_ms: int, precision_ms: int) -> None: ...
    def set_wheel(self, wheel: bytes | memoryview | None) -> None: ...
    def build(self, topic: bytes, group: bytes, queue_id: int, queue_offset: int,
              handle_text: bytes, now_ms: int) -> tuple[bytes, int, bytes] | None:
        """``(stored topic, queue id, record bytes)``, or None (the handler's)."""
