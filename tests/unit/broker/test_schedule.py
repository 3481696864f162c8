# Tests of the delay (schedule) service over a real store with an injected clock.
"""Goal: delayed messages reach their real topic/queue exactly when due (their properties kept
as Java keeps them: DELAY, WAIT, REAL_*), progress survives a restart through delayOffset.json,
nothing is delivered twice, and a round that raises neither stops delivery nor goes unlogged.
Method: DELAY sends through the real send handler into a real MessageStore on tmp_path whose
clock the test sets; ScheduleService.run_once is driven with explicit times, ScheduleService.run
(the supervisor's loop) on the real clock with a putter that raises.
"""
import asyncio
import importlib.util
import logging
import pathlib
import time

import pytest

from pybroker import clock
from pybroker.broker import schedule, send
from pybroker.errors import ServiceFailedError
from pybroker.protocol.codes import ResponseCode
from pybroker.store import config_docs, paths

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
T0 = 1_800_000_000_000


@pytest.fixture
def broker(tmp_path):
    clock = [T0]
    created = harness.Broker(tmp_path, clock_ms=lambda: clock[0])
    created.clock = clock
    yield created
    created.close()


def service(broker, **kwargs):
    path = paths.config_path(str(broker.store.store_root), paths.DELAY_OFFSET_CONFIG)
    return schedule.ScheduleService(broker.store, broker.putter,
                                    broker.config.derived.delay_levels_ms, path, **kwargs)


def send_delayed(broker, level: int, body: bytes, queue_id: int = 1) -> None:
    response = broker.call(send.handle_send_message, harness.send_request(
        "java", body, queue_id=queue_id, properties=harness.properties_text(
            DELAY=str(level), TAGS="tg", WAIT="true")))
    assert response.code == ResponseCode.SUCCESS


def test_delivers_when_due_and_only_once(broker):
    send_delayed(broker, 1, b"one")
    send_delayed(broker, 2, b"two", queue_id=3)
    send_delayed(broker, 1, b"three")
    delay = service(broker, persist_interval_ms=0)
    assert harness.run(delay.run_once(T0 + 999)) == 0
    assert harness.run(delay.run_once(T0 + 1000)) == 2
    delivered = broker.records(harness.TOPIC, 1)
    assert [bytes(r.body) for r, _ in delivered] == [b"one", b"three"]
    for _, properties in delivered:
        # Java keeps the schedule record's properties (consumers read getDelayTimeLevel()).
        assert properties["DELAY"] == "1" and properties["WAIT"] == "true"
        assert properties["REAL_TOPIC"] == harness.TOPIC and properties["TAGS"] == "tg"
        assert properties["REAL_QID"] == "1" and properties["CLUSTER"]
    assert delay.offset_table == {1: 2}
    assert harness.run(delay.run_once(T0 + 5000)) == 1
    assert [bytes(r.body) for r, _ in broker.records(harness.TOPIC, 3)] == [b"two"]
    saved = config_docs.load_delay_offsets(delay.offsets_path).offset_table
    assert saved == {1: 2, 2: 1}
    again = service(broker, persist_interval_ms=0)
    assert again.offset_table == saved
    assert harness.run(again.run_once(T0 + 10_000_000)) == 0
    assert len(broker.records(harness.TOPIC, 1)) == 2


def test_stops_at_the_first_message_not_due(broker):
    send_delayed(broker, 3, b"early")          # 10 s
    broker.clock[0] = T0 + 5000
    send_delayed(broker, 3, b"late")
    delay = service(broker)
    assert harness.run(delay.run_once(T0 + 12_000)) == 1
    assert delay.offset_table == {3: 1}
    assert harness.run(delay.run_once(T0 + 15_000)) == 1


def test_persist_interval_bounds_file_writes(broker):
    send_delayed(broker, 1, b"x")
    delay = service(broker, persist_interval_ms=60_000)
    delay._persisted_ms = T0
    assert harness.run(delay.run_once(T0 + 1000)) == 1
    assert config_docs.load_delay_offsets(delay.offsets_path).offset_table == {}
    delay.persist()
    assert config_docs.load_delay_offsets(delay.offsets_path).offset_table == {1: 1}


class _RaisingPutter:
    """The store's putter, but the first ``failures`` puts raise ``error``."""

    def __init__(self, putter, error: Exception, failures: int = 1):
        self.putter, self.error, self.failures = putter, error, failures

    async def put(self, *args):
        if self.failures:
            self.failures -= 1
            raise self.error
        return await self.putter.put(*args)


async def _run_until(delay, done, timeout_s: float = 10.0):
    """Run delay.run() until ``done()``; the loop's own end (an error) fails the wait."""
    task = asyncio.get_running_loop().create_task(delay.run())
    deadline = time.monotonic() + timeout_s
    try:
        while not done():
            assert not task.done(), f"the delay loop ended: {task.exception()!r}"
            assert time.monotonic() < deadline, "not delivered in time"
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_round_that_raises_is_logged_and_delivery_goes_on(tmp_path, caplog):
    # Stored a minute ago: a level-1 message is due at once on the real clock.
    broker = harness.Broker(tmp_path, clock_ms=lambda: clock.now_ms() - 60_000)
    try:
        send_delayed(broker, 1, b"late")
        delay = schedule.ScheduleService(
            broker.store, _RaisingPutter(broker.putter, RuntimeError("ring gone")),
            broker.config.derived.delay_levels_ms,
            paths.config_path(str(tmp_path), paths.DELAY_OFFSET_CONFIG), failure_pause_ms=200)
        with caplog.at_level(logging.ERROR, logger="pybroker.broker.schedule"):
            asyncio.run(_run_until(delay, lambda: broker.records(harness.TOPIC, 1)))
        assert [bytes(r.body) for r, _ in broker.records(harness.TOPIC, 1)] == [b"late"]
        failed = [r for r in caplog.records if "delay delivery" in r.getMessage()]
        assert len(failed) == 1 and "ring gone" in failed[0].getMessage()
        assert failed[0].exc_info is not None     # the cause's traceback
        # The loop's end persisted the offset.
        assert config_docs.load_delay_offsets(delay.offsets_path).offset_table == {1: 1}
    finally:
        broker.close()


@pytest.mark.parametrize("error, failures, ends_with", [
    (AssertionError("offset went back"), 1, AssertionError),
    (RuntimeError("still broken"), 10_000, ServiceFailedError)])
def test_an_invariant_violation_or_endless_failures_end_the_loop(tmp_path, error, failures,
                                                                  ends_with):
    broker = harness.Broker(tmp_path, clock_ms=lambda: clock.now_ms() - 60_000)
    try:
        send_delayed(broker, 1, b"late")
        delay = schedule.ScheduleService(
            broker.store, _RaisingPutter(broker.putter, error, failures),
            broker.config.derived.delay_levels_ms,
            paths.config_path(str(tmp_path), paths.DELAY_OFFSET_CONFIG), failure_pause_ms=1)

        async def main():
            with pytest.raises(ends_with):
                await asyncio.wait_for(delay.run(), 10.0)
        asyncio.run(main())
        assert broker.records(harness.TOPIC, 1) == []
    finally:
        broker.close()
