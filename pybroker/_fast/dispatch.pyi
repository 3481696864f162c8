# Python face of pybroker._fast.dispatch (the reput's per-record work in C).
from typing_extensions import Buffer

SCAN_DONE: int          # reached the end of the range
SCAN_BLANK: int         # the file's BLANK end marker
SCAN_END: int           # end of data, or a record whose bytes are not all here yet
SCAN_CORRUPT: int       # a damaged record
SCAN_NEED_QUEUE: int    # the record's queue is not bound (scan() names it)
SCAN_NEED_INDEX: int    # the record has keys and no index file is bound
SCAN_PYTHON: int        # the Python dispatcher takes this one record
LAYOUT: dict[str, int]

class ReputScanner:
    """Consume-queue and index writes of the reput, over files bound for one call."""
    def __init__(self, index_enabled: bool = True) -> None: ...
    def bind_queue(self, topic: bytes, queue_id: int, file_buffer: Buffer,
                   file_from_offset: int, wrote_position: int,
                   last_dispatched_phy: int) -> int: ...
    def bind_index(self, file_buffer: Buffer, hash_slots: int, index_max: int) -> None: ...
    def scan(self, buffer: Buffer, position: int,
             end: int) -> tuple[int, int, int, int, bytes | None, int]: ...
    def take_dirty(self) -> list[tuple[int, int, int]]: ...
    def release(self) -> None: ...
    def forget(self) -> None: ...
