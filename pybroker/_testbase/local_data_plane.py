# One data plane in forked processes without a supervisor: for tests and micro benchmarks.
"""A data plane (control block, send and completion rings, eventfds, the appender, dispatcher
and flusher processes) built the way the supervisor builds one, over a store directory, for
tests/unit/proc/test_data_plane.py and benchmarks/micro/test_bench_data_plane.py.

Producers are the caller's own forked functions using ``rings[i]``/``completions[i]`` and
``wakes.workers[i]`` (slot i). :meth:`LocalDataPlane.stop_workers` stops in the supervisor's
order; :meth:`LocalDataPlane.close` kills what is left and unmaps everything.
"""
import functools
import os
import pathlib
import signal
import time
import traceback
from collections.abc import Callable

from pybroker.proc.appender import run_appender
from pybroker.proc.children import STOP_SIGNAL
from pybroker.proc.dispatcher import run_dispatcher
from pybroker.proc.flusher import flusher_owns_confirm, run_flusher
from pybroker.proc.shared import SharedRegion, create_byte_ring, create_completion_ring
from pybroker.proc.wake import DataPlaneWakes, WakeFd
from pybroker.store import lock_file
from pybroker.store.control_block import BrokerState, ControlBlock
from pybroker.store.queue_offsets import TABLE_BYTES, initialise
from pybroker.store.settings import StoreConfig

__all__ = ["LocalDataPlane", "wait_exit", "fork_function"]


def fork_function(function: Callable[..., object], *args: object) -> int:
    """Run ``function(*args)`` in a forked child that exits 0, or 1 (traceback on stderr)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            function(*args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait_exit(pid: int, deadline_s: float) -> int:
    """Exit code of child ``pid``; past the deadline it is killed and AssertionError raised."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"process {pid} did not exit within {deadline_s} s")


class LocalDataPlane:
    """Regions under ``run_dir`` for ``producers`` producer slots over ``settings``' store."""

    def __init__(self, run_dir: pathlib.Path, settings: StoreConfig, producers: int,
                 ring_bytes: int, completion_slots: int):
        self.settings = settings
        self.root = settings.store_path_root_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        os.makedirs(self.root, exist_ok=True)
        lock_file.create_abort_file(self.root)        # the store is "open" from here on
        self.control = ControlBlock(str(run_dir / "control"), create=True)
        if settings.sync_flush:
            # As DataPlane.create outside controller mode: the flusher owns the confirm offset.
            self.control.publish("confirm_position", 0)
        # memfds, as the supervisor's (proc/dataplane.py): no writeback of the rings' pages
        self.rings = [create_byte_ring(str(run_dir / f"send-{i}"), ring_bytes, in_memory=True)
                      for i in range(producers)]
        self.completions = [create_completion_ring(str(run_dir / f"done-{i}"),
                                                   completion_slots, in_memory=True)
                            for i in range(producers)]
        self.wakes = DataPlaneWakes(WakeFd(), WakeFd(), WakeFd(),
                                    [WakeFd() for _ in range(producers)])
        # The queue offset table start_workers' dispatcher publishes (store/queue_offsets.py).
        self.queue_offsets = SharedRegion.create(str(run_dir / "queue-offsets"), TABLE_BYTES,
                                                 populate=False)
        initialise(self.queue_offsets.buffer)
        self.pids: dict[str, int] = {}

    def fork(self, name: str, function: Callable[..., object], *args: object) -> int:
        """Fork ``function(*args)`` as the child called ``name``."""
        pid = self.pids[name] = fork_function(function, *args)
        return pid

    def wait(self, name: str, deadline_s: float) -> int:
        """Exit code of the child called ``name``, which is forgotten (see :func:`wait_exit`)."""
        return wait_exit(self.pids.pop(name), deadline_s)

    def start_workers(self) -> None:
        """Fork the appender, the dispatcher and the flusher."""
        self.fork("appender", run_appender, self.settings, [r.ring for r in self.rings],
                  [c.ring for c in self.completions], self.control, self.wakes)
        self.fork("dispatcher", functools.partial(
            run_dispatcher, queue_offsets=self.queue_offsets.buffer),
            self.settings, self.control, self.wakes)
        self.fork("flusher", functools.partial(
            run_flusher, owns_confirm=flusher_owns_confirm(self.settings.sync_flush, False)),
            self.settings, self.control, self.wakes)

    def stop_workers(self, deadline_s: float = 20) -> list[int]:
        """The supervisor's order: no more appends, dispatch the rest, then the last flush
        writes the checkpoint with the dispatcher's final timestamps. Exit codes, in order."""
        self.control.broker_state = int(BrokerState.STOPPING)
        self.wakes.appender.signal()
        codes = [self.wait("appender", deadline_s)]
        for name in ("dispatcher", "flusher"):
            os.kill(self.pids[name], STOP_SIGNAL)
            codes.append(self.wait(name, deadline_s))
        return codes

    def kill_all(self) -> None:
        """SIGKILL every child still recorded (crash tests; clean-up)."""
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_exit(pid, 10)
        self.pids.clear()

    def close(self) -> None:
        """Kill what is left, unmap the regions, close the eventfds."""
        self.kill_all()
        for region in self.rings + self.completions + [self.queue_offsets]:
            region.close()
        wakes = self.wakes
        for wake_fd in (wakes.appender, wakes.dispatcher, wakes.flusher, *wakes.workers):
            wake_fd.close()
        self.control.close()
