# What Python sees of pybroker._fast.pull_scan (the units one pull takes).
from collections.abc import Iterable

from typing_extensions import Buffer

LAYOUT: dict[str, int]

def collect(units: Buffer, codes: Iterable[int] | None,
            damaged: list[tuple[int, int]] | None, max_count: int, max_bytes: int | None,
            in_disk_below: int, memory_bytes: int, memory_count: int, disk_bytes: int,
            disk_count: int, file_size: int
            ) -> tuple[int, int, list[list] | None]: ...
