# Python face of pybroker._fast.timer_reput (a due slot's parked records into re-put runs).
import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

CANCEL_KEYS_MAX: int    # cancel keys one convert call takes (a linear search per record)
OWN_MS_NONE_VALUE: int  # convert's own_ms of a record whose own time is not read (Long.MIN)

class TimerReputs:
    """The timer's first-delivery rule over many records (broker/timer.py _convert_text)."""
    def __init__(self, real_topic: bytes, real_queue_id: bytes, uniq_key: bytes,
                 delete_key: bytes, enqueue_name: bytes, dequeue_name: bytes) -> None: ...
    def convert(self, files: list[memoryview], which: npt.NDArray[np.int32],
                starts: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
                enqueue_ms: npt.NDArray[np.int64], eligible: npt.NDArray[np.uint8],
                dequeue_ms: int, run_records_max: int, run_bytes_max: int,
                cancel_keys: tuple[bytes, ...] = (),
                positions: npt.NDArray[np.int64] | None = None,
                own_ms: npt.NDArray[np.int64] | None = None
                ) -> tuple[bytearray, list[tuple[str, int, int, int]],
                           list[tuple[int, int, int, int]], list[int], list[tuple[int, int]]]:
        """(out, groups, runs, rest, cancelled) for the parked records (record i: ``sizes[i]``
        bytes at ``starts[i]`` of ``files[which[i]]``, -1 not readable): new records, (topic,
        queue_id, sys_flag, count) per group, (start, end, count, group) per run, indexes left
        to the Python rule, (record index, cancel key index) per record a cancel key dropped;
        ``positions`` (one per record) filled with each new record's start in out, -1 when
        not written; ``own_ms`` (one per record) filled with each record's own delivery
        time, the put rule's at its store timestamp (OWN_MS_NONE_VALUE: not read)."""

def restamp(out: bytearray, converted_ms: int, dequeue_ms: int) -> bool:
    """Rewrite TIMER_DEQUEUE_MS (``converted_ms`` when converted) in every record of a
    convert output to ``dequeue_ms``, in place; False when it cannot (then drop ``out``)."""

def strip(out: Buffer, positions: npt.NDArray[np.int64]) -> bytearray | None:
    """The recipes of a convert output: each new record without its body, in the records'
    order; None when ``out`` is not what convert wrote at ``positions``."""

def assemble(recipes: Buffer, positions: npt.NDArray[np.int64], buffers: list[memoryview],
             which: npt.NDArray[np.int32], starts: npt.NDArray[np.int64],
             sizes: npt.NDArray[np.int64], out_length: int) -> bytearray | None:
    """The convert output ``recipes`` were stripped from, each body copied from its parked
    record (record i: ``sizes[i]`` bytes at ``starts[i]`` of ``buffers[which[i]]``, -1 not
    readable); None when a record cannot be read or its body does not match."""

class Assembly:
    """A held chunk's runs ready to be written where they are put (prepare)."""
    runs: int
    def run_bytes(self, run: int) -> int: ...
    def run_records(self, run: int) -> int: ...
    def fill_into(self, run: int, target: Buffer) -> None:
        """Write run ``run``'s records at the start of ``target``."""
    def release(self) -> None:
        """Drop the views and the read they came from."""

def prepare(recipes: Buffer, positions: npt.NDArray[np.int64], order: npt.NDArray[np.int64],
            spans: object, sizes: npt.NDArray[np.int64], out_length: int,
            cuts: list[tuple[int, int, int, int]], converted_ms: int,
            dequeue_ms: int) -> Assembly | None:
    """The Assembly of ``recipes`` (assemble then restamp, run by run as ``cuts``), the
    parked records where ``spans`` (a SpansResult, released with the Assembly) found them;
    None when a record does not match or the time cannot be rewritten in place."""
