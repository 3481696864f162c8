# pybroker._fast.selector: a remoting worker's epoll selector that calls its C readers in C.
"""The remoting worker's event-loop selector (docs/architecture/data-plane.md, "The loop's
C readers called by its selector").

The work of a send's two loop turns is C - the socket's reader
(:class:`~pybroker._fast.socket_reader.SocketReader`) and the completion round
(:class:`~pybroker._fast.wake.AsyncWakeReader`) - but asyncio reaches each through a turn of
``BaseEventLoop._run_once``: the selector's ``select`` and ``_key_from_fd``, the loop's
``_process_events`` and ``_add_callback``, ``Handle._run`` and ``loop.time`` twice. A
:class:`FastSelector` is a :class:`selectors.EpollSelector` (registration stays Python: it is
rare) whose ``select`` is C: ``epoll_wait``, and each ready fd whose key asks only for reads
and whose reader handle (not cancelled, no arguments) has one of those two C readers as its
callback is called here, in its handle's context, as ``Handle._run`` would call it - no
handle queued, no turn. Everything else is handed to asyncio as ``EpollSelector.select``
hands it (key and events, in epoll order), and the keys are looked up per event, so a reader
removed by one called before it in the same batch is not called.

While only C readers are ready the selector keeps waiting in C, up to the timeout asyncio
gave (``CLOCK_MONOTONIC``, the loop's clock; None: none, 0: one poll that does not block), or
to an earlier timer a reader scheduled meanwhile; it returns as soon as an event needs Python
(a Python reader, a writer, asyncio's self-pipe: signals and ``call_soon_threadsafe``),
the loop's ready queue is not empty (a reader's ``call_soon``, the deferred appender signal's
handle), the loop is stopping, or after ``ROUNDS_MAX`` polls, so asyncio's own work (timers,
cancelled-handle cleanup) runs at least that often under any load. A select entered with
callbacks already ready calls no reader itself (one poll, everything handed back): those
callbacks run before the events, as asyncio orders them. An exception of a reader goes to
``loop.call_exception_handler`` with the context ``Handle._run`` gives it. With the loop in
debug mode (its slow-callback report times each handle) the selector is plain epoll.
"""
import asyncio
import selectors

cimport cython
from asyncio.format_helpers import _format_callback_source

from cpython.exc cimport PyErr_CheckSignals, PyErr_SetFromErrno
from libc.errno cimport EINTR, errno
from libc.math cimport ceil
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from pybroker._fast.socket_reader cimport SocketReader
from pybroker._fast.wake cimport AsyncWakeReader


ROUNDS = ROUNDS_MAX
_EVENT_READ = selectors.EVENT_READ
_EVENT_WRITE = selectors.EVENT_WRITE


class FastSelector(selectors.EpollSelector):
    """An epoll selector whose ``select`` calls the loop's C readers itself (see the module
    docstring); plain epoll until :meth:`bind` gives it its loop."""

    def __init__(self):
        super().__init__()
        self._poller = None

    def bind(self, loop):
        """``loop`` (an asyncio.SelectorEventLoop made with this selector) is the one whose
        ready queue, stop request and exception handler the C readers' calls answer to."""
        self._poller = _Poller(self, loop)

    def select(self, timeout=None):
        poller = self._poller
        if poller is None or (<_Poller>poller).loop._debug:
            return selectors.EpollSelector.select(self, timeout)
        return (<_Poller>poller).select_c(timeout)


def new_event_loop():
    """An asyncio.SelectorEventLoop over a bound :class:`FastSelector` (the remoting worker's
    loop: ``asyncio.Runner(loop_factory=new_event_loop)``)."""
    selector = FastSelector()
    loop = asyncio.SelectorEventLoop(selector)
    selector.bind(loop)
    return loop


cdef inline double _monotonic():
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec + now.tv_nsec * 1e-9


cdef inline int _wait_ms(double seconds):
    """epoll_wait's timeout for ``seconds`` (> 0): rounded up, as EpollSelector rounds it,
    so a poll never ends before the time asked."""
    return <int>ceil(seconds * 1e3) if seconds < 2e6 else 2000000000


@cython.auto_pickle(False)
cdef class _Poller:
    """A FastSelector's C state: its epoll fd, key table and loop (selector.pxd)."""

    def __init__(self, selector, loop):
        if loop._selector is not selector:
            raise ValueError("the loop does not poll with this selector")
        self.loop = loop
        self._epfd = selector.fileno()
        self._fd_to_key = selector._fd_to_key
        self._ready = loop._ready

    cdef list select_c(self, object timeout):
        cdef list ready = []
        cdef bint forever = timeout is None
        cdef double deadline = 0.0, left
        cdef int wait_ms = -1, count, index
        cdef int rounds = 0
        cdef bint call = not self._ready
        if not forever:
            left = timeout
            wait_ms = 0 if left <= 0 else _wait_ms(left)
            deadline = _monotonic() + left
        while True:
            with nogil:
                count = epoll_wait(self._epfd, self._events, EVENTS_MAX, wait_ms)
            if count < 0:
                if errno != EINTR:
                    PyErr_SetFromErrno(OSError)
                PyErr_CheckSignals()        # a handler's exception goes up, as epoll.poll's
                count = 0
            for index in range(count):
                self._event(self._events[index].data.fd, self._events[index].events,
                            ready, call)
            rounds += 1
            if (ready or not call or wait_ms == 0 or self._ready or self.loop._stopping
                    or rounds >= ROUNDS_MAX):
                return ready
            scheduled = self.loop._scheduled
            if scheduled:       # a reader may have scheduled a timer earlier than the timeout
                left = (<object>scheduled[0])._when
                if forever or left < deadline:
                    forever = False
                    deadline = left
            if not forever:
                left = deadline - _monotonic()
                if left <= 0:
                    return ready
                wait_ms = _wait_ms(left)

    cdef int _event(self, int fd, unsigned int happened, list ready, bint call) except -1:
        cdef int events = 0
        key = self._fd_to_key.get(fd)       # now: an earlier reader may have removed it
        if key is None:
            return 0
        if call:
            handle = _c_reader_handle(<tuple>key)
            if handle is not None:
                self._call(handle)
                return 0
        if happened & ~EPOLLIN:
            events |= _EVENT_WRITE
        if happened & ~EPOLLOUT:
            events |= _EVENT_READ
        ready.append((key, events & (<tuple>key)[2]))
        return 0

    cdef int _call(self, object handle) except -1:
        callback = handle._callback
        try:
            handle._context.run(callback)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            source = _format_callback_source(callback, ())
            context = {"message": f"Exception in callback {source}", "exception": exc,
                       "handle": handle}
            if handle._source_traceback:
                context["source_traceback"] = handle._source_traceback
            self.loop.call_exception_handler(context)
        return 0


cdef object _c_reader_handle(tuple key):
    """The reader handle of a read-only ``key`` when its callback is a C reader called without
    arguments and it is not cancelled, else None (a SelectorKey: fileobj, fd, events, data;
    asyncio's data: the reader and writer handles)."""
    data = key[3]
    if key[2] != _EVENT_READ or type(data) is not tuple:
        return None
    handle = (<tuple>data)[0]
    if handle is None or handle._cancelled or handle._args:
        return None
    kind = type(handle._callback)
    if kind is SocketReader or kind is AsyncWakeReader:
        return handle
    return None
