# Raw remoting reads for tests and tools: connect with retries, pull, read a whole queue.
"""Reads as the Java consumer's PULL_MESSAGE frames them, over :class:`SyncRemotingClient`, so
a check does not depend on any client library (tests/ha_support.py re-exports them for the
test suites; tools use them from here).

* :func:`client_for` - a connected client, retried while the broker is not listening.
* :func:`pull` - one PULL_MESSAGE (no commit, no suspend, every tag).
* :func:`records_of` - the records of a pull answer, each checked whole (CRC included).
* :func:`read_queue` - every body of one queue from an offset to its end, offsets checked
  contiguous.
"""
import time

from pybroker._fast import record
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient

__all__ = ["TIMEOUT_MS", "client_for", "pull", "records_of", "read_queue"]

TIMEOUT_MS = 5000


def client_for(address: str, timeout_s: float = 30) -> SyncRemotingClient:
    """A connected client; retries while the broker is not listening (a data-plane restart
    publishes positions before its remoting workers listen again)."""
    deadline = time.monotonic() + timeout_s
    while True:
        client = SyncRemotingClient()
        try:
            client.connect(address, 3000)
            return client
        except (OSError, TimeoutError):
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def pull(client, topic: str, queue_id: int, queue_offset: int, group: str = "ha_consumer",
         max_nums: int = 32):
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
           "queueOffset": str(queue_offset), "maxMsgNums": str(max_nums), "sysFlag": "4",
           "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
           "subVersion": "0", "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def records_of(body) -> list:
    """Decoded records of a pull answer; AssertionError unless every record is whole."""
    data, position, found = bytes(body or b""), 0, []
    while position < len(data):
        status, total_size = record.check(data, position, len(data), True)
        assert status == record.RECORD_OK, f"damaged record served at {position}"
        found.append(record.decode(data, position))
        position += total_size
    return found


def read_queue(client, topic: str, queue_id: int, start: int = 0) -> list[bytes]:
    """Every body of one queue from ``start`` to its end, offsets checked contiguous."""
    bodies: list[bytes] = []
    offset = start
    while True:
        response = pull(client, topic, queue_id, offset)
        if response.code != ResponseCode.SUCCESS:
            return bodies
        for message in records_of(response.body):
            assert (message.topic, message.queue_id, message.queue_offset) == \
                (topic, queue_id, offset), "offset gap"
            bodies.append(bytes(message.body))
            offset += 1
