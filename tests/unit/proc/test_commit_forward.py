"""A worker's pull-carried commit offsets reach the metadata service per interval.

Method: a real event loop drives :class:`pybroker.proc.commit_forward.CommitForwards` with a
send that records each COMMIT_OFFSET it is given (decoded back from its encoded frame, as the
service reads it). The first commit after a quiet interval goes out at the next loop turns;
commits within the interval after a forward wait for its end and go out together, the last
offset of each queue; a flush (a forwarded client request) and close send at once.
"""
import asyncio

import orjson

from pybroker.proc.commit_forward import COMMIT_FORWARD_INTERVAL_S, CommitForwards
from pybroker.protocol.codes import InternalCode
from pybroker.protocol.command import decode, encode


class Service:
    """The metadata service's side: each forward's loop time and rows."""

    def __init__(self):
        self.forwards: list[tuple[float, list]] = []

    def send(self, command) -> None:
        frame = encode(command)
        received = decode(frame, 0, len(frame))
        assert received.code == InternalCode.COMMIT_OFFSET and received.is_oneway
        self.forwards.append((asyncio.get_running_loop().time(),
                              orjson.loads(bytes(received.body))))


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_first_commit_goes_at_the_next_turn_and_later_ones_per_interval():
    async def scenario():
        service = Service()
        forwards = CommitForwards(service.send)
        forwards.add([("G", "T", 0, 5)])
        forwards.add([("G", "T", 1, 7), ("G", "T", 0, 9)])
        await turns(2)
        assert [rows for _, rows in service.forwards] == [[["G", "T", 0, 9], ["G", "T", 1, 7]]]
        first_at = service.forwards[0][0]
        # Within the interval: pending, whatever the number of loop turns.
        forwards.add([("G", "T", 0, 12)])
        forwards.add([("G", "T", 2, 3)])
        forwards.add([("G", "T", 0, 14)])
        await turns(20)
        if asyncio.get_running_loop().time() < first_at + COMMIT_FORWARD_INTERVAL_S:
            assert len(service.forwards) == 1
        await asyncio.sleep(COMMIT_FORWARD_INTERVAL_S * 3)
        assert [rows for _, rows in service.forwards[1:]] == [[["G", "T", 0, 14],
                                                               ["G", "T", 2, 3]]]
        assert service.forwards[1][0] >= first_at + COMMIT_FORWARD_INTERVAL_S
        # Quiet for longer than the interval: the next commit goes at once again.
        await asyncio.sleep(COMMIT_FORWARD_INTERVAL_S * 2)
        forwards.add([("H", "U", 4, 1)])
        await turns(2)
        assert [rows for _, rows in service.forwards[2:]] == [[["H", "U", 4, 1]]]
        forwards.close()
        assert len(service.forwards) == 3
    asyncio.run(scenario())


def test_flush_and_close_send_what_is_pending_at_once():
    async def scenario():
        service = Service()
        forwards = CommitForwards(service.send)
        forwards.add([("G", "T", 0, 1)])
        await turns(2)
        forwards.add([("G", "T", 0, 2)])
        forwards.flush()                    # a forwarded request: the commits go first
        assert [rows for _, rows in service.forwards] == [[["G", "T", 0, 1]],
                                                          [["G", "T", 0, 2]]]
        await asyncio.sleep(COMMIT_FORWARD_INTERVAL_S * 3)
        assert len(service.forwards) == 2   # the interval's timer found nothing left
        forwards.flush()
        assert len(service.forwards) == 2   # nothing pending: nothing sent
        forwards.add([("G", "T", 1, 8)])
        forwards.close()                    # the worker stops
        assert [rows for _, rows in service.forwards[2:]] == [[["G", "T", 1, 8]]]
        await asyncio.sleep(COMMIT_FORWARD_INTERVAL_S * 3)
        assert len(service.forwards) == 3
    asyncio.run(scenario())
