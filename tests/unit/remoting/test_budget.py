"""A connection's unanswered work is bounded, and unexpected errors reach clients without paths.

Method: a real server on a 127.0.0.1 ephemeral port whose handler waits on an event; a client
pipelines far more requests than ``requests_in_progress_max`` allows and the test checks that
the server never runs more handlers at once for that connection, that another connection is
served meanwhile, and that every request is answered once the handlers are released. A handler
raising an error naming a store path and a unix socket gets a SYSTEM_ERROR remark without them.
"""
import asyncio

import pytest

from pybroker.protocol.command import create_request, create_response, encode
from pybroker.remoting import RemotingClient, RequestTable, start_server
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import client_remark

WAIT, QUICK, FAIL = 201, 202, 203
IN_PROGRESS_MAX = 8
PIPELINED = 200


def test_a_connection_runs_at_most_its_in_progress_budget():
    async def scenario():
        release = asyncio.Event()
        running = [0, 0]          # now, highest

        async def wait(connection, request):
            running[0] += 1
            running[1] = max(running)
            await release.wait()
            running[0] -= 1
            return create_response(request, 0, "done")

        async def quick(connection, request):
            return create_response(request, 0, "quick")

        table = RequestTable({WAIT: wait, QUICK: quick})
        server = await start_server("127.0.0.1", 0, table,
                                    requests_in_progress_max=IN_PROGRESS_MAX)
        greedy, polite = RemotingClient(), RemotingClient()
        await greedy.connect(server.address)
        await polite.connect(server.address)
        calls = [asyncio.ensure_future(greedy.invoke(create_request(WAIT), 10_000))
                 for _ in range(PIPELINED)]
        while running[0] < IN_PROGRESS_MAX:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)          # time for more frames to (not) start
        assert running[1] == IN_PROGRESS_MAX
        answer = await polite.invoke(create_request(QUICK), 2000)
        assert answer.remark == "quick"
        release.set()
        answers = await asyncio.gather(*calls)
        assert [a.remark for a in answers] == ["done"] * PIPELINED
        assert running[1] == IN_PROGRESS_MAX
        for client in (greedy, polite):
            client.close()
        server.close()
        await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), 20))


@pytest.mark.parametrize("read_in_c", [False, True])
def test_a_read_after_the_budget_is_spent_waits(read_in_c):
    """The last frame of one read spends the budget (reading is not paused: no frame was held
    yet); a frame of the next read waits until a handler ends, whether asyncio's transport or
    the reader in C (pybroker._fast.socket_reader) reads the socket."""
    async def scenario():
        loop = asyncio.get_running_loop()
        release = asyncio.Event()
        started = []

        async def wait(connection, request):
            started.append(request.opaque)
            await release.wait()
            return create_response(request, 0, "done")

        limits = ConnectionLimits(requests_in_progress_max=2)
        made = []

        def connection():
            made.append(RemotingConnection(RequestTable({WAIT: wait}), limits,
                                           read_in_c=read_in_c))
            return made[-1]
        server = await loop.create_server(connection, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        requests = [create_request(WAIT) for _ in range(3)]
        for opaque, request in enumerate(requests, 1):
            request.opaque = opaque
        writer.write(encode(requests[0]) + encode(requests[1]))
        while len(started) < 2:
            await asyncio.sleep(0.01)
        writer.write(encode(requests[2]))
        await asyncio.sleep(0.2)              # time for the third to (not) start
        assert started == [1, 2]
        assert (made[0]._reader is not None) == read_in_c
        release.set()
        answered = 0
        while answered < 3:
            length = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(length)
            answered += 1
        assert started == [1, 2, 3]
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_unexpected_errors_reach_clients_without_local_paths():
    async def scenario():
        async def fail(connection, request):
            await asyncio.sleep(0)
            raise ConnectionError("unix:/srv/broker/store/run/metadata.sock: connection lost\n"
                                  "  File \"/usr/lib/python3/x.py\", line 1")

        server = await start_server("127.0.0.1", 0, RequestTable({FAIL: fail}))
        client = RemotingClient()
        await client.connect(server.address)
        answer = await client.invoke(create_request(FAIL), 2000)
        client.close()
        server.close()
        await server.wait_closed()
        return answer

    answer = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert answer.code == 1
    assert answer.remark == "ConnectionError: <path>: connection lost"


def test_client_remark_keeps_ordinary_text():
    assert client_remark(KeyError("late")) == "KeyError: 'late'"
    assert client_remark(OSError(2, "No such file", "/var/lib/store/commitlog/00")) == \
        "FileNotFoundError: [Errno 2] No such file: '<path>'"
