"""Held acknowledgements (SYNC_FLUSH, SYNC_MASTER, controller mode) are the same on the send
fast path and the Python path, and wait for the last byte of every send form.

Method: the two sides of test_send_fast.py (a real RemotingConnection over a fake transport,
real shared-memory send and completion rings, a stand-in appender giving offsets): this test
plays the flusher and the ha worker, publishing ``flushed_position``,
``replicated_position`` and ``ha_slaves_connected`` in a real control block and waking the
putter; the answers (by opaque, at each step) and the counted figures must be equal on both
paths, and the codes Java's.
"""
import asyncio
import time

import pytest

from pybroker.protocol import command
from pybroker.protocol.codes import ResponseCode
from pybroker.stats.region import StatsCounter, StatsHistogram
from tests.unit.broker.test_send_fast import (TOMORROW_MS, Side, batch_body, feed, frame,
                                              responses, settle, side_pairs)


@pytest.fixture
def sides(tmp_path):
    yield from side_pairs(tmp_path)


def test_sync_flush_answers_wait_for_the_flushed_position(sides):
    """SYNC_FLUSH: no answer before flushed_position covers the record, FLUSH_DISK_TIMEOUT
    after syncFlushTimeout; the same frames either way."""
    python_side, fast_side = sides({"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": "300"})
    data = [frame("binary"), frame("go", properties="WAIT\x01false\x02"),
            frame("batch-binary", batch="true", body=batch_body([(0, b"a", "")] * 3))]

    async def main(side: Side):
        connection, transport = side.connect()
        side.refresh()
        feed(connection, data[0])
        await settle(side, connection)
        held = bytes(transport.written)        # only the answer that does not wait
        oldest = side.stats_region.snapshot().counter(StatsCounter.SEND_OLDEST_MS)
        assert oldest > 0, "a held acknowledgement is an unanswered send"
        side.control.publish("flushed_position", side.appender.physical_offset)
        side.putter.on_wake()
        for _ in range(3):      # the Python path answers in a later loop turn
            await asyncio.sleep(0)
        released = bytes(transport.written)
        assert side.stats_region.snapshot().counter(StatsCounter.SEND_OLDEST_MS) == 0
        feed(connection, data[1] + data[2])
        await settle(side, connection)
        await asyncio.sleep(0.5)               # past syncFlushTimeout: FLUSH_DISK_TIMEOUT
        return held, released, bytes(transport.written), _flush_waits(side)
    expected = asyncio.run(main(python_side))
    got = asyncio.run(main(fast_side))
    assert got == expected
    # SYNC_FLUSH_WAIT_US counts each held acknowledgement once (WAIT=false is not held).
    assert expected[3] == 2
    assert expected[0] == b"" and expected[1] != b""
    codes = sorted(command.decode(frame_bytes, 0, len(frame_bytes)).code
                   for frame_bytes in responses(expected[2]).values())
    assert codes == [0, 0, 10]        # SUCCESS, SUCCESS (no wait), FLUSH_DISK_TIMEOUT


@pytest.mark.parametrize("style", ["binary", "go", "batch-binary", "batch-json", "batch3",
                                   "timer"])
@pytest.mark.parametrize("role", ["SYNC_FLUSH", "SYNC_MASTER"])
def test_an_acknowledgement_waits_for_the_last_byte(sides, style, role):
    """With the flushed (SYNC_FLUSH) or replicated (SYNC_MASTER) position at the record's
    start, then one byte short of its end, nothing is answered; at its end, SEND_OK. A batch
    of one message included (it was answered at the start: its end was taken as its start), and a
    timer message the fast path parks on rmq_sys_wheel_timer."""
    field = "flushed_position" if role == "SYNC_FLUSH" else "replicated_position"
    overrides = ({"flushDiskType": "SYNC_FLUSH"} if role == "SYNC_FLUSH"
                 else {"brokerRole": "SYNC_MASTER"})
    python_side, fast_side = sides(dict(overrides, syncFlushTimeout="60000",
                                        slaveTimeout="60000"))
    if style == "batch3":
        data = frame("batch-binary", batch="true", body=batch_body([(0, b"m", "")] * 3))
    elif style.startswith("batch"):
        data = frame(style, batch="true", body=batch_body([(0, b"one", "")]))
    elif style == "timer":
        data = frame("json310", properties=f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02"
                     "UNIQ_KEY\x01AB12\x02WAIT\x01true\x02")
    else:
        data = frame(style)

    async def main(side: Side):
        connection, transport = side.connect()
        side.refresh()
        answered = []

        async def publish(value: int) -> None:
            side.control.publish(field, value, True)
            side.putter.on_wake()
            for _ in range(3):      # the Python path answers in a later loop turn
                await asyncio.sleep(0)
            answered.append(bytes(transport.written))
        side.control.publish("ha_slaves_connected", 1)
        start = side.appender.physical_offset
        await publish(start)
        feed(connection, data)
        await settle(side, connection)
        end = side.appender.physical_offset
        await publish(start)
        await publish(end - 1)
        await publish(end)
        return answered
    expected = asyncio.run(main(python_side))
    got = asyncio.run(main(fast_side))
    assert got == expected
    assert expected[:3] == [b"", b"", b""]
    assert list(_codes(expected[3]).values()) == [ResponseCode.SUCCESS]
    assert fast_side.putter.core.fast_puts_total == 1
    assert fast_side.putter.core.timer_puts_total == (style == "timer")


def _flush_waits(side: Side) -> int:
    """SYNC_FLUSH acknowledgements the side counted in SYNC_FLUSH_WAIT_US."""
    snapshot = side.stats_region.snapshot()
    return int(snapshot.histogram(StatsHistogram.SYNC_FLUSH_WAIT_US)[64])


def _codes(data: bytes) -> dict[int, int]:
    return {opaque: command.decode(frame_bytes, 0, len(frame_bytes)).code
            for opaque, frame_bytes in responses(data).items()}


async def _sync_master_steps(side: Side, sends: dict[str, bytes]) -> list:
    """Drive one side through the SYNC_MASTER cases, playing the ha worker and the flusher
    (publish the positions, then the wake-up); the codes answered at each step. The timeout
    is 1 s, so the steps before a timeout (milliseconds) stay far inside it on a busy box;
    the timeouts themselves are loop timers, ordered before the 1.2 s sleeps."""
    connection, transport = side.connect()
    side.refresh()
    control, steps, seen = side.control, [], set()

    def step() -> None:
        codes = _codes(bytes(transport.written))
        steps.append({opaque: code for opaque, code in codes.items() if opaque not in seen})
        seen.update(codes)

    async def send_now(*names: str) -> None:
        for name in names:
            feed(connection, sends[name])
            await settle(side, connection)

    async def publish(**values: int) -> None:
        for field, value in values.items():
            control.publish(field, value, field == "replicated_position")
        side.putter.on_wake()
        for _ in range(3):      # the Python path answers in a later loop turn
            await asyncio.sleep(0)

    await send_now("alone", "nowait")           # no slave: SLAVE_NOT_AVAILABLE (after the flush)
    step()
    await publish(flushed_position=side.appender.physical_offset)
    step()
    await publish(ha_slaves_connected=1, replicated_position=side.appender.physical_offset)
    await send_now("first")
    first_end = side.appender.physical_offset
    await send_now("batch")                     # held for the slave
    step()
    await publish(ha_slaves_connected=0)        # the slave leaves: a send after it is held
    await send_now("left")                      # for the flush alone, behind the two above
    step()
    await publish(flushed_position=side.appender.physical_offset)
    step()                                      # "left" released by the flush (SYNC_FLUSH)
    await publish(replicated_position=first_end)
    step()                                      # "first" released, "batch" still waits
    await asyncio.sleep(1.2)                   # "batch": FLUSH_SLAVE_TIMEOUT
    step()
    await publish(ha_slaves_connected=1)        # back, but more than haMaxGapNotInSync behind
    await send_now("far")
    step()
    await publish(replicated_position=side.appender.physical_offset)
    await send_now("synced")
    await publish(replicated_position=side.appender.physical_offset)
    step()                                      # the slave has it; the disk not (SYNC_FLUSH)
    await asyncio.sleep(1.2)                   # FLUSH_DISK_TIMEOUT; "far" stays SNA
    step()
    assert not transport.aborted
    return steps


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sync_master_acks_are_the_python_answers(sides, flush):
    """SYNC_MASTER: the fast path holds an acknowledgement until the slave has the record,
    answers SLAVE_NOT_AVAILABLE without a slave in sync (at once, or at the flush under
    SYNC_FLUSH), FLUSH_SLAVE_TIMEOUT past syncFlushTimeout, FLUSH_DISK_TIMEOUT when only the
    disk lacks it: at the same steps, with the same bytes, as the Python path."""
    python_side, fast_side = sides({"brokerRole": "SYNC_MASTER", "flushDiskType": flush,
                                    "syncFlushTimeout": "1000", "slaveTimeout": "1000",
                                    "haMaxGapNotInSync": "1000"})
    names = ["alone", "nowait", "first", "batch", "left", "far", "synced"]
    sends = {name: frame("binary", body=name.encode()) for name in names}
    sends["nowait"] = frame("go", body=b"nowait", properties="WAIT\x01false\x02")
    sends["batch"] = frame("batch-binary", batch="true", body=batch_body([(0, b"b", "")] * 3))
    sends["far"] = frame("binary", body=b"far" * 500)
    opaques = {command.decode(data, 0, len(data)).opaque: name for name, data in sends.items()}
    expected = asyncio.run(_sync_master_steps(python_side, sends))
    got = asyncio.run(_sync_master_steps(fast_side, sends))
    assert got == expected
    assert fast_side.putter.core.fast_puts_total == len(sends)
    assert fast_side.putter.core.held_count == 0
    named = [{opaques[opaque]: code for opaque, code in answered.items()} for answered in got]
    ok, fdt, sna, fst = 0, 10, 11, 12
    if flush == "ASYNC_FLUSH":
        assert named == [{"alone": sna, "nowait": ok}, {}, {}, {"left": sna}, {},
                         {"first": ok}, {"batch": fst}, {"far": sna}, {"synced": ok}, {}]
    else:
        assert named == [{"nowait": ok}, {"alone": sna}, {}, {}, {"left": sna},
                         {"first": ok}, {"batch": fst}, {}, {}, {"far": sna, "synced": fdt}]
    held = 0 if flush == "ASYNC_FLUSH" else len(sends) - 1      # all but "nowait"
    assert _flush_waits(python_side) == _flush_waits(fast_side) == held
    assert python_side.counted() == fast_side.counted()


def test_flush_and_slave_have_their_own_timeouts(sides):
    """SYNC_FLUSH + SYNC_MASTER, syncFlushTimeout 0.3 s, slaveTimeout 0.9 s (Java waits for the
    flush and the replica futures with their own timeouts): flushed but not on the slave is
    FLUSH_SLAVE_TIMEOUT after 0.9 s, not 0.3 s; on the slave but not flushed is
    FLUSH_DISK_TIMEOUT after 0.3 s, also when the slave's acknowledgement came after the
    timer was set for 0.9 s. Both paths, the same bytes."""
    python_side, fast_side = sides({"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
                                    "syncFlushTimeout": "300", "slaveTimeout": "900"})

    async def main(side: Side) -> list:
        connection, transport = side.connect()
        side.refresh()
        control, steps = side.control, []

        async def publish(field: str, value: int) -> None:
            control.publish(field, value, True)
            side.putter.on_wake()
            for _ in range(3):
                await asyncio.sleep(0)

        async def after(seconds: float) -> None:
            await asyncio.sleep(seconds)
            steps.append(sorted(_codes(bytes(transport.written)).values()))
        control.publish("ha_slaves_connected", 1)
        control.publish("replicated_position", side.appender.physical_offset)
        feed(connection, frame("binary", body=b"flushed-only"))
        await settle(side, connection)
        await publish("flushed_position", side.appender.physical_offset)
        await after(0.5)                        # past syncFlushTimeout: flushed, so waits
        await after(0.6)                        # past slaveTimeout: FLUSH_SLAVE_TIMEOUT
        feed(connection, frame("go", body=b"replicated-only"))
        await settle(side, connection)          # its timer: 0.9 s (both conditions wait)
        await publish("replicated_position", side.appender.physical_offset)
        await after(0.5)                        # FLUSH_DISK_TIMEOUT at 0.3 s
        return steps
    expected = asyncio.run(main(python_side))
    assert asyncio.run(main(fast_side)) == expected
    fst, fdt = ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT
    assert expected == [[], [fst], sorted([fst, fdt])]


async def _controller_mode_steps(side: Side, sends: dict[str, bytes]) -> list:
    """Drive one side through controller mode's acknowledgement cases, playing the ha worker
    (it publishes how many acknowledgements a send waits for and what they all cover)."""
    connection, transport = side.connect()
    side.refresh()
    control, steps, seen = side.control, [], set()

    def step() -> None:
        codes = _codes(bytes(transport.written))
        steps.append({opaque: code for opaque, code in codes.items() if opaque not in seen})
        seen.update(codes)

    async def send_now(*names: str) -> None:
        for name in names:
            feed(connection, sends[name])
            await settle(side, connection)

    async def publish(**values: int) -> None:
        for field, value in values.items():
            control.publish(field, value, field == "replicated_position")
        side.putter.on_wake()
        for _ in range(3):
            await asyncio.sleep(0)

    await send_now("alone")                     # the master alone in its SyncStateSet
    step()
    await publish(ha_slaves_connected=1, replicated_position=side.appender.physical_offset)
    await send_now("first")
    first_end = side.appender.physical_offset
    await send_now("batch")                     # both wait for the member
    step()
    await publish(replicated_position=first_end)
    step()                                      # "first" answered
    # The controller took the member out: nothing to wait for, the position jumps to the end.
    await publish(ha_slaves_connected=0, replicated_position=side.appender.physical_offset)
    step()                                      # "batch" answered
    await publish(ha_slaves_connected=1)
    await send_now("far")                       # far behind: no gap rule, it waits
    step()
    await asyncio.sleep(1.0)                   # slaveTimeout: then FLUSH_SLAVE_TIMEOUT,
    deadline = time.monotonic() + 10.0         # as soon as the hold's timer runs (a busy box
    while len(_codes(bytes(transport.written))) == len(seen) and \
            time.monotonic() < deadline:       # runs it late)
        await asyncio.sleep(0.05)
    step()
    assert not transport.aborted
    return steps


def test_controller_mode_acks_are_the_python_answers(sides):
    """Controller mode (allAckInSyncStateSet): a send waits for the acknowledgements the ha
    worker says it needs, none means SEND_OK (never SLAVE_NOT_AVAILABLE), no haMaxGapNotInSync
    rule, FLUSH_SLAVE_TIMEOUT past the timeout: the same on both paths."""
    python_side, fast_side = sides({
        "brokerRole": "SYNC_MASTER", "slaveTimeout": "1000", "haMaxGapNotInSync": "1000",
        "enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878",
        "allAckInSyncStateSet": "true"})
    names = ["alone", "first", "batch", "far"]
    sends = {name: frame("binary", body=name.encode()) for name in names}
    sends["batch"] = frame("batch-binary", batch="true", body=batch_body([(0, b"b", "")] * 3))
    sends["far"] = frame("binary", body=b"far" * 500)
    opaques = {command.decode(data, 0, len(data)).opaque: name for name, data in sends.items()}
    expected = asyncio.run(_controller_mode_steps(python_side, sends))
    got = asyncio.run(_controller_mode_steps(fast_side, sends))
    assert got == expected
    assert fast_side.putter.core.fast_puts_total == len(sends)
    named = [{opaques[opaque]: code for opaque, code in answered.items()} for answered in got]
    assert named == [{"alone": 0}, {}, {"first": 0}, {"batch": 0}, {}, {"far": 12}]
    # Both paths' holds are the C core's (one counter each side).
    assert python_side.putter.core.slave_not_available_total == 0
    assert fast_side.putter.core.slave_not_available_total == 0


def test_min_in_sync_replicas_refuses_before_the_put(sides):
    """minInSyncReplicas=2 and a SyncStateSet of one: SYSTEM_ERROR "in-sync replicas not
    enough", nothing reaches the ring (the fast path is off for this setting)."""
    python_side, _ = sides({"brokerRole": "SYNC_MASTER", "enableControllerMode": "true",
                            "controllerAddr": "127.0.0.1:9878", "minInSyncReplicas": "2"})
    python_side.control.publish_sync_state([], 1)

    async def run() -> tuple:
        connection, transport = python_side.connect()
        python_side.refresh()
        feed(connection, frame("binary", body=b"refused"))
        await settle(python_side, connection)
        return bytes(transport.written), python_side.appender.requests
    written, appended = asyncio.run(run())
    [response] = responses(written).values()
    decoded = command.decode(response, 0, len(response))
    assert (decoded.code, decoded.remark) == (1, "in-sync replicas not enough")
    assert appended == []
