"""SYNC_MASTER puts are answered as Java answers them: after a slave acknowledged the run,
SLAVE_NOT_AVAILABLE without a slave in sync, FLUSH_SLAVE_TIMEOUT past slaveTimeout, and
with SYNC_FLUSH both conditions before PUT_OK.

Method: a real appender process over real shared rings and a control block (the data-plane
fixture of test_data_plane.py); this test plays the master's ha worker: it publishes
``ha_slaves_connected`` and ``replicated_position`` with the waiter bits and signals the
putter's eventfd, exactly as pybroker/proc/ha_master.py does, while a RingPutter in this
process puts. Deadlines fail the test.
"""
import asyncio

import pytest

from pybroker.proc.appender import run_appender
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.wake import signal_mask
from pybroker.store.status import PutStatus
from pybroker._testbase.local_data_plane import LocalDataPlane
from tests.unit.proc.test_data_plane import HOST, PORT, QUEUES, TOPIC, encode, make_plane

pytestmark = [pytest.mark.dataplane, pytest.mark.timeout(60)]
TIMEOUT_MS = 300


@pytest.fixture
def plane(tmp_path):
    made = None

    def make(flush_disk_type: str = "ASYNC_FLUSH") -> LocalDataPlane:
        nonlocal made
        made = make_plane(tmp_path, flush_disk_type)
        made.fork("appender", run_appender, made.settings, [r.ring for r in made.rings],
                  [c.ring for c in made.completions], made.control, made.wakes)
        return made
    yield make
    if made is not None:
        made.kill_all()


def _putter(plane: LocalDataPlane, sync_flush: bool = False,
            gap_bytes: int = 1 << 20) -> RingPutter:
    putter = RingPutter(plane.rings[0].ring, plane.completions[0].ring, plane.control,
                        plane.wakes.appender, 0, (HOST, PORT), sync_flush, TIMEOUT_MS,
                        sync_master=True, ha_max_gap_bytes=gap_bytes,
                        slave_timeout_ms=TIMEOUT_MS)
    putter.start(plane.wakes.workers[0])
    return putter


def _replicate(plane: LocalDataPlane, position: int) -> None:
    """What the ha worker does on a slave's report."""
    signal_mask(plane.control.publish("replicated_position", position, True),
                plane.wakes.by_slot())


async def _put(putter: RingPutter, number: int):
    queue_id = number % QUEUES
    return await putter.put(encode(b"sm-%04d" % number, queue_id), TOPIC, queue_id, 1, 0, True)


async def _until(predicate, what: str, timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.005)


def test_acks_wait_for_the_slave_and_are_released_in_order(plane):
    plane = plane()

    async def scenario():
        plane.control.publish("ha_slaves_connected", 1)
        putter = _putter(plane)
        puts = [asyncio.ensure_future(_put(putter, number)) for number in range(10)]
        await _until(lambda: plane.control.written_position > 0 and not putter.ring.used_bytes(),
                     "the appender took every put")
        await asyncio.sleep(0.05)
        assert not any(put.done() for put in puts), "answered before the slave had it"
        # Ends are in append order: acknowledging the fourth run's end releases four puts
        # (the records are of one size, from offset 0).
        await _until(lambda: putter.core.held_count == 10, "completions")
        written = plane.control.written_position
        assert written % 10 == 0
        fourth_end = written // 10 * 4
        _replicate(plane, fourth_end)
        await _until(lambda: sum(put.done() for put in puts) == 4, "four released")
        assert all(puts[i].done() for i in range(4))
        _replicate(plane, plane.control.written_position)
        results = await asyncio.gather(*puts)
        putter.stop()
        return results
    results = asyncio.run(scenario())
    assert {result.status for result in results} == {PutStatus.PUT_OK}


def test_no_slave_slave_behind_and_timeout(plane):
    plane = plane()

    async def scenario():
        putter = _putter(plane, gap_bytes=150)   # records here are 108 bytes
        alone = await _put(putter, 0)                    # nobody connected
        plane.control.publish("ha_slaves_connected", 1)
        behind = await _put(putter, 1)                   # 216 bytes unacknowledged
        _replicate(plane, plane.control.written_position)
        started = asyncio.get_running_loop().time()
        timed_out = await _put(putter, 2)                # in sync, but never acknowledged
        waited = asyncio.get_running_loop().time() - started
        putter.stop()
        return alone, behind, timed_out, waited
    alone, behind, timed_out, waited = asyncio.run(scenario())
    # Java answers these with the message stored: the status says what the slave lacks.
    assert alone.status is PutStatus.SLAVE_NOT_AVAILABLE and alone.status.stored
    assert behind.status is PutStatus.SLAVE_NOT_AVAILABLE and behind.message_id
    assert timed_out.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert TIMEOUT_MS / 1000 <= waited < TIMEOUT_MS / 1000 + 2


def test_with_sync_flush_both_must_hold(plane):
    plane = plane("SYNC_FLUSH")      # no flusher runs: flushed_position never moves

    async def scenario():
        plane.control.publish("ha_slaves_connected", 1)
        putter = _putter(plane, sync_flush=True)
        replicated_only = asyncio.ensure_future(_put(putter, 0))
        await _until(lambda: plane.control.written_position > 0, "appended")
        _replicate(plane, plane.control.written_position)
        first = await replicated_only
        neither = await _put(putter, 1)
        putter.stop()
        return first, neither
    first, neither = asyncio.run(scenario())
    assert first.status is PutStatus.FLUSH_DISK_TIMEOUT      # the slave had it, the disk not
    assert neither.status is PutStatus.FLUSH_SLAVE_TIMEOUT   # the replica's outcome wins
