# Forking broker processes: names, life tied to the parent, and who may stop them.
"""How the supervisor (and standalone mode) start child processes (docs/architecture/processes.md).

Signals. Only the supervisor decides when a child stops. SIGTERM and SIGINT sent to the whole
process group (Ctrl-C in a terminal, ``kill -TERM -- -PGID``, systemd's default
``KillMode=control-group``) must stop the broker in order, not cut a worker short: every child
ignores both, and the supervisor stops a child with :data:`STOP_SIGNAL` (SIGUSR1). The signals
(and STOP_SIGNAL) are blocked around ``fork()`` so that one arriving in between is neither lost
for the parent nor acted on by the child before it ignores it. A child starts with STOP_SIGNAL
blocked and unblocks it with :func:`accept_stop` once its handler is installed: a stop sent
earlier (a generation stopped right after "boot success", while a worker still starts) waits in
the kernel instead of killing the worker by SIGUSR1's default action.

Life. Every child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``): a
``kill -9`` of the supervisor is a ``kill -9`` of the whole broker, including the embedded
NameServer, and nothing is left holding a port.

Memory. A child shares the parent's pages copy-on-write, the Python objects of every module
imported before the fork among them; a full collection of Python's cyclic garbage collector
writes into the header of every object it tracks, so it would copy each of those pages into
every process that runs one. :func:`fork_child` freezes the objects the parent tracks before
it forks (``gc.freeze()``: the collector of either side never visits them again), so the
pages stay shared; the supervisor gives its own back to the collector with :func:`thaw` once
the children that shared them are gone (a generation's end), so garbage cycles made of them
are still collected (docs/architecture/processes.md).
"""
import ctypes
import gc
import logging
import os
import signal
from collections.abc import Callable

from pybroker import logs

__all__ = ["STOP_SIGNAL", "accept_stop", "fork_child", "die_with_parent", "set_process_title",
           "thaw"]

log = logging.getLogger("pybroker.proc.children")

# The supervisor's "finish and exit" request to a child.
STOP_SIGNAL = signal.SIGUSR1
_GROUP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PROCESS_NAME_BYTES_MAX = 15      # the kernel's comm field, without its NUL


def fork_child(name: str, main: Callable[[], int | None]) -> int:
    """Fork a child running ``main()`` (its return value is the exit status, None = 0);
    returns the child's pid in the parent. The child is named ``pb-<name>``, logs as
    ``name``, ignores SIGTERM/SIGINT and dies with its parent."""
    parent_pid = os.getpid()
    gc.freeze()          # the pages of the parent's objects stay shared (module docstring)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS | {STOP_SIGNAL})
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return pid
    status = 1
    try:
        for number in _GROUP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        signal.signal(STOP_SIGNAL, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set(blocked) | {STOP_SIGNAL})   # accept_stop
        logs.set_process_name(name)
        die_with_parent(parent_pid)
        set_process_title(name)
        result = main()
        status = 0 if result is None else int(result)
    except BaseException:
        log.exception("%s failed", name)
    finally:
        logging.shutdown()
        os._exit(status)


def thaw() -> None:
    """Give the objects frozen at earlier forks back to the garbage collector (in the parent,
    once the children that share their pages have exited)."""
    gc.unfreeze()


def accept_stop() -> None:
    """Let the supervisor's stop request in: called by a child right after it installed its
    STOP_SIGNAL handler. A request sent before (blocked since the fork) is delivered now."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {STOP_SIGNAL})


def set_process_title(name: str) -> None:
    """Name the process ``pb-<name>`` in /proc/<pid>/comm (ps, top, psutil ``name()``): all
    children share the supervisor's command line, and operators and crash tests must tell the
    appender from the flusher."""
    title = f"pb-{name}".encode()[:_PROCESS_NAME_BYTES_MAX]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(title), 0, 0, 0)
    except (OSError, AttributeError) as error:
        log.warning("cannot name the process %s: %s", name, error)


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies; exit at once if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError) as error:
        log.warning("cannot tie this process's life to its parent: %s", error)
    if os.getppid() != parent_pid:      # the parent died before prctl took effect
        os._exit(1)
