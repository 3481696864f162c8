# Python face of pybroker._fast.send.stats (the fast path cimports the rest).
from pybroker._fast.stats import StatsWriter

def distribute_bucket(elapsed_ms: int) -> int:
    """The put-latency bucket the fast path counts (Java's putMessageDistributeTime)."""

class SendStats:
    python_oldest_ms: int
    def __init__(self, writer: StatsWriter | None = None,
                 python_oldest_ms: int = 0) -> None: ...


def size_bucket(size_bytes: int) -> int: ...
