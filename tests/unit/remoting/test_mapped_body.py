"""A MappedBody (a pull's records as views of mapped files) reaches the peer byte for byte, in
order with the frames around it, and its holds are released exactly once: after the write,
after a refusal, or when the connection is gone.

Method: a real server on a 127.0.0.1 ephemeral port whose handler answers with a MappedBody
over views of a real mmap (and of bytearrays) and a counting release; real clients (the
pybroker RemotingClient, and a raw socket that reads nothing for a while so the kernel takes
only part of a 6 MiB answer and the rest goes through the transport's buffer). Each scenario runs
under an asyncio.wait_for deadline that fails the test.
"""
import asyncio
import mmap
import socket
import struct

import pytest

from pybroker.protocol import command as wire
from pybroker.protocol.command import MappedBody, create_request, create_response
from pybroker.remoting import RequestTable, start_server
from tests.unit.remoting.test_remoting import connected_client, run

MAPPED = 120


class Releases:
    """Counts releases per body id; a body released twice is an error."""

    def __init__(self):
        self.counts: dict[int, int] = {}

    def release_for(self, body_id: int):
        def release() -> None:
            self.counts[body_id] = self.counts.get(body_id, 0) + 1
        return release


def expected_body(size: int, seed: int) -> bytes:
    return bytes((seed + position * 7) % 251 for position in range(size))


def make_table(releases: Releases, region: mmap.mmap) -> RequestTable:
    async def mapped(connection, request):
        size, seed = int(request.ext_fields["size"]), int(request.ext_fields["seed"])
        body_id = int(request.ext_fields["id"])
        data = expected_body(size, seed)
        region[:size] = data           # the first part is a view of a real mapping
        split = size // 3
        views = [memoryview(region)[:split], memoryview(bytearray(data[split:2 * split])),
                 memoryview(bytearray(data[2 * split:]))]
        body = MappedBody(views, releases.release_for(body_id))
        return create_response(request, 0, "FOUND", {"n": str(body_id)}, body)
    return RequestTable({MAPPED: mapped}, eager=True)


@pytest.mark.parametrize("size", [0, 1, 300, 70_000])
def test_pipelined_mapped_answers_arrive_whole_and_in_order(size):
    releases, region = Releases(), mmap.mmap(-1, 1 << 23)

    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table(releases, region))
        client = await connected_client(server)
        requests = [create_request(MAPPED, {"size": str(size), "seed": "0", "id": str(n)})
                    for n in range(50)]
        responses = await asyncio.gather(*(client.invoke(request, 5000)
                                           for request in requests))
        client.close()
        server.close()
        await server.wait_closed()
        return requests, responses

    requests, responses = run(scenario)
    for request, response in zip(requests, responses, strict=True):
        assert response.opaque == request.opaque and response.code == 0
        assert response.ext_fields["n"] == request.ext_fields["id"]
        assert bytes(response.body or b"") == expected_body(size, 0)
    assert releases.counts == {n: 1 for n in range(50)}


def test_an_answer_larger_than_the_socket_buffer_is_finished_by_the_transport():
    releases, region = Releases(), mmap.mmap(-1, 1 << 23)
    size = 6 << 20

    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table(releases, region))
        host, port = server.address.rsplit(":", 1)
        raw = socket.create_connection((host, int(port)))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        reader, writer = await asyncio.open_connection(sock=raw)
        request = create_request(MAPPED, {"size": str(size), "seed": "5", "id": "1"})
        writer.write(wire.encode(request))
        deadline = asyncio.get_running_loop().time() + 5
        while 1 not in releases.counts:        # written (partly into the transport) first
            assert asyncio.get_running_loop().time() < deadline, "body never released"
            await asyncio.sleep(0.01)
        length = struct.unpack(">i", await reader.readexactly(4))[0]
        data = struct.pack(">i", length) + await reader.readexactly(length)
        writer.close()
        server.close()
        await server.wait_closed()
        return wire.decode(data, 0, len(data), copy_body=True)

    response = run(scenario)
    assert response.code == 0 and len(response.body) == size
    assert response.body == expected_body(size, 5)
    assert releases.counts == {1: 1}


def test_refused_and_undeliverable_answers_release_their_holds():
    releases, region = Releases(), mmap.mmap(-1, 1 << 23)

    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table(releases, region),
                                    frame_max_bytes=1 << 16)
        client = await connected_client(server)
        too_big = await client.invoke(create_request(
            MAPPED, {"size": str(1 << 17), "seed": "0", "id": "1"}), 2000)
        client.close()
        server.close()
        await server.wait_closed()
        return too_big

    too_big = run(scenario)
    assert too_big.code == 1 and "frame_max_bytes" in too_big.remark
    assert releases.counts == {1: 1}
    gone = Releases()
    body = MappedBody([memoryview(b"abc")], gone.release_for(2))
    assert bytes(body) == b"abc" and len(body) == 3
    del body                                   # dropped unsent: released by collection
    assert gone.counts == {2: 1}
