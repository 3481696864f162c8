# The scrubber's thread in the supervisor: low priority, rate-limited, figures for brokerStatus.
"""Runs :class:`pybroker.store.scrub.Scrubber` over the live store (docs/reliability.md).

A thread of the supervisor, one per generation (started after the workers, stopped before the
data plane closes), not a process of its own: its death must not end a generation, and it
needs no ring, eventfd or control-block line. The thread lowers its own CPU priority (nice 19)
and I/O priority (idle class, where the kernel offers ``ioprio_set``); the CRC scan runs in C
without the GIL, so the supervisor's event loop keeps its turn. It reads no further than the
flushed position (what is on disk) and the dispatched position (units that exist), at most
``storeScrubRateMegabytesPerSecond``, in steps of :data:`STEP_BYTES`; pages it read that were
not in the page cache before are given back (``POSIX_FADV_DONTNEED``) so a pass does not push
the consumers' pages out. Progress is saved every :data:`SAVE_INTERVAL_S` and at stop; the
figures go to the supervisor's section of the instrument region (``pybroker prof``) and to
:meth:`ScrubberThread.status` (brokerStatus, Prometheus).
"""
import ctypes
import logging
import os
import threading
import time

from pybroker import clock
from pybroker.tasks import start_thread
from pybroker._fast import pagecache
from pybroker.stats.region import StatsCounter, StatsWriter
from pybroker.store.control_block import ControlBlock
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.scrub import COMMITLOG, PHASE_DONE, Scrubber, ScrubState
from pybroker.store.settings import StoreConfig

__all__ = ["ScrubberThread", "STEP_BYTES"]

log = logging.getLogger("pybroker.proc.scrubber")

STEP_BYTES = 1 << 20
SAVE_INTERVAL_S = 10.0
IDLE_WAIT_S = 1.0                     # nothing to verify yet: look again after
_FINDINGS_LISTED_MAX = 5              # brokerStatus lists the first few findings
# ioprio_set(2) numbers per machine; IOPRIO_WHO_PROCESS = 1 (a thread id works there).
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
_IOPRIO_IDLE = 3 << 13


def _lower_priority() -> None:
    """This thread: nice 19, idle I/O class (best effort, logged when refused)."""
    thread_id = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread_id, 19)
    except OSError as error:
        log.warning("scrubber: cannot lower its CPU priority: %s", error)
    number = _IOPRIO_SET.get(os.uname().machine)
    if number is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, 1, thread_id, _IOPRIO_IDLE) != 0:
        log.info("scrubber: idle I/O priority refused (errno %d)", ctypes.get_errno())


class ScrubberThread:
    """The scrubber of one generation; :meth:`start`, :meth:`stop`, :meth:`status`."""

    def __init__(self, settings: StoreConfig, control: ControlBlock,
                 stats: StatsWriter | None):
        self.settings = settings
        self.control = control
        self.stats = stats
        self.rate_bytes_per_s = settings.store_scrub_rate_megabytes_per_second * 1_000_000
        self.pass_interval_ms = settings.store_scrub_pass_interval_seconds * 1000
        self.state = ScrubState.load(settings.store_path_root_dir)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    @property
    def enabled(self) -> bool:
        return self.rate_bytes_per_s > 0

    def start(self) -> None:
        if not self.enabled:
            log.info("scrubber off (storeScrubRateMegabytesPerSecond=0)")
            return
        self._thread = start_thread(self._run, "scrubber", self._failed, log)

    def stop(self) -> None:
        """Stop and save the progress (bounded: one step)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30.0)
            self._thread = None

    def _failed(self, error: BaseException) -> None:
        """The thread ended by an error (logged with its traceback by start_thread): the
        broker goes on serving, the scrubber's status shows the error."""
        self.error = f"{type(error).__name__}: {error}"

    # --- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        _lower_priority()
        control = self.control
        reader = MessageStoreReader(
            self.settings, control.dispatched_position,
            positions=lambda: (control.dispatched_position, control.written_position),
            store_changes=lambda: (control.commitlog_min_offset,
                                   control.topic_deletion_done))
        scrubber = Scrubber(reader, self.state, clock.now_ms)
        try:
            self._loop(scrubber)
        finally:
            self._save()
            reader.close()

    def _loop(self, scrubber: Scrubber) -> None:
        state, control = self.state, self.control
        saved = time.monotonic()
        while not self._stop.is_set():
            if state.phase == PHASE_DONE:
                wait_ms = state.pass_started_ms + self.pass_interval_ms - clock.now_ms()
                if state.passes or state.pass_started_ms:
                    if wait_ms > 0:
                        self._stop.wait(min(wait_ms / 1000, IDLE_WAIT_S))
                        continue
                scrubber.start_pass()
            limit = min(control.flushed_position, control.dispatched_position)
            started = time.monotonic()
            verified = self._step(scrubber, limit)
            self._publish()
            if time.monotonic() - saved >= SAVE_INTERVAL_S:
                self._save()
                saved = time.monotonic()
            pause = verified / self.rate_bytes_per_s - (time.monotonic() - started) \
                if verified else IDLE_WAIT_S
            if pause > 0:
                self._stop.wait(pause)

    def _step(self, scrubber: Scrubber, limit: int) -> int:
        """One step; the CommitLog pages it read cold leave the page cache again."""
        state = self.state
        before = state.position
        cold = self._cold_before(scrubber, before) if state.phase != PHASE_DONE else False
        verified = scrubber.step(limit, STEP_BYTES)
        if cold and state.position > before:
            self._drop_pages(scrubber, before, state.position)
        return verified

    def _cold_before(self, scrubber: Scrubber, position: int) -> bool:
        """The next step's CommitLog range is wholly out of the page cache."""
        commitlog = scrubber.reader.commitlog
        mapped_file = commitlog.mapped_file_queue.find_mapped_file_by_offset(position)
        if mapped_file is None:
            return False
        start = position - mapped_file.file_from_offset
        view = mapped_file.view(start, min(STEP_BYTES, mapped_file.wrote_position - start))
        if view is None:
            return False
        try:
            pages, cold_pages = pagecache.cold_pages([view])
            return pages > 0 and cold_pages == pages
        finally:
            view.release()
            mapped_file.release()

    def _drop_pages(self, scrubber: Scrubber, start: int, end: int) -> None:
        mapped_file = scrubber.reader.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            start)
        if mapped_file is None:
            return
        position = start - mapped_file.file_from_offset
        length = min(end - start, mapped_file.file_size - position)
        try:
            descriptor = os.open(mapped_file.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.posix_fadvise(descriptor, position, length, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)

    # --- figures -------------------------------------------------------------------------------
    def _publish(self) -> None:
        stats, state = self.stats, self.state
        if stats is None:
            return
        stats.set(StatsCounter.SCRUB_VERIFIED_BYTES, state.verified_bytes)
        stats.set(StatsCounter.SCRUB_POSITION, state.position)
        stats.set(StatsCounter.SCRUB_PASSES, state.passes)
        stats.set(StatsCounter.SCRUB_FINDINGS, len(state.findings))

    def _save(self) -> None:
        try:
            self.state.save(self.settings.store_path_root_dir)
        except OSError as error:
            log.error("scrubber: cannot save its progress: %s", error)

    def status(self) -> dict[str, str]:
        """brokerStatus keys (pybroker's): progress and findings of the scrubber."""
        state = self.state
        commitlog_findings = [f for f in state.findings if f.kind == COMMITLOG]
        texts = [f.text() for f in state.findings[:_FINDINGS_LISTED_MAX]]
        return {
            "scrubRateMegabytesPerSecond": str(self.rate_bytes_per_s // 1_000_000),
            "scrubState": ("off" if not self.enabled else "stopped: " + self.error
                           if self.error else "between passes" if state.phase == PHASE_DONE
                           else f"pass {state.passes + 1}: {state.phase}"),
            "scrubPasses": str(state.passes),
            "scrubPosition": str(state.position),
            "scrubVerifiedBytes": str(state.verified_bytes),
            "scrubLastPassTimestamp": str(state.last_pass_ms),
            "scrubDamagedRecords": str(len(commitlog_findings)),
            "scrubDamagedUnits": str(len(state.findings) - len(commitlog_findings)),
            "scrubFindings": " | ".join(texts) if texts else "none",
        }
