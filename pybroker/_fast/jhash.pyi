# Python face of pybroker._fast.jhash (Java String.hashCode over UTF-16 code units).
from typing_extensions import Buffer

def java_hash(s: str) -> int:
    """Java String.hashCode of s, signed 32-bit."""

def java_hash_utf8(buf: Buffer, start: int = 0, end: int = -1) -> int:
    """Java hash of the UTF-8 text in buf[start:end] (malformed bytes hash as U+FFFD)."""

def tags_code(tags: str | None) -> int:
    """ConsumeQueue tags code: java_hash(tags); 0 for None or ""."""

def index_key_hash(key: str) -> int:
    """abs(java_hash(key)); 0 for Integer.MIN_VALUE."""
