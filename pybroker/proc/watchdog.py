# The supervisor's watchdog: a worker whose main loop stopped turning while work waits is hung.
"""Hang detection for one generation (docs/architecture/processes.md, "Crash model").

Every worker counts its main-loop turns in its control-block line (``heartbeats``): the
appender, dispatcher and flusher once per loop turn (they sleep at most a second, or the
flush interval), each remoting worker once a second from its event loop. Once a second the
supervisor looks at each counter. A worker is hung when its counter has not moved for
``workerHangTimeoutMillis`` (plus its longest legitimate sleep) while work waits for it:

* appender: a send ring holds requests;
* dispatcher: the CommitLog is written beyond the dispatched position;
* flusher: the CommitLog is written beyond the flushed position;
* remoting, gRPC and timer workers: always (their event loops must turn; the timer's
  beats from a task of its loop).

A hung worker is logged and killed with SIGKILL; its death ends the generation like any other
(the next one starts with abnormal recovery), so a stopped or dead-locked process cannot keep
the broker silent. ``kill -STOP`` of the appender is the test.
"""
import logging
import os
import signal
from collections.abc import Callable

from pybroker.store.control_block import (APPENDER, DISPATCHER, FLUSHER, grpc_worker,
                                         remoting_worker)

__all__ = ["Watchdog"]

log = logging.getLogger("pybroker.proc.watchdog")

_LOOP_WAIT_S = 1.0            # the longest sleep of the appender, dispatcher and remoting beat


class Watchdog:
    """Watches the workers of ``plane`` (a pybroker.proc.dataplane.DataPlane).

    ``children``: pid -> worker name (the supervisor's live table); ``timeout_ms``:
    workerHangTimeoutMillis; ``flush_interval_ms``: the flusher's longest sleep.
    """

    def __init__(self, plane, children: dict[int, str], timeout_ms: int,
                 flush_interval_ms: int, kill: Callable[[int, int], None] = os.kill):
        self.plane = plane
        self.control = plane.control
        self.children = children
        self.timeout_s = timeout_ms / 1000
        self.flush_interval_s = flush_interval_ms / 1000
        self.kill = kill
        # name -> (heartbeats seen, monotonic time since when nothing moved with work waiting)
        self._seen: dict[str, tuple[int, float]] = {}
        self.killed: list[str] = []

    def _slot(self, name: str) -> int | None:
        if name.startswith("remoting-"):
            return remoting_worker(int(name.split("-", 1)[1])).slot
        if name.startswith("grpc-"):
            return grpc_worker(int(name.split("-", 1)[1]),
                               self.plane.config.remoting.remoting_workers).slot
        if name == "timer":
            return self.plane.timer_slot
        return {worker.name: worker.slot for worker in (APPENDER, DISPATCHER, FLUSHER)}.get(name)

    def _work_waits(self, name: str) -> bool:
        control = self.control
        if name == "appender":
            return any(region.ring.used_bytes() > 0 for region in self.plane.rings)
        if name == "dispatcher":
            return control.written_position > control.dispatched_position
        if name == "flusher":
            return control.written_position > control.flushed_position
        return True

    def _allowance_s(self, name: str) -> float:
        sleep_s = self.flush_interval_s if name == "flusher" else _LOOP_WAIT_S
        return self.timeout_s + max(sleep_s, _LOOP_WAIT_S)

    def check(self, now: float) -> None:
        """One look at every worker (call once a second, ``now`` = time.monotonic())."""
        for pid, name in list(self.children.items()):
            slot = self._slot(name)
            if slot is None:
                continue
            beats = self.control.worker(slot).heartbeats
            seen = self._seen.get(name)
            if seen is None or beats != seen[0] or not self._work_waits(name):
                self._seen[name] = (beats, now)
                continue
            stalled_s = now - seen[1]
            if stalled_s < self._allowance_s(name):
                continue
            log.error("worker %s (pid %d) made no progress for %.1f s while work waited for it "
                      "(workerHangTimeoutMillis=%d): killing it; the generation restarts",
                      name, pid, stalled_s, int(self.timeout_s * 1000))
            self.killed.append(name)
            self._seen[name] = (beats, now)
            try:
                self.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
