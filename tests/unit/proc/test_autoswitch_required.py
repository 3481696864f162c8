"""A controller-mode master's ha worker marks a required slave's connection with the end it
must acknowledge before it may join the SyncStateSet (``required_from``), also when the slave
connects after it became required.

Why: the supervisor proposes a joining slave once its acknowledgement reaches
``required_from`` (broker/sync_state.ready_to_join). The mark was set only when a member
entered the published set; a slave whose connection was replaced while it was joining (its data
plane restarted: CI, test_controller_failover's rejoin) came back with no mark, and the set
stayed without it for good.

Method: the real AutoSwitchMasterService on a real listener, store and control block (the
data-plane fixture's settings); this test plays the slave with raw sockets speaking the
AutoSwitchHA handshake, and the supervisor by publishing the SyncStateSet and waking the
worker.
"""
import asyncio
import socket

import pytest

from pybroker.proc.autoswitch_master import AutoSwitchMasterService
from pybroker.proc.wake import WakeFd
from pybroker.protocol import autoswitch_ha as wire
from pybroker.store.epoch_file import EpochFile
from pybroker._testbase.local_data_plane import LocalDataPlane
from tests.unit.proc.test_data_plane import make_plane

pytestmark = [pytest.mark.timeout(60)]
SLAVE_ID = 1


async def _until(predicate, what: str, timeout_s: float = 10):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.01)


def _line(plane: LocalDataPlane) -> dict | None:
    lines = [line for line in plane.control.ha_slave_lines() if line["broker_id"] == SLAVE_ID]
    return lines[0] if lines else None


async def _handshake(address) -> socket.socket:
    loop = asyncio.get_running_loop()
    slave = socket.socket()
    slave.setblocking(False)
    await loop.sock_connect(slave, address)
    await loop.sock_sendall(slave, wire.encode_slave_handshake(SLAVE_ID, False, False))
    assert await loop.sock_recv(slave, 4096)            # the master's handshake
    return slave


def test_a_required_slave_reconnecting_is_marked_again(tmp_path):
    plane = make_plane(tmp_path, "ASYNC_FLUSH")
    plane.wakes.ha = WakeFd()               # the ha worker's eventfd (the fixture has none)
    EpochFile.load(plane.settings.epoch_file_path).append(1, 0)
    plane.control.publish("written_position", 4242)

    async def scenario():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        service = AutoSwitchMasterService(plane.settings, plane.control, plane.wakes, listener)
        stop = asyncio.Event()
        running = asyncio.ensure_future(service.run(stop))
        try:
            first = await _handshake(listener.getsockname())
            line = await _until(lambda: _line(plane), "the first connection's line")
            assert line["required_from"] == 0                   # not required yet
            # The supervisor makes the slave required (it is joining) and wakes the worker.
            plane.control.publish_sync_state({SLAVE_ID}, 2)
            plane.wakes.ha.signal()
            await _until(lambda: (_line(plane) or {}).get("required_from") == 4243,
                         "the mark when the slave became required")
            # Its connection is replaced while it is still joining.
            first.close()
            await _until(lambda: _line(plane) is None, "the first connection gone")
            plane.control.publish("written_position", 5000)
            second = await _handshake(listener.getsockname())
            await _until(lambda: _line(plane), "the second connection's line")
            await asyncio.sleep(0.1)
            assert _line(plane)["required_from"] == 5001
            second.close()
        finally:
            stop.set()
            await running
            listener.close()
    try:
        asyncio.run(scenario())
    finally:
        plane.kill_all()
