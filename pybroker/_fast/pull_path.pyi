# Python face of pybroker._fast.pull_path (the remoting worker's pull fast path).
from collections.abc import Callable

from typing_extensions import Buffer

from pybroker._fast.stats import StatsWriter


class PullPath:
    fast_pulls_total: int
    other_frames_total: int
    held_files: int
    def __init__(self, positions: Callable[[], tuple[int, int, int, bool]],
                 queue_source: Callable[[str, int], tuple | None],
                 commitlog_source: Callable[[], tuple[int, list]],
                 pull_offset_entry: Callable[[str, str, int], int],
                 stats: StatsWriter | None, ext_fields_max: int, frame_max_bytes: int,
                 check_crc: bool, memory_bytes: int, transfer_limits: tuple[int, int, int, int],
                 slave_read_enable: bool, template: tuple[bytes, ...],
                 request_tag_codes: Callable[[str | None, str | None],
                                             tuple[bool, list[int] | None]],
                 own_expression_entry: Callable[[str, str], tuple | None]) -> None: ...
    def set_subscriptions(self, entries: list[tuple]) -> None: ...
    def take(self, buffer: Buffer, start: int, end: int, fd: int,
             pending_max: int) -> tuple[int, int, int, bytes | None]: ...
    def commits(self) -> list[tuple[str, str, int, int]]: ...
    def reset(self) -> None: ...
