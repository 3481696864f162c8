"""The remoting worker's selector (pybroker._fast.selector) calls the loop's C readers itself,
without a Python frame or a loop turn, and leaves everything else to asyncio as it was.

Method: real eventfds (pybroker._fast.wake.WakeFd) read by real AsyncWakeReaders and a real
socket pair on the worker's loop (``selector.new_event_loop``), either run by asyncio or polled
with ``select`` directly: a reader that signals its own eventfd keeps the loop busy in C; a
thread signalling every millisecond is a reader busy from outside. Counted under a profile
hook: Python frames (of .py files only: the debug flavour's linetrace reports Cython's frames
too) and ``_run_once`` calls (loop turns). Python readers, timers (also one a reader schedules
while the selector waits), ``call_soon`` and the timeout keep their times; a reader removed by
the one before it in a batch is not called; a reader's exception reaches the loop's exception
handler as ``Handle._run`` sends it.
"""
import asyncio
import functools
import socket
import sys
import threading
import time

import pytest

from pybroker._fast.selector import ROUNDS, FastSelector, new_event_loop
from pybroker._fast.wake import AsyncWakeReader, WakeFd

pytestmark = pytest.mark.unit


@pytest.fixture
def loop():
    loop = new_event_loop()
    assert isinstance(loop._selector, FastSelector)
    yield loop
    loop.close()


@pytest.fixture
def wakes():
    made = []

    def make():
        made.append(WakeFd())
        return made[-1]
    yield make
    for wake in made:
        wake.close()


def _reader(loop, wake, on_wake):
    reader = AsyncWakeReader(loop, wake, [], on_wake)
    reader.start()          # registers the eventfd and runs one round
    return reader


def _self_signalling(loop, wake):
    """A C reader whose every round signals its own eventfd again: busy in C for ever."""
    return _reader(loop, wake, wake.signal)


class _Ticker:
    """A thread that signals an eventfd every millisecond until stopped."""

    def __init__(self, wake):
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.001):
            self._wake.signal()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def test_c_readers_run_without_python_frames_or_loop_turns(loop, wakes):
    """A busy C reader is called ROUNDS times per loop turn, with no Python frame of its
    own: the turns' asyncio frames are all there is (asyncio's loop: a turn per call)."""
    reader = _self_signalling(loop, wakes())
    frames = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith(".py"):
            frames.append(frame.f_code.co_name)
    loop.call_later(0.2, loop.stop)
    rounds = reader.rounds
    sys.setprofile(hook)
    try:
        loop.run_forever()
    finally:
        sys.setprofile(None)
    rounds = reader.rounds - rounds
    turns = frames.count("_run_once")
    assert rounds > 1000, rounds
    assert turns * (ROUNDS // 2) <= rounds, (turns, rounds)
    assert len(frames) * 4 < rounds, (len(frames), rounds)


def test_python_reader_timer_and_call_soon_keep_their_times(loop, wakes):
    """While a C reader is called every millisecond (from a thread), a timer a reader
    scheduled meanwhile fires on time, the call_soon it makes runs before any further C
    read, and a Python reader's socket is served at the poll that finds it readable."""
    wake = wakes()
    left, right = socket.socketpair()
    seen = {}

    def on_wake():
        if "scheduled" not in seen:
            seen["scheduled"] = loop.time()
            loop.call_later(0.03, fired)

    def fired():
        seen["late"] = loop.time() - seen["scheduled"] - 0.03
        seen["fired_rounds"] = reader.rounds
        loop.call_soon(soon)
        right.send(b"x")

    def soon():
        seen["soon_rounds"] = reader.rounds

    def readable():
        left.recv(16)
        seen["read_rounds"] = reader.rounds
        loop.call_later(0.02, loop.stop)
    reader = _reader(loop, wake, lambda: None)
    reader.on_wake = on_wake
    loop.add_reader(left.fileno(), readable)
    try:
        with _Ticker(wake):
            loop.run_forever()
    finally:
        loop.remove_reader(left.fileno())
        left.close()
        right.close()
    assert seen["late"] < 0.035, seen        # not ROUNDS ticks late (64 ms or more)
    assert seen["soon_rounds"] == seen["fired_rounds"], seen
    assert seen["read_rounds"] - seen["fired_rounds"] <= 2, seen
    assert reader.rounds - seen["fired_rounds"] >= 5, "the C reader stayed busy"


def test_the_timeout_is_honoured(loop, wakes):
    """select(0) polls once, select(t) waits t in C through C reads (not ROUNDS reads
    long), select(None) with a reader always ready ends after ROUNDS polls."""
    selector = loop._selector
    started = time.monotonic()
    assert selector.select(0) == []
    assert time.monotonic() - started < 0.01
    started = time.monotonic()
    assert selector.select(0.05) == []
    assert 0.05 <= time.monotonic() - started < 0.5
    wake = wakes()
    reader = _reader(loop, wake, lambda: None)
    wake.signal()
    started = time.monotonic()
    assert selector.select(0.05) == []
    assert 0.05 <= time.monotonic() - started < 0.5
    assert wake.wakeups == 1 and reader.rounds == 2     # start's round and this one
    with _Ticker(wake):
        time.sleep(0.005)
        started = time.monotonic()
        assert selector.select(0.01) == []
        elapsed = time.monotonic() - started
    # Not ROUNDS polls long (a tick a millisecond: 64 ms or more).
    assert 0.01 <= elapsed < 0.045, elapsed
    busy = _self_signalling(loop, wakes())
    rounds = busy.rounds
    assert selector.select(None) == []
    assert busy.rounds - rounds == ROUNDS


def test_python_events_are_handed_to_asyncio(loop, wakes):
    """A Python reader's key comes back as EpollSelector gives it; the C reader ready in the
    same poll is called, and not handed back."""
    wake = wakes()
    reader = _reader(loop, wake, lambda: None)
    left, right = socket.socketpair()
    try:
        loop.add_reader(left.fileno(), lambda: None)
        right.send(b"x")
        wake.signal()
        rounds = reader.rounds
        ready = loop._selector.select(1)
        assert [(key.fd, events) for key, events in ready] == [(left.fileno(), 1)]
        assert reader.rounds == rounds + 1
        loop.remove_reader(left.fileno())
    finally:
        left.close()
        right.close()


def test_callbacks_ready_before_the_poll_run_before_its_reads(loop, wakes):
    """A select entered with callbacks ready (a call_soon) calls no reader: the poll's events
    all go back to asyncio, which runs them after those callbacks, as its own loop does."""
    wake = wakes()
    reader = _reader(loop, wake, lambda: None)
    wake.signal()
    loop.call_soon(lambda: None)
    rounds = reader.rounds
    ready = loop._selector.select(0)
    assert [key.fd for key, _ in ready] == [wake.fd] and reader.rounds == rounds
    loop._ready.clear()
    assert loop._selector.select(0) == [] and reader.rounds == rounds + 1


def test_a_reader_removed_by_an_earlier_one_is_not_called(loop, wakes):
    """Two C readers ready in one poll, each removing the other: only the first is called."""
    first, second = wakes(), wakes()
    called = []

    def remover(name, other):
        called.append(name)
        loop.remove_reader(other.fd)
    _reader(loop, first, functools.partial(called.append, "start"))
    _reader(loop, second, functools.partial(called.append, "start"))
    loop._selector.get_key(first.fd).data[0]._callback.on_wake = \
        functools.partial(remover, "first", second)
    loop._selector.get_key(second.fd).data[0]._callback.on_wake = \
        functools.partial(remover, "second", first)
    first.signal()
    second.signal()
    assert loop._selector.select(0) == []
    assert called[:2] == ["start", "start"]
    assert len(called[2:]) == 1, called


def _exception_context(loop, wake):
    contexts = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))

    def fail():
        raise ValueError("reader")
    reader = AsyncWakeReader(loop, wake, [], lambda: None)
    reader.start()
    reader.on_wake = fail
    wake.signal()
    loop.call_later(0.05, loop.stop)
    loop.run_forever()
    reader.stop()
    return [dict(context, message=context["message"].replace(repr(reader), "READER"))
            for context in contexts]


def test_a_reader_exception_reaches_the_exception_handler(loop, wakes):
    """As Handle._run sends it: the same context keys and message as asyncio's loop gives."""
    contexts = _exception_context(loop, wakes())
    plain = asyncio.SelectorEventLoop()
    try:
        expected = _exception_context(plain, wakes())
    finally:
        plain.close()
    assert len(contexts) == 1 and len(expected) == 1
    context, reference = contexts[0], expected[0]
    assert sorted(context) == sorted(reference) == ["exception", "handle", "message"]
    assert isinstance(context["exception"], ValueError)
    assert context["message"] == reference["message"] == "Exception in callback READER()"
    assert type(context["handle"]) is asyncio.Handle


def test_debug_mode_leaves_every_event_to_asyncio(loop, wakes):
    """A loop in debug mode times each handle: its C readers go through asyncio's turn."""
    wake = wakes()
    reader = _reader(loop, wake, lambda: None)
    loop.set_debug(True)
    wake.signal()
    rounds = reader.rounds
    ready = loop._selector.select(0)
    assert [key.fd for key, _ in ready] == [wake.fd] and reader.rounds == rounds
