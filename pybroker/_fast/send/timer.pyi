# Python face of pybroker._fast.send.timer (tests; the fast path cimports it).

def redirect(text: bytes, topic: bytes, queue_id: int, enabled: bool, max_delay_ms: int,
             precision_ms: int, congestion_possible: bool, now_ms: int,
             broker_name: bytes = b"", congest_limit: int = 0,
             wheel: bytes | memoryview | None = None) -> tuple[int, bytes | None, bytes | None]:
    """``(outcome, stored properties without CLUSTER, recall handle)``: outcome 1 parked, 0
    stored as it is, -1 left to the handler."""
