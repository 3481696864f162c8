# The timer's re-puts: a due slot's runs chunk by chunk, Java's retry rule, the counters.
"""How :class:`pybroker.broker.timer.TimerStore` puts what it delivers (Java
TimerDequeuePutMessageService and doPut): a slot's runs chunk by chunk, a few chunks in flight
so a burst keeps the event loop turning, each run with Java's retry rule, each stored run
counted (figures, lateness, statsAll). A held chunk's runs go to a putter that writes them
where it puts them (``AssemblingPutter.put_assembled``: the send ring's reserved space) as
:class:`pybroker.broker.timer_runs.AssembledRun`; every other run as its bytes.
"""
import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable

from pybroker._fast import timer_reput
from pybroker._fast.stats import StatsHistogram, StatsWriter
from pybroker.broker.interfaces import AssemblingPutter, Putter
from pybroker.broker.timer_runs import CHUNKS_IN_FLIGHT, AssembledRun, Run
from pybroker.stats.recorder import PUT_LABEL_STATS_ONLY, Recorder
from pybroker.store.settings import StoreConfig
from pybroker.store.status import PutStatus

__all__ = ["TimerPuts", "TimerFigures", "PUT_TRIES_DEFAULT", "UNKNOWN_ERROR_PAUSE_S"]

log = logging.getLogger("pybroker.broker.timer")

PUT_TRIES_DEFAULT = 3           # Java without timerEnableRetryUntilSuccess
UNKNOWN_ERROR_PAUSE_S = 0.05    # Java holdMomentForUnknownError
_NO_RETRY = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED,
                       PutStatus.MESSAGE_SIZE_EXCEEDED, PutStatus.WHEEL_TIMER_NOT_ENABLE,
                       PutStatus.WHEEL_TIMER_MSG_ILLEGAL, PutStatus.WHEEL_TIMER_FLOW_CONTROL})
_RETRY = frozenset({PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.CREATE_MAPPED_FILE_FAILED,
                    PutStatus.OS_PAGE_CACHE_BUSY, PutStatus.TIMEOUT_CLEAN_QUEUE})


@dataclasses.dataclass
class TimerFigures:
    """Counters of the timer (the worker publishes them; tests read them)."""
    enqueued: int = 0           # units appended (cancel marks and rolls included)
    enqueued_due: int = 0       # delivered at enqueue: their slot was past
    dequeued: int = 0           # re-puts stored (rolls included)
    rolled: int = 0
    cancelled: int = 0          # messages a cancel mark dropped
    duplicates_dropped: int = 0  # a second unit of one message in one slot
    unreadable: int = 0         # units or records that could not be read (skipped)
    put_dropped: int = 0        # puts given up (Java: PUT_NO_RETRY, tries used up)
    slots_delivered: int = 0
    converted_ahead: int = 0    # messages put from runs converted before their slot was due
    own_times_read: int = 0     # running slots' messages whose own time was read when the
                                # slot began (not enqueued by this worker, not ahead)
    # real topic -> wheel-topic messages read (cancel marks, rolls and the due included:
    # Java's rocketmq_timer_enqueue_total)
    enqueued_by_topic: dict = dataclasses.field(default_factory=dict)
    # (real topic, bucket) -> [messages, seconds]: delivery time - birth of each message read
    # (Java's rocketmq_delay_message_latency, metric_names.DELAY_LATENCY_BUCKETS_S)
    delay_latency: dict = dataclasses.field(default_factory=dict)
    delivered_by_topic: dict = dataclasses.field(default_factory=dict)   # real topic -> count


class TimerPuts:
    """The re-puts of the timer (a mixin of TimerStore, whose attributes below it uses)."""

    putter: Putter | None
    assembling: AssemblingPutter | None
    settings: StoreConfig
    figures: TimerFigures
    recorder: Recorder
    stats: StatsWriter
    precision_ms: int
    now_ms: Callable[[], int]

    async def _put_chunks(self, chunks: Iterable[tuple[list[Run] | list[AssembledRun],
                                                       timer_reput.Assembly | None]],
                          slot_end_ms: int) -> None:
        """Put each chunk's runs (with its Assembly when the putter assembles them), a few
        chunks in flight: the puts of one under way while the next is built. A failing one
        cancels the others and raises (what was not put is delivered again)."""
        in_flight: list[asyncio.Future] = []
        assemblies: list[timer_reput.Assembly] = []
        try:
            for runs, assembly in chunks:
                if assembly is not None:
                    assemblies.append(assembly)
                in_flight.append(asyncio.ensure_future(  # tidy: allow (awaited)
                    self._put_all(runs, slot_end_ms, assembly)))
                if len(in_flight) >= CHUNKS_IN_FLIGHT:
                    await in_flight.pop(0)
                else:
                    await asyncio.sleep(0)
            await asyncio.gather(*in_flight)
        except BaseException:
            for task in in_flight:
                task.cancel()
            for assembly in assemblies:     # a task cancelled before it ran released none
                assembly.release()
            raise

    async def _put_all(self, runs: list[Run] | list[AssembledRun], slot_end_ms: int | None,
                       assembly: timer_reput.Assembly | None = None) -> None:
        """Put every run, all awaited together; each stored message's lateness after
        ``slot_end_ms`` is recorded (None: due at enqueue, not a slot's delivery);
        ``assembly`` (the runs' when assembled by the putter) released at the end."""
        try:
            if runs:
                await asyncio.gather(*(self._put_run(run, slot_end_ms) for run in runs))
        finally:
            if assembly is not None:
                assembly.release()

    async def _put_run(self, run: Run | AssembledRun, slot_end_ms: int | None) -> None:
        """One run with Java's retry rule (doPut): stored; refused for good; or retried after
        500 x precision / 1000 ms, three tries unless timerEnableRetryUntilSuccess."""
        assert self.putter is not None
        tries = 0
        while True:
            if isinstance(run, AssembledRun):
                assert self.assembling is not None
                result = await self.assembling.put_assembled(
                    run.assembly, run.run, run.topic, run.queue_id, run.sys_flag, True)
            else:
                result = await self.putter.put(run.records, run.topic, run.queue_id,
                                               run.messages, run.sys_flag, True,
                                               message_ids=False)
            status = result.status
            if status.stored:
                self._delivered(run.topic, run.messages, slot_end_ms)
                # Java's doPut counts the put under its topic in statsAll (TOPIC_PUT_NUMS),
                # not in rocketmq_messages_in_total.
                self.recorder.topic_put(run.topic, run.messages, result.wrote_bytes,
                                        PUT_LABEL_STATS_ONLY)
                return
            tries += 1
            unknown = status not in _NO_RETRY and status not in _RETRY
            give_up = status in _NO_RETRY or (unknown and self.settings.timer_skip_unknown_error)
            if not give_up and not self.settings.timer_enable_retry_until_success:
                give_up = tries >= PUT_TRIES_DEFAULT
            if give_up:
                log.error("timer: %d message(s) to %s-%d not delivered: %s after %d tries",
                          run.messages, run.topic, run.queue_id, status.name, tries)
                self.figures.put_dropped += run.messages
                return
            pause_s = 500 * self.precision_ms / 1000 / 1000
            await asyncio.sleep(pause_s + (UNKNOWN_ERROR_PAUSE_S if unknown else 0))

    def _delivered(self, topic: str, count: int, slot_end_ms: int | None) -> None:
        figures = self.figures
        figures.dequeued += count
        figures.delivered_by_topic[topic] = figures.delivered_by_topic.get(topic, 0) + count
        if slot_end_ms is not None:
            self.stats.record(StatsHistogram.TIMER_LATENESS_MS,
                              max(self.now_ms() - slot_end_ms, 0), count)
