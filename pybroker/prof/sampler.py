# One profile sample per second: the broker's instruments, positions, residency, kernel figures.
"""Attach to a running broker and take samples (the content of a recording, docs/profiling.md).

The profiler runs beside the broker on the same machine and only reads: the instrument region
(``<store>/run/stats``), the control block (``<store>/run/control``), the store files (its own
read-only maps, for ``mincore``), ``config/consumerOffset.json`` and /proc. It never sends a
request on the data path; attaching by admin port costs one GET_BROKER_CONFIG to learn the
store directory and the settings.
"""
import asyncio
import dataclasses
import os
import time

import numpy as np

from pybroker.config import load_properties
from pybroker.prof import system
from pybroker.prof.residency import PAGE_SIZE_BYTES, FileResidency
from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsKeyKind
from pybroker.stats.region import Snapshot, StatsRegion
from pybroker.store import config_docs, layout, paths
from pybroker.store.control_block import ControlBlock, stats_section_name, worker_of_stats_section
from pybroker.stats.timer_gauges import TIMER_DIST_SECONDS
from pybroker.store.mapped_file import is_offset_file_name
from pybroker.store.settings import timer_precision_of
from pybroker.store.timer_wheel import TimerWheel
from pybroker.tasks import within

__all__ = ["Target", "Sampler", "attach_store", "attach_admin", "COUNTERS", "HISTOGRAMS",
           "SETTINGS_RECORDED"]

C = StatsCounter
# Gauges: one writer's value, not a sum over sections.
_GAUGES = {C.PAGE_CACHE_LOCK_BEGIN_MS, C.PULL_HELD, C.PUT_ENTIRE_TIME_MAX_MS,
           C.GET_ENTIRE_TIME_MAX_MS, C.SEND_OLDEST_MS, C.PULL_OLDEST_MS, C.QUERY_OLDEST_MS,
           C.TRANSACTION_OLDEST_MS, C.ACK_OLDEST_MS, C.PROCESS_ID, C.PREFAULT_POSITION,
           C.LOCKED_BYTES, C.SCRUB_POSITION, C.SCRUB_FINDINGS}
COUNTERS = tuple(counter for counter in StatsCounter if counter not in _GAUGES)
HISTOGRAMS = tuple(StatsHistogram)
# Settings a profile is read against (copied into the recording's header when known).
SETTINGS_RECORDED = ("brokerName", "flushDiskType", "brokerRole", "mappedFileSizeCommitLog",
                     "mappedFileSizeConsumeQueue", "flushIntervalCommitLog",
                     "flushCommitLogLeastPages", "flushCommitLogThoroughInterval",
                     "warmMapedFileEnable", "flushLeastPagesWhenWarmMapedFile",
                     "transientStorePoolEnable", "transientStorePoolSize",
                     "commitIntervalCommitLog", "commitCommitLogLeastPages",
                     "osPageCacheBusyTimeOutMills", "accessMessageInMemoryMaxRatio",
                     "storePathRootDir")


@dataclasses.dataclass
class Target:
    """The broker being profiled: its store and what is known of its settings, and where
    they came from (``settings_source``; None: unknown)."""
    store_root: str
    settings: dict[str, str]
    settings_source: str | None = None

    @property
    def commitlog_dir(self) -> str:
        return self.settings.get("storePathCommitLog") or paths.commitlog_dir(self.store_root)


def attach_store(store_root: str, settings: dict[str, str] | None = None,
                 settings_source: str | None = None) -> Target:
    """The broker serving ``store_root`` (it must be running: its region must exist). Its
    settings: ``settings`` when given, else the ones it wrote into
    ``<store>/run/broker.conf``; none (unknown) when neither is there."""
    store_root = os.path.abspath(store_root)
    if not os.path.exists(paths.stats_region_path(store_root)):
        raise FileNotFoundError(f"{store_root}: no running broker (no "
                                f"{paths.stats_region_path(store_root)})")
    if settings is None:
        running = paths.running_settings_path(store_root)
        try:
            settings = load_properties(running)
            settings_source = running
        except FileNotFoundError:
            settings = {}
    known = dict(settings)
    known.setdefault("storePathRootDir", store_root)
    return Target(store_root, known, settings_source)


def attach_admin(address: str, timeout_s: float = 5.0) -> Target:
    """The broker listening on ``address`` (host:port, on this machine): its settings and
    store directory from GET_BROKER_CONFIG."""
    from pybroker.admin.broker_commands import invoke
    from pybroker.client.admin import Admin
    from pybroker.protocol.codes import RequestCode

    async def fetch() -> dict[str, str]:
        async with Admin(address) as admin:
            response = await within(invoke(admin, address, RequestCode.GET_BROKER_CONFIG),
                                    timeout_s)
        text = bytes(response.body or b"").decode("utf-8", "replace")
        return dict(line.split("=", 1) for line in text.splitlines()
                    if "=" in line and not line.startswith("#"))
    settings = asyncio.run(fetch())
    if "storePathRootDir" not in settings:
        raise ValueError(f"{address} did not name its store (storePathRootDir)")
    return attach_store(settings["storePathRootDir"], settings,
                        f"GET_BROKER_CONFIG of {address}")


def _histogram(snapshot: Snapshot, index: int) -> dict:
    words = snapshot.histogram(index)
    buckets = {str(bucket): int(words[bucket]) for bucket in np.flatnonzero(words[:64])}
    return {"count": int(words[64]), "sum": int(words[65]), "max": int(words[66]),
            "buckets": buckets}


class Sampler:
    """Samples of one broker (see the module docstring); ``chunk_bytes``: the unit of the
    CommitLog residency strip."""

    def __init__(self, target: Target, chunk_bytes: int = 8 << 20):
        if chunk_bytes < PAGE_SIZE_BYTES:
            raise ValueError(f"chunk_bytes must be at least a page ({PAGE_SIZE_BYTES})")
        self.target = target
        self.chunk_bytes = chunk_bytes
        root = target.store_root
        self.region = StatsRegion.attach(paths.stats_region_path(root))
        if not self.region.enabled:
            self.region.close()
            raise ValueError(f"{root}: the broker runs with statsInstrumentsEnable=false, "
                             f"its instruments record nothing to profile")
        self.control = ControlBlock(paths.control_block_path(root), create=False)
        self.residency = FileResidency()
        self.device = system.store_device(root)
        self._offsets_cache: tuple[float, dict] = (-1.0, {})
        self._wheel: TimerWheel | None = None       # mapped once the timer made it
        self._cq_file_size: int | None = None

    def close(self) -> None:
        if self._wheel is not None:
            self._wheel.close()
        self.residency.close()
        self.control.close()
        self.region.close()

    def header(self) -> dict:
        """What the recording's first line says about the broker and the machine."""
        source = self.target.settings_source
        settings = {key: self.target.settings[key] for key in SETTINGS_RECORDED
                    if key in self.target.settings} if source else {}
        return {"store": self.target.store_root, "settings": settings,
                "settings_source": source,
                "vm": system.vm_settings(), "page_size": PAGE_SIZE_BYTES,
                "chunk_bytes": self.chunk_bytes, "device": self.device,
                "boot_ms": self.region.boot_ms, "host": os.uname().nodename,
                "kernel": os.uname().release, "cpus": os.cpu_count()}

    def sample(self) -> dict:
        """One sample (cumulative counters and histograms; residency and gauges now)."""
        started = time.monotonic()
        snapshot = self.region.snapshot()
        positions = self._positions(snapshot)
        sample: dict = {"t_ms": time.time_ns() // 1_000_000,
                  "positions": positions,
                  "counters": {c.name.lower(): snapshot.counter(c) for c in COUNTERS},
                  "histograms": {h.name.lower(): _histogram(snapshot, h) for h in HISTOGRAMS},
                  "processes": self._processes(snapshot),
                  "memory": system.memory_figures(),
                  "disk": system.disk_figures(self.device)}
        sample["groups"] = self._groups(snapshot, positions["written"])
        sample["topics"] = {key: [totals.messages, totals.size_bytes, totals.requests]
                            for (kind, key), totals in snapshot.keys().items()
                            if kind == StatsKeyKind.KEY_TOPIC_PUT}
        sample["commitlog"], sample["files"] = self._residency()
        timer = self._timer(sample["t_ms"])
        if timer is not None:
            sample["timer"] = timer
        sample["sample_ms"] = round((time.monotonic() - started) * 1000, 2)
        return sample

    def _positions(self, snapshot: Snapshot) -> dict[str, int]:
        control = self.control
        busy_since = int(snapshot.counters[:, C.PAGE_CACHE_LOCK_BEGIN_MS].max())
        return {"written": control.written_position, "flushed": control.flushed_position,
                "dispatched": control.dispatched_position,
                "replicated": control.replicated_position,
                "commitlog_min": control.commitlog_min_offset,
                "prefaulted": int(snapshot.counters[:, C.PREFAULT_POSITION].max()),
                "locked_bytes": int(snapshot.counters[:, C.LOCKED_BYTES].sum()),
                "pulls_held": int(snapshot.counters[:, C.PULL_HELD].sum()),
                # The scrubber (a thread of the supervisor): its pass's CommitLog offset and
                # the damage it knows of (docs/reliability.md).
                "scrubbed": int(snapshot.counters[:, C.SCRUB_POSITION].max()),
                "scrub_findings": int(snapshot.counters[:, C.SCRUB_FINDINGS].max()),
                "append_busy_since_ms": busy_since,
                "broker_state": control.broker_state}

    def _processes(self, snapshot: Snapshot) -> dict[str, dict]:
        figures: dict[str, dict] = {}
        parent = None
        for writer in range(snapshot.writers):
            pid = snapshot.counter(C.PROCESS_ID, writer)
            if not pid:
                continue
            name = stats_section_name(writer)
            process = system.process_figures(pid)
            if process is None:
                continue
            worker = worker_of_stats_section(writer)
            if worker is not None:
                counters = self.control.worker(worker.slot)
                process.update(wakeups=counters.wakeups, appends=counters.appends,
                               batches=counters.batches)
            figures[name] = process
            parent = parent or _parent(pid)
        if parent is not None:
            supervisor = system.process_figures(parent)
            if supervisor is not None:
                figures.setdefault("supervisor", supervisor)
        return figures

    def _timer(self, now_ms: int) -> dict | None:
        """The 5.x timer: its line of the control block and the wheel's fill (messages parked
        per Java timerDist bound, from now), None without a timer."""
        line = self.control.timer()
        if line.read_time_ms == 0:
            return None
        if self._wheel is None:
            path = paths.timer_wheel_path(self.target.store_root)
            if not os.path.exists(path):
                return None
            precision = int(self.target.settings.get("timerPrecisionMs", "1000"))
            self._wheel = TimerWheel(path, timer_precision_of(precision), read_only=True)
        wheel = self._wheel
        precision = wheel.precision_ms
        start = now_ms // precision * precision
        nums = wheel.nums_between(start, TIMER_DIST_SECONDS[-1] * 1000 // precision)
        fill, low = {}, 0
        for bound in TIMER_DIST_SECONDS:
            high = bound * 1000 // precision
            fill[str(bound)] = int(nums[low:high].sum())
            low = high
        return {"read_time_ms": line.read_time_ms, "write_time_ms": line.write_time_ms,
                "queue_offset": line.queue_offset, "slots_done": line.slots_done,
                "parked": wheel.all_num(line.read_time_ms), "fill": fill}

    def _consumer_offsets(self) -> dict[str, dict[int, int]]:
        path = paths.config_path(self.target.store_root, paths.CONSUMER_OFFSET_CONFIG)
        try:
            modified = os.stat(path).st_mtime
        except FileNotFoundError:
            return {}
        if modified != self._offsets_cache[0]:
            table = config_docs.load_consumer_offsets(path).offset_table
            self._offsets_cache = (modified, table)
        return self._offsets_cache[1]

    def _groups(self, snapshot: Snapshot, written: int) -> dict[str, dict]:
        """Per topic@group: pulls, cold pulls, messages (the region); from consumerOffset.json
        as last persisted (every 5 s): the read position (CommitLog offset of the
        furthest-behind queue's committed offset) and the lag, in messages (max queue offset
        - committed offset, summed over queues) and in bytes (the stored sizes of those
        messages, read from the ConsumeQueue; past LAG_UNITS_READ_MAX units of a queue
        extrapolated from the ones read, and then ``lag_bytes_estimated``)."""
        groups: dict[str, dict] = {}
        for (kind, key), totals in snapshot.keys().items():
            if kind == StatsKeyKind.KEY_GROUP_GET:
                groups[key] = {"messages": totals.messages, "bytes": totals.size_bytes,
                               "pulls": totals.requests, "cold_pulls": totals.cold_requests}
        for key, queues in self._consumer_offsets().items():
            topic = key.partition("@")[0]
            entry = groups.setdefault(key, {"messages": 0, "bytes": 0, "pulls": 0,
                                            "cold_pulls": 0})
            known: list[int] = []
            lag_messages, estimated = 0, False
            lag_bytes: int | None = 0
            for queue_id, offset in queues.items():
                queue = self._queue(topic, queue_id)
                if queue is None:
                    continue
                physical = queue.physical_offset(offset)
                if physical is not None:
                    known.append(physical)
                behind, size, guessed = queue.lag(offset)
                lag_messages += behind
                if lag_bytes is not None:
                    lag_bytes = None if size is None else lag_bytes + size
                estimated = estimated or guessed
            entry["read_position"] = min(known) if known else written
            entry.update(lag_messages=lag_messages, lag_bytes=lag_bytes,
                         lag_bytes_estimated=estimated)
        return groups

    def _queue(self, topic: str, queue_id: int) -> "_QueueFiles | None":
        try:
            directory = paths.consume_queue_dir(self.target.store_root, topic, queue_id)
        except ValueError:
            return None
        file_size = self._cq_file_size or self._consume_queue_file_size(directory)
        return _QueueFiles(directory, file_size) if file_size else None

    def _consume_queue_file_size(self, directory: str) -> int | None:
        configured = self.target.settings.get("mappedFileSizeConsumeQueue")
        if configured:
            size = int(configured)
            self._cq_file_size = size + (-size % layout.CQ_STORE_UNIT_SIZE)
            return self._cq_file_size
        try:
            name = next(n for n in os.listdir(directory) if is_offset_file_name(n))
        except (OSError, StopIteration):
            return None
        self._cq_file_size = os.path.getsize(os.path.join(directory, name))
        return self._cq_file_size

    def _residency(self) -> tuple[list[dict], dict[str, list[int]]]:
        """CommitLog chunks per file, and (resident pages, pages, files) per store area."""
        seen: set[str] = set()
        commitlog, totals = [], {"commitlog": [0, 0, 0], "consumequeue": [0, 0, 0],
                                 "index": [0, 0, 0]}
        for name, path in _listing(self.target.commitlog_dir):
            seen.add(path)
            chunks = self.residency.chunks(path, self.chunk_bytes)
            if chunks is None:
                continue
            resident, pages = self.residency.resident_pages(path)
            _add(totals["commitlog"], resident, pages)
            commitlog.append({"base": int(name), "size": os.path.getsize(path),
                              "chunks": chunks.tolist()})
        root = self.target.store_root
        for area, files in (("consumequeue", _queue_files(root)),
                            ("index", _listing(paths.index_dir(root)))):
            for _, path in files:
                seen.add(path)
                _add(totals[area], *self.residency.resident_pages(path))
        self.residency.retain(seen)
        return commitlog, totals


LAG_UNITS_READ_MAX = 16384     # ConsumeQueue units read per queue for the lag in bytes
_UNIT = layout.CQ_STORE_UNIT_SIZE
# A ConsumeQueue unit: CommitLog offset (8), size (4), tags code (8), big-endian.
_UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
assert _UNIT_DTYPE.itemsize == _UNIT


class _QueueFiles:
    """Read-only look-ups in one queue's ConsumeQueue files (``file_size`` bytes each)."""

    def __init__(self, directory: str, file_size: int):
        self.directory = directory
        self.file_size = file_size

    def _units(self, queue_offset: int, count: int) -> np.ndarray:
        """Up to ``count`` units from ``queue_offset``, within one file (fewer at its end)."""
        position = queue_offset * _UNIT
        within = position % self.file_size
        count = min(count, (self.file_size - within) // _UNIT)
        path = paths.offset_file_path(self.directory, position - within)
        try:
            with open(path, "rb") as queue_file:
                data = os.pread(queue_file.fileno(), count * _UNIT, within)
        except OSError:
            return np.zeros(0, _UNIT_DTYPE)
        return np.frombuffer(data[:len(data) - len(data) % _UNIT], _UNIT_DTYPE)

    def physical_offset(self, queue_offset: int) -> int | None:
        """CommitLog offset of the unit at ``queue_offset`` (None: not written yet)."""
        units = self._units(queue_offset, 1)
        if not len(units) or units["size"][0] <= 0 or units["offset"][0] < 0:
            return None
        return int(units["offset"][0])

    def max_offset(self) -> int:
        """The queue offset after the last unit written (0 for an empty queue): the last
        file's written units end where its zero-filled rest begins."""
        names = [name for name, _ in _listing(self.directory)]
        if not names:
            return 0
        base = int(names[-1]) // _UNIT
        low, high = 0, self.file_size // _UNIT       # units [0, low) written, [high, ..) not
        while low < high:
            middle = (low + high) // 2
            units = self._units(base + middle, 1)
            if len(units) and units["size"][0] > 0:
                low = middle + 1
            else:
                high = middle
        return base + low

    def lag(self, committed: int) -> tuple[int, int | None, bool]:
        """(messages, bytes, bytes estimated?) between ``committed`` and the end; bytes
        None when none of those units can be read (their files expired)."""
        end = self.max_offset()
        behind = max(end - committed, 0)
        size, read, offset = 0, 0, committed
        while offset < end and read < LAG_UNITS_READ_MAX:
            units = self._units(offset, min(end - offset, LAG_UNITS_READ_MAX - read))
            if not len(units):
                break
            size += int(units["size"].clip(min=0).sum())
            read += len(units)
            offset += len(units)
        if read < behind:
            return behind, size * behind // read if read else None, True
        return behind, size, False


def _add(total: list[int], resident: int, pages: int) -> None:
    if pages:
        total[0] += resident
        total[1] += pages
        total[2] += 1


def _listing(directory: str) -> list[tuple[str, str]]:
    try:
        names = sorted(name for name in os.listdir(directory) if name.isdigit())
    except FileNotFoundError:
        return []
    return [(name, os.path.join(directory, name)) for name in names]


def _queue_files(store_root: str) -> list[tuple[str, str]]:
    files = []
    root = paths.consume_queue_root(store_root)
    try:
        topics = os.listdir(root)
    except FileNotFoundError:
        return []
    for topic in topics:
        try:
            queue_ids = os.listdir(os.path.join(root, topic))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for queue_id in queue_ids:
            files.extend(_listing(os.path.join(root, topic, queue_id)))
    return files


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None
