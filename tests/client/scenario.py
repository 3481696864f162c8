# Helpers shared by the client scenario tests: names, a checked event loop, topics, bounded waits.
"""Building blocks of the tests/client scenarios (against Java RocketMQ or pybroker).

``peer`` arguments are anything with ``namesrv_addr`` and ``broker_addr`` (the ``Peer`` of
conftest.py, or a running ``StandaloneBroker``).
"""
import asyncio
import threading
import time
import uuid

from pybroker.client.admin import Admin

TOPIC_ROUTE_TIMEOUT_S = 20


def unique_name(prefix: str) -> str:
    """A topic or group name no other test run uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def run_scenario(coroutine):
    """Run one scenario in a fresh loop; no task or thread may outlive it."""
    async def checked():
        result = await coroutine
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert leftover == [], leftover
        return result
    threads_before = threading.active_count()
    result = asyncio.run(checked())
    assert threading.active_count() <= threads_before
    return result


async def create_topic(peer, topic: str, queue_nums: int = 4) -> None:
    """Create ``topic`` on the peer's broker and wait until the name server routes it."""
    async with Admin(peer.namesrv_addr) as admin:
        await admin.create_topic(topic, queue_nums, broker_addr=peer.broker_addr)
        deadline = time.monotonic() + TOPIC_ROUTE_TIMEOUT_S
        while await admin.topic_route(topic) is None:
            assert time.monotonic() < deadline, "topic never reached the name server"
            await asyncio.sleep(0.2)


async def wait_until(predicate, timeout_s: float, what: str) -> None:
    """Poll ``predicate()`` until true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
