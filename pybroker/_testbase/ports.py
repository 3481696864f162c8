# Free 127.0.0.1 ports for tests and tools: outside the ephemeral range, one slice per xdist worker.
"""``free_port(offsets)``: a port P such that every P + offset can be bound on 127.0.0.1 now.

Why not ``bind(("127.0.0.1", 0))``: the kernel answers from its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), the same range every outgoing connection takes its
local port from, so between the pick and the broker's bind a client connection elsewhere on the
machine can take the port. The ports here come from outside that range (below it; above it when
below is too small).

Why slices: under pytest-xdist several test processes pick ports at once. Worker ``gwK`` of N
(``PYTEST_XDIST_WORKER``, ``PYTEST_XDIST_WORKER_COUNT``) picks only from the K-th of N equal
slices, so two workers never hand out the same port; a child process inherits its worker's
slice. Within a process a cursor walks the slice from a random start, so a port handed out is not
handed out again before the slice wraps (the caller may not have bound it yet). A port another
program holds, or that is in TIME_WAIT, fails the bind probe and is skipped.

Standard library only: tools/java_rocketmq.py loads this file by path, before pybroker is
installed.
"""
import os
import random
import socket
import threading

LOOPBACK = "127.0.0.1"
LOWEST = 20000              # below: well-known defaults (9876, 10911, 8080, ...) people run
SMALLEST_POOL = 2000        # a side of the ephemeral range smaller than this is not used alone
RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL = (32768, 60999)

_lock = threading.Lock()
_cursor: dict[tuple[int, int], int] = {}


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (inclusive), Linux's default when unreadable."""
    try:
        with open(RANGE_FILE, encoding="ascii") as source:
            low, high = (int(word) for word in source.read().split())
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def pool() -> tuple[int, int]:
    """[start, stop) of the ports handed out: the larger side of the ephemeral range, or every
    port from LOWEST up when neither side has SMALLEST_POOL ports."""
    low, high = ephemeral_range()
    below, above = (LOWEST, low), (high + 1, 65536)
    best = max(below, above, key=lambda side: side[1] - side[0])
    return best if best[1] - best[0] >= SMALLEST_POOL else (LOWEST, 65536)


def worker_slice() -> tuple[int, int]:
    """[start, stop) of this process's slice of the pool (the whole pool outside xdist)."""
    start, stop = pool()
    environment = os.environ  # tidy: allow (pytest-xdist's variables, not a broker setting)
    name = environment.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(environment.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(name[2:]) if name.startswith("gw") else 0
    except ValueError:
        count, index = 1, 0
    if count <= 1 or not 0 <= index < count:
        return start, stop
    width = (stop - start) // count
    return start + index * width, start + (index + 1) * width


def bindable(ports) -> bool:
    """True when every port of ``ports`` can be bound on 127.0.0.1 now (no SO_REUSEADDR, so a
    port in TIME_WAIT counts as taken)."""
    sockets = []
    try:
        for port in ports:
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(probe)
            probe.bind((LOOPBACK, port))
        return True
    except OSError:
        return False
    finally:
        for probe in sockets:
            probe.close()


def free_port(offsets=(0,), tries: int = 400) -> int:
    """A port P such that P + every offset is free on 127.0.0.1 now (a broker needs -2, 0, +1:
    its VIP channel and its HA port). Raises RuntimeError after ``tries`` candidates."""
    start, stop = worker_slice()
    below, span = min(min(offsets), 0), max(max(offsets), 0) - min(min(offsets), 0) + 1
    if stop - start < span:
        raise RuntimeError(f"port slice [{start}, {stop}) too small for offsets {offsets}")
    with _lock:
        # The cursor is the lowest port of the next set; every set is [cursor, cursor + span).
        cursor = _cursor.get((start, stop))
        if cursor is None:
            cursor = random.randrange(start, stop - span + 1)
        for _ in range(tries):
            if cursor + span > stop:
                cursor = start
            candidate = cursor - below
            cursor += span
            if bindable(candidate + offset for offset in offsets):
                _cursor[(start, stop)] = cursor
                return candidate
        _cursor[(start, stop)] = cursor
    raise RuntimeError(f"no free port set {offsets} in [{start}, {stop}) after {tries} tries")
