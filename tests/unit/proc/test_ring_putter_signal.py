"""RingPutter wakes a sleeping appender once per loop turn, never loses that wake-up, and never
signals an appender that is awake.

Method: one asyncio loop runs RingPutter.put on real shared-memory rings (tmp_path); the test
plays the appender in the same process (consumer flag, peek, completion push) and counts the
eventfd's signals after the loop turn in which many puts committed.
"""
import asyncio

import pytest

from pybroker.proc import shared
from pybroker.proc.ring_format import read_put_request, status_code
from pybroker.proc.ring_putter import _SIGNAL_DEFER_PUTS_MAX, RingPutter
from pybroker.proc.wake import WakeFd
from pybroker.store.control_block import ControlBlock
from pybroker.store.status import PutStatus

RECORD = b"\x00" * 96


@pytest.fixture
def plane(tmp_path):
    ring_region = shared.create_byte_ring(str(tmp_path / "send"), 1 << 16)
    done_region = shared.create_completion_ring(str(tmp_path / "done"), 256)
    control = ControlBlock(str(tmp_path / "control"), create=True)
    wake = WakeFd()
    yield ring_region.ring, done_region.ring, control, wake
    wake.close()
    control.close()
    ring_region.close()
    done_region.close()


def complete_all(ring, completions) -> int:
    """The appender's part: take every committed request and answer PUT_OK."""
    taken = 0
    count, start, end = ring.peek_batch(1 << 20)
    data = ring.data()
    for payload_offset, length in ring.iter_records(start, end):
        request_id = read_put_request(data, payload_offset, length).request_id
        completions.push(request_id, status_code(PutStatus.PUT_OK), 1, 0, 0)
        taken += 1
    ring.release(end)
    completions.commit()
    return taken


async def put_turn(plane, puts: int, appender_asleep: bool) -> tuple[int, int]:
    """``puts`` puts started in one loop turn; (signals after that turn, requests committed)."""
    ring, completions, control, wake = plane
    putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
    if appender_asleep:
        assert ring.set_consumer_sleeping() is False
    tasks = [asyncio.ensure_future(putter.put(RECORD, "TopicTest", 0, 1, 0, False))
             for _ in range(puts)]
    for _ in range(3):
        await asyncio.sleep(0)
    signals = wake.consume()
    committed = complete_all(ring, completions)
    putter.on_wake()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert [result.status for result in results] == [PutStatus.PUT_OK] * puts
    return signals, committed


@pytest.mark.parametrize("puts", [1, 5, 40])
def test_sleeping_appender_gets_one_signal_per_turn(plane, puts):
    signals, committed = asyncio.run(put_turn(plane, puts, appender_asleep=True))
    assert committed == puts
    assert signals == 1


def test_awake_appender_gets_no_signal(plane):
    signals, committed = asyncio.run(put_turn(plane, 5, appender_asleep=False))
    assert (signals, committed) == (0, 5)


def test_signal_goes_out_within_the_turn_after_many_puts(plane):
    """A turn with more commits than the deferral bound signals at the bound, not at its end."""
    ring, completions, control, wake = plane

    async def main():
        putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
        assert ring.set_consumer_sleeping() is False
        seen = []
        for _ in range(40):
            offset = ring.reserve(8)
            ring.data()[offset:offset + 8] = b"\x00" * 8
            putter.after_commit(asyncio.get_running_loop(), ring.commit(), 1)
            seen.append(wake.consume())
        return seen
    seen = asyncio.run(main())
    assert sum(seen) == 1 and seen.index(1) == _SIGNAL_DEFER_PUTS_MAX - 1
