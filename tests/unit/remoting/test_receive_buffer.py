"""A connection's receive buffer keeps one 64 KiB allocation while reads end inside frames.

Method: a real socket pair; the peer writes 64 frames of 1.3 KB at a time (84 KB, more than the
buffer, as 64 sends of 1 KiB in flight queue them), this side reads into
``ReceiveBuffer.free_view()`` with ``recv_into`` and consumes every whole frame, as the
connection's receive loop does. Every read but the last of a round ends inside a frame. The
buffer must stay the same bytearray of 64 KiB (before, each such read replaced it by a new,
zeroed 64 KiB + held buffer, and the next empty read by another 64 KiB one), hand back every
frame byte for byte, and still grow for a frame larger than itself and shrink after it.
"""
import random
import socket

from pybroker.remoting.receive_buffer import RECEIVE_BUFFER_INITIAL_BYTES, ReceiveBuffer


def _frame(rng: random.Random, body_bytes: int) -> bytes:
    payload = rng.randbytes(body_bytes)
    return len(payload).to_bytes(4, "big") + payload


def _read_frames(sock: socket.socket, received: ReceiveBuffer, count: int,
                 allocations: list) -> list[bytes]:
    """Read until ``count`` whole frames were consumed; every bytearray used is noted."""
    frames: list[bytes] = []
    while len(frames) < count:
        view = received.free_view()
        if not allocations or allocations[-1] is not received.data:
            allocations.append(received.data)
        nbytes = sock.recv_into(view)
        view.release()
        assert nbytes > 0
        received.end += nbytes
        data, position = received.data, received.start
        while received.end - position >= 4:
            length = int.from_bytes(data[position:position + 4], "big")
            if received.end - position < 4 + length:
                break
            frames.append(bytes(data[position:position + 4 + length]))
            position += 4 + length
        received.consumed_to(position)
    return frames


def test_reads_ending_inside_frames_keep_one_buffer():
    rng = random.Random(28)
    received = ReceiveBuffer()
    allocations: list = []
    left, right = socket.socketpair()
    try:
        right.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        for _ in range(20):
            sent = [_frame(rng, rng.randrange(1200, 1400)) for _ in range(64)]
            right.sendall(b"".join(sent))
            assert _read_frames(left, received, len(sent), allocations) == sent
        assert len(allocations) == 1
        assert len(received.data) == RECEIVE_BUFFER_INITIAL_BYTES
        big = _frame(rng, 3 * RECEIVE_BUFFER_INITIAL_BYTES)
        right.sendall(big)
        assert _read_frames(left, received, 1, allocations) == [big]
        assert len(allocations) > 1
        small = _frame(rng, 100)
        right.sendall(small)
        assert _read_frames(left, received, 1, allocations) == [small]
        assert len(received.data) == RECEIVE_BUFFER_INITIAL_BYTES
    finally:
        left.close()
        right.close()
