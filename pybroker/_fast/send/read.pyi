# Python face of pybroker._fast.send.read (tests and micro benchmarks; the fast path cimports it).
from typing_extensions import Buffer

def read_send(frame: Buffer, ext_fields_max: int = 1024) -> dict | None:
    """The send request the fast path reads from one whole frame, or None when the Python path
    takes it: ``code``, ``opaque``, ``rpc_flag``, ``fields`` (wire long name -> str),
    ``queue_id``, ``sys_flag``, ``born_timestamp``, ``flag``, ``reconsume_times``, ``batch``,
    ``body``."""

def scan(text: Buffer) -> tuple[bool, int, bytes] | None:
    """``(wait_store, flags, stored)`` of a properties string, or None when the Python path
    must decide."""
