# The wall clock of the broker: ms since the epoch (store timestamps, expiry, leases).
"""One definition of "now in ms"; every service takes a clock argument defaulting to this, so
tests inject their own."""
import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Wall clock, ms since the epoch."""
    return time.time_ns() // 1_000_000
