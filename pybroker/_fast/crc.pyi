# Python face of pybroker._fast.crc (Java/zlib CRC-32).
from typing_extensions import Buffer

def crc32(buf: Buffer, start: int = 0, end: int = -1) -> int:
    """Unsigned CRC-32 of buf[start:end]; end=-1 means len(buf)."""

def crc32_masked(buf: Buffer, start: int = 0, end: int = -1) -> int:
    """crc32(...) & 0x7FFFFFFF (RocketMQ's stored body CRC)."""

def folds() -> bool:
    """Whether spans of 64 bytes and more are folded here (x86-64 with PCLMULQDQ)."""
