# A remoting worker's ACK_MESSAGE fast path: the C AckTaker over its RingPutter and handlers' ctx.
"""The door of a remoting worker's connections to the ACK_MESSAGE fast path
(docs/architecture/pop.md, "ACK_MESSAGE on the frame-taker path").

One :class:`FastAckPort` per worker holds :class:`pybroker._fast.pop.ack_take.AckTaker` over the
worker's send path (its :class:`~pybroker.proc.ring_putter.RingPutter`'s ``SendPath``) and the
handlers' context (metadata replica, store reader, POP slots, statistics). Each client connection
walks its receive buffer with an :class:`AckFrameTaker` (a frame taker,
pybroker/remoting/frame_taker.py, chained after the send fast path's port): the leading ACKs the
taker may take go into the ring as the handler's revive puts do, each becomes a pending put of
the putter (:class:`pybroker._fast.pop.ack_take.FastAck`), ended and answered by the worker's
``AckEnd`` (broker/pop/ack_fast.py ack_end) when its outcome comes back. While fast failure
finds the page cache busy every ACK goes to the handler (which is refused its put, and answers
SUCCESS, as Java).
"""
import asyncio

from pybroker._fast.pop.ack_take import AckTaker, FastAck
from pybroker.broker import send_fast
from pybroker.broker.pop import ack_fast
from pybroker.protocol import pop

__all__ = ["FastAckPort", "AckFrameTaker"]


class FastAckPort:
    """See the module docstring; ``ctx`` is the worker's BrokerContext (with ``pop`` and
    ``stats``), ``putter`` its RingPutter."""

    def __init__(self, config, ctx, putter, lookup=None, clock_ms=None):
        timer = send_fast.timer_settings(config)
        broker = config.broker
        ip, port = putter.store_host
        self.ctx = ctx
        self.putter = putter
        self.taker = AckTaker(
            putter.core, bytes(ip), port, pop.revive_topic(broker.broker_cluster_name).encode(),
            broker.revive_queue_num, timer.timer_topic, timer.enabled,
            timer.congestion_possible, timer.congest_limit, timer.max_delay_ms,
            timer.precision_ms, lookup or ack_fast.queue_lookup(ctx),
            config.remoting.frame_max_bytes, config.remoting.ext_fields_max, clock_ms)
        self.end = ack_fast.ack_end(ctx, self)
        # Answers made since the putter last handed out outcomes, per connection (its
        # write_frames): written once per batch (RingPutter.add_answers_flush).
        self._answers: dict = {}
        putter.add_answers_flush(self._flush_answers, self._answers)

    def set_timer_wheel(self, wheel) -> None:
        """The timerwheel's read-only bytes for the congestion rule (timer_slots.follow)."""
        self.taker.set_timer_wheel(wheel)

    def open(self, write_frames) -> "AckFrameTaker":
        """A connection's taker; ``write_frames(frames)`` writes answers to it now (after
        anything queued)."""
        return AckFrameTaker(self, write_frames)

    def answer(self, write_frames, frame: bytes) -> None:
        """Queue ``frame`` for the connection of ``write_frames`` (written at the flush)."""
        frames = self._answers.get(write_frames)
        if frames is None:
            self._answers[write_frames] = [frame]
        else:
            frames.append(frame)

    def _flush_answers(self) -> None:
        if self._answers:
            # Emptied in place: the putter's completion round watches this dict.
            answers = list(self._answers.items())
            self._answers.clear()
            for write_frames, frames in answers:
                write_frames(frames[0] if len(frames) == 1 else b"".join(frames))

    def accepted(self, loop: asyncio.AbstractEventLoop, write_frames, taken: list,
                 appender_asleep: bool) -> None:
        """The acks one take put: each a pending put of the putter, counted as the handler's
        requests are when they start (proc/remoting.py _local)."""
        putter, end = self.putter, self.end
        stats = self.ctx.stats
        for entry in taken:
            if stats is not None:
                token, started_ns = stats.request_started("ack"), stats.now_ns()
            else:
                token, started_ns = 0, 0
            putter.add_fast_put(entry[0], FastAck(end, write_frames, entry, token, started_ns))
        putter.puts_total += len(taken)
        # This read's acks are all in: the appender need not wait for the end of the turn
        # (as RevivePuts' records; one loop turn less per ack), and no deferred wake-up is
        # made only to be cancelled (its handle would cost the loop a turn).
        putter.wake_at_once(appender_asleep)
        if putter.fast_failure is not None:
            putter.fast_failure.committed(loop)


class AckFrameTaker:
    """One client connection's frame taker for the ACK_MESSAGE fast path."""

    __slots__ = ("_port", "_write_frames", "_loop")

    def __init__(self, port: FastAckPort, write_frames):
        self._port = port
        self._write_frames = write_frames
        # Its connection's loop (asyncio.get_running_loop() is a getpid system call a take
        # on Python 3.11).
        self._loop = asyncio.get_running_loop()

    def take(self, buffer, start: int, end: int) -> tuple[int, int, int]:
        """``(position, outcome, frame_length)`` after putting the leading fast acks."""
        port = self._port
        taker = port.taker
        fast_failure = port.putter.fast_failure
        taker.divert = fast_failure is not None and fast_failure.page_cache_busy()
        position, outcome, frame_length, taken, asleep = taker.take(buffer, start, end)
        if taken:
            port.accepted(self._loop, self._write_frames, taken, asleep)
        return position, outcome, frame_length

    def wait_for_space(self) -> asyncio.Future:
        """Resolved when a TAKE_FULL may be retried (the putter's next wake-up)."""
        self._port.putter.space_waits_total += 1
        return self._port.putter.wait_for_space()

    def close(self) -> None:
        """Nothing to release: answers to a closed connection are dropped by it
        (write_frames)."""
