# Message ids: the broker's offset message id and the client-style unique id (UNIQ_KEY).
"""RocketMQ message ids (protocol.md §3.5). Ids are opaque strings to everything but this module.

* Offset message id: store host IP (4 or 16 bytes) + port (int) + physical offset (long),
  upper-case hex, 32 or 56 characters. Decoders tell IPv4 from IPv6 by the length alone.
* Unique id (``UNIQ_KEY``): client IP + pid (short) + class-loader-like hash (int), then
  ms since the start of the current month in local time (int) + counter (short), upper-case hex
  as Java renders it (Go renders the suffix lower-case; decoding accepts either case).
"""
import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time

_OFFSET_ID_V4_CHARS = 2 * (4 + 4 + 8)
_OFFSET_ID_V6_CHARS = 2 * (16 + 4 + 8)
assert (_OFFSET_ID_V4_CHARS, _OFFSET_ID_V6_CHARS) == (32, 56)
_PORT_AND_OFFSET = struct.Struct(">iq")
_UNIQ_PREFIX_TAIL = struct.Struct(">hi")      # pid (short), class-loader-like hash (int)
_UNIQ_SUFFIX = struct.Struct(">iH")           # ms since month start (int), counter (short)
_UNIQ_ID_V4_CHARS = 2 * (4 + 2 + 4 + 4 + 2)
_UNIQ_ID_V6_CHARS = 2 * (16 + 2 + 4 + 4 + 2)
assert (_UNIQ_ID_V4_CHARS, _UNIQ_ID_V6_CHARS) == (32, 56)


def offset_message_id(store_host_ip: bytes, store_port: int, physical_offset: int) -> str:
    """The broker's message id of a stored record: upper-case hex of ip + port + offset.

    ``store_host_ip`` is the raw 4-byte (IPv4) or 16-byte (IPv6) address; ``physical_offset``
    is the record's CommitLog byte offset. ValueError on a bad address size or an out-of-range
    port/offset.
    """
    if len(store_host_ip) not in (4, 16):
        raise ValueError(f"store host IP of {len(store_host_ip)} bytes; expected 4 or 16")
    try:
        tail = _PORT_AND_OFFSET.pack(store_port, physical_offset)
    except struct.error as error:
        raise ValueError(f"port {store_port} / offset {physical_offset}: {error}") from None
    return (bytes(store_host_ip) + tail).hex().upper()


def _hex_bytes(message_id: str, lengths: tuple[int, ...]) -> bytes:
    if not isinstance(message_id, str) or len(message_id) not in lengths:
        raise ValueError(f"message id {message_id!r}: expected {' or '.join(map(str, lengths))}"
                         " hex characters")
    raw = bytes.fromhex(message_id)   # ValueError on a non-hex character
    if len(raw) * 2 != len(message_id):   # fromhex skips whitespace
        raise ValueError(f"message id {message_id!r} is not plain hex")
    return raw


def decode_offset_message_id(message_id: str) -> tuple[bytes, int, int]:
    """``(store_host_ip, store_port, physical_offset)`` from an offset message id.

    32 characters mean IPv4, 56 mean IPv6; anything else, or non-hex text, is a ValueError.
    """
    raw = _hex_bytes(message_id, (_OFFSET_ID_V4_CHARS, _OFFSET_ID_V6_CHARS))
    address_bytes = len(raw) - _PORT_AND_OFFSET.size
    port, physical_offset = _PORT_AND_OFFSET.unpack_from(raw, address_bytes)
    return raw[:address_bytes], port, physical_offset


def _local_ip() -> bytes:
    # The address this host would use to reach the network (no packet is sent); loopback if none.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            return socket.inet_aton(probe.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")


def _month_start_ms(now_ms: int, months_back: int = 0) -> int:
    # Local midnight of the 1st of the month containing now_ms (or months_back before it).
    local = datetime.datetime.fromtimestamp(now_ms / 1000)
    month_index = local.year * 12 + local.month - 1 - months_back
    start = datetime.datetime(month_index // 12, month_index % 12 + 1, 1)
    return int(time.mktime(start.timetuple())) * 1000


class _UniqIdState:
    """Per-process parts of the unique id; rebuilt after fork because the pid is in the prefix."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pid = -1
        self.prefix = b""
        self.counter = itertools.count()
        self.month_start_ms = 0
        self.next_month_start_ms = 0

    def refresh(self, now_ms: int) -> None:
        with self.lock:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                loader_hash = random.getrandbits(31)
                self.prefix = _local_ip() + _UNIQ_PREFIX_TAIL.pack(
                    (self.pid + 2**15) % 2**16 - 2**15, loader_hash)
            if not self.month_start_ms <= now_ms < self.next_month_start_ms:
                self.month_start_ms = _month_start_ms(now_ms)
                # 32 days after the 1st always lands in the next month.
                self.next_month_start_ms = _month_start_ms(self.month_start_ms + 32 * 86_400_000)


_STATE = _UniqIdState()


def create_uniq_id() -> str:
    """A new client-style unique message id (upper-case hex, 32 characters with an IPv4 host)."""
    now_ms = time.time_ns() // 1_000_000
    if _STATE.pid != os.getpid() or not (
            _STATE.month_start_ms <= now_ms < _STATE.next_month_start_ms):
        _STATE.refresh(now_ms)
    suffix = _UNIQ_SUFFIX.pack(now_ms - _STATE.month_start_ms, next(_STATE.counter) & 0xFFFF)
    return (_STATE.prefix + suffix).hex().upper()


def decode_uniq_id_timestamp(uniq_id: str, now_ms: int | None = None) -> int:
    """Approximate creation time (ms since the epoch) of a unique id, as Java estimates it.

    The id holds ms since the start of a month (local time): this month's start is assumed,
    or the previous month's when that would put the time at or after ``now_ms``.
    """
    raw = _hex_bytes(uniq_id, (_UNIQ_ID_V4_CHARS, _UNIQ_ID_V6_CHARS))
    span_ms = int.from_bytes(raw[-6:-2], "big")
    if now_ms is None:
        now_ms = time.time_ns() // 1_000_000
    start_ms = _month_start_ms(now_ms)
    if start_ms + span_ms >= now_ms:
        start_ms = _month_start_ms(now_ms, months_back=1)
    return start_ms + span_ms
