"""Remoting round trips per second over loopback, and what the eager handler start buys.

Method: a RemotingServer with a 128 B echo handler and one RemotingClient connection on
127.0.0.1; each benchmark round sends ROUND_TRIPS requests with 1 in flight (sequential) or 16 in
flight (pipelined on the one connection) and waits for every reply. Server and client share one
event loop in this process ("same_loop", a CPU cost per round trip for both ends) or the server
runs in a child process ("server_process", closer to a real broker on 2 cores). The request
table runs handlers eagerly (``coroutine.send(None)``, a Task only if the handler waits) or always
as Tasks; compare the two in each group. Rates are in extra_info as round_trips_per_s.
"""
import asyncio
import multiprocessing

import pytest

from pybroker.protocol.command import create_request, create_response
from pybroker.remoting import RemotingClient, RequestTable, start_server

ECHO = 101
ROUND_TRIPS = 2000
BODY = b"\xab" * 128
EXT_FIELDS = {"topic": "BenchTopic", "queueId": "0", "producerGroup": "bench"}


async def echo(connection, request):
    return create_response(request, 0, None, None, request.body)


async def serve_forever(eager: bool, port_pipe) -> None:
    server = await start_server("127.0.0.1", 0, RequestTable({ECHO: echo}, eager=eager))
    port_pipe.send(server.address)
    await asyncio.Event().wait()


def server_process_main(eager: bool, port_pipe) -> None:
    asyncio.run(serve_forever(eager, port_pipe))


class Loopback:
    """A server (here or in a child process) and a connected client on a private loop."""

    def __init__(self, placement: str, eager: bool):
        self.loop = asyncio.new_event_loop()
        self.process = None
        self.server = None
        if placement == "server_process":
            parent_end, child_end = multiprocessing.Pipe()
            context = multiprocessing.get_context("spawn")
            self.process = context.Process(target=server_process_main, args=(eager, child_end),
                                           daemon=True)
            self.process.start()
            if not parent_end.poll(30):
                raise RuntimeError("benchmark server process did not start in 30 s")
            address = parent_end.recv()
        else:
            self.server = self.loop.run_until_complete(start_server(
                "127.0.0.1", 0, RequestTable({ECHO: echo}, eager=eager)))
            address = self.server.address
        self.client = RemotingClient()
        self.loop.run_until_complete(self.client.connect(address, 5000))

    def round_trips(self, in_flight: int) -> None:
        async def one_lane(count: int) -> None:
            for _ in range(count):
                response = await self.client.invoke(create_request(ECHO, EXT_FIELDS, BODY), 5000)
                assert response.code == 0 and len(response.body) == len(BODY)

        async def all_lanes() -> None:
            await asyncio.gather(*(one_lane(ROUND_TRIPS // in_flight) for _ in range(in_flight)))

        self.loop.run_until_complete(asyncio.wait_for(all_lanes(), 60))

    def close(self) -> None:
        self.client.close()
        if self.server is not None:
            self.server.close()
            self.loop.run_until_complete(self.server.wait_closed())
        self.loop.run_until_complete(asyncio.sleep(0.01))
        self.loop.close()
        if self.process is not None:
            self.process.terminate()
            self.process.join(10)


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "task"])
@pytest.mark.parametrize("in_flight", [1, 16])
@pytest.mark.parametrize("placement", ["same_loop", "server_process"])
def test_round_trips(benchmark, figure, placement, in_flight, eager):
    loopback = Loopback(placement, eager)
    try:
        loopback.round_trips(in_flight)  # warm up and check the replies
        benchmark.group = f"remoting {placement} {in_flight} in flight"
        benchmark.pedantic(loopback.round_trips, args=(in_flight,), rounds=5, iterations=1)
        figure("round_trips_per_s", lambda seconds: round(ROUND_TRIPS / seconds))
    finally:
        loopback.close()
